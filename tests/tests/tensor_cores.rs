//! Products at `--precision tf32` on the first OpenCL device, against the CPU backend in fp32.
//!
//! On a device with tensor cores (NVIDIA, compute capability 8.0 or later: the H200 through the `device` tool,
//! `scripts/device/check.sh`) every product of more than one row runs on them (`codegen/mma.rs`) and matches fp32
//! within TF32's rounding; on one without (PoCL in CI) the plan's fallback holds: the precision granted is fp32,
//! no kernel is a tensor-core one, and the results are fp32's. Both are checked on whichever device this is; the
//! graph has every form lowering makes of a product (transposed and batched operands, a bias matrix, ReLU, an
//! implicit convolution grouped, strided and split along K, a pointwise one, a product of one row, a residual
//! addition and ReLU in a convolution's epilogue).

use stowage_compiler::ir::{self, Graph, Op, Unary, ValueType};
use stowage_compiler::plan::Precision;
use stowage_opencl::Target;
use stowage_runtime::{DatumType, Ledger, Tensor};

fn f32s(shape: &[usize], seed: u64) -> Tensor<'static> {
    stowage_tests::random_f32s(shape, seed)
}

fn node(g: &mut Graph, name: &str, op: Op, inputs: Vec<ir::ValueId>, shape: &[usize]) -> ir::ValueId {
    let ty = ValueType::new(DatumType::F32, shape);
    let n = g.add_node(name, op, inputs.into_iter().map(Some).collect(), vec![Some((format!("{name}_out"), ty))]);
    g.node(n).outputs[0].expect("output")
}

fn window(kernel: usize, stride: usize, pad: usize) -> ir::Window {
    ir::Window {
        kernel: vec![kernel; 2],
        strides: vec![stride; 2],
        dilations: vec![1; 2],
        pads: vec![pad; 4],
        auto_pad: ir::AutoPad::NotSet,
        ceil_mode: false,
    }
}

/// The products, and the input of the one-row product.
fn products() -> (Graph, Tensor<'static>) {
    let mut g = Graph::new("tf32 products");
    let x = g.add_input("x", ValueType::new(DatumType::F32, [1, 2048]));
    let mut outs = Vec::new();
    // One row (a work-group per output: never on tensor cores).
    let (w, c) = (g.add_const("w", f32s(&[1000, 2048], 1)), g.add_const("c", f32s(&[1000], 2)));
    let fc = ir::Gemm { alpha: 0.5, beta: 2.0, trans_a: false, trans_b: true };
    outs.push(node(&mut g, "fc", Op::Gemm(fc), vec![x, w, c], &[1, 1000]));
    // A transposed A and a bias matrix, with alpha and beta.
    let (a, b, c) = (
        g.add_const("ta", f32s(&[300, 70], 3)),
        g.add_const("tb", f32s(&[300, 90], 4)),
        g.add_const("tc", f32s(&[70, 90], 5)),
    );
    let ta = ir::Gemm { alpha: 0.75, beta: 2.0, trans_a: true, trans_b: false };
    outs.push(node(&mut g, "gemm_ta", Op::Gemm(ta), vec![a, b, c], &[70, 90]));
    // Odd sizes batched over a broadcast operand, and a larger square-ish product.
    let (a, b) = (g.add_const("a", f32s(&[3, 70, 1000], 6)), g.add_const("b", f32s(&[1000, 50], 7)));
    outs.push(node(&mut g, "batched", Op::MatMul, vec![a, b], &[3, 70, 50]));
    let (a, b) = (g.add_const("ba", f32s(&[256, 512], 8)), g.add_const("bb", f32s(&[512, 384], 9)));
    let big = node(&mut g, "big", Op::MatMul, vec![a, b], &[256, 384]);
    // A bias and tanh in the tensor-core kernel's epilogue (`lower/epilogue.rs`).
    let big_bias = g.add_const("big_bias", f32s(&[384], 19));
    let biased = node(&mut g, "big_add", Op::Binary(ir::Binary::Add), vec![big, big_bias], &[256, 384]);
    outs.push(node(&mut g, "big_tanh", Op::Unary(Unary::Tanh), vec![biased], &[256, 384]));
    // ResNet's last 3 × 3 convolution with bias and ReLU (k 4608: split along K on a large GPU).
    let xc = g.add_const("xc", f32s(&[1, 512, 7, 7], 10));
    let (wc, bc) = (g.add_const("wc", f32s(&[512, 512, 3, 3], 11)), g.add_const("bc", f32s(&[512], 12)));
    let y = node(
        &mut g,
        "conv",
        Op::Conv(ir::Conv { window: window(3, 1, 1), group: 1 }),
        vec![xc, wc, bc],
        &[1, 512, 7, 7],
    );
    outs.push(node(&mut g, "relu", Op::Unary(Unary::Relu), vec![y], &[1, 512, 7, 7]));
    // Grouped, unpadded.
    let wg = g.add_const("wg", f32s(&[192, 256, 3, 3], 13));
    outs.push(node(
        &mut g,
        "grouped",
        Op::Conv(ir::Conv { window: window(3, 1, 0), group: 2 }),
        vec![xc, wg],
        &[1, 192, 5, 5],
    ));
    // Strided, padded, over a larger plane.
    let xs = g.add_const("xs", f32s(&[1, 64, 28, 28], 14));
    let ws = g.add_const("ws", f32s(&[128, 64, 3, 3], 15));
    outs.push(node(
        &mut g,
        "strided",
        Op::Conv(ir::Conv { window: window(3, 2, 1), group: 1 }),
        vec![xs, ws],
        &[1, 128, 14, 14],
    ));
    // Pointwise: the input read directly as B.
    let wp = g.add_const("wp", f32s(&[256, 64, 1, 1], 16));
    outs.push(node(
        &mut g,
        "pointwise",
        Op::Conv(ir::Conv { window: window(1, 1, 0), group: 1 }),
        vec![xs, wp],
        &[1, 256, 28, 28],
    ));
    // A residual block's end: the addition and its ReLU in the convolution's epilogue.
    let wr = g.add_const("wr", f32s(&[64, 64, 3, 3], 18));
    let r =
        node(&mut g, "res", Op::Conv(ir::Conv { window: window(3, 1, 1), group: 1 }), vec![xs, wr], &[1, 64, 28, 28]);
    let sum = node(&mut g, "add", Op::Binary(ir::Binary::Add), vec![r, xs], &[1, 64, 28, 28]);
    outs.push(node(&mut g, "add_relu", Op::Unary(Unary::Relu), vec![sum], &[1, 64, 28, 28]));
    // Large and batched: a product of odd columns (the last column of tiles partly outside) and an implicit 3 × 3
    // convolution at batch 8 (with `STOWAGE_OPENCL_MMA_TILE=128`, both take tiles of 128 × 128 on a GPU of up to
    // 132 compute units: checked so on an H100, 2026-12-07).
    let (a, b) = (g.add_const("la", f32s(&[3, 768, 256], 20)), g.add_const("lb", f32s(&[256, 1000], 21)));
    outs.push(node(&mut g, "large", Op::MatMul, vec![a, b], &[3, 768, 1000]));
    let xb = g.add_const("xb", f32s(&[8, 32, 56, 56], 22));
    let wb = g.add_const("wb", f32s(&[128, 32, 3, 3], 23));
    outs.push(node(
        &mut g,
        "batched_conv",
        Op::Conv(ir::Conv { window: window(3, 1, 1), group: 1 }),
        vec![xb, wb],
        &[8, 128, 56, 56],
    ));
    for (k, v) in outs.into_iter().enumerate() {
        g.add_output(format!("y{k}"), v);
    }
    (g, f32s(&[1, 2048], 17))
}

#[test]
fn tf32_products_run_on_tensor_cores_where_there_are_some_and_in_fp32_elsewhere() {
    let (g, x) = products();
    let want = stowage_cpu::lower(&g, 1).expect("CPU lowers").run(vec![x.clone()]).expect("CPU runs").outputs;
    let target = Target::open("opencl").unwrap_or_else(|e| panic!("{e}"));
    let granted = stowage_opencl::precision_on(target.info(), Precision::Tf32).expect("tf32 is granted or falls back");
    let cores = target.info().tensor_cores();
    assert_eq!(granted.computed, if cores { Precision::Tf32 } else { Precision::Fp32 }, "{}", granted.describe());
    let program =
        stowage_opencl::lower_planned(&g, &target, &Ledger::off(), &|_: &str| false, granted.computed).expect("lowers");
    let on_cores = program.kernel_notes().iter().filter(|n| n.contains("tf32 tensor cores")).count();
    // Ten products of 64 rows or more (per group), each its own kernel (none is the same as another); fewer rows
    // stay in fp32 (`on_tensor_cores`).
    assert_eq!(on_cores, if cores { 10 } else { 0 }, "{:?}", program.kernel_notes());
    // The residual addition and its ReLU are the convolution's step, not launches of their own.
    let ops: Vec<&str> = program.steps().iter().map(|s| s.op).collect();
    assert!(ops.contains(&"Conv+Add+Relu") && !ops.contains(&"Add"), "{ops:?}");
    assert!(ops.contains(&"MatMul+Fused") && !ops.contains(&"Fused"), "{ops:?}");
    let got = program.run(vec![x], &Ledger::off()).expect("runs");
    let mut rounded = false;
    for (k, (got, want)) in got.iter().zip(&want).enumerate() {
        let (got, want) = (got.to_vec::<f32>().expect("reads"), want.to_vec::<f32>().expect("reads"));
        assert_eq!(got.len(), want.len());
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs())).max(1.0);
        // TF32 keeps 10 bits of each operand's mantissa (2⁻¹¹ relative), sums in fp32: over these sums of up to
        // 4608 terms of ±0.25 that is within 2·10⁻³ of the output's scale; fp32 against fp32 within 10⁻⁴.
        let bound = if cores && k > 0 { 2e-3 } else { 1e-4 } * scale;
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!((a - b).abs() <= bound, "output y{k}[{i}]: {a} against the CPU's {b} (bound {bound})");
            rounded |= (a - b).abs() > 1e-5 * scale;
        }
    }
    // On tensor cores the operands' rounding shows somewhere; in fp32 it would not.
    if cores {
        assert!(rounded, "no output shows TF32's rounding: the products did not run in TF32");
    }
}

/// The same products in a plan at fp16 and at bf16 (every value stored in the type, `passes::storage`), against
/// the CPU in fp32: on tensor cores (`mma.sync … m16n8k16 …f16` or `…bf16`) where the device has them, in the
/// tiled kernels reading halves elsewhere, within the type's rounding of the operands, of each stored product and
/// of the outputs.
#[test]
fn half_products_run_on_tensor_cores_where_there_are_some() {
    let (g, x) = products();
    let want = stowage_cpu::lower(&g, 1).expect("CPU lowers").run(vec![x.clone()]).expect("CPU runs").outputs;
    let target = Target::open("opencl").unwrap_or_else(|e| panic!("{e}"));
    let cores = target.info().tensor_cores();
    for (precision, dt, word, tolerance) in
        [(Precision::Fp16, DatumType::F16, "f16", 4e-3f32), (Precision::Bf16, DatumType::BF16, "bf16", 3e-2)]
    {
        let mut cx = stowage_compiler::Context::new(g.clone());
        cx.store_floats_in(dt).unwrap_or_else(|e| panic!("{e}"));
        let granted = stowage_opencl::precision_on(target.info(), precision).expect("granted");
        assert_eq!(granted.computed, precision, "{}", granted.describe());
        let program = stowage_opencl::lower_planned(&cx.graph, &target, &Ledger::off(), &|_: &str| false, precision)
            .expect("lowers");
        let on_cores = program.kernel_notes().iter().filter(|n| n.contains(&format!("{word} tensor cores"))).count();
        assert_eq!(on_cores, if cores { 10 } else { 0 }, "{precision}: {:?}", program.kernel_notes());
        let ops: Vec<&str> = program.steps().iter().map(|s| s.op).collect();
        assert!(ops.contains(&"Conv+Add+Relu"), "{precision}: {ops:?}");
        let got = program.run(vec![x.clone()], &Ledger::off()).expect("runs");
        for (k, (got, want)) in got.iter().zip(&want).enumerate() {
            let (got, want) = (got.to_vec::<f32>().expect("f32 out"), want.to_vec::<f32>().expect("reads"));
            let scale = want.iter().fold(0f32, |m, v| m.max(v.abs())).max(1.0);
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (a - b).abs() <= tolerance * scale,
                    "{precision}: output y{k}[{i}]: {a} against the CPU's {b} (bound {})",
                    tolerance * scale
                );
            }
        }
    }
}
