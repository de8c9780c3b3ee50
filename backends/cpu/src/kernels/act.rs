//! The activation a product's or convolution's epilogue applies while its tile is still in registers.
//!
//! A convolution followed by its activation is one step: the bias is added and the activation applied to each
//! tile before it is stored, so the activation costs no pass over the output. onnxruntime does the same in its
//! convolutions (`MlasActivation`); MobileNet-style models put a HardSwish or a Clip(0, 6) after nearly every
//! convolution, and as separate steps those took 15–18 % of a MobileNetV3 classifier's run here. The rules:
//!
//! 1. **The ONNX op's arithmetic, in f32.** Each variant computes what its op computes (`scalar` is the
//!    reference), with the op's attributes as the node gives them: HardSwish is `x · max(0, min(1, x/6 + 1/2))`,
//!    HardSigmoid `max(0, min(1, αx + β))`, LeakyRelu `x < 0 ? αx : x`, Clip `min(max(x, lo), hi)`; Sigmoid
//!    `1 / (1 + e^-x)` and SiLU (YOLO's `Mul(x, Sigmoid(x))`) `x · (1 / (1 + e^-x))` with e^x as the generated
//!    kernels compute it (`stowage_kir::func::exp_f32`), so that a convolution with its SiLU gives the same bits
//!    as the convolution and the fused chain it replaces.
//! 2. **NaN stays NaN.** The vector forms order each `max`/`min`'s operands so that a NaN operand is the one
//!    returned (`_mm512_max_ps` returns its second operand when either is NaN), as ONNX's reference does.
//! 3. **Vector and scalar agree.** The AVX-512 and AVX2 forms make the same operations in the same order as
//!    `scalar`, so a tile computed in registers and a tail computed in plain code give the same bits (a NaN for a
//!    NaN, whose sign follows the order the compiler gives a product's operands). Products
//!    and sums are separate (no fused multiply-add): the scalar form then needs no `fmaf` call where the CPU has
//!    no FMA.
//!
//! Tests: `vector_forms_match_scalar` (rules 2 and 3) here; the convolution tests run every variant through
//! each kernel path (`conv/tests.rs`).

/// An activation applied in a kernel's epilogue.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Act {
    /// None: the sum as it is.
    #[default]
    None,
    /// `max(0, x)`.
    Relu,
    /// `min(max(x, lo), hi)` (ReLU6 is `Clip(0, 6)`).
    Clip {
        /// Lower bound.
        lo: f32,
        /// Upper bound.
        hi: f32,
    },
    /// `max(0, min(1, αx + β))`.
    HardSigmoid {
        /// α.
        alpha: f32,
        /// β.
        beta: f32,
    },
    /// `x · max(0, min(1, x/6 + 1/2))`.
    HardSwish,
    /// `x < 0 ? αx : x`.
    LeakyRelu {
        /// α.
        alpha: f32,
    },
    /// `1 / (1 + e^-x)`.
    Sigmoid,
    /// `x · (1 / (1 + e^-x))`: a Sigmoid and the Mul of its input by it.
    Silu,
}

impl Act {
    /// True for [`Act::None`].
    pub fn is_none(self) -> bool {
        self == Act::None
    }

    /// The activation of one f32 value (rule 1).
    #[inline(always)]
    pub fn scalar(self, v: f32) -> f32 {
        // `a.max(b)` of Rust returns the other operand on NaN: written as selects so that NaN passes (rule 2).
        let max = |a: f32, b: f32| if a > b { a } else { b };
        let min = |a: f32, b: f32| if a < b { a } else { b };
        match self {
            Act::None => v,
            Act::Relu => max(0.0, v),
            Act::Clip { lo, hi } => min(hi, max(lo, v)),
            Act::HardSigmoid { alpha, beta } => max(0.0, min(1.0, alpha * v + beta)),
            Act::HardSwish => v * max(0.0, min(1.0, v * (1.0f32 / 6.0) + 0.5)),
            Act::LeakyRelu { alpha } => {
                if v < 0.0 {
                    alpha * v
                } else {
                    v
                }
            }
            Act::Sigmoid => stowage_kir::func::sigmoid_f32(v),
            Act::Silu => v * stowage_kir::func::sigmoid_f32(v),
        }
    }

    /// [`Act::scalar`] for any float type of the kernels (f64 computes in f64 with the f32 attributes widened).
    #[inline(always)]
    pub fn apply<T: super::gemm::Float>(self, v: T) -> T {
        if std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>() {
            return T::from_f32(self.scalar(v.to_f32()));
        }
        let x = v.to_f64();
        let max = |a: f64, b: f64| if a > b { a } else { b };
        let min = |a: f64, b: f64| if a < b { a } else { b };
        T::from_f64(match self {
            Act::None => x,
            Act::Relu => max(0.0, x),
            Act::Clip { lo, hi } => min(hi as f64, max(lo as f64, x)),
            Act::HardSigmoid { alpha, beta } => max(0.0, min(1.0, alpha as f64 * x + beta as f64)),
            Act::HardSwish => x * max(0.0, min(1.0, x / 6.0 + 0.5)),
            Act::LeakyRelu { alpha } => {
                if x < 0.0 {
                    alpha as f64 * x
                } else {
                    x
                }
            }
            Act::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            Act::Silu => x * (1.0 / (1.0 + (-x).exp())),
        })
    }

    /// The activation of 16 f32 lanes (rules 2 and 3).
    ///
    /// # Safety
    /// The CPU has AVX-512F.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    #[inline]
    pub unsafe fn avx512(self, v: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
        use std::arch::x86_64::*;
        let (zero, one) = (_mm512_setzero_ps(), _mm512_set1_ps(1.0));
        match self {
            Act::None => v,
            Act::Relu => _mm512_max_ps(zero, v),
            Act::Clip { lo, hi } => _mm512_min_ps(_mm512_set1_ps(hi), _mm512_max_ps(_mm512_set1_ps(lo), v)),
            Act::HardSigmoid { alpha, beta } => {
                let t = _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(alpha), v), _mm512_set1_ps(beta));
                _mm512_max_ps(zero, _mm512_min_ps(one, t))
            }
            Act::HardSwish => {
                let t = _mm512_add_ps(_mm512_mul_ps(v, _mm512_set1_ps(1.0 / 6.0)), _mm512_set1_ps(0.5));
                _mm512_mul_ps(v, _mm512_max_ps(zero, _mm512_min_ps(one, t)))
            }
            Act::LeakyRelu { alpha } => {
                let negative = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(v, zero);
                _mm512_mask_mul_ps(v, negative, v, _mm512_set1_ps(alpha))
            }
            Act::Sigmoid | Act::Silu => {
                // -v: the sign bit flipped, as Rust's negation does (NaN keeps its payload).
                let negated = _mm512_xor_si512(_mm512_castps_si512(v), _mm512_set1_epi32(i32::MIN));
                let s = _mm512_div_ps(one, _mm512_add_ps(one, exp512(_mm512_castsi512_ps(negated))));
                if self == Act::Silu {
                    _mm512_mul_ps(v, s)
                } else {
                    s
                }
            }
        }
    }

    /// The activation of 8 f32 lanes, for CPUs with AVX2 and FMA (rules 2 and 3).
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    pub unsafe fn avx2(self, v: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        let (zero, one) = (_mm256_setzero_ps(), _mm256_set1_ps(1.0));
        match self {
            Act::None => v,
            Act::Relu => _mm256_max_ps(zero, v),
            Act::Clip { lo, hi } => _mm256_min_ps(_mm256_set1_ps(hi), _mm256_max_ps(_mm256_set1_ps(lo), v)),
            Act::HardSigmoid { alpha, beta } => {
                let t = _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(alpha), v), _mm256_set1_ps(beta));
                _mm256_max_ps(zero, _mm256_min_ps(one, t))
            }
            Act::HardSwish => {
                let t = _mm256_add_ps(_mm256_mul_ps(v, _mm256_set1_ps(1.0 / 6.0)), _mm256_set1_ps(0.5));
                _mm256_mul_ps(v, _mm256_max_ps(zero, _mm256_min_ps(one, t)))
            }
            Act::LeakyRelu { alpha } => {
                let negative = _mm256_cmp_ps::<_CMP_LT_OQ>(v, zero);
                _mm256_blendv_ps(v, _mm256_mul_ps(v, _mm256_set1_ps(alpha)), negative)
            }
            Act::Sigmoid | Act::Silu => {
                let s = _mm256_div_ps(one, _mm256_add_ps(one, exp256(_mm256_xor_ps(v, _mm256_set1_ps(-0.0)))));
                if self == Act::Silu {
                    _mm256_mul_ps(v, s)
                } else {
                    s
                }
            }
        }
    }

    /// Applies the activation to every element of `y` (the kernels' path when the tile was not in registers).
    pub fn over<T: super::gemm::Float>(self, y: &mut [T]) {
        if !self.is_none() {
            y.iter_mut().for_each(|v| *v = self.apply(*v));
        }
    }
}

/// `stowage_kir::func::exp_f32` on 16 lanes: the same operations in the same order (rule 3). Callable where
/// AVX-512F is enabled.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
fn exp512(x: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    use stowage_kir::func::{EXP_HI, EXP_LN2_HI, EXP_LN2_LO, EXP_LO, EXP_P, EXP_SHIFT};
    // `max`/`min` return their second operand on NaN: a NaN x passes the clamp, as `f32::clamp` lets it.
    let x = _mm512_min_ps(_mm512_set1_ps(EXP_HI), _mm512_max_ps(_mm512_set1_ps(EXP_LO), x));
    let shift = _mm512_set1_ps(EXP_SHIFT);
    let t = _mm512_add_ps(_mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)), shift);
    let n = _mm512_sub_ps(t, shift);
    let r = _mm512_sub_ps(x, _mm512_mul_ps(n, _mm512_set1_ps(EXP_LN2_HI)));
    let r = _mm512_sub_ps(r, _mm512_mul_ps(n, _mm512_set1_ps(EXP_LN2_LO)));
    let mut p = _mm512_set1_ps(EXP_P[0]);
    for &c in &EXP_P[1..] {
        p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(c));
    }
    let e = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(p, _mm512_mul_ps(r, r)), r), _mm512_set1_ps(1.0));
    let n = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_set1_epi32(EXP_SHIFT.to_bits() as i32));
    // `e · 2^a · 2^b` (a + b = n) in one instruction: `e · 2^a` is exact (`e` is near 1 and `a` ≥ −75), so the
    // two products round once, where the result does, as `scalef` does: the same bits, in 2 operations, not 8.
    _mm512_scalef_ps(e, _mm512_cvtepi32_ps(n))
}

/// [`exp512`] on 8 lanes, for CPUs with AVX2 (rule 3). Callable where AVX2 is enabled.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn exp256(x: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    use stowage_kir::func::{EXP_HI, EXP_LN2_HI, EXP_LN2_LO, EXP_LO, EXP_P, EXP_SHIFT};
    let x = _mm256_min_ps(_mm256_set1_ps(EXP_HI), _mm256_max_ps(_mm256_set1_ps(EXP_LO), x));
    let shift = _mm256_set1_ps(EXP_SHIFT);
    let t = _mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(std::f32::consts::LOG2_E)), shift);
    let n = _mm256_sub_ps(t, shift);
    let r = _mm256_sub_ps(x, _mm256_mul_ps(n, _mm256_set1_ps(EXP_LN2_HI)));
    let r = _mm256_sub_ps(r, _mm256_mul_ps(n, _mm256_set1_ps(EXP_LN2_LO)));
    let mut p = _mm256_set1_ps(EXP_P[0]);
    for &c in &EXP_P[1..] {
        p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(c));
    }
    let e = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(p, _mm256_mul_ps(r, r)), r), _mm256_set1_ps(1.0));
    let n = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(EXP_SHIFT.to_bits() as i32));
    let a = _mm256_srai_epi32::<1>(n);
    let b = _mm256_sub_epi32(n, a);
    let bias = _mm256_set1_epi32(127);
    let scale = |k: __m256i| _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(k, bias)));
    _mm256_mul_ps(_mm256_mul_ps(e, scale(a)), scale(b))
}

#[cfg(test)]
mod tests {
    use super::Act;

    const ALL: [Act; 8] = [
        Act::None,
        Act::Relu,
        Act::Clip { lo: 0.0, hi: 6.0 },
        Act::HardSigmoid { alpha: 0.2, beta: 0.5 },
        Act::HardSwish,
        Act::LeakyRelu { alpha: 0.1 },
        Act::Sigmoid,
        Act::Silu,
    ];

    fn values() -> Vec<f32> {
        let mut v: Vec<f32> = (0..64).map(|i| (i as f32 - 32.0) * 0.37).collect();
        v.extend([f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0, 0.0, 3.0, -3.0, 6.0, 2.5, -2.5]);
        v.resize(80, 1.0);
        v
    }

    #[test]
    fn scalar_follows_the_ops() {
        assert_eq!(Act::HardSwish.scalar(3.0), 3.0);
        assert_eq!(Act::HardSwish.scalar(-3.0), 0.0);
        assert_eq!(Act::HardSwish.scalar(1.5), 1.5 * 0.75);
        assert_eq!(Act::Clip { lo: 0.0, hi: 6.0 }.scalar(7.0), 6.0);
        assert_eq!(Act::LeakyRelu { alpha: 0.1 }.scalar(-2.0), -0.2);
        assert_eq!(Act::HardSigmoid { alpha: 0.2, beta: 0.5 }.scalar(1.0), 0.7);
        for act in ALL {
            assert!(act.scalar(f32::NAN).is_nan(), "{act:?} keeps NaN");
            assert!(act.apply(f64::NAN).is_nan(), "{act:?} keeps NaN in f64");
        }
    }

    /// Each value's bits, every NaN as one (rule 3).
    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| if x.is_nan() { f32::NAN.to_bits() } else { x.to_bits() }).collect()
    }

    fn bits_of(b: &[u32]) -> Vec<u32> {
        bits(&b.iter().map(|&b| f32::from_bits(b)).collect::<Vec<_>>())
    }

    /// `exp512` gives `exp_f32`'s bits on 16 lanes (rule 3) over every input class: the clamps' edges, results
    /// that are subnormal (where the scaling rounds), that overflow, and a sweep of 2²⁰ values through the range.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn exp_on_lanes_matches_the_scalar_bits() {
        if !std::arch::is_x86_feature_detected!("avx512f") {
            return; // valgrind hides AVX-512 (scripts/valgrind-runtime); CI's machines have it.
        }
        use stowage_kir::func::{exp_f32, EXP_HI, EXP_LO};
        let span = EXP_HI - EXP_LO + 4.0;
        let mut xs: Vec<f32> = (0..1 << 20).map(|i| EXP_LO - 2.0 + span * i as f32 / (1 << 20) as f32).collect();
        xs.extend([EXP_LO, EXP_HI, -87.5, -88.7, -100.0, -103.9, 88.7, 89.0, 0.0, -0.0, f32::NAN, f32::INFINITY]);
        xs.extend([f32::NEG_INFINITY, f32::MIN_POSITIVE, -f32::MIN_POSITIVE, 1e-30, -1e-30]);
        xs.resize(xs.len().next_multiple_of(16), 0.5);
        for chunk in xs.chunks_exact(16) {
            let mut got = [0f32; 16];
            // SAFETY: AVX-512F was detected above; both pointers hold 16 floats.
            unsafe {
                use std::arch::x86_64::{_mm512_loadu_ps, _mm512_storeu_ps};
                _mm512_storeu_ps(got.as_mut_ptr(), super::exp512(_mm512_loadu_ps(chunk.as_ptr())));
            }
            let want: Vec<f32> = chunk.iter().map(|&x| exp_f32(x)).collect();
            assert_eq!(bits(&got), bits(&want), "{chunk:?}");
        }
    }

    #[test]
    fn silu_is_close_to_its_definition() {
        // Within a few ulp of x / (1 + e^-x) (the fused chain's bits are `lower/epilogue_tests.rs`'s).
        for x in [-90.0f32, -20.0, -3.5, -1.0, -1e-3, 0.0, 1e-3, 0.5, 2.0, 7.25, 30.0, 88.0] {
            let exact = x as f64 / (1.0 + (-(x as f64)).exp());
            assert!(
                (Act::Silu.scalar(x) as f64 - exact).abs() <= 4.0 * f32::EPSILON as f64 * exact.abs().max(1e-30),
                "{x}"
            );
        }
    }

    #[test]
    fn vector_forms_match_scalar() {
        #[cfg(target_arch = "x86_64")]
        for act in ALL {
            let v = values();
            let want: Vec<u32> = v.iter().map(|&x| act.scalar(x).to_bits()).collect();
            assert!(v.iter().all(|&x| !x.is_nan() || act.scalar(x).is_nan()), "{act:?} keeps NaN");
            if std::arch::is_x86_feature_detected!("avx512f") {
                let mut got = vec![0f32; v.len()];
                for (src, dst) in v.chunks(16).zip(got.chunks_mut(16)) {
                    // SAFETY: AVX-512F is available (checked above); both chunks hold 16 floats.
                    unsafe {
                        use std::arch::x86_64::*;
                        _mm512_storeu_ps(dst.as_mut_ptr(), act.avx512(_mm512_loadu_ps(src.as_ptr())));
                    }
                }
                assert_eq!(bits(&got), bits_of(&want), "{act:?} in AVX-512");
            }
            if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
                let mut got = vec![0f32; v.len()];
                for (src, dst) in v.chunks(8).zip(got.chunks_mut(8)) {
                    // SAFETY: AVX2 and FMA are available (checked above); both chunks hold 8 floats.
                    unsafe {
                        use std::arch::x86_64::*;
                        _mm256_storeu_ps(dst.as_mut_ptr(), act.avx2(_mm256_loadu_ps(src.as_ptr())));
                    }
                }
                assert_eq!(bits(&got), bits_of(&want), "{act:?} in AVX2");
            }
        }
    }
}
