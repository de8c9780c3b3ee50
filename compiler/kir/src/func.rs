//! The elementwise functions a kernel computes, with their scalar f32 semantics (the reference both backends'
//! generated chains are tested against) and which of them a chain may hold.

/// One-input elementwise functions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum UnaryFn {
    /// `|x|`.
    Abs,
    /// Round up.
    Ceil,
    /// Cosine.
    Cos,
    /// Error function.
    Erf,
    /// `e^x`.
    Exp,
    /// Round down.
    Floor,
    /// Natural log.
    Log,
    /// `-x`.
    Neg,
    /// Logical not.
    Not,
    /// `1/x`.
    Reciprocal,
    /// `max(x, 0)`.
    Relu,
    /// Logistic.
    Sigmoid,
    /// -1, 0, 1.
    Sign,
    /// Sine.
    Sin,
    /// Square root.
    Sqrt,
    /// tanh.
    Tanh,
    /// `ln(1+e^x)`.
    Softplus,
    /// Leaky ReLU with slope alpha.
    LeakyRelu(f32),
    /// `max(0, min(1, alpha*x+beta))`.
    HardSigmoid(f32, f32),
    /// `x * hardsigmoid(x; 1/6, 1/2)`.
    HardSwish,
    /// GELU, erf form, or tanh form when true.
    Gelu(bool),
    /// Round to nearest, halves to even.
    Round,
    /// Bitwise not (integer kernels only).
    BitNot,
    /// Arccosine (not in chains).
    Acos,
    /// Arcsine (not in chains).
    Asin,
    /// Arctangent (not in chains).
    Atan,
    /// Inverse hyperbolic cosine (not in chains).
    Acosh,
    /// Inverse hyperbolic sine (not in chains).
    Asinh,
    /// Inverse hyperbolic tangent (not in chains).
    Atanh,
    /// Hyperbolic sine (not in chains).
    Sinh,
    /// Hyperbolic cosine (not in chains).
    Cosh,
}

/// Two-input elementwise functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryFn {
    /// `a+b`.
    Add,
    /// `a-b`.
    Sub,
    /// `a*b`.
    Mul,
    /// `a/b`.
    Div,
    /// `a^b`.
    Pow,
    /// Logical and.
    And,
    /// Logical or.
    Or,
    /// `a==b`.
    Equal,
    /// `a>b`.
    Greater,
    /// `a<b`.
    Less,
    /// `a` if positive, else `a*b`.
    PRelu,
    /// Larger (NaN wins).
    Max,
    /// Smaller (NaN wins).
    Min,
    /// Remainder with the divisor's sign (Python's `%`).
    Mod,
    /// Remainder with the dividend's sign (C's `fmod`).
    Fmod,
    /// `a << b` (integer kernels only).
    ShiftLeft,
    /// `a >> b` (integer kernels only).
    ShiftRight,
    /// Bitwise and (integer kernels only).
    BitAnd,
    /// Bitwise or (integer kernels only).
    BitOr,
    /// Bitwise exclusive or (integer kernels only).
    BitXor,
}

/// Numerator coefficients (in x², highest power first) of the rational approximation of erf on [-4, 4] that
/// Eigen and XLA use for f32 (absolute error about 4e-7 here); the result is `x·P(x²) / Q(x²)`.
pub const ERF_P: [f32; 7] = [
    -2.726_142_3e-10,
    2.770_681_4e-8,
    -2.101_024e-6,
    -5.692_506_4e-5,
    -7.349_906_3e-4,
    -2.954_600_2e-3,
    -1.609_603_3e-2,
];
/// Denominator coefficients of [`ERF_P`]'s approximation.
pub const ERF_Q: [f32; 5] = [-1.456_607_2e-5, -2.133_740_6e-4, -1.682_827e-3, -7.373_329e-3, -1.426_474e-2];

/// Numerator coefficients (in x², highest power first) of the rational approximation of tanh that Eigen uses for
/// f32, on x clamped to ±[`TANH_CLAMP`] (where tanh rounds to ±1): `x·P(x²) / Q(x²)`, within 3.9e-7 of tanh
/// relatively over the whole line (checked against f64 tanh on 2·10⁶ points of [-9, 9]).
pub const TANH_P: [f32; 7] =
    [-2.760_768_5e-16, 2.000_188e-13, -8.604_672e-11, 5.122_297e-8, 1.485_722_4e-5, 6.372_619_3e-4, 4.893_524_6e-3];
/// Denominator coefficients of [`TANH_P`]'s approximation.
pub const TANH_Q: [f32; 4] = [1.198_258_4e-6, 1.185_347e-4, 2.268_434_6e-3, 4.893_525e-3];
/// Where [`TANH_P`]'s approximation clamps its argument.
pub const TANH_CLAMP: f32 = 7.905_311;

/// tanh by the rational approximation the JIT compiles (so that chains holding it vectorise): see [`TANH_P`].
#[inline(always)]
pub fn tanh_f32(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    let x = x.clamp(-TANH_CLAMP, TANH_CLAMP);
    let x2 = x * x;
    let p = TANH_P[1..].iter().fold(TANH_P[0], |acc, &c| acc * x2 + c) * x;
    let q = TANH_Q[1..].iter().fold(TANH_Q[0], |acc, &c| acc * x2 + c);
    p / q
}

/// erf by the rational approximation the JIT compiles (so that chains vectorise): see [`ERF_P`].
#[inline(always)]
pub fn erf_f32(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let p = ERF_P[1..].iter().fold(ERF_P[0], |acc, &c| acc * x2 + c) * x;
    let q = ERF_Q[1..].iter().fold(ERF_Q[0], |acc, &c| acc * x2 + c);
    p / q
}

/// Where [`exp_f32`] clamps its argument: below `EXP_LO` e^x rounds to 0 in f32, above `EXP_HI` to +inf, and the
/// clamped values still do.
pub const EXP_LO: f32 = -104.0;
/// See [`EXP_LO`].
pub const EXP_HI: f32 = 89.0;
/// The two parts of ln 2 that [`exp_f32`] reduces its argument by (the first exact in few bits, so that `n·EXP_LN2_HI`
/// is exact for every `n` the clamp allows).
pub const EXP_LN2_HI: f32 = 0.693_359_4;
/// See [`EXP_LN2_HI`].
pub const EXP_LN2_LO: f32 = -2.121_944_4e-4;
/// 1.5·2²³: `v + EXP_SHIFT` is `v` rounded to an integer (ties to even) for `|v| < 2²²`, held in the sum's low bits.
pub const EXP_SHIFT: f32 = 12_582_912.0;
/// The polynomial of [`exp_f32`] on `|r| ≤ ln 2 / 2`, highest power first: `e^r ≈ 1 + r + r²·P(r)`.
pub const EXP_P: [f32; 6] = [1.987_569_1e-4, 1.398_2e-3, 8.333_452e-3, 4.166_579_6e-2, 1.666_666_5e-1, 0.5];

/// e^x as the JIT compiles it (so that chains holding it vectorise): `x = n·ln 2 + r` with `n = round(x·log₂e)`,
/// `e^r` from [`EXP_P`], then two scalings by `2^(n/2)` halves so that every step stays a normal number (results
/// that underflow to subnormals or 0, and overflow to +inf, come out of the last product). Within 2 ulp of e^x
/// (checked against f64 on the whole finite range); NaN passes through.
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    let x = x.clamp(EXP_LO, EXP_HI);
    // Adding 1.5·2²³ rounds x·log₂e to an integer (ties to even) and leaves it in the low bits of the sum.
    let t = x * std::f32::consts::LOG2_E + EXP_SHIFT;
    let n = t - EXP_SHIFT;
    let r = x - n * EXP_LN2_HI;
    let r = r - n * EXP_LN2_LO;
    let p = EXP_P[1..].iter().fold(EXP_P[0], |acc, &c| acc * r + c);
    let e = p * (r * r) + r + 1.0;
    // NaN gives any integer here, and `e` is NaN.
    let n = (t.to_bits() as i32).wrapping_sub(EXP_SHIFT.to_bits() as i32);
    let (a, b) = (n >> 1, n.wrapping_sub(n >> 1));
    let scale = |k: i32| f32::from_bits((k.wrapping_add(127) as u32) << 23);
    e * scale(a) * scale(b)
}

/// The logistic function as the JIT compiles it: `1 / (1 + e^-x)` with [`exp_f32`].
#[inline(always)]
pub fn sigmoid_f32(x: f32) -> f32 {
    1.0 / (1.0 + exp_f32(-x))
}

/// Unary functions with a native Cranelift form (vector and scalar).
pub fn native_unary(f: UnaryFn) -> bool {
    matches!(
        f,
        UnaryFn::Erf
            | UnaryFn::Exp
            | UnaryFn::Sigmoid
            | UnaryFn::Gelu(_)
            | UnaryFn::Tanh
            | UnaryFn::Abs
            | UnaryFn::Neg
            | UnaryFn::Relu
            | UnaryFn::Sqrt
            | UnaryFn::Floor
            | UnaryFn::Ceil
            | UnaryFn::Reciprocal
            | UnaryFn::LeakyRelu(_)
            | UnaryFn::HardSigmoid(..)
            | UnaryFn::HardSwish
            | UnaryFn::Round
    )
}

/// Binary functions with a native Cranelift form.
pub fn native_binary(f: BinaryFn) -> bool {
    matches!(
        f,
        BinaryFn::Add | BinaryFn::Sub | BinaryFn::Mul | BinaryFn::Div | BinaryFn::Max | BinaryFn::Min | BinaryFn::PRelu
    )
}

/// Functions a chain may hold (the f32 elementwise set, bool-valued ones excluded).
pub fn fusable_unary(f: UnaryFn) -> bool {
    !matches!(
        f,
        UnaryFn::Not
            | UnaryFn::Sign
            | UnaryFn::BitNot
            | UnaryFn::Acos
            | UnaryFn::Asin
            | UnaryFn::Atan
            | UnaryFn::Acosh
            | UnaryFn::Asinh
            | UnaryFn::Atanh
            | UnaryFn::Sinh
            | UnaryFn::Cosh
    )
}

/// Binary functions a chain may hold.
pub fn fusable_binary(f: BinaryFn) -> bool {
    !matches!(
        f,
        BinaryFn::And
            | BinaryFn::Or
            | BinaryFn::Equal
            | BinaryFn::Greater
            | BinaryFn::Less
            | BinaryFn::Mod
            | BinaryFn::Fmod
            | BinaryFn::ShiftLeft
            | BinaryFn::ShiftRight
            | BinaryFn::BitAnd
            | BinaryFn::BitOr
            | BinaryFn::BitXor
    )
}

/// Scalar semantics of a unary function, as the interpreter kernels compute it.
#[inline(always)]
pub fn unary_scalar(f: UnaryFn, x: f32) -> f32 {
    match f {
        UnaryFn::Abs => x.abs(),
        UnaryFn::Neg => -x,
        UnaryFn::Relu => {
            if x < 0.0 {
                0.0
            } else {
                x
            }
        }
        UnaryFn::Sqrt => x.sqrt(),
        UnaryFn::Floor => x.floor(),
        UnaryFn::Ceil => x.ceil(),
        UnaryFn::Reciprocal => 1.0 / x,
        UnaryFn::Exp => exp_f32(x),
        UnaryFn::Log => x.ln(),
        UnaryFn::Tanh => tanh_f32(x),
        UnaryFn::Sin => x.sin(),
        UnaryFn::Cos => x.cos(),
        UnaryFn::Erf => erf_f32(x),
        UnaryFn::Sigmoid => sigmoid_f32(x),
        UnaryFn::Softplus => {
            if x > 0.0 {
                x + (-x).exp().ln_1p()
            } else {
                x.exp().ln_1p()
            }
        }
        UnaryFn::LeakyRelu(a) => {
            if x >= 0.0 {
                x
            } else {
                x * a
            }
        }
        UnaryFn::HardSigmoid(a, b) => (a * x + b).clamp(0.0, 1.0),
        UnaryFn::HardSwish => x * (x / 6.0 + 0.5).clamp(0.0, 1.0),
        UnaryFn::Gelu(false) => 0.5 * x * (1.0 + erf_f32(x * std::f32::consts::FRAC_1_SQRT_2)),
        UnaryFn::Gelu(true) => {
            let c = (2.0f32 / std::f32::consts::PI).sqrt();
            0.5 * x * (1.0 + tanh_f32(c * (x + 0.044715 * x * x * x)))
        }
        UnaryFn::Sign => {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                x
            }
        }
        UnaryFn::Not => f32::from(u8::from(x == 0.0)),
        UnaryFn::Round => x.round_ties_even(),
        UnaryFn::BitNot => f32::NAN,
        UnaryFn::Acos => x.acos(),
        UnaryFn::Asin => x.asin(),
        UnaryFn::Atan => x.atan(),
        UnaryFn::Acosh => x.acosh(),
        UnaryFn::Asinh => x.asinh(),
        UnaryFn::Atanh => x.atanh(),
        UnaryFn::Sinh => x.sinh(),
        UnaryFn::Cosh => x.cosh(),
    }
}

/// Scalar semantics of a binary function.
#[inline(always)]
pub fn binary_scalar(f: BinaryFn, a: f32, b: f32) -> f32 {
    match f {
        BinaryFn::Add => a + b,
        BinaryFn::Sub => a - b,
        BinaryFn::Mul => a * b,
        BinaryFn::Div => a / b,
        BinaryFn::Pow => a.powf(b),
        BinaryFn::Max => {
            if a.is_nan() || b.is_nan() {
                f32::NAN
            } else {
                a.max(b)
            }
        }
        BinaryFn::Min => {
            if a.is_nan() || b.is_nan() {
                f32::NAN
            } else {
                a.min(b)
            }
        }
        BinaryFn::PRelu => {
            if a < 0.0 {
                a * b
            } else {
                a
            }
        }
        BinaryFn::Fmod => a % b,
        BinaryFn::Mod => {
            let r = a % b;
            if r != 0.0 && (r < 0.0) != (b < 0.0) {
                r + b
            } else {
                r.copysign(b)
            }
        }
        BinaryFn::And
        | BinaryFn::Or
        | BinaryFn::Equal
        | BinaryFn::Greater
        | BinaryFn::Less
        | BinaryFn::ShiftLeft
        | BinaryFn::ShiftRight
        | BinaryFn::BitAnd
        | BinaryFn::BitOr
        | BinaryFn::BitXor => f32::NAN,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_within_two_ulp_over_the_finite_range() {
        let ulp = |v: f64| {
            let f = v as f32;
            f64::from(f32::from_bits(f.to_bits() + 1)) - f64::from(f)
        };
        let mut worst = 0f64;
        let mut x = -103.0f32;
        while x < 88.72 {
            let want = f64::from(x).exp();
            let got = f64::from(exp_f32(x));
            if want >= f64::from(f32::MIN_POSITIVE) {
                worst = worst.max((got - want).abs() / ulp(want));
            } else {
                // Subnormal results: within one subnormal step.
                assert!((got - want).abs() <= 1.5e-45, "exp({x}) = {got}, want {want}");
            }
            x += 1.37e-3;
        }
        assert!(worst <= 2.0, "{worst} ulp");
        assert_eq!(exp_f32(0.0), 1.0);
        assert_eq!(
            (exp_f32(89.0), exp_f32(f32::INFINITY), exp_f32(-f32::INFINITY)),
            (f32::INFINITY, f32::INFINITY, 0.0)
        );
        assert_eq!(exp_f32(-200.0), 0.0);
        assert!(exp_f32(f32::NAN).is_nan());
        assert_eq!((sigmoid_f32(-200.0), sigmoid_f32(200.0), sigmoid_f32(0.0)), (0.0, 1.0, 0.5));
        assert!((sigmoid_f32(-20.0) - 2.061_153_6e-9).abs() < 1e-15);
    }

    #[test]
    fn the_tanh_approximation_is_within_its_stated_error() {
        let mut worst = 0f64;
        for i in -90_000..=90_000 {
            let x = i as f32 * 1e-4;
            let want = f64::from(x).tanh();
            let got = f64::from(tanh_f32(x));
            if want != 0.0 {
                worst = worst.max((got - want).abs() / want.abs());
            }
        }
        assert!(worst < 5e-7, "relative error {worst}");
        assert_eq!((tanh_f32(f32::INFINITY), tanh_f32(-f32::INFINITY), tanh_f32(0.0)), (1.0, -1.0, 0.0));
        assert!(tanh_f32(f32::NAN).is_nan());
        assert!(tanh_f32(100.0) <= 1.0 && tanh_f32(-100.0) >= -1.0);
    }
}
