//! ONNX pooling: `MaxPool` (with its optional `Indices` output), `AveragePool`, `GlobalMaxPool` and
//! `GlobalAveragePool`, over any number of spatial axes.
//!
//! Layouts are packed row-major: `x` is `[N, C, D₁ … Dₛ]` and `y` is `[N, C, O₁ … Oₛ]` (all `Oᵢ = 1` for the global
//! pools). Attributes arrive resolved: explicit begin/end padding (no `auto_pad`) and the output shape, which the
//! caller computed (with `ceil_mode` if set). Window `o` along an axis covers input coordinates
//! `o·stride − pad_begin + t·dilation` for `t < kernel`; taps outside the input are skipped, whether they fall in
//! the padding or (with `ceil_mode`) past it, so padding never wins a max and is never summed.

use rayon::prelude::*;

use super::gemm::Float;
pub use super::pool_f32::{average_pool_f32, max_pool_f32};

/// Pooling attributes, one entry per spatial axis except `pads`: begin padding of every spatial axis, then end
/// padding of every spatial axis (ONNX order). Empty `strides` / `dilations` / `pads` mean 1 / 1 / 0.
#[derive(Clone, Copy, Debug)]
pub struct PoolParams<'a> {
    /// Window shape.
    pub kernel: &'a [usize],
    /// Stride per spatial axis.
    pub strides: &'a [usize],
    /// Dilation per spatial axis.
    pub dilations: &'a [usize],
    /// `[begin₁ … beginₛ, end₁ … endₛ]` padding.
    pub pads: &'a [usize],
}

/// The valid taps of every window along one spatial axis.
struct AxisTaps {
    /// `coords[offsets[o]..offsets[o + 1]]`: input coordinates read by window `o`, ascending.
    offsets: Vec<usize>,
    coords: Vec<usize>,
    /// Per window: taps inside the padded extent `[−pad_begin, D + pad_end)` (the `count_include_pad` divisor).
    padded: Vec<usize>,
}

impl AxisTaps {
    fn new(d_in: usize, d_out: usize, kernel: usize, stride: usize, dilation: usize, pb: usize, pe: usize) -> Self {
        let mut offsets = Vec::with_capacity(d_out + 1);
        let mut coords = Vec::new();
        let mut padded = Vec::with_capacity(d_out);
        offsets.push(0);
        for o in 0..d_out {
            let mut in_pad = 0;
            for t in 0..kernel {
                // Coordinate in the padded frame: the input starts at pb.
                let q = o * stride + t * dilation;
                if q < pb + d_in + pe {
                    in_pad += 1;
                }
                if q >= pb && q < pb + d_in {
                    coords.push(q - pb);
                }
            }
            offsets.push(coords.len());
            padded.push(in_pad);
        }
        AxisTaps { offsets, coords, padded }
    }

    fn window(&self, o: usize) -> &[usize] {
        &self.coords[self.offsets[o]..self.offsets[o + 1]]
    }
}

/// Geometry shared by the windowed pools.
struct Windows {
    taps: Vec<AxisTaps>,
    out_sp: Vec<usize>,
    /// Row-major strides of the input spatial axes.
    rm: Vec<usize>,
    /// Column-major strides of the input spatial axes (for `storage_order = 1` indices).
    cm: Vec<usize>,
    in_size: usize,
    out_size: usize,
}

impl Windows {
    fn new(x_shape: &[usize], p: &PoolParams<'_>, y_shape: &[usize]) -> Self {
        assert!(x_shape.len() >= 2, "pool: input must have rank ≥ 2, got {x_shape:?}");
        assert_eq!(x_shape.len(), y_shape.len(), "pool: output rank");
        assert_eq!(x_shape[..2], y_shape[..2], "pool: output batch and channels");
        let s = x_shape.len() - 2;
        assert_eq!(p.kernel.len(), s, "pool: kernel_shape length");
        let attr = |v: &[usize], i: usize, default: usize| v.get(i).copied().unwrap_or(default);
        let in_sp = &x_shape[2..];
        let out_sp = y_shape[2..].to_vec();
        let taps = (0..s)
            .map(|d| {
                AxisTaps::new(
                    in_sp[d],
                    out_sp[d],
                    p.kernel[d],
                    attr(p.strides, d, 1).max(1),
                    attr(p.dilations, d, 1).max(1),
                    attr(p.pads, d, 0),
                    attr(p.pads, s + d, 0),
                )
            })
            .collect();
        let mut rm = vec![1; s];
        for d in (0..s.saturating_sub(1)).rev() {
            rm[d] = rm[d + 1] * in_sp[d + 1];
        }
        let mut cm = vec![1; s];
        for d in 1..s {
            cm[d] = cm[d - 1] * in_sp[d - 1];
        }
        Windows { taps, out_sp, rm, cm, in_size: in_sp.iter().product(), out_size: y_shape[2..].iter().product() }
    }

    /// Calls `f(q, lists)` for every output position `q` (row-major) with the tap lists of its window.
    fn for_each_output(&self, mut f: impl FnMut(usize, &[&[usize]])) {
        let s = self.out_sp.len();
        let mut o = vec![0usize; s];
        let mut lists: Vec<&[usize]> = (0..s).map(|d| self.taps[d].window(0)).collect();
        if self.out_size == 0 {
            return;
        }
        for q in 0..self.out_size {
            f(q, &lists);
            // Advance the output multi-index.
            let mut d = s;
            while d > 0 {
                d -= 1;
                o[d] += 1;
                if o[d] < self.out_sp[d] {
                    lists[d] = self.taps[d].window(o[d]);
                    break;
                }
                o[d] = 0;
                lists[d] = self.taps[d].window(0);
            }
        }
    }
}

/// Calls `f(row_major_offset, col_major_offset)` for every tap of a window (cartesian product of the per-axis
/// coordinate lists), in row-major order. One to three spatial axes get plain nested loops (so `f` inlines);
/// more recurse.
#[inline(always)]
fn visit(lists: &[&[usize]], rm: &[usize], cm: &[usize], f: &mut impl FnMut(usize, usize)) {
    match *lists {
        [] => f(0, 0),
        [l0] => {
            for &a in l0 {
                f(a * rm[0], a * cm[0]);
            }
        }
        [l0, l1] => {
            for &a in l0 {
                let (r0, c0) = (a * rm[0], a * cm[0]);
                for &b in l1 {
                    f(r0 + b * rm[1], c0 + b * cm[1]);
                }
            }
        }
        [l0, l1, l2] => {
            for &a in l0 {
                let (r0, c0) = (a * rm[0], a * cm[0]);
                for &b in l1 {
                    let (r1, c1) = (r0 + b * rm[1], c0 + b * cm[1]);
                    for &c in l2 {
                        f(r1 + c * rm[2], c1 + c * cm[2]);
                    }
                }
            }
        }
        _ => visit_rec(lists, rm, cm, (0, 0), f),
    }
}

/// The general case of [`visit`].
fn visit_rec(lists: &[&[usize]], rm: &[usize], cm: &[usize], acc: (usize, usize), f: &mut impl FnMut(usize, usize)) {
    match lists.split_first() {
        None => f(acc.0, acc.1),
        Some((first, rest)) => {
            for &c in *first {
                visit_rec(rest, &rm[1..], &cm[1..], (acc.0 + c * rm[0], acc.1 + c * cm[0]), f);
            }
        }
    }
}

/// Whether a value is unordered with itself (NaN).
#[inline]
fn unordered<T: PartialOrd>(v: &T) -> bool {
    v.partial_cmp(v).is_none()
}

/// Splits `y` (and the optional indices) into channel blocks of `block` elements and runs `f(channel, y, ind)` on
/// each, in parallel when `threads > 1`.
fn per_channel<T: Send>(
    y: &mut [T],
    indices: Option<&mut [i64]>,
    block: usize,
    threads: usize,
    f: impl Fn(usize, &mut [T], Option<&mut [i64]>) + Sync,
) {
    if block == 0 {
        return;
    }
    match indices {
        Some(ind) if threads > 1 => y
            .par_chunks_mut(block)
            .zip(ind.par_chunks_mut(block))
            .enumerate()
            .for_each(|(c, (yc, ic))| f(c, yc, Some(ic))),
        Some(ind) => {
            y.chunks_mut(block).zip(ind.chunks_mut(block)).enumerate().for_each(|(c, (yc, ic))| f(c, yc, Some(ic)))
        }
        None if threads > 1 => y.par_chunks_mut(block).enumerate().for_each(|(c, yc)| f(c, yc, None)),
        None => y.chunks_mut(block).enumerate().for_each(|(c, yc)| f(c, yc, None)),
    }
}

/// ONNX `MaxPool`: `y[n, c, o]` is the largest input in window `o` (see the module doc), the first one in
/// row-major window order on ties. NaN inputs lose against numbers (a window of NaNs gives NaN); a window with
/// no input element at all (possible only through padding) gives `T::default()` (0) and index −1.
///
/// `indices`, if given (same length as `y`), receives the ONNX `Indices` output: the flat position of the
/// chosen element in `x`, i.e. `(n·C + c)·(D₁⋯Dₛ) + spatial`, where `spatial` is row-major over the spatial axes,
/// or column-major when `column_major_indices` (`storage_order = 1`).
///
/// Works for any ordered element type (f32, f64 and the integer types MaxPool accepts).
///
/// # Panics
/// On inconsistent shapes or slice lengths.
#[allow(clippy::too_many_arguments)]
pub fn max_pool<T: Copy + PartialOrd + Default + Send + Sync>(
    x: &[T],
    x_shape: &[usize],
    p: &PoolParams<'_>,
    y: &mut [T],
    y_shape: &[usize],
    indices: Option<&mut [i64]>,
    column_major_indices: bool,
    threads: usize,
) {
    if indices.is_none() && max_pool_2d(x, x_shape, p, y, y_shape, threads) {
        return;
    }
    let win = Windows::new(x_shape, p, y_shape);
    let channels = x_shape[0] * x_shape[1];
    assert_eq!(x.len(), channels * win.in_size, "max_pool: X length");
    assert_eq!(y.len(), channels * win.out_size, "max_pool: Y length");
    if let Some(ind) = &indices {
        assert_eq!(ind.len(), y.len(), "max_pool: Indices length");
    }
    per_channel(y, indices, win.out_size, threads, |c, yc, mut ic| {
        let xc = &x[c * win.in_size..][..win.in_size];
        let base = (c * win.in_size) as i64;
        win.for_each_output(|q, lists| {
            let mut best: Option<(T, usize, usize)> = None;
            visit(lists, &win.rm, &win.cm, &mut |r, k| {
                let v = xc[r];
                let better = match &best {
                    None => true,
                    Some((b, _, _)) => v > *b || (unordered(b) && !unordered(&v)),
                };
                if better {
                    best = Some((v, r, k));
                }
            });
            let (v, idx) = match best {
                Some((v, r, k)) => (v, base + if column_major_indices { k } else { r } as i64),
                None => (T::default(), -1),
            };
            yc[q] = v;
            if let Some(ic) = ic.as_deref_mut() {
                ic[q] = idx;
            }
        });
    });
}

/// ONNX `AveragePool`: `y[n, c, o]` is the mean of the input elements in window `o`. With `count_include_pad`
/// the divisor also counts window taps in the padding — but only inside the padded extent
/// `[−pad_begin, D + pad_end)` per axis, not the taps past it that exist only because of `ceil_mode` (as the
/// ONNX reference does). Without it the divisor is the number of input elements in the window (a window without
/// any gives NaN). Sums are accumulated in f64.
///
/// # Panics
/// On inconsistent shapes or slice lengths.
#[allow(clippy::too_many_arguments)]
pub fn average_pool<T: Float>(
    x: &[T],
    x_shape: &[usize],
    p: &PoolParams<'_>,
    count_include_pad: bool,
    y: &mut [T],
    y_shape: &[usize],
    threads: usize,
) {
    if average_pool_2d_inside(x, x_shape, p, y, y_shape) {
        return;
    }
    let win = Windows::new(x_shape, p, y_shape);
    let channels = x_shape[0] * x_shape[1];
    assert_eq!(x.len(), channels * win.in_size, "average_pool: X length");
    assert_eq!(y.len(), channels * win.out_size, "average_pool: Y length");
    let s = win.out_sp.len();
    // Divisors depend only on the output position: precompute them once.
    let mut divisors = vec![0.0f64; win.out_size];
    {
        let mut o = vec![0usize; s];
        for dv in divisors.iter_mut() {
            let mut count = 1usize;
            for (t, &od) in win.taps.iter().zip(&o) {
                count *= if count_include_pad { t.padded[od] } else { t.window(od).len() };
            }
            *dv = count as f64;
            let mut d = s;
            while d > 0 {
                d -= 1;
                o[d] += 1;
                if o[d] < win.out_sp[d] {
                    break;
                }
                o[d] = 0;
            }
        }
    }
    per_channel(y, None, win.out_size, threads, |c, yc, _| {
        let xc = &x[c * win.in_size..][..win.in_size];
        win.for_each_output(|q, lists| {
            let mut sum = 0.0f64;
            visit(lists, &win.rm, &win.cm, &mut |r, _| sum += xc[r].to_f64());
            yc[q] = T::from_f64(sum / divisors[q]);
        });
    });
}

/// ONNX `GlobalMaxPool` (`max`) or `GlobalAveragePool`: reduces all spatial axes of `x` (`[N, C, D₁ … Dₛ]`) to
/// one value per channel, written to `y` (`N·C` elements, shape `[N, C, 1 … 1]`). The max propagates NaN, like
/// numpy's; the mean is accumulated in f64.
///
/// # Panics
/// On inconsistent shapes or slice lengths.
pub fn global_pool<T: Float>(x: &[T], x_shape: &[usize], max: bool, y: &mut [T], threads: usize) {
    assert!(x_shape.len() >= 2, "global_pool: input must have rank ≥ 2, got {x_shape:?}");
    let channels = x_shape[0] * x_shape[1];
    let size: usize = x_shape[2..].iter().product();
    assert_eq!(x.len(), channels * size, "global_pool: X length");
    assert_eq!(y.len(), channels, "global_pool: Y length");
    let one = |c: usize, out: &mut T| {
        let xc = &x[c * size..][..size];
        *out = if max { plane_max(xc) } else { T::from_f64(plane_sum(xc) / size as f64) };
    };
    if threads > 1 && channels >= 2 && channels * size >= GLOBAL_PARALLEL_MIN {
        let per = channels.div_ceil(threads);
        y.par_chunks_mut(per).enumerate().for_each(|(i, part)| {
            part.iter_mut().enumerate().for_each(|(j, out)| one(i * per + j, out));
        });
    } else {
        y.iter_mut().enumerate().for_each(|(c, out)| one(c, out));
    }
}

/// Elements of a global pool's input below which it runs on one thread.
const GLOBAL_PARALLEL_MIN: usize = 1 << 15;

/// Lanes of the partial maxima and sums of a global pool: independent chains the compiler keeps in vector
/// registers, where one chain waited on each comparison or addition (magika's GlobalMaxPool over 512 × 508
/// took 0.38 ms).
const LANES: usize = 16;

/// The largest element of `xc`, or its first NaN when it has one (as a serial scan that stops at a NaN gives).
fn plane_max<T: Float>(xc: &[T]) -> T {
    let mut m = [T::NEG_INFINITY; LANES];
    let mut nan = false;
    let mut chunks = xc.chunks_exact(LANES);
    for chunk in &mut chunks {
        for (mi, &v) in m.iter_mut().zip(chunk) {
            // NaN is the one value unequal to itself.
            #[allow(clippy::eq_op)]
            let is_nan = v != v;
            nan |= is_nan;
            *mi = if v > *mi { v } else { *mi };
        }
    }
    for (mi, &v) in m.iter_mut().zip(chunks.remainder()) {
        #[allow(clippy::eq_op)]
        let is_nan = v != v;
        nan |= is_nan;
        *mi = if v > *mi { v } else { *mi };
    }
    if nan {
        #[allow(clippy::eq_op)]
        return xc.iter().copied().find(|v| v != v).unwrap_or(T::NAN);
    }
    m.iter().copied().fold(T::NEG_INFINITY, |a, b| if b > a { b } else { a })
}

/// The sum of `xc` in f64, in partial sums ([`super::norm::lane_sum`]).
fn plane_sum<T: Float>(xc: &[T]) -> f64 {
    super::norm::lane_sum(xc, |v| v.to_f64())
}

/// The common case, 2-D without dilation and without indices, as plain loops over each window's rows (what the
/// general window walker costs several times over). Returns false, doing nothing, when `p` is not that case.
fn max_pool_2d<T: Copy + PartialOrd + Default + Send + Sync>(
    x: &[T],
    x_shape: &[usize],
    p: &PoolParams<'_>,
    y: &mut [T],
    y_shape: &[usize],
    threads: usize,
) -> bool {
    let one = |v: &[usize]| v.is_empty() || v.iter().all(|&d| d == 1);
    if x_shape.len() != 4 || y_shape.len() != 4 || p.kernel.len() != 2 || !one(p.dilations) {
        return false;
    }
    let (h, w, oh, ow) = (x_shape[2], x_shape[3], y_shape[2], y_shape[3]);
    let (kh, kw) = (p.kernel[0], p.kernel[1]);
    let (sh, sw) = if p.strides.is_empty() { (1, 1) } else { (p.strides[0], p.strides[1]) };
    let (pt, pl) = if p.pads.is_empty() { (0, 0) } else { (p.pads[0], p.pads[1]) };
    let planes = x_shape[0] * x_shape[1];
    if x.len() != planes * h * w || y.len() != planes * oh * ow || oh * ow == 0 {
        return false;
    }
    let plane = |c: usize, yc: &mut [T]| {
        let xc = &x[c * h * w..(c + 1) * h * w];
        for i in 0..oh {
            let top = (i * sh) as isize - pt as isize;
            let (h0, h1) = (top.max(0) as usize, ((top + kh as isize).max(0) as usize).min(h));
            for j in 0..ow {
                let left = (j * sw) as isize - pl as isize;
                let (w0, w1) = (left.max(0) as usize, ((left + kw as isize).max(0) as usize).min(w));
                let mut best: Option<T> = None;
                for r in h0..h1 {
                    for &v in &xc[r * w + w0..r * w + w1] {
                        best = Some(match best {
                            // NaN loses to any number, as in the general path.
                            Some(b) if !(v > b || (b.partial_cmp(&b).is_none() && v.partial_cmp(&v).is_some())) => b,
                            _ => v,
                        });
                    }
                }
                yc[i * ow + j] = best.unwrap_or_default();
            }
        }
    };
    if threads > 1 {
        use rayon::prelude::*;
        y.par_chunks_mut(oh * ow).enumerate().for_each(|(c, yc)| plane(c, yc));
    } else {
        y.chunks_mut(oh * ow).enumerate().for_each(|(c, yc)| plane(c, yc));
    }
    true
}

/// The common 2-D case where every window lies inside the input (no padding, no dilation, no window past the
/// edge): the divisor is the window size whatever `count_include_pad` says, and the sums are plain loops. Returns
/// false, doing nothing, otherwise.
fn average_pool_2d_inside<T: Float>(
    x: &[T],
    x_shape: &[usize],
    p: &PoolParams<'_>,
    y: &mut [T],
    y_shape: &[usize],
) -> bool {
    let ones = |v: &[usize]| v.is_empty() || v.iter().all(|&d| d == 1);
    let zeros = |v: &[usize]| v.iter().all(|&d| d == 0);
    if x_shape.len() != 4 || y_shape.len() != 4 || p.kernel.len() != 2 || !ones(p.dilations) || !zeros(p.pads) {
        return false;
    }
    let (h, w, oh, ow) = (x_shape[2], x_shape[3], y_shape[2], y_shape[3]);
    let (kh, kw) = (p.kernel[0], p.kernel[1]);
    let (sh, sw) = if p.strides.is_empty() { (1, 1) } else { (p.strides[0], p.strides[1]) };
    let planes = x_shape[0] * x_shape[1];
    let inside = oh > 0 && ow > 0 && (oh - 1) * sh + kh <= h && (ow - 1) * sw + kw <= w;
    if !inside || x.len() != planes * h * w || y.len() != planes * oh * ow {
        return false;
    }
    let scale = T::ONE / T::from_usize(kh * kw);
    for (c, yc) in y.chunks_mut(oh * ow).enumerate() {
        let xc = &x[c * h * w..(c + 1) * h * w];
        for i in 0..oh {
            for j in 0..ow {
                let mut sum = T::ZERO;
                for r in i * sh..i * sh + kh {
                    for &v in &xc[r * w + j * sw..r * w + j * sw + kw] {
                        sum += v;
                    }
                }
                yc[i * ow + j] = sum * scale;
            }
        }
    }
    true
}

#[cfg(test)]
mod tests;
