//! Products and softmax (f32 and f16) as a large GPU divides them, checked on the CI's OpenCL device against the CPU backend
//! (here, in the workspace's suites, because no backend depends on another).
//!
//! PoCL has two compute units here, so its products are never split. This binary asks for the 264 work-groups an
//! H200 asks for (`STOWAGE_OPENCL_GEMM_GROUPS`), and for convolutions computed inside the product, so that split
//! products (partial sums over ranges of K, added up in the same launch by the last work-group of each tile, with
//! the epilogue) and 4 × 4 and 2 × 2 blocks run here, on odd sizes that leave partial tiles and a last range
//! shorter than the others, and products of one row take a work-group per output (`STOWAGE_OPENCL_GEMV`) and
//! long LayerNorm rows a work-group per row (`STOWAGE_OPENCL_GROUPED_ROWS`), as on a GPU. Its own test binary,
//! because it sets the environment.

use stowage_compiler::ir::{self, Graph, Op, SoftmaxKind, Unary, ValueType};
use stowage_opencl::Target;
use stowage_runtime::{DatumType, Ledger, Tensor};

fn f32s(shape: &[usize], seed: u64) -> Tensor<'static> {
    stowage_tests::random_f32s(shape, seed)
}

fn ty(shape: &[usize]) -> ValueType {
    ValueType::new(DatumType::F32, shape)
}

/// Adds `op` over `inputs` with one output of `shape`; returns the output.
fn node(g: &mut Graph, name: &str, op: Op, inputs: Vec<ir::ValueId>, shape: &[usize]) -> ir::ValueId {
    let n =
        g.add_node(name, op, inputs.into_iter().map(Some).collect(), vec![Some((format!("{name}_out"), ty(shape)))]);
    g.node(n).outputs[0].expect("output")
}

/// One graph of products of every form lowering makes, each split on the GPU division; returns it with its input.
fn products() -> (Graph, Tensor<'static>) {
    let mut g = Graph::new("split products");
    let x = g.add_input("x", ty(&[1, 2048]));
    let mut outs = Vec::new();
    // A classifier's Gemm (m = 1: a work-group per output), transposed B, a bias vector, alpha and beta.
    let w = g.add_const("w", f32s(&[1000, 2048], 1));
    let c = g.add_const("c", f32s(&[1000], 2));
    let gemm = ir::Gemm { alpha: 0.5, beta: 2.0, trans_a: false, trans_b: true };
    outs.push(node(&mut g, "fc", Op::Gemm(gemm), vec![x, w, c], &[1, 1000]));
    // Rows times matrices, batched on both sides: one row each, a work-group per output.
    // Its epilogue runs a chain: a bias broadcast over the batch, then tanh.
    let (ra, rb) = (g.add_const("ra", f32s(&[3, 1, 300], 12)), g.add_const("rb", f32s(&[3, 300, 70], 13)));
    let rows = node(&mut g, "rows", Op::MatMul, vec![ra, rb], &[3, 1, 70]);
    let rows_bias = g.add_const("rows_bias", f32s(&[70], 16));
    let biased = node(&mut g, "rows_add", Op::Binary(ir::Binary::Add), vec![rows, rows_bias], &[3, 1, 70]);
    outs.push(node(&mut g, "rows_tanh", Op::Unary(Unary::Tanh), vec![biased], &[3, 1, 70]));
    // A thin product: blocks of 1, split, and SiLU (the product read twice by its chain) after the ranges' sum.
    let (ta, tb) = (g.add_const("ta", f32s(&[10, 1000], 14)), g.add_const("tb", f32s(&[1000, 20], 15)));
    let thin = node(&mut g, "thin", Op::MatMul, vec![ta, tb], &[10, 20]);
    let gate = node(&mut g, "thin_sigmoid", Op::Unary(Unary::Sigmoid), vec![thin], &[10, 20]);
    outs.push(node(&mut g, "thin_silu", Op::Binary(ir::Binary::Mul), vec![thin, gate], &[10, 20]));
    // A MatMul of odd sizes (partial tiles everywhere, a shorter last range) batched over a broadcast operand.
    let a = g.add_const("a", f32s(&[3, 37, 1000], 3));
    let b = g.add_const("b", f32s(&[1000, 50], 4));
    outs.push(node(&mut g, "batched", Op::MatMul, vec![a, b], &[3, 37, 50]));
    // ResNet's last 3 × 3 convolution, with its bias and ReLU in the epilogue (m 512, n 49, k 4608), and a grouped
    // one: both computed inside the product.
    let xc = g.add_const("xc", f32s(&[1, 512, 7, 7], 5));
    let wc = g.add_const("wc", f32s(&[512, 512, 3, 3], 6));
    let bc = g.add_const("bc", f32s(&[512], 7));
    let window = |kernel: usize, pad: usize| ir::Window {
        kernel: vec![kernel; 2],
        strides: vec![1; 2],
        dilations: vec![1; 2],
        pads: vec![pad; 4],
        auto_pad: ir::AutoPad::NotSet,
        ceil_mode: false,
    };
    let conv = ir::Conv { window: window(3, 1), group: 1 };
    let y = node(&mut g, "conv", Op::Conv(conv), vec![xc, wc, bc], &[1, 512, 7, 7]);
    outs.push(node(&mut g, "relu", Op::Unary(Unary::Relu), vec![y], &[1, 512, 7, 7]));
    let wg = g.add_const("wg", f32s(&[96, 256, 3, 3], 8));
    let grouped = ir::Conv { window: window(3, 0), group: 2 };
    let grouped = node(&mut g, "grouped", Op::Conv(grouped), vec![xc, wg], &[1, 96, 5, 5]);
    // A scale per channel in the convolution's epilogue (the chain's operand broadcast along the plane).
    let scale = g.add_const("scale", f32s(&[96, 1, 1], 17));
    outs.push(node(&mut g, "grouped_scale", Op::Binary(ir::Binary::Mul), vec![grouped, scale], &[1, 96, 5, 5]));
    // Softmax over a long row (a work-group per row) and LogSoftmax over a long axis that is not the last.
    let softmax = |kind, axis| Op::Softmax { kind, axis, flatten: false };
    outs.push(node(&mut g, "softmax", softmax(SoftmaxKind::Softmax, 1), vec![outs[0]], &[1, 1000]));
    outs.push(node(&mut g, "logsoftmax", softmax(SoftmaxKind::LogSoftmax, 1), vec![outs[3]], &[3, 37, 50]));
    // Both operands through a transpose, read in place (`lower/prologue.rs`): the heads of an attention.
    let (qa, kb) = (g.add_const("qa", f32s(&[37, 3, 40], 22)), g.add_const("kb", f32s(&[3, 50, 40], 23)));
    let perm = |p: &[usize]| Op::Transpose { perm: Some(p.to_vec()) };
    let q = node(&mut g, "q_heads", perm(&[1, 0, 2]), vec![qa], &[3, 37, 40]);
    let k = node(&mut g, "k_heads", perm(&[0, 2, 1]), vec![kb], &[3, 40, 50]);
    outs.push(node(&mut g, "scores", Op::MatMul, vec![q, k], &[3, 37, 50]));
    // LayerNorm over rows of 50 and of 1000 (a work-group per long row, as on a GPU), with its mean and inverse
    // deviation.
    for (k, (v, shape)) in [(outs[3], vec![3usize, 37, 50]), (outs[0], vec![1, 1000])].into_iter().enumerate() {
        let len = shape[shape.len() - 1];
        let (scale, bias) =
            (g.add_const(format!("ln_s{k}"), f32s(&[len], 20)), g.add_const(format!("ln_b{k}"), f32s(&[len], 21)));
        let mut stat = shape.clone();
        *stat.last_mut().expect("rank") = 1;
        let n = g.add_node(
            format!("ln{k}"),
            Op::LayerNorm { axis: shape.len() as i64 - 1, epsilon: 1e-5, stash: DatumType::F32 },
            vec![Some(v), Some(scale), Some(bias)],
            vec![
                Some((format!("ln{k}_y"), ty(&shape))),
                Some((format!("ln{k}_mean"), ty(&stat))),
                Some((format!("ln{k}_inv"), ty(&stat))),
            ],
        );
        outs.extend(g.node(n).outputs.iter().flatten().copied());
    }
    // The same in half precision (read as float, summed in float, rounded once): a product and a long softmax.
    let half = |g: &mut Graph, name: &str, v: ir::ValueId, to: DatumType, shape: &[usize]| {
        let n = g.add_node(
            name,
            Op::cast(to),
            vec![Some(v)],
            vec![Some((format!("{name}_out"), ValueType::new(to, shape)))],
        );
        g.node(n).outputs[0].expect("cast")
    };
    let (a16, b16) = (g.add_const("a16", f32s(&[40, 600], 10)), g.add_const("b16", f32s(&[600, 70], 11)));
    let a16 = half(&mut g, "a_to_f16", a16, DatumType::F16, &[40, 600]);
    let b16 = half(&mut g, "b_to_f16", b16, DatumType::F16, &[600, 70]);
    let p16 = g.add_node(
        "product_f16",
        Op::MatMul,
        vec![Some(a16), Some(b16)],
        vec![Some(("p16".into(), ValueType::new(DatumType::F16, [40, 70])))],
    );
    let p16 = g.node(p16).outputs[0].expect("p16");
    let s16 = g.add_node(
        "softmax_f16",
        softmax(SoftmaxKind::Softmax, 1),
        vec![Some(p16)],
        vec![Some(("s16".into(), ValueType::new(DatumType::F16, [40, 70])))],
    );
    let s16 = g.node(s16).outputs[0].expect("s16");
    outs.push(half(&mut g, "p_to_f32", p16, DatumType::F32, &[40, 70]));
    outs.push(half(&mut g, "s_to_f32", s16, DatumType::F32, &[40, 70]));
    for (k, v) in outs.into_iter().enumerate() {
        g.add_output(format!("y{k}"), v);
    }
    (g, f32s(&[1, 2048], 9))
}

#[test]
fn products_split_along_k_and_long_softmax_rows_match_the_cpu() {
    // SAFETY: this test binary has this one test, so nothing else reads the environment while it is set.
    unsafe {
        std::env::set_var("STOWAGE_OPENCL_GEMM_GROUPS", "264");
        std::env::set_var("STOWAGE_OPENCL_IMPLICIT_CONV", "1");
        std::env::set_var("STOWAGE_OPENCL_GEMV", "1");
        std::env::set_var("STOWAGE_OPENCL_GROUPED_ROWS", "1");
    }
    let (g, x) = products();
    let want = stowage_cpu::lower(&g, 1).expect("CPU lowers").run(vec![x.clone()]).expect("CPU runs").outputs;
    for name in ["opencl", "opencl:discrete"] {
        let target = Target::open(name).unwrap_or_else(|e| panic!("{e}"));
        let program = stowage_opencl::lower(&g, &target, &Ledger::off()).expect("lowers");
        // Every product of more than one row and a long K was split, and is one launch all the same: its last
        // work-groups add up the ranges. Products of one row are not split, nor is `scores`, whose K of 40 is too
        // short.
        let products = program
            .steps()
            .iter()
            .filter(|s| s.op.starts_with("Gemm") || s.op.contains("MatMul") || s.op.starts_with("Conv"));
        assert_eq!(products.clone().count(), 8, "{name}: products");
        // The chains after `rows`, `thin` and `grouped` run in their epilogues: no launch of their own.
        let fused: Vec<&str> =
            program.steps().iter().filter(|s| s.op.ends_with("+Fused")).map(|s| s.name.as_str()).collect();
        assert_eq!(fused, ["rows", "thin", "grouped"], "{name}: products with a chain in their epilogue");
        assert_eq!(program.steps().len(), 8 + 7 + 2, "{name}: steps: the transposes have none");
        for step in products {
            assert_eq!(step.launches(), 1, "{name}: {} ({})", step.name, step.op);
            let note = &program.kernel_notes()[step.kernels()[0]];
            let split = !matches!(step.name.as_str(), "fc" | "rows" | "scores");
            assert_eq!(note.contains(" split"), split, "{name}: {} ({}): {note}", step.name, step.op);
        }
        let got = program.run(vec![x.clone()], &Ledger::off()).expect("runs");
        let want_count = want.len();
        for (k, (got, want)) in got.iter().zip(&want).enumerate() {
            let (got, want) = (got.to_vec::<f32>().expect("reads"), want.to_vec::<f32>().expect("reads"));
            assert_eq!(got.len(), want.len());
            let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
            // The last two outputs went through f16: a rounding of their own apart (2⁻¹⁰ relative), which the
            // softmax's exponential scales by the size of its input.
            let half = k + 2 >= want_count;
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                let bound = if half { 1e-2 * b.abs().max(1e-2 * scale) } else { 1e-4 * scale.max(1.0) };
                assert!((a - b).abs() <= bound, "{name}: output y{k}[{i}]: {a} against the CPU's {b}");
            }
        }
    }
}
