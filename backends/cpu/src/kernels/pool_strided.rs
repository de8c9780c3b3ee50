//! f32 MaxPool and AveragePool with a column stride of 1 or 2: the stride-2 pools after stems and between stages
//! (SqueezeNet's 3 × 3, ResNet's and GoogLeNet's 3 × 3 with padding, VGG's 2 × 2, DenseNet's 2 × 2 averages in its
//! transitions) and stride-1 pools that shrink the plane.
//!
//! `max_pool_f32` went a row at a time through calls (a copy, a max per window row, a vector pass, the edge windows
//! one by one): about 20 ns of calls and set-up an output row, and on 13² to 28² planes most of the time. SqueezeNet's
//! three pools took 0.10–0.19 ms each against onnxruntime's 0.02–0.10 (`scripts/bench_nodes.py`, one thread). Here
//! a band of output rows of one plane is one function, compiled for AVX-512F where the CPU has it. The rules:
//!
//! 1. **Which pools** ([`Strided::takes`]): 2-D, dilation 1, column stride 1 or 2, any row stride, the begin padding
//!    inside the window (`pt < kh`, `pl < kw`) and every window's first row and column inside the plane
//!    (`(oh − 1)·sh < h + pt`, `(ow − 1)·sw < w + pl`), so that every window holds an input element.
//! 2. **Rows, then columns.** For output row `i` the rows of its window, clipped to the plane, are reduced into the
//!    row buffer `v` at offset `pl`; output `j` is then the max of `v[j·sw .. j·sw + kw]`.
//! 3. **NaN is the padding.** `v` holds NaN before and after the row. The max is `f32::max`'s (NaN loses to a
//!    number, a window of NaN only is NaN), so padding is absent from every window, as in `max_pool`, and no order
//!    of the taps changes a value.
//! 4. **Sixteen outputs at a time.** Tap `t` of outputs `j .. j + 16` is loaded from `v` at `j·sw + t` (stride 2:
//!    two loads whose even lanes are tap `t` and odd lanes tap `t + 1`, each taken by one permute), `f32::max`ed into the sums (`max_ps`, then the lanes where
//!    the tap is NaN keep the sum) and stored masked to the row. `v` is long enough for the last group's loads
//!    ([`Strided::buffer`], asserted).
//!
//! 5. **Means inside the plane.** An AveragePool is taken when it has no padding and every window lies inside the
//!    plane ([`Strided::takes_mean`]), so the divisor is `kh·kw` whatever `count_include_pad` says: rule 2 sums the
//!    window's rows instead of taking their max, rule 4 sums the taps from 0, and the sum is multiplied by
//!    `1 / (kh·kw)` (the general path's scale). Sums run rows first, so a mean may differ from the general path's
//!    (taps in row-major order) in its last bits. DenseNet-121's three transitions took 0.21–0.42 ms a pool in
//!    scalar loops on one thread, against onnxruntime's 0.04–0.06.
//!
//! Tests: `strided_pools_match_the_general_max_pool` here (rules 1–4 against `max_pool`, NaN and padding included,
//! on AVX-512F and on the plain loops), `strided_means_match_the_general_average_pool` (rule 5 against
//! `average_pool`, on one and two threads); `the_f32_fast_path_matches_the_general_max_pool` in `pool/tests.rs`
//! (threads).

/// Lanes of one AVX-512 register of f32.
const LANES: usize = 16;

/// One plane's pool: sizes of the input and output planes, kernel, strides and begin padding (each rows, columns).
#[derive(Clone, Copy, Debug)]
pub struct Strided {
    /// Input height and width.
    pub hw: (usize, usize),
    /// Output height and width.
    pub out: (usize, usize),
    /// Kernel height and width.
    pub k: (usize, usize),
    /// Row and column strides.
    pub stride: (usize, usize),
    /// Begin padding (top, left).
    pub pad: (usize, usize),
}

impl Strided {
    /// Rule 1: whether [`rows`] takes this pool.
    pub fn takes(&self) -> bool {
        let Strided { hw: (h, w), out: (oh, ow), k: (kh, kw), stride: (sh, sw), pad: (pt, pl) } = *self;
        h > 0
            && w > 0
            && oh > 0
            && ow > 0
            && sh > 0
            && (sw == 1 || sw == 2)
            && pt < kh
            && pl < kw
            && (oh - 1) * sh < h + pt
            && (ow - 1) * sw < w + pl
    }

    /// Rule 5: whether [`mean_rows`] takes this pool: no padding and every window inside the plane.
    pub fn takes_mean(&self) -> bool {
        let Strided { hw: (h, w), out: (oh, ow), k: (kh, kw), stride: (sh, sw), pad } = *self;
        pad == (0, 0) && self.takes() && (oh - 1) * sh + kh <= h && (ow - 1) * sw + kw <= w
    }

    /// The row buffer's length (rule 4): the row at `pl`, and every load of the last group of sixteen outputs.
    fn buffer(&self) -> usize {
        let (w, ow, kw, sw, pl) = (self.hw.1, self.out.1, self.k.1, self.stride.1, self.pad.1);
        let last = (ow - 1) / LANES * LANES;
        (last * sw + kw - 1 + LANES * sw).max(pl + w)
    }
}

/// Output rows `i0 ..` of one plane (`x` is the `h·w` input plane, `y` whole output rows), through the row buffer
/// `v` (any vector, reused across calls). The caller has checked [`Strided::takes`].
///
/// # Panics
/// On a plane or rows of other lengths than the geometry's.
pub fn rows(x: &[f32], g: Strided, i0: usize, y: &mut [f32], v: &mut Vec<f32>) {
    assert!(g.takes(), "max pool: {g:?} is not a strided pool");
    pool_rows::<false>(x, g, i0, y, v)
}

/// [`rows`] for an AveragePool (rule 5). The caller has checked [`Strided::takes_mean`].
///
/// # Panics
/// On a plane or rows of other lengths than the geometry's.
pub fn mean_rows(x: &[f32], g: Strided, i0: usize, y: &mut [f32], v: &mut Vec<f32>) {
    assert!(g.takes_mean(), "average pool: {g:?} is not a strided pool inside its plane");
    pool_rows::<true>(x, g, i0, y, v)
}

/// [`rows`], or [`mean_rows`] with `MEAN`.
fn pool_rows<const MEAN: bool>(x: &[f32], g: Strided, i0: usize, y: &mut [f32], v: &mut Vec<f32>) {
    let ((h, w), (oh, ow)) = (g.hw, g.out);
    assert!(x.len() >= h * w, "pool: a plane of {} for {h}x{w}", x.len());
    assert!(y.len().is_multiple_of(ow) && i0 + y.len() / ow <= oh, "pool: rows past the output");
    // Rule 3: NaN around the row; the row itself is written for each output row.
    v.clear();
    v.resize(g.buffer(), f32::NAN);
    #[cfg(target_arch = "x86_64")]
    if super::sgemm512::available() {
        // SAFETY: AVX-512F is available (checked just above); `v` has `g.buffer()` floats (just resized).
        return unsafe { rows_avx512::<MEAN>(x, g, i0, y, v) };
    }
    let scale = 1.0 / (g.k.0 * g.k.1) as f32;
    for (i, out) in (i0..).zip(y.chunks_exact_mut(ow)) {
        vertical::<MEAN>(x, g, i, v);
        for (j, o) in out.iter_mut().enumerate() {
            let taps = &v[j * g.stride.1..][..g.k.1];
            *o = if MEAN {
                taps.iter().fold(0.0, |a, &t| a + t) * scale
            } else {
                taps.iter().fold(f32::NAN, |m, &t| m.max(t))
            };
        }
    }
}

/// Rule 2: the rows of output row `i`'s window, clipped to the plane, reduced (summed with `MEAN`) into
/// `v[pl .. pl + w]`.
#[inline(always)]
fn vertical<const MEAN: bool>(x: &[f32], g: Strided, i: usize, v: &mut [f32]) {
    let (h, w) = g.hw;
    let top = (i * g.stride.0) as isize - g.pad.0 as isize;
    let r0 = top.max(0) as usize;
    let r1 = ((top + g.k.0 as isize) as usize).min(h);
    let row = &mut v[g.pad.1..g.pad.1 + w];
    row.copy_from_slice(&x[r0 * w..][..w]);
    for r in r0 + 1..r1 {
        for (m, &t) in row.iter_mut().zip(&x[r * w..][..w]) {
            *m = if MEAN { *m + t } else { m.max(t) };
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn rows_avx512<const MEAN: bool>(x: &[f32], g: Strided, i0: usize, y: &mut [f32], v: &mut [f32]) {
    use std::arch::x86_64::*;
    let ((ow, kw), sw) = ((g.out.1, g.k.1), g.stride.1);
    let evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    let odds = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    let last = (ow - 1) / LANES * LANES;
    assert!(last * sw + kw - 1 + LANES * sw <= v.len(), "max pool: a row buffer short of the last loads");
    let ((h, w), (sh, kh), (pt, pl)) = (g.hw, (g.stride.0, g.k.0), g.pad);
    assert!(x.len() >= h * w && pl + w <= v.len(), "max pool: a plane or row buffer too short");
    for (i, out) in (i0..).zip(y.chunks_exact_mut(ow)) {
        // Rule 2 as `vertical`, sixteen columns at a time with the row's tail masked (a plain loop leaves the
        // tail of a 27-wide row to scalar code).
        let top = (i * sh) as isize - pt as isize;
        let (r0, r1) = (top.max(0) as usize, ((top + kh as isize) as usize).min(h));
        for c in (0..w).step_by(LANES) {
            let keep = ((1u32 << (w - c).min(LANES)) - 1) as u16;
            // SAFETY: rows r0 .. r1 < h of the plane, columns c .. c + lanes ≤ w: inside `x` (asserted); the
            // store is to v[pl + c ..][..lanes], inside `v` (asserted).
            unsafe {
                let mut m = _mm512_maskz_loadu_ps(keep, x.as_ptr().add(r0 * w + c));
                for r in r0 + 1..r1 {
                    let t = _mm512_maskz_loadu_ps(keep, x.as_ptr().add(r * w + c));
                    m = if MEAN {
                        _mm512_add_ps(m, t)
                    } else {
                        let larger = _mm512_max_ps(m, t);
                        _mm512_mask_mov_ps(larger, _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(t, t), m)
                    };
                }
                _mm512_mask_storeu_ps(v.as_mut_ptr().add(pl + c), keep, m);
            }
        }
        let p = v.as_ptr();
        let scale = _mm512_set1_ps(1.0 / (g.k.0 * kw) as f32);
        for j in (0..ow).step_by(LANES) {
            let mut m = if MEAN { _mm512_setzero_ps() } else { _mm512_set1_ps(f32::NAN) };
            // Rule 4: `max_ps` gives its second operand when either is NaN: the tap where the sum is NaN, and the
            // lanes where the tap is NaN keep the sum. Rule 5: a mean's taps are summed.
            let fmax = |m: __m512, tap: __m512| {
                if MEAN {
                    _mm512_add_ps(m, tap)
                } else {
                    _mm512_mask_mov_ps(_mm512_max_ps(m, tap), _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(tap, tap), m)
                }
            };
            let mut t = 0;
            while t < kw {
                let at = j * sw + t;
                // SAFETY: `at + 16·sw ≤ last·sw + kw − 1 + 16·sw ≤ v.len()` (asserted above): inside `v`.
                unsafe {
                    if sw == 1 {
                        m = fmax(m, _mm512_loadu_ps(p.add(at)));
                        t += 1;
                    } else {
                        // Taps t and t + 1 are the even and the odd lanes of the same two loads.
                        let (lo, hi) = (_mm512_loadu_ps(p.add(at)), _mm512_loadu_ps(p.add(at + LANES)));
                        m = fmax(m, _mm512_permutex2var_ps(lo, evens, hi));
                        if t + 1 < kw {
                            m = fmax(m, _mm512_permutex2var_ps(lo, odds, hi));
                        }
                        t += 2;
                    }
                }
            }
            if MEAN {
                m = _mm512_mul_ps(m, scale);
            }
            let lanes = (ow - j).min(LANES);
            // SAFETY: the mask keeps the store to `out[j .. j + lanes]`, inside the row.
            unsafe { _mm512_mask_storeu_ps(out.as_mut_ptr().add(j), ((1u32 << lanes) - 1) as u16, m) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::pool::{average_pool, average_pool_f32, max_pool, PoolParams};
    use super::{rows, Strided};

    #[test]
    fn strided_pools_match_the_general_max_pool() {
        // (h, w, kh, kw, sh, sw, pads [top, left, bottom, right]): SqueezeNet's 3/2 with ceil mode's end padding,
        // ResNet's 3/2 padded, VGG's 2/2, stride 1 shrinking the plane, row strides 1 and 3, rows wider than 16
        // outputs, a kernel wider than the row, a plane of one element.
        type Case = (usize, usize, usize, usize, usize, usize, [usize; 4]);
        let cases: [Case; 10] = [
            (27, 27, 3, 3, 2, 2, [0, 0, 1, 1]),
            (112, 112, 3, 3, 2, 2, [1, 1, 1, 1]),
            (14, 14, 2, 2, 2, 2, [0, 0, 0, 0]),
            (9, 40, 3, 3, 1, 1, [0, 0, 0, 0]),
            (10, 37, 2, 3, 1, 2, [1, 2, 1, 1]),
            (13, 11, 4, 5, 3, 2, [2, 3, 1, 2]),
            (5, 70, 1, 2, 1, 2, [0, 1, 0, 1]),
            (3, 2, 5, 5, 2, 2, [2, 2, 2, 2]),
            (1, 1, 3, 3, 2, 2, [1, 1, 1, 1]),
            (6, 33, 3, 1, 2, 1, [1, 0, 1, 0]),
        ];
        for (h, w, kh, kw, sh, sw, pads) in cases {
            let oh = (h + pads[0] + pads[2] - kh) / sh + 1;
            let ow = (w + pads[1] + pads[3] - kw) / sw + 1;
            let mut x: Vec<f32> = (0..2 * h * w).map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.25).collect();
            // NaN in a few places and a whole row of the second plane: NaN loses to numbers.
            for i in (0..x.len()).step_by(7).chain(h * w..h * w + w) {
                x[i] = f32::NAN;
            }
            let p = PoolParams { kernel: &[kh, kw], strides: &[sh, sw], dilations: &[1, 1], pads: &pads };
            let mut want = vec![0.0; 2 * oh * ow];
            max_pool(&x, &[1, 2, h, w], &p, &mut want, &[1, 2, oh, ow], None, false, 1);
            let g = Strided { hw: (h, w), out: (oh, ow), k: (kh, kw), stride: (sh, sw), pad: (pads[0], pads[1]) };
            assert!(g.takes(), "{g:?}");
            let (mut got, mut v) = (vec![0.0; want.len()], Vec::new());
            for (xc, yc) in x.chunks(h * w).zip(got.chunks_mut(oh * ow)) {
                // A plane in two calls: output rows from 0 and from a later row.
                let (a, b) = yc.split_at_mut(oh / 2 * ow);
                rows(xc, g, 0, a, &mut v);
                rows(xc, g, oh / 2, b, &mut v);
            }
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert!(a == b || (a.is_nan() && b.is_nan()), "{g:?} [{i}]: {a} vs {b}");
            }
        }
        // A window wholly in the padding is not taken.
        let g = Strided { hw: (4, 4), out: (3, 3), k: (2, 2), stride: (2, 2), pad: (0, 0) };
        assert!(!g.takes());
    }

    #[test]
    fn strided_means_match_the_general_average_pool() {
        // (h, w, kh, kw, sh, sw): DenseNet's 2/2 transitions at 56² and 14², stride 1, row strides 1 and 3, rows
        // wider than 16 outputs, a window as large as the plane, a plane of odd width whose last column no window
        // reads.
        let cases = [
            (56, 56, 2, 2, 2, 2),
            (14, 14, 2, 2, 2, 2),
            (9, 40, 3, 3, 1, 1),
            (13, 11, 4, 5, 3, 2),
            (5, 70, 1, 2, 1, 2),
            (7, 7, 7, 7, 1, 1),
            (10, 37, 2, 3, 1, 2),
        ];
        for (h, w, kh, kw, sh, sw) in cases {
            let (oh, ow) = ((h - kh) / sh + 1, (w - kw) / sw + 1);
            let planes = 5;
            let x: Vec<f32> = (0..planes * h * w).map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.25).collect();
            let p = PoolParams { kernel: &[kh, kw], strides: &[sh, sw], dilations: &[1, 1], pads: &[0; 4] };
            let shapes = ([1, planes, h, w], [1, planes, oh, ow]);
            let mut want = vec![0.0f32; planes * oh * ow];
            average_pool(&x, &shapes.0, &p, false, &mut want, &shapes.1, 1);
            let g = Strided { hw: (h, w), out: (oh, ow), k: (kh, kw), stride: (sh, sw), pad: (0, 0) };
            assert!(g.takes_mean(), "{g:?}");
            for threads in [1, 2] {
                let mut got = vec![f32::NAN; want.len()];
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("pool");
                pool.install(|| average_pool_f32(&x, &shapes.0, &p, true, &mut got, &shapes.1, threads));
                for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                    assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{g:?} on {threads} threads [{i}]: {a} vs {b}");
                }
            }
        }
        // Padding, or a window past the edge (ceil mode): not taken.
        let padded = Strided { hw: (8, 8), out: (5, 5), k: (2, 2), stride: (2, 2), pad: (1, 1) };
        let past = Strided { hw: (7, 7), out: (4, 4), k: (2, 2), stride: (2, 2), pad: (0, 0) };
        assert!(padded.takes() && !padded.takes_mean() && past.takes() && !past.takes_mean());
    }
}
