//! Weights the import left in the model file's bytes (`SharedBytes`, at an odd address) are packed from there
//! (`kernels::weights`): a convolution taken by `conv_lanes.rs`, a product of few rows and an LSTM compute bit for
//! bit what they compute from aligned weights, and (with AVX-512F) no aligned copy of those weights is made.

use std::sync::Arc;

use stowage_compiler::ir::{self, Activation, Graph, Op, ValueId, ValueType};
use stowage_runtime::{DatumType, SharedBytes, Tensor};

fn values(n: usize, seed: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 37 + seed * 11) % 23) as f32 / 23.0 - 0.5).collect()
}

/// `values` as a constant: aligned, or in bytes one past a 64-byte boundary, as a weight inside a model file.
fn weight(shape: &[usize], seed: usize, in_place: bool) -> Tensor<'static> {
    let v = values(shape.iter().product(), seed);
    if !in_place {
        return Tensor::from_slice(shape, &v).unwrap();
    }
    Tensor::from_shared_bytes(DatumType::F32, shape, odd_bytes(&v), 0..4 * v.len()).unwrap()
}

/// An owner of `v`'s little-endian bytes whose first byte is one past a 64-byte boundary (the capacity reserved
/// first, so the buffer does not move as it is filled).
fn odd_bytes(v: &[f32]) -> stowage_runtime::Owner {
    let mut bytes = Vec::with_capacity(65 + 4 * v.len());
    let skew = (bytes.as_ptr() as usize).wrapping_neg() % 64 + 1;
    bytes.resize(skew, 0u8);
    bytes.extend(v.iter().flat_map(|x| x.to_le_bytes()));
    assert_eq!((bytes.as_ptr() as usize + skew) % 64, 1, "the buffer moved");
    Arc::new(OddBytes(bytes, skew))
}

/// Bytes from an offset on.
struct OddBytes(Vec<u8>, usize);

impl AsRef<[u8]> for OddBytes {
    fn as_ref(&self) -> &[u8] {
        &self.0[self.1..]
    }
}

fn f32s(shape: &[usize]) -> ValueType {
    ValueType::new(DatumType::F32, shape.to_vec())
}

fn node(g: &mut Graph, op: Op, inputs: Vec<ValueId>, shape: &[usize]) -> ValueId {
    let n = g.add_node("n", op, inputs.into_iter().map(Some).collect(), vec![Some(("y".into(), f32s(shape)))]);
    g.node(n).outputs[0].unwrap()
}

/// A 64 → 256 3 × 3 convolution at 13² (`conv_lanes.rs`'s), a Gemm of 16 rows against a transposed 300 × 576
/// weight (`few_rows.rs`), and a bidirectional LSTM of hidden 20 over 3 steps.
fn graphs(in_place: bool) -> Vec<(Graph, Vec<Tensor<'static>>)> {
    let window = super::epilogue_tests::padded_3x3();
    let mut conv = Graph::new("conv");
    let x = conv.add_input("x", f32s(&[1, 64, 13, 13]));
    let w = conv.add_const("w", weight(&[256, 64, 3, 3], 1, in_place));
    let y = node(&mut conv, Op::Conv(ir::Conv { window, group: 1 }), vec![x, w], &[1, 256, 13, 13]);
    conv.add_output("y", y);
    let mut gemm = Graph::new("gemm");
    let a = gemm.add_input("a", f32s(&[16, 576]));
    let b = gemm.add_const("b", weight(&[300, 576], 2, in_place));
    let op = Op::Gemm(ir::Gemm { alpha: 0.5, beta: 0.0, trans_a: false, trans_b: true });
    let y = node(&mut gemm, op, vec![a, b], &[16, 300]);
    gemm.add_output("y", y);
    let mut lstm = Graph::new("lstm");
    let x = lstm.add_input("x", f32s(&[3, 2, 30]));
    let (w, r) = (
        lstm.add_const("w", weight(&[2, 80, 30], 3, in_place)),
        lstm.add_const("r", weight(&[2, 80, 20], 4, in_place)),
    );
    let layer = ir::Lstm {
        hidden: 20,
        reverse: vec![false, true],
        activations: [Activation::Sigmoid, Activation::Tanh, Activation::Tanh].repeat(2),
        clip: None,
        input_forget: false,
        batch_major: false,
    };
    let n = lstm.add_node(
        "lstm",
        Op::Lstm(layer),
        vec![Some(x), Some(w), Some(r)],
        vec![Some(("y".into(), f32s(&[3, 2, 2, 20])))],
    );
    let y = lstm.node(n).outputs[0].unwrap();
    lstm.add_output("y", y);
    let input = |shape: &[usize], seed| Tensor::from_slice(shape, &values(shape.iter().product(), seed)).unwrap();
    vec![
        (conv, vec![input(&[1, 64, 13, 13], 5)]),
        (gemm, vec![input(&[16, 576], 6)]),
        (lstm, vec![input(&[3, 2, 30], 7)]),
    ]
}

#[test]
fn weights_in_the_model_files_bytes_are_packed_in_place() {
    for ((shared, inputs), (aligned, _)) in graphs(true).into_iter().zip(graphs(false)) {
        let name = shared.name.clone();
        let got = super::lower(&shared, 1).expect("lowers").run(inputs.clone()).expect("runs").outputs;
        let want = super::lower(&aligned, 1).expect("lowers").run(inputs).expect("runs").outputs;
        assert_eq!(got[0].to_vec::<f32>().unwrap(), want[0].to_vec::<f32>().unwrap(), "{name}");
        // The packed kernels are AVX-512F ones (valgrind hides it: there the weights are read aligned, as every
        // kernel but these reads them).
        if !crate::kernels::sgemm512::available() {
            continue;
        }
        for (_, data) in shared.values() {
            if let ir::ValueDef::Const(t) = &data.def {
                let storage = t.storage().as_any().and_then(|a| a.downcast_ref::<SharedBytes>()).expect("shared");
                assert!(!storage.is_copied(), "{name}: a weight was copied to be packed");
            }
        }
    }
}

/// A constant a step reads at run time (an addition's operand) is copied out of its owner when the program is
/// made: the program holds neither the owner nor a storage over it, so a model file's mapping is not read by a run.
#[test]
fn programs_keep_no_owner_of_the_constants_they_read() {
    let v = values(4096, 8);
    let owner = odd_bytes(&v);
    let mut g = Graph::new("add");
    let x = g.add_input("x", f32s(&[4096]));
    let c = g.add_const("c", Tensor::from_shared_bytes(DatumType::F32, &[4096], owner.clone(), 0..4 * 4096).unwrap());
    let y = node(&mut g, Op::Binary(ir::Binary::Add), vec![x, c], &[4096]);
    g.add_output("y", y);
    let program = super::lower(&g, 1).expect("lowers");
    drop(g);
    assert_eq!(Arc::strong_count(&owner), 1, "the program holds the owner");
    let x = Tensor::from_slice(&[4096], &vec![1.0f32; 4096]).unwrap();
    let got = program.run(vec![x]).expect("runs").outputs[0].to_vec::<f32>().unwrap();
    assert!(got.iter().zip(&v).all(|(a, b)| *a == b + 1.0));
}
