//! Tests of what a convolution's step takes in (`generated` in `mod.rs`): a SiLU after a Conv, a residual addition.

use stowage_compiler::ir::{AutoPad, Binary, Conv, Graph, Op, Unary, ValueType, Window};
use stowage_runtime::{DatumType, Tensor};

/// A 3 × 3 window at stride 1 with padding 1: the output plane is the input's.
pub(super) fn padded_3x3() -> Window {
    Window {
        kernel: vec![3, 3],
        strides: vec![1, 1],
        dilations: vec![1, 1],
        pads: vec![1, 1, 1, 1],
        auto_pad: AutoPad::NotSet,
        ceil_mode: false,
    }
}

/// `y = x_c · Sigmoid(x_c)` with `x_c = Conv(x, w)` (3×3, padding 1), the Mul's operands in the order `swap` says;
/// with `extra`, the Conv's output is a graph output too.
fn conv_silu(swap: bool, extra: bool) -> Graph {
    let f32ty = |s: Vec<usize>| ValueType::new(DatumType::F32, s);
    let mut g = Graph::new("silu");
    let x = g.add_input("x", f32ty(vec![1, 3, 9, 9]));
    let wv: Vec<f32> = (0..4 * 3 * 9).map(|i| ((i * 7 % 19) as f32 - 9.0) * 0.05).collect();
    let w = g.add_const("w", Tensor::from_slice(&[4, 3, 3, 3], &wv).unwrap());
    let window = padded_3x3();
    let shape = vec![1, 4, 9, 9];
    let conv = g.add_node(
        "conv",
        Op::Conv(Conv { window, group: 1 }),
        vec![Some(x), Some(w)],
        vec![Some(("c".into(), f32ty(shape.clone())))],
    );
    let c = g.node(conv).outputs[0].unwrap();
    let sig =
        g.add_node("sig", Op::Unary(Unary::Sigmoid), vec![Some(c)], vec![Some(("s".into(), f32ty(shape.clone())))]);
    let s = g.node(sig).outputs[0].unwrap();
    let operands = if swap { vec![Some(s), Some(c)] } else { vec![Some(c), Some(s)] };
    let mul = g.add_node("mul", Op::Binary(Binary::Mul), operands, vec![Some(("y".into(), f32ty(shape)))]);
    let y = g.node(mul).outputs[0].unwrap();
    g.add_output("y", y);
    if extra {
        g.add_output("c", c);
    }
    g
}

#[test]
fn a_silu_after_a_conv_runs_in_its_step_and_gives_the_chains_bits() {
    let xv: Vec<f32> = (0..3 * 81).map(|i| ((i * 13 % 29) as f32 - 14.0) * 0.3).collect();
    let x = || vec![Tensor::from_slice(&[1, 3, 9, 9], &xv).unwrap()];
    for swap in [false, true] {
        let g = conv_silu(swap, false);
        let fused = super::lower(&g, 1).expect("lowers");
        let ops: Vec<&str> = fused.steps().iter().map(|s| s.op).collect();
        assert_eq!(ops, ["Conv+SiLU"], "swap {swap}");
        let apart = super::lower_with(&g, &super::LowerOptions { fuse: false, ..Default::default() }).expect("lowers");
        let ops: Vec<&str> = apart.steps().iter().map(|s| s.op).collect();
        assert_eq!(ops, ["Conv", "Sigmoid", "Mul"]);
        let got = fused.run(x()).expect("runs").outputs[0].to_vec::<f32>().unwrap();
        let want = apart.run(x()).expect("runs").outputs[0].to_vec::<f32>().unwrap();
        assert_eq!(
            got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            want.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
    }
    // The Conv's output read elsewhere too (here, a graph output): not taken in; the Sigmoid and the Mul are a
    // generated chain, whose bits the Conv's step gave above.
    let g = conv_silu(false, true);
    let program = super::lower(&g, 1).expect("lowers");
    let ops: Vec<&str> = program.steps().iter().map(|s| s.op).collect();
    assert_eq!(ops, ["Conv", "Fused"]);
    let chain = program.run(x()).expect("runs").outputs[0].to_vec::<f32>().unwrap();
    let fused = super::lower(&conv_silu(false, false), 1).expect("lowers").run(x()).expect("runs").outputs[0]
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(
        chain.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        fused.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
}

/// A ResNet block's end: `Relu(Add(Conv₂(Relu(Conv₁(x))), x))`, 16 channels of 9 × 9 (weights packed), the
/// addition's operands in the order `swap` says; with `extra`, the addition's value is a graph output too; with
/// `bias`, Conv₂ has one (without, the term takes the place after an empty one).
fn residual_block(swap: bool, extra: bool, bias: bool) -> Graph {
    let f32ty = |s: Vec<usize>| ValueType::new(DatumType::F32, s);
    let shape = vec![1, 16, 9, 9];
    let mut g = Graph::new("residual");
    let x = g.add_input("x", f32ty(shape.clone()));
    let window = |k: usize| Window {
        kernel: vec![k, k],
        strides: vec![1, 1],
        dilations: vec![1, 1],
        pads: vec![k / 2; 4],
        auto_pad: AutoPad::NotSet,
        ceil_mode: false,
    };
    let conv = |g: &mut Graph, name: &str, input, k: usize, bias: bool| {
        let wv: Vec<f32> = (0..16 * 16 * k * k).map(|i| ((i * 7 % 19) as f32 - 9.0) * 0.02).collect();
        let w = g.add_const(format!("{name}.w"), Tensor::from_slice(&[16, 16, k, k], &wv).unwrap());
        let bv: Vec<f32> = (0..16).map(|i| i as f32 * 0.1 - 0.8).collect();
        let b = g.add_const(format!("{name}.b"), Tensor::from_slice(&[16], &bv).unwrap());
        let op = Op::Conv(Conv { window: window(k), group: 1 });
        let inputs = if bias { vec![Some(input), Some(w), Some(b)] } else { vec![Some(input), Some(w)] };
        let n = g.add_node(name, op, inputs, vec![Some((name.into(), f32ty(shape.clone())))]);
        g.node(n).outputs[0].unwrap()
    };
    let c1 = conv(&mut g, "c1", x, 3, true);
    let r1 = g.add_node("r1", Op::Unary(Unary::Relu), vec![Some(c1)], vec![Some(("r1".into(), f32ty(shape.clone())))]);
    let r1 = g.node(r1).outputs[0].unwrap();
    let c2 = conv(&mut g, "c2", r1, 1, bias);
    let operands = if swap { vec![Some(x), Some(c2)] } else { vec![Some(c2), Some(x)] };
    let add = g.add_node("add", Op::Binary(Binary::Add), operands, vec![Some(("a".into(), f32ty(shape.clone())))]);
    let a = g.node(add).outputs[0].unwrap();
    let relu = g.add_node("r2", Op::Unary(Unary::Relu), vec![Some(a)], vec![Some(("y".into(), f32ty(shape)))]);
    let y = g.node(relu).outputs[0].unwrap();
    g.add_output("y", y);
    if extra {
        g.add_output("a", a);
    }
    g
}

#[test]
fn a_residual_add_runs_in_the_convolutions_step_and_gives_the_unfused_bits() {
    let xv: Vec<f32> = (0..16 * 81).map(|i| ((i * 13 % 29) as f32 - 14.0) * 0.1).collect();
    let x = || vec![Tensor::from_slice(&[1, 16, 9, 9], &xv).unwrap()];
    let bits = |t: &Tensor<'_>| t.to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    for (swap, extra, bias, want_ops) in [
        (false, false, true, &["Conv+Relu", "Conv+Add+Relu"][..]),
        (true, false, true, &["Conv+Relu", "Conv+Add+Relu"][..]),
        (false, true, true, &["Conv+Relu", "Conv+Add", "Fused"][..]),
        (true, false, false, &["Conv+Relu", "Conv+Add+Relu"][..]),
    ] {
        let g = residual_block(swap, extra, bias);
        let apart = super::lower_with(&g, &super::LowerOptions { fuse: false, ..Default::default() }).expect("lowers");
        let want = apart.run(x()).expect("runs").outputs;
        for threads in [1, 2] {
            let fused = super::lower(&g, threads).expect("lowers");
            let ops: Vec<&str> = fused.steps().iter().map(|s| s.op).collect();
            assert_eq!(ops, want_ops, "swap {swap}, extra {extra}");
            let got = fused.run(x()).expect("runs").outputs;
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(bits(g), bits(w), "swap {swap}, extra {extra}, {threads} thread(s)");
            }
        }
    }
}
