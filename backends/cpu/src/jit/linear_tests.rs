use stowage_kir::{BinaryFn, Chain, Inst, UnaryFn};

use super::{Leaf, Linear, Step, BLOCK};

/// Input 0 contiguous, input 1 one value per row, input 2 read through other strides.
fn kinds(k: usize) -> Option<Leaf> {
    [Some(Leaf::Tile(0)), Some(Leaf::Row(1)), None][k]
}

fn linear(insts: Vec<Inst>) -> Option<Linear> {
    Linear::new(&Chain { insts }, kinds)
}

/// AVX-512F: what the form needs. Valgrind hides it (`scripts/valgrind-runtime`); CI's machines have it.
fn avx512() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
}

#[test]
fn only_linear_native_chains_qualify() {
    use BinaryFn::{Add, Mul, Sub};
    use Inst::{Binary, Const, Input, Unary};
    // Rule 1: a scale and shift by row, a ReLU.
    let affine =
        linear(vec![Input(0), Input(1), Binary(Mul, 0, 1), Const(0.5), Binary(Add, 3, 2), Unary(UnaryFn::Relu, 4)]);
    assert_eq!(
        affine,
        Some(Linear {
            first: Leaf::Tile(0),
            steps: vec![Step::Left(Mul, Leaf::Row(1)), Step::Right(Add, Leaf::Const(0.5)), Step::Unary(UnaryFn::Relu)],
        })
    );
    // A start of two leaves; the contiguous input read again further on; a dead instruction off the path.
    let twice = linear(vec![Input(0), Const(2.0), Binary(Sub, 1, 0), Unary(UnaryFn::Neg, 0), Binary(Add, 2, 0)]);
    assert_eq!(
        twice,
        Some(Linear {
            first: Leaf::Const(2.0),
            steps: vec![Step::Left(Sub, Leaf::Tile(0)), Step::Left(Add, Leaf::Tile(0))],
        })
    );
    // Two computed values meeting, a function that is not native, an input read through strides, no instruction.
    assert_eq!(linear(vec![Input(0), Unary(UnaryFn::Neg, 0), Unary(UnaryFn::Abs, 0), Binary(Add, 1, 2)]), None);
    assert_eq!(linear(vec![Input(0), Unary(UnaryFn::Log, 0), Binary(Mul, 0, 1)]), None);
    assert_eq!(linear(vec![Input(0), Input(2), Binary(Add, 0, 1)]), None);
    assert_eq!(linear(vec![Input(0)]), None);
    assert_eq!(linear(vec![Input(0), Binary(BinaryFn::Pow, 0, 0)]), None);
}

/// Values where the definitions branch: NaN, infinities, signed zeros, the clamps' edges, a subnormal.
const SPECIAL: [f32; 20] = [
    f32::NAN,
    f32::INFINITY,
    f32::NEG_INFINITY,
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    -3.0,
    3.0,
    6.0,
    -6.0,
    2.5,
    -0.25,
    1e-40,
    7.0,
    -9.5,
    4.5,
    100.0,
    -120.0,
];

/// Runs `insts` (input 0 contiguous `x`, input 1 one value per row) over one row in registers.
fn run(insts: &[Inst], x: &[f32], per_row: f32) -> Vec<f32> {
    let lin = linear(insts.to_vec()).expect("linear");
    let mut out = vec![0f32; x.len()];
    // SAFETY: the CPU has AVX-512F (checked by the callers); `x` and `out` hold the row's elements.
    unsafe { lin.row(&[x.as_ptr(), std::ptr::null()], &[0.0, per_row], out.as_mut_ptr(), x.len()) };
    out
}

#[test]
fn every_native_function_matches_the_scalar_definition_bit_for_bit() {
    if !avx512() {
        return;
    }
    use Inst::{Binary, Input, Unary};
    let unary = [
        UnaryFn::Relu,
        UnaryFn::LeakyRelu(0.1),
        UnaryFn::Neg,
        UnaryFn::Abs,
        UnaryFn::Sqrt,
        UnaryFn::Reciprocal,
        UnaryFn::HardSigmoid(0.2, 0.5),
        UnaryFn::HardSwish,
        UnaryFn::Tanh,
        UnaryFn::Erf,
        UnaryFn::Sigmoid,
        UnaryFn::Gelu(true),
        UnaryFn::Gelu(false),
    ];
    let x: Vec<f32> = SPECIAL.to_vec();
    for f in unary {
        assert!(super::native_unary(f));
        let insts = [Input(0), Unary(f, 0)];
        let got = run(&insts, &x, 0.0);
        for (&v, g) in x.iter().zip(got) {
            let want = Chain { insts: insts.to_vec() }.eval(&[v, 0.0]);
            assert_eq!(g.to_bits(), want.to_bits(), "{f:?}({v}): got {g}, want {want}");
        }
    }
    let binary =
        [BinaryFn::Add, BinaryFn::Sub, BinaryFn::Mul, BinaryFn::Div, BinaryFn::Max, BinaryFn::Min, BinaryFn::PRelu];
    for f in binary {
        assert!(super::native_binary(f));
        for &r in &SPECIAL {
            // The row's value on the right, then on the left, of the contiguous input.
            for insts in [[Input(0), Input(1), Binary(f, 0, 1)], [Input(0), Input(1), Binary(f, 1, 0)]] {
                let got = run(&insts, &x, r);
                for (&v, g) in x.iter().zip(got) {
                    let want = Chain { insts: insts.to_vec() }.eval(&[v, r]);
                    assert_eq!(g.to_bits(), want.to_bits(), "{insts:?} at ({v}, {r}): got {g}, want {want}");
                }
            }
        }
    }
}

#[test]
fn rows_of_every_length_touch_only_their_elements() {
    if !avx512() {
        return;
    }
    use Inst::{Binary, Input, Unary};
    let insts = [Input(0), Input(1), Binary(BinaryFn::Mul, 0, 1), Binary(BinaryFn::Add, 2, 0), Unary(UnaryFn::Relu, 3)];
    let lin = linear(insts.to_vec()).expect("linear");
    let chain = Chain { insts: insts.to_vec() };
    const GUARD: f32 = 12345.0;
    for n in 0..=2 * BLOCK + 17 {
        let x: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin() * 4.0).collect();
        let mut out = vec![GUARD; n + 40];
        // SAFETY: AVX-512F is present; `x` holds `n` elements and `out` more than `n`.
        unsafe { lin.row(&[x.as_ptr(), std::ptr::null()], &[0.0, -0.75], out[8..].as_mut_ptr(), n) };
        assert!(out[..8].iter().chain(&out[8 + n..]).all(|&g| g == GUARD), "a row of {n} wrote outside itself");
        for (i, &v) in x.iter().enumerate() {
            assert_eq!(out[8 + i].to_bits(), chain.eval(&[v, -0.75]).to_bits(), "element {i} of a row of {n}");
        }
    }
}
