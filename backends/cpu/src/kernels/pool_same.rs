//! f32 MaxPool at stride 1 whose output has its input's size ("same" padding): GoogLeNet's branch pools (3 × 3,
//! padding 1) and YOLO's SPPF (5 × 5, padding 2), on planes of 7² to 40².
//!
//! `max_pool_f32` goes a row at a time (a copy, a max per window row, a pass over the windows, the edge windows one
//! by one): on a 28 × 28 plane that is about 40 ns of calls and set-up a row, and Inception v1's nine such pools
//! took 0.2–0.34 ms each against onnxruntime's 0.02–0.06 (`scripts/bench_nodes.py`, one thread). Here each plane
//! is a few passes over the whole plane. The rules:
//!
//! 1. **Separable, in flat passes.** The window's rows first: row `i` of the plane is row `i` of the output shifted
//!    by whole rows, so `v = max(x, x shifted down by d rows, x shifted up by d rows)` for each `d` the padding
//!    reaches, one slice operation over the plane each; rows past the plane's edge simply are not in the shifted
//!    slice. Then the window's columns the same way over `v`, shifting by `d` elements.
//! 2. **Edges recomputed.** A shift by `d` elements brings the previous row's last columns into a row's first ones
//!    (and the next row's first into its last): the `pad` columns at each end of every row are computed again from
//!    the row alone.
//! 3. **`f32::max`, as `max_pool_f32`.** NaN loses to any number and a window of NaN only is NaN (max is taken over
//!    the window's numbers), so the order of the passes changes no value.
//!
//! Tests: `same_pools_match_the_row_kernel` here (rules 1–3 against `max_pool_f32`'s general path, NaN included).

/// Whether [`same_plane`] takes a pool: 2-D, stride and dilation 1, kernel `(kh, kw)` with begin padding `(pt, pl)`
/// inside the window, and output as large as the input.
pub fn takes(
    (h, w): (usize, usize),
    (oh, ow): (usize, usize),
    (kh, kw): (usize, usize),
    (pt, pl): (usize, usize),
) -> bool {
    kh > 0 && kw > 0 && pt < kh && pl < kw && oh == h && ow == w && h > 0 && w > 0
}

/// A plane's geometry: its size, the kernel, the begin padding (each as rows, columns).
#[derive(Clone, Copy, Debug)]
pub struct Same {
    /// Height and width of the plane (input and output).
    pub hw: (usize, usize),
    /// Kernel height and width.
    pub k: (usize, usize),
    /// Begin padding (rows, columns); the end padding is the rest of the window.
    pub pad: (usize, usize),
}

/// One plane (`x` and `y` of `h·w`), `scratch` reused across planes (rules 1–3).
pub fn same_plane(x: &[f32], g: Same, y: &mut [f32], scratch: &mut Vec<f32>) {
    #[cfg(target_arch = "x86_64")]
    if super::sgemm512::available() {
        // SAFETY: AVX-512F is available (checked just above).
        return unsafe { same_plane_avx512(x, g, y, scratch) };
    }
    same_plane_body(x, g, y, scratch);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn same_plane_avx512(x: &[f32], g: Same, y: &mut [f32], scratch: &mut Vec<f32>) {
    same_plane_body(x, g, y, scratch);
}

#[inline(always)]
fn max_into(dst: &mut [f32], src: &[f32]) {
    for (m, &v) in dst.iter_mut().zip(src) {
        *m = m.max(v);
    }
}

#[inline(always)]
fn same_plane_body(x: &[f32], g: Same, y: &mut [f32], scratch: &mut Vec<f32>) {
    let Same { hw: (h, w), k: (kh, kw), pad: (pt, pl) } = g;
    let n = h * w;
    let (x, y) = (&x[..n], &mut y[..n]);
    // Rule 1, the window's rows: rows i − pt ..= i + (kh − 1 − pt).
    scratch.clear();
    scratch.extend_from_slice(x);
    let v = &mut scratch[..n];
    for d in 1..=pt.min(h - 1) {
        max_into(&mut v[d * w..], &x[..n - d * w]);
    }
    for d in 1..=(kh - 1 - pt).min(h - 1) {
        max_into(&mut v[..n - d * w], &x[d * w..]);
    }
    // The window's columns: j − pl ..= j + (kw − 1 − pr), pr = kw − 1 − pl.
    let pr = kw - 1 - pl;
    y.copy_from_slice(v);
    for d in 1..=pl.min(w - 1) {
        max_into(&mut y[d..], &v[..n - d]);
    }
    for d in 1..=pr.min(w - 1) {
        max_into(&mut y[..n - d], &v[d..]);
    }
    // Rule 2: the columns a shift reached across a row's end, from the row alone.
    let right = w.saturating_sub(pr).max(pl.min(w));
    for (row, out) in v.chunks_exact(w).zip(y.chunks_exact_mut(w)) {
        for j in (0..pl.min(w)).chain(right..w) {
            let (c0, c1) = (j.saturating_sub(pl), (j + pr + 1).min(w));
            out[j] = row[c0..c1].iter().fold(f32::NAN, |m, &v| m.max(v));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::pool::{max_pool, PoolParams};

    #[test]
    fn same_pools_match_the_row_kernel() {
        // (h, w, kh, kw, pt, pl): GoogLeNet's 3 × 3, SPPF's 5 × 5, uneven padding, a kernel wider than the plane.
        for &(h, w, kh, kw, pt, pl) in &[
            (28, 28, 3, 3, 1, 1),
            (20, 20, 5, 5, 2, 2),
            (7, 9, 3, 3, 1, 1),
            (6, 11, 4, 2, 2, 0),
            (3, 2, 5, 5, 2, 2),
            (1, 17, 1, 3, 0, 2),
        ] {
            let mut x: Vec<f32> = (0..2 * h * w).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
            x[3] = f32::NAN;
            let at = (h * w + w + 1) % x.len();
            x[at] = f32::NAN;
            let pads = [pt, pl, kh - 1 - pt, kw - 1 - pl];
            let p = PoolParams { kernel: &[kh, kw], strides: &[1, 1], dilations: &[], pads: &pads };
            let mut want = vec![0f32; x.len()];
            max_pool(&x, &[1, 2, h, w], &p, &mut want, &[1, 2, h, w], None, false, 1);
            assert!(super::takes((h, w), (h, w), (kh, kw), (pt, pl)));
            let mut got = vec![0f32; x.len()];
            let mut scratch = Vec::new();
            for (xc, yc) in x.chunks(h * w).zip(got.chunks_mut(h * w)) {
                super::same_plane(xc, super::Same { hw: (h, w), k: (kh, kw), pad: (pt, pl) }, yc, &mut scratch);
            }
            for (i, (g, w_)) in got.iter().zip(&want).enumerate() {
                assert!(
                    g == w_ || (g.is_nan() && w_.is_nan()),
                    "{h}x{w} {kh}x{kw} at ({pt}, {pl}), [{i}]: {g} vs {w_}"
                );
            }
        }
    }
}
