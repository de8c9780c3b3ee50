//! Direct convolution of one input channel per group (depthwise, with any channel multiplier), over one or two
//! spatial axes: what MobileNets, PP-OCR's backbones and EfficientNets are made of.
//!
//! The im2col route turns such a group into a product with one row (`[M/G, K] · [K, O]`, K being 9 or 25 taps):
//! the unfolding costs more than the product it feeds, and a product of one row runs far from the kernel's speed.
//! Here each output plane is accumulated directly instead, 16 columns at a time in registers: they start at the
//! bias, and each tap adds its weight times 16 neighbouring elements of the input row. The input plane is first
//! copied with its rows zero-padded and split into one phase per column stride (`phases`), so that no tap needs
//! clipping and every stride reads contiguous elements. For f32 the loops are compiled for AVX-512 where the CPU
//! has it (`#[target_feature]`, vectorised by rustc); layouts are packed row-major, as in `conv.rs`, whose
//! [`super::conv::conv_packed`] calls this.

use rayon::prelude::*;

use super::act::Act;
use super::gemm::Float;

/// The geometry of one spatial plane (1-D convolutions are planes of height 1).
#[derive(Clone, Copy, Debug)]
pub struct Plane {
    /// Input height and width.
    pub ih: usize,
    /// See `ih`.
    pub iw: usize,
    /// Output height and width.
    pub oh: usize,
    /// See `oh`.
    pub ow: usize,
    /// Kernel height and width.
    pub kh: usize,
    /// See `kh`.
    pub kw: usize,
    /// Strides (rows, columns).
    pub stride: (usize, usize),
    /// Dilations (rows, columns).
    pub dilation: (usize, usize),
    /// Begin padding (rows, columns); the end padding follows from the output size.
    pub pad: (usize, usize),
}

/// `y[n, m] = bias[m] + Σ_taps w[m, tap] · x[n, m / mult, …]` for every batch item `n` and output channel `m`
/// (`mult` = output channels per input channel), `act` applied to each. `x` is `[N, C, ih, iw]`, `w` `[M, kh·kw]`,
/// `y` `[N, M, oh, ow]`, all packed. Planes run in parallel over `threads` when there are enough of them.
///
/// # Panics
/// On slice lengths that do not match the geometry.
#[allow(clippy::too_many_arguments)]
pub fn depthwise<T: Float>(
    x: &[T],
    w: &[T],
    bias: Option<&[T]>,
    channels: usize,
    mult: usize,
    p: &Plane,
    act: Act,
    y: &mut [T],
    threads: usize,
) {
    #[cfg(target_arch = "x86_64")]
    if std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>()
        && super::depthwise_lanes::takes(mult, p)
        && !super::depthwise_s2::before_lanes(p)
    {
        // SAFETY: `T` is f32 (its TypeId, compared above): the same slices, retyped.
        let (x, w, y) = unsafe {
            (
                &*(x as *const [T] as *const [f32]),
                &*(w as *const [T] as *const [f32]),
                &mut *(y as *mut [T] as *mut [f32]),
            )
        };
        // SAFETY: as above.
        let bias = bias.map(|b| unsafe { &*(b as *const [T] as *const [f32]) });
        return super::depthwise_lanes::depthwise_lanes(x, w, bias, channels, p, act, y, threads);
    }
    let (p_in, p_out, taps) = (p.ih * p.iw, p.oh * p.ow, p.kh * p.kw);
    let m = channels * mult;
    assert_eq!(w.len(), m * taps, "depthwise: W length");
    assert!(p_out > 0 && y.len().is_multiple_of(m * p_out), "depthwise: Y length");
    assert_eq!(x.len() / p_in.max(1), y.len() / p_out * channels / m, "depthwise: X length");
    let plane = |scratch: &mut Scratch<T>, (pi, out): (usize, &mut [T])| {
        let (ni, mi) = (pi / m, pi % m);
        let src = &x[(ni * channels + mi / mult) * p_in..][..p_in];
        let b = bias.map_or(T::ZERO, |b| b[mi]);
        one_plane(src, &w[mi * taps..][..taps], b, p, act, out, scratch);
    };
    if threads > 1 && y.len() / p_out >= 2 * threads && y.len() >= 1 << 14 {
        y.par_chunks_mut(p_out).enumerate().for_each_init(Scratch::default, plane);
    } else {
        let mut scratch = Scratch::default();
        y.chunks_mut(p_out).enumerate().for_each(|c| plane(&mut scratch, c));
    }
}

/// What one thread's planes reuse from plane to plane: the phases, one padded row, the tap offsets, each
/// block's row starts, and its sums.
struct Scratch<T> {
    rows: Vec<T>,
    padded: Vec<T>,
    taps: Vec<usize>,
    starts: Vec<usize>,
    sums: Vec<T>,
}

impl<T> Default for Scratch<T> {
    fn default() -> Self {
        Scratch { rows: Vec::new(), padded: Vec::new(), taps: Vec::new(), starts: Vec::new(), sums: Vec::new() }
    }
}

/// Output columns in one sum: a vector of 16 f32 lanes.
const LANES: usize = 16;

/// One output plane, in blocks of `R` rows × `G` vectors of [`LANES`] columns whose `R·G` sums are independent,
/// so that their adds overlap: wide rows take four vectors of two rows, narrow ones one vector of eight rows. Eight
/// sums keep two FMA pipes busy through their four-cycle latency; four (one row of four vectors, as before) left
/// half idle: 16 channels of 112² at 3×3 0.160 → 0.143 ms, 144 of 56² 0.355 → 0.320, 32 of 150² 0.62 → 0.55
/// (`SHAPES=… cargo run --release -p stowage-cpu --example depthwise_speed`, fastest of 300, binaries in turn). For
/// f32 on a CPU with AVX-512F the sums are `zmm` registers (`sum_avx512`), with AVX2 and FMA pairs of `ymm`
/// registers (`sum_avx2`); otherwise plain loops (`sum_plain`).
/// f32 at 3 × 3 stride 2 reads its rows in place instead (`depthwise_s2.rs`).
fn one_plane<T: Float>(x: &[T], k: &[T], bias: T, p: &Plane, act: Act, y: &mut [T], scratch: &mut Scratch<T>) {
    if std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>() && super::depthwise_s2::takes(p) {
        // SAFETY: `T` is f32 (its TypeId, compared above): the same slices and value, retyped.
        let (x, k, y, bias) = unsafe {
            (
                &*(x as *const [T] as *const [f32]),
                &*(k as *const [T] as *const [f32]),
                &mut *(y as *mut [T] as *mut [f32]),
                *(&bias as *const T as *const f32),
            )
        };
        return super::depthwise_s2::plane(x, k, bias, p, act, y);
    }
    phased(x, k, bias, p, act, y, scratch);
}

/// [`one_plane`] through the column phases, whatever the geometry.
fn phased<T: Float>(x: &[T], k: &[T], bias: T, p: &Plane, act: Act, y: &mut [T], scratch: &mut Scratch<T>) {
    match p.ow.div_ceil(LANES) {
        1 => blocks::<T, 8, 1>(x, k, bias, p, act, y, scratch),
        2 => blocks::<T, 4, 2>(x, k, bias, p, act, y, scratch),
        3 => blocks::<T, 2, 3>(x, k, bias, p, act, y, scratch),
        _ => blocks::<T, 2, 4>(x, k, bias, p, act, y, scratch),
    }
}

/// One plane through the column phases (the reference of `depthwise_s2.rs`'s tests).
#[cfg(test)]
pub(super) fn by_phases(x: &[f32], k: &[f32], bias: f32, p: &Plane, act: Act, y: &mut [f32]) {
    phased(x, k, bias, p, act, y, &mut Scratch::default());
}

/// The input plane as the taps read it: each row zero-padded on both sides and split into `stride` phases
/// (phase `r` holds padded columns `r, r + stride, …`), so that the taps of [`LANES`] neighbouring outputs read
/// [`LANES`] neighbouring elements of one phase, whatever the stride; long enough for output blocks of `span`
/// columns, and followed by one row of zeros. Returns the length of a phase.
#[inline(always)]
fn phases<T: Float>(x: &[T], p: &Plane, span: usize, out: &mut Vec<T>, padded: &mut Vec<T>) -> usize {
    let sw = p.stride.1;
    // Padded columns any tap of any block of `span` output columns reads.
    let reach = (p.ow.div_ceil(span) * span - 1) * sw + (p.kw - 1) * p.dilation.1 + 1;
    let len = reach.div_ceil(sw);
    // Every plane of one call has this geometry and writes the same elements, so the zeros of the padding
    // (and of the last row) written for the first plane stay for the next.
    if out.len() != (p.ih + 1) * sw * len {
        out.clear();
        out.resize((p.ih + 1) * sw * len, T::ZERO);
    }
    // One padded row (`sw·len` columns: the begin padding, the row, zeros after it), then split into the phases.
    // Measured with the strided element-by-element copy this replaces, on this project's AVX-512 VM: MobileNet's
    // 32 channels of 112² at 3×3/2 spent half their time here (0.74 ms for the layer).
    padded.clear();
    padded.resize(sw * len, T::ZERO);
    let start = p.pad.1.min(sw * len);
    let n = p.iw.min(sw * len - start);
    #[cfg(target_arch = "x86_64")]
    let wide = std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>() && super::sgemm512::available();
    for (iy, row) in x.chunks(p.iw).enumerate() {
        let dst = &mut out[iy * sw * len..][..sw * len];
        if sw == 1 {
            dst[start..start + n].copy_from_slice(&row[..n]);
            continue;
        }
        #[cfg(target_arch = "x86_64")]
        if sw == 2 && wide {
            // SAFETY: `T` is f32 (its TypeId, compared for `wide`), so these are the same slices retyped; AVX-512F
            // is available (checked with it).
            unsafe {
                let row = &*(&row[..n] as *const [T] as *const [f32]);
                let dst = &mut *(dst as *mut [T] as *mut [f32]);
                split2_avx512(row, start, dst, len);
            }
            continue;
        }
        padded[start..start + n].copy_from_slice(&row[..n]);
        match sw {
            2 => split::<T, 2>(padded, dst, len),
            3 => split::<T, 3>(padded, dst, len),
            4 => split::<T, 4>(padded, dst, len),
            _ => {
                for (j, cols) in padded.chunks_exact(sw).enumerate() {
                    for (r, &v) in cols.iter().enumerate() {
                        dst[r * len + j] = v;
                    }
                }
            }
        }
    }
    len
}

/// [`phases`] compiled for AVX-512F, so that its copies, fills and splits run in `zmm` registers.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn phases_avx512<T: Float>(x: &[T], p: &Plane, span: usize, out: &mut Vec<T>, padded: &mut Vec<T>) -> usize {
    phases(x, p, span, out, padded)
}

/// Splits a padded row of `S·len` columns into its `S` phases (phase `r` takes columns `r, r + S, …`), written one
/// after another into `dst`; with `S` a constant the loop vectorises (into permutes, for stride 2).
#[inline(always)]
fn split<T: Float, const S: usize>(padded: &[T], dst: &mut [T], len: usize) {
    let (cols, _) = padded.as_chunks::<S>();
    let (phase0, rest) = dst.split_at_mut(len);
    for r in 0..S {
        let phase = if r == 0 { &mut phase0[..] } else { &mut rest[(r - 1) * len..][..len] };
        for (d, c) in phase.iter_mut().zip(cols) {
            *d = c[r];
        }
    }
}

/// The two phases of an f32 row at stride 2 (`dst[r·len + j]` = padded column `2j + r`, the row starting at padded
/// column `start`, zeros outside it), read from the row itself by two-source permutes, 32 columns at a time. Copied
/// into a padded row first and split element by element, a 32-channel 3×3 stride-2 layer at 112² spent half its
/// time here, its loads waiting on the copy's stores (`examples/depthwise_speed`, `perf annotate`). The edges (the
/// begin padding, the row's end, the phases' last partial vector) are masked loads and stores, not scalar loops:
/// with the ends element by element, this function still took 55 % of that layer (0.160 ms).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn split2_avx512(row: &[f32], start: usize, dst: &mut [f32], len: usize) {
    use std::arch::x86_64::*;
    let (even, odd) = dst[..2 * len].split_at_mut(len);
    let evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    let odds = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    // Lanes [from, to) of 16, clipped: the mask of the padded columns a vector holds that lie inside the row.
    let lanes = |from: isize, to: isize| -> __mmask16 {
        let (from, to) = (from.clamp(0, 16), to.clamp(0, 16));
        if to <= from {
            0
        } else {
            (((1u32 << (to - from)) - 1) << from) as __mmask16
        }
    };
    let (start, n) = (start as isize, row.len() as isize);
    for j in (0..len).step_by(16) {
        // Padded columns 2j .. 2j + 32; column c is row[c − start] where 0 ≤ c − start < n, else 0.
        let first = 2 * j as isize - start;
        let (ma, mb) = (lanes(-first, n - first), lanes(-first - 16, n - first - 16));
        let at = row.as_ptr().wrapping_offset(first);
        let out = lanes(0, (len - j) as isize);
        // SAFETY: a masked load reads only the lanes its mask sets, which are the columns inside `row` (`ma` for
        // the 16 from `at`, `mb` for the 16 after); the masked stores write lanes j .. min(j + 16, len) of `even`
        // and `odd`, each `len` long.
        unsafe {
            let a = _mm512_maskz_loadu_ps(ma, at);
            let b = _mm512_maskz_loadu_ps(mb, at.wrapping_add(16));
            _mm512_mask_storeu_ps(even.as_mut_ptr().add(j), out, _mm512_permutex2var_ps(a, evens, b));
            _mm512_mask_storeu_ps(odd.as_mut_ptr().add(j), out, _mm512_permutex2var_ps(a, odds, b));
        }
    }
}

/// What one block reads: the phases, where each of its rows starts in them for each kernel row, the start of
/// each tap in a row, and the block's first column.
struct Block<'a, T, const R: usize> {
    rows: &'a [T],
    starts: &'a [[usize; R]],
    taps: &'a [usize],
    c0: usize,
}

#[allow(clippy::too_many_arguments)]
fn blocks<T: Float, const R: usize, const G: usize>(
    x: &[T],
    k: &[T],
    bias: T,
    p: &Plane,
    act: Act,
    y: &mut [T],
    scratch: &mut Scratch<T>,
) {
    let (sh, sw) = p.stride;
    let (dh, dw) = p.dilation;
    let span = G * LANES;
    #[cfg(target_arch = "x86_64")]
    let len = if super::sgemm512::available() {
        // SAFETY: AVX-512F is available (checked on this line).
        unsafe { phases_avx512(x, p, span, &mut scratch.rows, &mut scratch.padded) }
    } else {
        phases(x, p, span, &mut scratch.rows, &mut scratch.padded)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let len = phases(x, p, span, &mut scratch.rows, &mut scratch.padded);
    let zero = p.ih * sw * len;
    // Output column c of tap kx reads padded column c·sw + kx·dw = (c + q)·sw + r: phase r, element c + q.
    let Scratch { rows, taps, starts, sums, .. } = scratch;
    taps.clear();
    taps.extend((0..p.kw).map(|kx| (kx * dw) % sw * len + (kx * dw) / sw));
    starts.clear();
    starts.resize(R * p.kh, zero);
    sums.clear();
    sums.resize(R * span, T::ZERO);
    #[cfg(target_arch = "x86_64")]
    let wide = std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>() && super::sgemm512::available();
    #[cfg(target_arch = "x86_64")]
    let avx2 = std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>()
        && std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("fma");
    for oy in (0..p.oh).step_by(R) {
        let here = R.min(p.oh - oy);
        for (ky, st) in starts.as_chunks_mut::<R>().0.iter_mut().enumerate() {
            for (rr, st) in st.iter_mut().enumerate() {
                let iy = ((oy + rr) * sh + ky * dh) as isize - p.pad.0 as isize;
                // Rows in the padding, and rows of the block past the output, read the row of zeros.
                *st = if rr < here && iy >= 0 && iy < p.ih as isize { iy as usize * sw * len } else { zero };
            }
        }
        for c0 in (0..p.ow).step_by(span) {
            let block = Block { rows: &rows[..], starts: starts.as_chunks::<R>().0, taps, c0 };
            #[cfg(target_arch = "x86_64")]
            if wide {
                // SAFETY: `T` is f32 (its TypeId, compared above), so these are the same slices and value
                // retyped; AVX-512F is available (checked with it).
                unsafe {
                    let block = &*(&block as *const Block<'_, T, R> as *const Block<'_, f32, R>);
                    let k = &*(k as *const [T] as *const [f32]);
                    let sums = &mut *(sums.as_mut_slice() as *mut [T] as *mut [f32]);
                    let bias = *(&bias as *const T as *const f32);
                    if (sh, dh, p.kh) == (1, 1, 3) {
                        sum_rows_avx512::<R, G>(block, k, p.kw, bias, act, sums);
                    } else {
                        sum_avx512::<R, G>(block, k, p.kw, bias, act, sums);
                    }
                }
            } else if avx2 {
                // SAFETY: as above, with AVX2 and FMA available (checked with the type).
                unsafe {
                    let block = &*(&block as *const Block<'_, T, R> as *const Block<'_, f32, R>);
                    let k = &*(k as *const [T] as *const [f32]);
                    let sums = &mut *(sums.as_mut_slice() as *mut [T] as *mut [f32]);
                    sum_avx2::<R, G>(block, k, p.kw, *(&bias as *const T as *const f32), act, sums);
                }
            } else {
                sum_plain::<T, R, G>(&block, k, p.kw, bias, act, sums);
            }
            #[cfg(not(target_arch = "x86_64"))]
            sum_plain::<T, R, G>(&block, k, p.kw, bias, act, sums);
            let width = (p.ow - c0).min(span);
            for (rr, sum) in sums.chunks(span).enumerate().take(here) {
                y[(oy + rr) * p.ow + c0..][..width].copy_from_slice(&sum[..width]);
            }
        }
    }
}

/// One block's sums (`R` rows of `G·LANES`, into `out`), with plain loops.
fn sum_plain<T: Float, const R: usize, const G: usize>(
    b: &Block<'_, T, R>,
    k: &[T],
    kw: usize,
    bias: T,
    act: Act,
    out: &mut [T],
) {
    let span = G * LANES;
    out.fill(bias);
    for (ky, starts) in b.starts.iter().enumerate() {
        for (&at, &wv) in b.taps.iter().zip(&k[ky * kw..][..kw]) {
            for (sum, &st) in out.chunks_mut(span).zip(starts) {
                for (o, &v) in sum.iter_mut().zip(&b.rows[st + at + b.c0..][..span]) {
                    *o += wv * v;
                }
            }
        }
    }
    act.over(out);
}

/// [`sum_plain`] for f32 in `zmm` registers, with fused multiply-adds.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn sum_avx512<const R: usize, const G: usize>(
    b: &Block<'_, f32, R>,
    k: &[f32],
    kw: usize,
    bias: f32,
    act: Act,
    out: &mut [f32],
) {
    use std::arch::x86_64::*;
    let span = G * LANES;
    let mut acc = [[_mm512_set1_ps(bias); G]; R];
    for (ky, starts) in b.starts.iter().enumerate() {
        for (&at, &wv) in b.taps.iter().zip(&k[ky * kw..][..kw]) {
            let w = _mm512_set1_ps(wv);
            for (acc, &st) in acc.iter_mut().zip(starts) {
                let src = &b.rows[st + at + b.c0..][..span];
                for (g, a) in acc.iter_mut().enumerate() {
                    // SAFETY: `src` holds `G·LANES` elements, and lane block g is within it.
                    *a = _mm512_fmadd_ps(w, unsafe { _mm512_loadu_ps(src.as_ptr().add(g * LANES)) }, *a);
                }
            }
        }
    }
    let out = &mut out[..R * span];
    for (r, acc) in acc.iter().enumerate() {
        for (g, &a) in acc.iter().enumerate() {
            // SAFETY: AVX-512F is enabled for this function.
            let v = unsafe { act.avx512(a) };
            // SAFETY: `out` holds `R·G·LANES` elements (checked by the slice above), and this block is within it.
            unsafe { _mm512_storeu_ps(out.as_mut_ptr().add((r * G + g) * LANES), v) };
        }
    }
}

/// [`sum_avx512`] for 3 × 3 kernels at a row stride and dilation of 1, where output row `r` reads input row
/// `r + ky` for kernel row `ky`: each of the block's `R + 2` input rows is loaded once per tap column and added
/// into every output row that reads it, instead of once per output row and kernel row (4 loads of a row where
/// there were 6 over 2 rows). Each sum takes its taps column by column (then kernel rows), not kernel row by
/// kernel row: the same sum in another order (within rounding of `sum_avx512`'s). `SHAPES=… examples/depthwise_speed`,
/// old and new binaries in turn, three times: 16 channels of 112² 0.148–0.184 → 0.128–0.140 ms, 64 of 56²
/// 0.147–0.158 → 0.133–0.143, 144 of 56² 0.319–0.335 → 0.282–0.284. Its store loop is `sum_avx512`'s, written out
/// again: a shared helper taking the sums by reference put them in memory (0.127 → 0.145 ms on the first shape).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn sum_rows_avx512<const R: usize, const G: usize>(
    b: &Block<'_, f32, R>,
    k: &[f32],
    kw: usize,
    bias: f32,
    act: Act,
    out: &mut [f32],
) {
    use std::arch::x86_64::*;
    const KH: usize = 3;
    let span = G * LANES;
    let mut acc = [[_mm512_set1_ps(bias); G]; R];
    // Input row j is row j − ky of kernel row ky; the pair with the smallest output row names it (rows past the
    // block's output read zeros, and their sums are never stored).
    // (At most 8 rows a block, so 10 input rows.)
    let rows: [usize; 10] = std::array::from_fn(|j| {
        let ky = j.min(KH - 1);
        b.starts[ky].get(j - ky).copied().unwrap_or(0)
    });
    for (kx, &at) in b.taps.iter().enumerate() {
        let w: [__m512; KH] = std::array::from_fn(|ky| _mm512_set1_ps(k[ky * kw + kx]));
        for (j, &st) in rows.iter().enumerate().take(R + KH - 1) {
            let src = &b.rows[st + at + b.c0..][..span];
            // SAFETY: `src` holds `G·LANES` elements, and lane block g is within it.
            let v: [__m512; G] = std::array::from_fn(|g| unsafe { _mm512_loadu_ps(src.as_ptr().add(g * LANES)) });
            for (ky, &w) in w.iter().enumerate() {
                if j >= ky && j - ky < R {
                    for (a, &v) in acc[j - ky].iter_mut().zip(&v) {
                        *a = _mm512_fmadd_ps(w, v, *a);
                    }
                }
            }
        }
    }
    let out = &mut out[..R * span];
    for (r, acc) in acc.iter().enumerate() {
        for (g, &a) in acc.iter().enumerate() {
            // SAFETY: AVX-512F is enabled for this function.
            let v = unsafe { act.avx512(a) };
            // SAFETY: `out` holds `R·G·LANES` elements (checked by the slice above), and this block is within it.
            unsafe { _mm512_storeu_ps(out.as_mut_ptr().add((r * G + g) * LANES), v) };
        }
    }
}

/// [`sum_avx512`] in pairs of `ymm` registers (each vector of [`LANES`] columns as two halves of 8), for CPUs with
/// AVX2 and FMA but not AVX-512F: MobileNet-style backbones' depthwise layers ran their plain loops there.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn sum_avx2<const R: usize, const G: usize>(
    b: &Block<'_, f32, R>,
    k: &[f32],
    kw: usize,
    bias: f32,
    act: Act,
    out: &mut [f32],
) {
    use std::arch::x86_64::*;
    const HALF: usize = LANES / 2;
    let span = G * LANES;
    let mut acc = [[[_mm256_set1_ps(bias); 2]; G]; R];
    for (ky, starts) in b.starts.iter().enumerate() {
        for (&at, &wv) in b.taps.iter().zip(&k[ky * kw..][..kw]) {
            let w = _mm256_set1_ps(wv);
            for (acc, &st) in acc.iter_mut().zip(starts) {
                let src = &b.rows[st + at + b.c0..][..span];
                for (g, halves) in acc.iter_mut().enumerate() {
                    for (h, a) in halves.iter_mut().enumerate() {
                        // SAFETY: `src` holds `G·LANES` elements, and half h of lane block g is within it.
                        let v = unsafe { _mm256_loadu_ps(src.as_ptr().add(g * LANES + h * HALF)) };
                        *a = _mm256_fmadd_ps(w, v, *a);
                    }
                }
            }
        }
    }
    let out = &mut out[..R * span];
    for (r, acc) in acc.iter().enumerate() {
        for (g, halves) in acc.iter().enumerate() {
            for (h, &a) in halves.iter().enumerate() {
                // SAFETY: AVX2 and FMA are enabled for this function.
                let v = unsafe { act.avx2(a) };
                // SAFETY: `out` holds `R·G·LANES` elements (checked by the slice above), and this half is within it.
                unsafe { _mm256_storeu_ps(out.as_mut_ptr().add((r * G + g) * LANES + h * HALF), v) };
            }
        }
    }
}
