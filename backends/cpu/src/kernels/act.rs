//! The activation a product's or convolution's epilogue applies while its tile is still in registers.
//!
//! A convolution followed by its activation is one step: the bias is added and the activation applied to each
//! tile before it is stored, so the activation costs no pass over the output. onnxruntime does the same in its
//! convolutions (`MlasActivation`); MobileNet-style models put a HardSwish or a Clip(0, 6) after nearly every
//! convolution, and as separate steps those took 15–18 % of a MobileNetV3 classifier's run here. The rules:
//!
//! 1. **The ONNX op's arithmetic, in f32.** Each variant computes what its op computes (`scalar` is the
//!    reference), with the op's attributes as the node gives them: HardSwish is `x · max(0, min(1, x/6 + 1/2))`,
//!    HardSigmoid `max(0, min(1, αx + β))`, LeakyRelu `x < 0 ? αx : x`, Clip `min(max(x, lo), hi)`.
//! 2. **NaN stays NaN.** The vector forms order each `max`/`min`'s operands so that a NaN operand is the one
//!    returned (`_mm512_max_ps` returns its second operand when either is NaN), as ONNX's reference does.
//! 3. **Vector and scalar agree.** The AVX-512 and AVX2 forms make the same operations in the same order as
//!    `scalar`, so a tile computed in registers and a tail computed in plain code give the same bits. Products
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
        }
    }

    /// Applies the activation to every element of `y` (the kernels' path when the tile was not in registers).
    pub fn over<T: super::gemm::Float>(self, y: &mut [T]) {
        if !self.is_none() {
            y.iter_mut().for_each(|v| *v = self.apply(*v));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Act;

    const ALL: [Act; 6] = [
        Act::None,
        Act::Relu,
        Act::Clip { lo: 0.0, hi: 6.0 },
        Act::HardSigmoid { alpha: 0.2, beta: 0.5 },
        Act::HardSwish,
        Act::LeakyRelu { alpha: 0.1 },
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

    #[test]
    fn vector_forms_match_scalar() {
        #[cfg(target_arch = "x86_64")]
        for act in ALL {
            let v = values();
            let want: Vec<u32> = v.iter().map(|&x| act.scalar(x).to_bits()).collect();
            if std::arch::is_x86_feature_detected!("avx512f") {
                let mut got = vec![0f32; v.len()];
                for (src, dst) in v.chunks(16).zip(got.chunks_mut(16)) {
                    // SAFETY: AVX-512F is available (checked above); both chunks hold 16 floats.
                    unsafe {
                        use std::arch::x86_64::*;
                        _mm512_storeu_ps(dst.as_mut_ptr(), act.avx512(_mm512_loadu_ps(src.as_ptr())));
                    }
                }
                assert_eq!(got.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), want, "{act:?} in AVX-512");
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
                assert_eq!(got.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), want, "{act:?} in AVX2");
            }
        }
    }
}
