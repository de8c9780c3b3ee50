//! The f32 pools without indices, dispatched to their fast kernels: whole-plane passes for stride-1 MaxPools of the
//! input's size (`pool_same.rs`), a band of rows per call for column strides 1 and 2 (`pool_strided.rs`, MaxPool
//! and the AveragePools inside their plane), separable row-then-column maxima otherwise; each split over threads
//! by [`in_bands`]. The rest take `pool.rs`'s general paths.

use super::pool::{average_pool, max_pool, PoolParams};

/// [`max_pool`] for f32 without indices: the 2-D case uses `f32::max` (NaN loses to any number; all-NaN windows
/// give NaN), which compiles to branch-free code.
pub fn max_pool_f32(
    x: &[f32],
    x_shape: &[usize],
    p: &PoolParams<'_>,
    y: &mut [f32],
    y_shape: &[usize],
    threads: usize,
) {
    let one = |v: &[usize]| v.is_empty() || v.iter().all(|&d| d == 1);
    let planes = x_shape.first().copied().unwrap_or(0) * x_shape.get(1).copied().unwrap_or(0);
    let fast = x_shape.len() == 4 && y_shape.len() == 4 && p.kernel.len() == 2 && one(p.dilations);
    if !fast
        || x.len() != planes * x_shape[2] * x_shape[3]
        || y.len() != planes * y_shape[2] * y_shape[3]
        || y.is_empty()
    {
        return max_pool(x, x_shape, p, y, y_shape, None, false, threads);
    }
    let (h, w, oh, ow) = (x_shape[2], x_shape[3], y_shape[2], y_shape[3]);
    let (kh, kw) = (p.kernel[0], p.kernel[1]);
    let (sh, sw) = if p.strides.is_empty() { (1, 1) } else { (p.strides[0], p.strides[1]) };
    let (pt, pl) = if p.pads.is_empty() { (0, 0) } else { (p.pads[0], p.pads[1]) };
    // Stride 1 with the input's size: whole-plane passes (`pool_same.rs`).
    if (sh, sw) == (1, 1) && super::pool_same::takes((h, w), (oh, ow), (kh, kw), (pt, pl)) {
        let g = super::pool_same::Same { hw: (h, w), k: (kh, kw), pad: (pt, pl) };
        let plane =
            |scratch: &mut Vec<f32>, (xc, yc): (&[f32], &mut [f32])| super::pool_same::same_plane(xc, g, yc, scratch);
        if threads > 1 && planes >= 2 * threads {
            use rayon::prelude::*;
            x.par_chunks(h * w).zip(y.par_chunks_mut(h * w)).for_each_init(Vec::new, plane);
        } else {
            let mut scratch = Vec::new();
            x.chunks(h * w).zip(y.chunks_mut(h * w)).for_each(|c| plane(&mut scratch, c));
        }
        return;
    }
    // Column stride 1 or 2, every window over the input: a band of rows of a plane per call (`pool_strided.rs`).
    let g = super::pool_strided::Strided { hw: (h, w), out: (oh, ow), k: (kh, kw), stride: (sh, sw), pad: (pt, pl) };
    if g.takes() {
        let rows = |c: usize, i0: usize, yc: &mut [f32], v: &mut Vec<f32>| {
            super::pool_strided::rows(&x[c * h * w..(c + 1) * h * w], g, i0, yc, v)
        };
        return in_bands(y, (planes, oh, ow), threads, &rows);
    }
    let cols: Vec<(usize, usize)> = (0..ow)
        .map(|j| {
            let left = (j * sw) as isize - pl as isize;
            (left.max(0) as usize, ((left + kw as isize).max(0) as usize).min(w))
        })
        .collect();
    // Separable: the max over the window's rows into one row, then over each window's columns of that row.
    // Output rows i0.. of channel c into `yc` (whole rows), through `col_max`, a row.
    let plane = |c: usize, i0: usize, yc: &mut [f32], col_max: &mut Vec<f32>| {
        let xc = &x[c * h * w..(c + 1) * h * w];
        col_max.resize(w, 0.0);
        for (i, out) in (i0..).zip(yc.chunks_exact_mut(ow)) {
            let top = (i * sh) as isize - pt as isize;
            let (h0, h1) = (top.max(0) as usize, ((top + kh as isize).max(0) as usize).min(h));
            if h0 >= h1 {
                out.fill(0.0);
                continue;
            }
            col_max.copy_from_slice(&xc[h0 * w..(h0 + 1) * w]);
            for r in h0 + 1..h1 {
                max_into(col_max, &xc[r * w..(r + 1) * w]);
            }
            for (o, &(w0, w1)) in out.iter_mut().zip(&cols) {
                *o = match &col_max[w0..w1.max(w0)] {
                    [] => 0.0,
                    window => window.iter().fold(f32::NAN, |m, &v| m.max(v)),
                };
            }
        }
    };
    in_bands(y, (planes, oh, ow), threads, &plane)
}

/// [`average_pool`] for f32: pools with column stride 1 or 2, no padding and every window inside the plane take
/// `pool_strided.rs`'s rows (rule 5 there), split over threads as [`max_pool_f32`]'s; the others the general path.
#[allow(clippy::too_many_arguments)]
pub fn average_pool_f32(
    x: &[f32],
    x_shape: &[usize],
    p: &PoolParams<'_>,
    count_include_pad: bool,
    y: &mut [f32],
    y_shape: &[usize],
    threads: usize,
) {
    let one = |v: &[usize]| v.is_empty() || v.iter().all(|&d| d == 1);
    let zero = |v: &[usize]| v.iter().all(|&d| d == 0);
    if let ([n, c, h, w], [_, _, oh, ow], [kh, kw]) = (x_shape, y_shape, p.kernel) {
        let (sh, sw) = if p.strides.is_empty() { (1, 1) } else { (p.strides[0], p.strides[1]) };
        let g = super::pool_strided::Strided {
            hw: (*h, *w),
            out: (*oh, *ow),
            k: (*kh, *kw),
            stride: (sh, sw),
            pad: (0, 0),
        };
        let planes = n * c;
        if one(p.dilations)
            && zero(p.pads)
            && g.takes_mean()
            && x.len() == planes * h * w
            && y.len() == planes * oh * ow
        {
            let rows = |c: usize, i0: usize, yc: &mut [f32], v: &mut Vec<f32>| {
                super::pool_strided::mean_rows(&x[c * h * w..(c + 1) * h * w], g, i0, yc, v)
            };
            return in_bands(y, (planes, *oh, *ow), threads, &rows);
        }
    }
    average_pool(x, x_shape, p, count_include_pad, y, y_shape, threads)
}

/// Output rows `i0 ..` of plane `c` into whole rows, with a scratch vector reused across calls.
type PlaneRows<'a> = dyn Fn(usize, usize, &mut [f32], &mut Vec<f32>) + Sync + 'a;

/// Runs `plane(c, i0, rows, scratch)` over every plane `c` of `y` (`planes` of `oh × ow`), on threads when `threads
/// > 1`: a contiguous range of planes per thread where there are at least two planes per thread, else the same band
/// of output rows of every plane per thread. Bands of rows, as the convolutions around split their output positions
/// (`cols.rs`), were meant to keep what a thread reads in its own core's cache, but ranges of planes measured faster
/// at two threads on every model tried (SqueezeNet's stride-2 pools 0.15 / 0.10 / 0.09 → 0.13 / 0.075 / 0.05 ms,
/// Inception v1's thirteen MaxPool steps 1.6–2.6 → 1.2 ms, ResNet-50's and DenseNet-121's one the same or
/// better; `STOWAGE_PROFILE`, both splits in turn).
fn in_bands(y: &mut [f32], (planes, oh, ow): (usize, usize, usize), threads: usize, plane: &PlaneRows<'_>) {
    if threads > 1 && planes >= 2 * threads {
        use rayon::prelude::*;
        let per = planes.div_ceil(threads) * oh * ow;
        y.par_chunks_mut(per).enumerate().for_each(|(t, part)| {
            let mut scratch = Vec::new();
            let first = t * per / (oh * ow);
            part.chunks_mut(oh * ow).enumerate().for_each(|(c, yc)| plane(first + c, 0, yc, &mut scratch));
        });
    } else if threads > 1 && oh >= threads {
        use rayon::prelude::*;
        let per = oh.div_ceil(threads) * ow;
        let bands = super::cols::Cols::whole(y, planes, oh * ow, oh * ow).split(per);
        bands.into_par_iter().for_each(|mut band| {
            let (i0, mut scratch) = (band.first_column() / ow, Vec::new());
            (0..planes).for_each(|c| plane(c, i0, band.row(c), &mut scratch));
        });
    } else {
        let mut scratch = Vec::new();
        y.chunks_mut(oh * ow).enumerate().for_each(|(c, yc)| plane(c, 0, yc, &mut scratch));
    }
}

/// `dst[i] = max(dst[i], src[i])`, NaN losing to numbers (`f32::max`), 16 lanes at a time where the CPU has
/// AVX-512F.
fn max_into(dst: &mut [f32], src: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: AVX-512F was detected.
        return unsafe { max_into_avx512(dst, src) };
    }
    for (m, &v) in dst.iter_mut().zip(src) {
        *m = m.max(v);
    }
}

/// The plain loop, compiled with AVX-512 enabled so that it is vectorised 16 lanes wide.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn max_into_avx512(dst: &mut [f32], src: &[f32]) {
    for (m, &v) in dst.iter_mut().zip(src) {
        *m = m.max(v);
    }
}
