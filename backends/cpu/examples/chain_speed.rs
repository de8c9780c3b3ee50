//! Times fused elementwise chains as the CPU runs them (`jit::Jit`, tile form where the CPU has AVX2 or
//! AVX-512), one thread: `cargo run --release -p stowage-cpu --example chain_speed`. Each line gives the fastest
//! and the median of 300 calls and the elements per nanosecond. `SHAPES="c,p;…"` times other shapes (channels,
//! positions per channel).
use std::time::Instant;

mod shapes;

use stowage_cpu::jit::Jit;
use stowage_kir::{BinaryFn, Body, Chain, Elem, Inst, Loops, Operand, UnaryFn};

/// The chains timed: a name, the instructions, and per input whether it is one value per channel.
fn chains() -> Vec<(&'static str, Vec<Inst>, Vec<bool>)> {
    use BinaryFn::{Add, Mul};
    use Inst::{Binary, Const, Input, Unary};
    vec![
        (
            "affine, ReLU",
            vec![Input(0), Input(1), Binary(Mul, 0, 1), Input(2), Binary(Add, 2, 3), Unary(UnaryFn::Relu, 4)],
            vec![false, true, true],
        ),
        (
            "two affines, ReLU (DenseNet)",
            vec![
                Input(0),
                Input(1),
                Binary(Mul, 0, 1),
                Input(2),
                Binary(Add, 2, 3),
                Input(3),
                Binary(Mul, 4, 5),
                Input(4),
                Binary(Add, 6, 7),
                Unary(UnaryFn::Relu, 8),
            ],
            vec![false, true, true, true, true],
        ),
        ("residual, ReLU", vec![Input(0), Input(1), Binary(Add, 0, 1), Unary(UnaryFn::Relu, 2)], vec![false, false]),
        (
            "SiLU",
            vec![Input(0), Const(1.0), Binary(Mul, 0, 1), Unary(UnaryFn::Sigmoid, 2), Binary(Mul, 0, 3)],
            vec![false],
        ),
        ("max with a constant", vec![Input(0), Const(-0.4), Binary(BinaryFn::Max, 0, 1)], vec![false]),
    ]
}

fn main() {
    let given = shapes::asked::<2>("c,p;…").map(|v| v.into_iter().map(|[c, p]| (c, p)).collect::<Vec<_>>());
    let shapes = given.unwrap_or_else(|| vec![(32, 3136), (160, 3136), (256, 784), (512, 49)]);
    for (name, insts, per_channel) in chains() {
        for &(c, p) in &shapes {
            let operand =
                |per: bool| Operand { elem: Elem::F32, strides: if per { vec![4, 0] } else { vec![4 * p, 4] } };
            let spec = Loops {
                dims: vec![c, p],
                inputs: per_channel.iter().map(|&per| operand(per)).collect(),
                output: operand(false),
                body: Body::Chain(Chain { insts: insts.clone() }),
            };
            let mut jit = Jit::new(None).expect("a JIT for this CPU");
            let k = jit.add(&spec).expect("the chain compiles");
            let code = jit.finish().expect("the module finishes");
            let data: Vec<Vec<f32>> = per_channel
                .iter()
                .map(|&per| (0..if per { c } else { c * p }).map(|i| (i % 13) as f32 * 0.1 - 0.5).collect())
                .collect();
            let bytes: Vec<&[u8]> = data.iter().map(|d| bytemuck::cast_slice(d.as_slice())).collect();
            let mut out = vec![0f32; c * p];
            let mut times: Vec<f64> = (0..300)
                .map(|_| {
                    let t = Instant::now();
                    code.call(k, &bytes, bytemuck::cast_slice_mut(&mut out), 1).expect("the chain runs");
                    t.elapsed().as_secs_f64() * 1e3
                })
                .collect();
            times.sort_by(f64::total_cmp);
            let rate = (c * p) as f64 / (times[0] * 1e6);
            println!(
                "{name}, {c} × {p}: fastest {:.4} ms, median {:.4} ms, {rate:.2} elements/ns",
                times[0], times[150]
            );
        }
    }
}
