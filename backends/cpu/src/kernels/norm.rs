//! Normalisations: ONNX `BatchNormalization` (inference form), `LayerNormalization`, `LRN`, and `Softmax` /
//! `LogSoftmax` (both the opset-13 single-axis form and the older flattened 2-D form).
//!
//! All tensors are packed row-major; outputs have the input's shape. Batch norm and LRN take the channel axis
//! to be axis 1 (`[N, C, …]`, any rank ≥ 2).

use super::gemm::Float;

/// Splits `shape` at `axis` into `(outer, n, inner)`: the products of the axes before, at and after it.
fn split3(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    assert!(axis < shape.len(), "axis {axis} out of range for shape {shape:?}");
    (shape[..axis].iter().product(), shape[axis], shape[axis + 1..].iter().product())
}

/// ONNX `BatchNormalization` in inference mode: `y = scale[c]·(x − mean[c]) / √(var[c] + epsilon) + bias[c]`
/// for channel `c` = axis 1 of `x` (`[N, C, …]`). `scale`, `bias`, `mean` and `var` hold `C` values each.
///
/// # Panics
/// On inconsistent shapes or slice lengths.
#[allow(clippy::too_many_arguments)]
pub fn batch_norm<T: Float>(
    x: &[T],
    x_shape: &[usize],
    scale: &[T],
    bias: &[T],
    mean: &[T],
    var: &[T],
    epsilon: f32,
    y: &mut [T],
) {
    assert!(x_shape.len() >= 2, "batch_norm: input must have rank ≥ 2, got {x_shape:?}");
    let (n, c, inner) = split3(x_shape, 1);
    assert_eq!(x.len(), n * c * inner, "batch_norm: X length");
    assert_eq!(y.len(), x.len(), "batch_norm: Y length");
    for (name, v) in [("scale", scale), ("bias", bias), ("mean", mean), ("var", var)] {
        assert_eq!(v.len(), c, "batch_norm: {name} length");
    }
    if x.is_empty() {
        return;
    }
    let eps = T::from_f32(epsilon);
    let coef: Vec<(T, T)> = (0..c)
        .map(|ch| {
            let a = scale[ch] / (var[ch] + eps).sqrt();
            (a, bias[ch] - mean[ch] * a)
        })
        .collect();
    for (i, (yr, xr)) in y.chunks_mut(inner).zip(x.chunks(inner)).enumerate() {
        let (a, b) = coef[i % c];
        for (yv, &xv) in yr.iter_mut().zip(xr) {
            *yv = xv * a + b;
        }
    }
}

/// Expands a broadcastable parameter (numpy rules, right-aligned) to the trailing shape `target`, returning it
/// as a packed vector of `target`'s size.
fn expand_to<T: Float>(v: &[T], shape: &[usize], target: &[usize], what: &str) -> Vec<T> {
    assert_eq!(v.len(), shape.iter().product::<usize>(), "layer_norm: {what} length");
    // Leading axes of size 1 beyond the target's rank are harmless.
    let mut shape = shape;
    while shape.len() > target.len() && shape[0] == 1 {
        shape = &shape[1..];
    }
    assert!(shape.len() <= target.len(), "layer_norm: {what} shape {shape:?} does not broadcast to {target:?}");
    let lead = target.len() - shape.len();
    for (d, &s) in shape.iter().enumerate() {
        assert!(s == 1 || s == target[lead + d], "layer_norm: {what} shape {shape:?} does not broadcast to {target:?}");
    }
    let size: usize = target.iter().product();
    if v.len() == size {
        return v.to_vec();
    }
    // Source strides over the target axes (0 on broadcast axes).
    let mut src_strides = vec![0usize; target.len()];
    let mut acc = 1;
    for d in (0..shape.len()).rev() {
        if shape[d] != 1 {
            src_strides[lead + d] = acc;
        }
        acc *= shape[d];
    }
    let mut out = Vec::with_capacity(size);
    let mut idx = vec![0usize; target.len()];
    for _ in 0..size {
        out.push(v[idx.iter().zip(&src_strides).map(|(i, s)| i * s).sum::<usize>()]);
        for d in (0..target.len()).rev() {
            idx[d] += 1;
            if idx[d] < target[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    out
}

/// ONNX `LayerNormalization`: each row `x[i, :]` of `x` viewed as `[Π dims[..axis], Π dims[axis..]]` is
/// normalised to zero mean and unit variance (`(x − mean) / √(var + epsilon)`, population variance), then
/// multiplied by `scale` and offset by `bias`, both (data, shape) broadcast to `x_shape[axis..]`.
/// The statistics are computed in f64 (at least the stash type f32 requires); if given, `mean` and
/// `inv_std_dev` receive each row's mean and `1 / √(var + epsilon)` (one value per row).
///
/// # Panics
/// On inconsistent shapes or slice lengths.
#[allow(clippy::too_many_arguments)]
pub fn layer_norm<T: Float>(
    x: &[T],
    x_shape: &[usize],
    axis: usize,
    scale: &[T],
    scale_shape: &[usize],
    bias: Option<(&[T], &[usize])>,
    epsilon: f32,
    y: &mut [T],
    mean: Option<&mut [f32]>,
    inv_std_dev: Option<&mut [f32]>,
) {
    assert!(axis <= x_shape.len(), "layer_norm: axis {axis} out of range for {x_shape:?}");
    let rows: usize = x_shape[..axis].iter().product();
    let cols: usize = x_shape[axis..].iter().product();
    assert_eq!(x.len(), rows * cols, "layer_norm: X length");
    assert_eq!(y.len(), x.len(), "layer_norm: Y length");
    for out in [&mean, &inv_std_dev].into_iter().flatten() {
        assert_eq!(out.len(), rows, "layer_norm: statistics length");
    }
    let target = &x_shape[axis..];
    let scale = expand_to(scale, scale_shape, target, "scale");
    let bias = bias.map(|(b, s)| expand_to(b, s, target, "bias"));
    if cols == 0 {
        return;
    }
    let eps = epsilon as f64;
    let bias = bias.as_deref();
    #[cfg(target_arch = "x86_64")]
    if std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>() && super::sgemm512::available() {
        let retype = |v: &[T]| {
            // SAFETY: `T` is f32 (its TypeId, just compared), so this is the same slice retyped.
            unsafe { &*(v as *const [T] as *const [f32]) }
        };
        // SAFETY: as above, for the output.
        let y32 = unsafe { &mut *(y as *mut [T] as *mut [f32]) };
        // SAFETY: AVX-512F is available (checked just above).
        unsafe { layer_norm_avx512(retype(x), cols, retype(&scale), bias.map(retype), eps, y32, mean, inv_std_dev) };
        return;
    }
    layer_norm_rows(x, cols, &scale, bias, eps, y, mean, inv_std_dev);
}

/// [`layer_norm_rows`] for f32 with its loops compiled for AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
fn layer_norm_avx512(
    x: &[f32],
    cols: usize,
    scale: &[f32],
    bias: Option<&[f32]>,
    eps: f64,
    y: &mut [f32],
    mean: Option<&mut [f32]>,
    inv_std_dev: Option<&mut [f32]>,
) {
    layer_norm_rows(x, cols, scale, bias, eps, y, mean, inv_std_dev);
}

/// [`layer_norm`]'s rows of `cols` elements, `scale` and `bias` already expanded to a row.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn layer_norm_rows<T: Float>(
    x: &[T],
    cols: usize,
    scale: &[T],
    bias: Option<&[T]>,
    eps: f64,
    y: &mut [T],
    mut mean: Option<&mut [f32]>,
    mut inv_std_dev: Option<&mut [f32]>,
) {
    for (r, (yr, xr)) in y.chunks_mut(cols).zip(x.chunks(cols)).enumerate() {
        let mu = lane_sum(xr, |v| v.to_f64()) / cols as f64;
        let var = lane_sum(xr, |v| {
            let d = v.to_f64() - mu;
            d * d
        }) / cols as f64;
        let inv = 1.0 / (var + eps).sqrt();
        if let Some(m) = mean.as_deref_mut() {
            m[r] = mu as f32;
        }
        if let Some(s) = inv_std_dev.as_deref_mut() {
            s[r] = inv as f32;
        }
        let (mu_t, inv_t) = (T::from_f64(mu), T::from_f64(inv));
        match &bias {
            Some(b) => {
                for (((yv, &xv), &sv), &bv) in yr.iter_mut().zip(xr).zip(scale).zip(*b) {
                    *yv = (xv - mu_t) * inv_t * sv + bv;
                }
            }
            None => {
                for ((yv, &xv), &sv) in yr.iter_mut().zip(xr).zip(scale) {
                    *yv = (xv - mu_t) * inv_t * sv;
                }
            }
        }
    }
}

/// `Σ f(v)` over `xr` in f64, in [`ROW_LANES`] partial sums: independent chains where one chain of f64 additions
/// made LayerNorm's statistics wait on each addition's latency (global average pools sum their planes so too).
#[inline(always)]
pub(crate) fn lane_sum<T: Float>(xr: &[T], f: impl Fn(T) -> f64) -> f64 {
    let mut sums = [0.0f64; ROW_LANES];
    let mut chunks = xr.chunks_exact(ROW_LANES);
    for c in &mut chunks {
        for (s, &v) in sums.iter_mut().zip(c) {
            *s += f(v);
        }
    }
    for (s, &v) in sums.iter_mut().zip(chunks.remainder()) {
        *s += f(v);
    }
    sums.iter().sum()
}

/// ONNX `Softmax` (`log = false`) or `LogSoftmax` (`log = true`). With `flatten = false` (opset ≥ 13) each
/// 1-D slice along `axis` is normalised; with `flatten = true` (opset < 13) the input is viewed as the 2-D
/// `[Π dims[..axis], Π dims[axis..]]` and each row is normalised. The maximum is subtracted first, so large
/// inputs do not overflow; the sums are accumulated in f64. Slices are split over `threads` where there are
/// [`SOFTMAX_PARALLEL_MIN`] elements or more.
///
/// # Panics
/// On inconsistent shapes or slice lengths.
pub fn softmax<T: Float>(
    x: &[T],
    x_shape: &[usize],
    axis: usize,
    flatten: bool,
    log: bool,
    y: &mut [T],
    threads: usize,
) {
    assert_eq!(x.len(), x_shape.iter().product::<usize>(), "softmax: X length");
    assert_eq!(y.len(), x.len(), "softmax: Y length");
    if x.is_empty() {
        return;
    }
    let (outer, n, inner) = if flatten {
        assert!(axis <= x_shape.len(), "softmax: axis {axis} out of range for {x_shape:?}");
        (x_shape[..axis].iter().product(), x_shape[axis..].iter().product(), 1)
    } else if x_shape.is_empty() {
        (1, 1, 1)
    } else {
        split3(x_shape, axis)
    };
    let block = n * inner;
    let per =
        if threads > 1 && outer >= 2 && x.len() >= SOFTMAX_PARALLEL_MIN { outer.div_ceil(threads) } else { outer };
    let part = |xp: &[T], yp: &mut [T]| {
        #[cfg(target_arch = "x86_64")]
        if std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>() && super::sgemm512::available() {
            // SAFETY: `T` is f32 (its TypeId, just compared), so these are the same slices retyped.
            let (xp, yp) = unsafe { (&*(xp as *const [T] as *const [f32]), &mut *(yp as *mut [T] as *mut [f32])) };
            // SAFETY: AVX-512F is available (checked just above).
            unsafe { softmax_avx512(xp, n, inner, log, yp) };
            return;
        }
        softmax_body(xp, n, inner, log, yp);
    };
    if per < outer {
        use rayon::prelude::*;
        x.par_chunks(per * block).zip(y.par_chunks_mut(per * block)).for_each(|(xp, yp)| part(xp, yp));
    } else {
        part(x, y);
    }
}

/// Elements from which [`softmax`] splits its slices over threads (a BERT-base attention's 12 × 128 × 128 is
/// 196,608; a sequence-16 block's 4 × 16 × 16, 1,024, stays on one).
pub const SOFTMAX_PARALLEL_MIN: usize = 16_384;

/// [`softmax`] for f32 with its loops compiled for AVX-512F (16 lanes where they were 2).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn softmax_avx512(x: &[f32], n: usize, inner: usize, log: bool, y: &mut [f32]) {
    softmax_body(x, n, inner, log, y);
}

/// Lanes of a row's maximum and of its sum ([`softmax_row`]).
const ROW_LANES: usize = 16;

/// Softmax of each slice of `x` (`[outer][n][inner]`, normalised along `n`) into `y`.
#[inline(always)]
fn softmax_body<T: Float>(x: &[T], n: usize, inner: usize, log: bool, y: &mut [T]) {
    if inner == 1 {
        for (yr, xr) in y.chunks_mut(n).zip(x.chunks(n)) {
            softmax_row(xr, yr, log);
        }
        return;
    }
    // Strided: process `inner` lanes at once, row by row along the axis.
    let mut max = vec![T::ZERO; inner];
    let mut sum = vec![0.0f64; inner];
    for (xb, yb) in x.chunks(n * inner).zip(y.chunks_mut(n * inner)) {
        max.fill(T::NEG_INFINITY);
        for xr in xb.chunks(inner) {
            for (m, &v) in max.iter_mut().zip(xr) {
                if v > *m {
                    *m = v;
                }
            }
        }
        sum.fill(0.0);
        for (yr, xr) in yb.chunks_mut(inner).zip(xb.chunks(inner)) {
            for (((yv, &xv), &m), s) in yr.iter_mut().zip(xr).zip(&max).zip(sum.iter_mut()) {
                let e = (xv - m).exp_fast();
                *s += e.to_f64();
                *yv = if log { xv - m } else { e };
            }
        }
        let fix: Vec<T> = sum.iter().map(|&s| T::from_f64(if log { s.ln() } else { 1.0 / s })).collect();
        for yr in yb.chunks_mut(inner) {
            for (v, &f) in yr.iter_mut().zip(&fix) {
                if log {
                    *v -= f;
                } else {
                    *v *= f;
                }
            }
        }
    }
}

/// One contiguous slice: the maximum in [`ROW_LANES`] lanes, the exponentials in a loop of their own (no
/// reduction in it, so it runs on vectors), their sum in [`ROW_LANES`] lanes of f64, then the scaling.
#[inline(always)]
fn softmax_row<T: Float>(xr: &[T], yr: &mut [T], log: bool) {
    let mut lanes = [T::NEG_INFINITY; ROW_LANES];
    let mut chunks = xr.chunks_exact(ROW_LANES);
    for c in &mut chunks {
        for (m, &v) in lanes.iter_mut().zip(c) {
            if v > *m {
                *m = v;
            }
        }
    }
    for (m, &v) in lanes.iter_mut().zip(chunks.remainder()) {
        if v > *m {
            *m = v;
        }
    }
    let max = lanes.iter().copied().fold(T::NEG_INFINITY, |m, v| if v > m { v } else { m });
    for (yv, &xv) in yr.iter_mut().zip(xr) {
        *yv = (xv - max).exp_fast();
    }
    let sum = lane_sum(yr, |v| v.to_f64());
    if log {
        let l = T::from_f64(sum.ln());
        for (yv, &xv) in yr.iter_mut().zip(xr) {
            *yv = xv - max - l;
        }
    } else {
        let inv = T::from_f64(1.0 / sum);
        for v in yr.iter_mut() {
            *v *= inv;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &[f32], b: &[f32], tol: f32) {
        assert_eq!(a.len(), b.len());
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!((x - y).abs() <= tol * (1.0 + y.abs()), "at {i}: {x} vs {y}");
        }
    }

    #[test]
    fn batch_norm_by_hand() {
        // [1, 2, 2]: channel 0 scale 2, bias 1, mean 1, var 3 (eps 1 -> std 2); channel 1 identity-ish.
        let x = [1.0f32, 3.0, 5.0, -5.0];
        let mut y = [0.0; 4];
        batch_norm(&x, &[1, 2, 2], &[2.0, 1.0], &[1.0, 0.5], &[1.0, 0.0], &[3.0, 0.0], 1.0, &mut y);
        assert_eq!(y, [1.0, 3.0, 5.5, -4.5]);
    }

    #[test]
    fn layer_norm_by_hand() {
        // Two rows of [1, 2, 3, 4] and [2, 2, 2, 2]; mean 2.5, var 1.25.
        let x = [1.0f32, 2.0, 3.0, 4.0, 2.0, 2.0, 2.0, 2.0];
        let scale = [1.0f32, 2.0, 1.0, 2.0];
        let bias = [0.0f32, 0.0, 1.0, 1.0];
        let mut y = [0.0; 8];
        let mut mean = [0.0f32; 2];
        let mut inv = [0.0f32; 2];
        let eps = 1e-5f32;
        layer_norm(&x, &[2, 4], 1, &scale, &[4], Some((&bias, &[4])), eps, &mut y, Some(&mut mean), Some(&mut inv));
        let i0 = 1.0 / (1.25f64 + eps as f64).sqrt();
        let want: Vec<f32> = [(-1.5, 1.0, 0.0), (-0.5, 2.0, 0.0), (0.5, 1.0, 1.0), (1.5, 2.0, 1.0)]
            .iter()
            .map(|&(d, s, b)| (d * i0 * s + b) as f32)
            .chain([0.0, 0.0, 1.0, 1.0])
            .collect();
        close(&y, &want, 1e-6);
        assert_eq!(mean, [2.5, 2.0]);
        close(&inv, &[i0 as f32, (1.0 / (eps as f64).sqrt()) as f32], 1e-6);
        // axis 1 of [1, 2, 2] with scale broadcast from [2] (over the last axis) and no bias.
        let mut y = [0.0; 4];
        layer_norm(&[1.0f64, 3.0, 1.0, 3.0], &[1, 2, 2], 1, &[1.0, 2.0], &[2], None, 0.0, &mut y, None, None);
        assert_eq!(y, [-1.0, 2.0, -1.0, 2.0]);
    }

    #[test]
    fn softmax_rows_and_axes() {
        let x: Vec<f32> = (0..24).map(|v| (v as f32 * 0.37).sin() * 5.0).collect();
        let shape = [2, 3, 4];
        for axis in 0..3 {
            let mut y = vec![0.0; 24];
            softmax(&x, &shape, axis, false, false, &mut y, 1);
            let (outer, n, inner) = split3(&shape, axis);
            for o in 0..outer {
                for i in 0..inner {
                    let at = |k: usize| (o * n + k) * inner + i;
                    let total: f32 = (0..n).map(|k| y[at(k)]).sum();
                    assert!((total - 1.0).abs() < 1e-6, "axis {axis}: {total}");
                    let max = (0..n).map(|k| x[at(k)]).fold(f32::NEG_INFINITY, f32::max);
                    let denom: f64 = (0..n).map(|k| ((x[at(k)] - max) as f64).exp()).sum();
                    for k in 0..n {
                        let want = ((x[at(k)] - max) as f64).exp() / denom;
                        assert!((y[at(k)] as f64 - want).abs() < 1e-6);
                    }
                }
            }
            let mut ly = vec![0.0; 24];
            softmax(&x, &shape, axis, false, true, &mut ly, 1);
            close(&ly, &y.iter().map(|v| v.ln()).collect::<Vec<_>>(), 1e-5);
        }
        // Flattened (opset < 13) at axis 1: rows of 12.
        let mut y = vec![0.0; 24];
        softmax(&x, &shape, 1, true, false, &mut y, 1);
        for r in y.chunks(12) {
            assert!((r.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        }
        // Large inputs do not overflow.
        let mut y = [0.0f32; 2];
        softmax(&[1000.0, 1000.0], &[2], 0, false, false, &mut y, 1);
        assert_eq!(y, [0.5, 0.5]);
        softmax(&[1000.0, 1000.0], &[2], 0, false, true, &mut y, 1);
        close(&y, &[-(2.0f32.ln()); 2], 1e-6);
    }

    /// Rows longer and shorter than the lanes, strided and contiguous, at one and two threads (enough elements to
    /// be split), against a softmax in f64; a row holding a NaN is NaN throughout.
    #[test]
    fn softmax_long_rows_over_threads() {
        for (shape, axis) in [([40usize, 3, 37], 2usize), ([64, 2, 130], 2), ([40, 37, 3], 1), ([300, 5, 11], 2)] {
            let len: usize = shape.iter().product();
            assert!(len >= SOFTMAX_PARALLEL_MIN || shape[0] == 40);
            let mut x: Vec<f32> = (0..len).map(|v| (v as f32 * 0.731).sin() * 9.0).collect();
            x[5 * shape[1] * shape[2] + 3] = f32::NAN;
            let (outer, n, inner) = split3(&shape, axis);
            for log in [false, true] {
                let mut want = vec![0.0f32; len];
                for o in 0..outer {
                    for i in 0..inner {
                        let at = |k: usize| (o * n + k) * inner + i;
                        let max = (0..n).map(|k| x[at(k)]).fold(f32::NEG_INFINITY, |m, v| if v > m { v } else { m });
                        let sum: f64 = (0..n).map(|k| ((x[at(k)] - max) as f64).exp()).sum();
                        for k in 0..n {
                            let d = (x[at(k)] - max) as f64;
                            want[at(k)] = if log { (d - sum.ln()) as f32 } else { (d.exp() / sum) as f32 };
                        }
                    }
                }
                for threads in [1, 2] {
                    let mut y = vec![0.0f32; len];
                    softmax(&x, &shape, axis, false, log, &mut y, threads);
                    for (j, (&a, &b)) in y.iter().zip(&want).enumerate() {
                        assert!(
                            (a.is_nan() && b.is_nan()) || (a - b).abs() <= 2e-6 * (1.0 + b.abs()),
                            "{shape:?} axis {axis} log {log} threads {threads} at {j}: {a} vs {b}"
                        );
                    }
                }
            }
        }
    }

    /// Rows longer and shorter than the lanes of the statistics' partial sums, against the statistics computed
    /// in one f64 chain.
    #[test]
    fn layer_norm_long_rows_match_serial_statistics() {
        for cols in [5usize, 16, 37, 300] {
            let rows = 3;
            let x: Vec<f32> = (0..rows * cols).map(|v| (v as f32 * 0.37).sin() * 4.0 + 1.5).collect();
            let scale: Vec<f32> = (0..cols).map(|c| 0.5 + c as f32 * 0.01).collect();
            let mut y = vec![0.0f32; x.len()];
            let (mut mean, mut inv) = (vec![0.0f32; rows], vec![0.0f32; rows]);
            layer_norm(&x, &[rows, cols], 1, &scale, &[cols], None, 1e-5, &mut y, Some(&mut mean), Some(&mut inv));
            for r in 0..rows {
                let xr = &x[r * cols..(r + 1) * cols];
                let mu = xr.iter().map(|&v| f64::from(v)).sum::<f64>() / cols as f64;
                let var = xr.iter().map(|&v| (f64::from(v) - mu).powi(2)).sum::<f64>() / cols as f64;
                let is = 1.0 / (var + 1e-5).sqrt();
                assert!((f64::from(mean[r]) - mu).abs() <= 1e-6 * (1.0 + mu.abs()), "cols {cols}: mean");
                assert!((f64::from(inv[r]) - is).abs() <= 1e-6 * is, "cols {cols}: inverse deviation");
                for (c, &v) in xr.iter().enumerate() {
                    let want = (f64::from(v) - mu) * is * f64::from(scale[c]);
                    let got = f64::from(y[r * cols + c]);
                    assert!(
                        (got - want).abs() <= 1e-5 * (1.0 + want.abs()),
                        "cols {cols} at ({r}, {c}): {got} vs {want}"
                    );
                }
            }
        }
    }
}
