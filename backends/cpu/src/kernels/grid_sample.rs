//! `GridSample`: X `[N, C, D1…Dr]` read at the points of a grid `[N, H1…Hr, r]`, for any number of spatial axes.
//!
//! Each output point's taps (source index and weight per axis: 1 for nearest, 2 for linear, 4 for cubic) are
//! computed once and applied to every channel, so the cost is one pass over the grid plus `taps^r` reads per output
//! element. The arithmetic follows ONNX's reference: a coordinate is denormalised (`align_corners` or not), rounded
//! half to even for nearest, brought inside the borders for `border` and `reflection` padding, and each tap's index
//! is then read as the padding mode says (zero, clamped, or mirrored). Coordinates are computed in f64 and rounded
//! to the input's type, as the reference holds them; sums are in f64.

use super::gemm::Float;

pub use stowage_kir::grid::{GridMode, GridPadding};

/// Mirrors `x` into `[lo, hi]` (the reference's repeated reflection at the near border).
fn reflect(x: f64, lo: f64, hi: f64) -> f64 {
    let span = hi - lo;
    if span <= 0.0 {
        return lo;
    }
    let (dx, from_low) = if x < lo {
        (lo - x, true)
    } else if x > hi {
        (x - hi, false)
    } else {
        return x;
    };
    let n = (dx / span).trunc();
    let r = dx - n * span;
    let even = n % 2.0 == 0.0;
    if even == from_low {
        lo + r
    } else {
        hi - r
    }
}

/// Keys' cubic weights (a = −0.75) of the four taps around a point `t` past the second.
fn cubic(t: f64) -> [f64; 4] {
    let a = -0.75;
    let far = |x: f64| ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
    let near = |x: f64| ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)]
}

/// The taps of one axis of length `d` at grid value `g`: up to four (index, weight) pairs; `None`: a zero.
fn taps<T: Float>(g: f64, d: usize, mode: GridMode, padding: GridPadding, align: bool) -> Vec<(Option<usize>, f64)> {
    let df = d as f64;
    let x = if align { (g + 1.0) / 2.0 * (df - 1.0) } else { ((g + 1.0) * df - 1.0) / 2.0 };
    let mut x = T::from_f64(x).to_f64();
    let (lo, hi) = if align { (0.0, df - 1.0) } else { (-0.5, df - 0.5) };
    if mode == GridMode::Nearest {
        x = x.round_ties_even();
    }
    if x < lo || x > hi {
        match padding {
            GridPadding::Border => x = x.clamp(0.0, df - 1.0),
            GridPadding::Reflection => x = reflect(x, lo, hi),
            GridPadding::Zeros => {}
        }
    }
    let pixel = |i: f64| -> Option<usize> {
        match padding {
            GridPadding::Zeros => (i >= 0.0 && i < df).then_some(i as usize),
            GridPadding::Border => Some(i.clamp(0.0, df - 1.0) as usize),
            GridPadding::Reflection => Some((reflect(i, lo, hi).trunc()).clamp(0.0, df - 1.0) as usize),
        }
    };
    if !x.is_finite() {
        return vec![(None, 0.0)];
    }
    match mode {
        GridMode::Nearest => vec![(pixel(x.trunc()), 1.0)],
        GridMode::Linear => {
            let x0 = x.floor();
            let t = x - x0;
            vec![(pixel(x0), 1.0 - t), (pixel(x0 + 1.0), t)]
        }
        GridMode::Cubic => {
            let x0 = x.floor();
            let w = cubic(x - x0);
            (0..4).map(|k| (pixel(x0 + k as f64 - 1.0), w[k])).collect()
        }
    }
}

/// How a grid is read: `GridSample`'s three attributes.
#[derive(Clone, Copy, Debug)]
pub struct Sampling {
    /// Interpolation.
    pub mode: GridMode,
    /// Reads outside the input.
    pub padding: GridPadding,
    /// −1 and 1 are the corner pixels' centres.
    pub align: bool,
}

/// Samples `x` (shape `xs` = `[N, C, D…]`) at `grid` (shape `[N, H…, r]`) into `y` (`[N, C, H…]`).
pub fn grid_sample<T: Float>(x: &[T], xs: &[usize], grid: &[T], gs: &[usize], how: Sampling, y: &mut [T]) {
    let Sampling { mode, padding, align } = how;
    let (n, c, r) = (xs[0], xs[1], xs.len() - 2);
    let dims = &xs[2..];
    let plane: usize = dims.iter().product();
    let points: usize = gs[1..=r].iter().product();
    let mut per_axis: Vec<Vec<(Option<usize>, f64)>> = Vec::with_capacity(r);
    let mut corners: Vec<(usize, f64)> = Vec::new();
    for b in 0..n {
        for p in 0..points {
            let g = &grid[(b * points + p) * r..][..r];
            per_axis.clear();
            // The grid's last axis lists the innermost spatial axis first.
            for (i, &d) in dims.iter().enumerate() {
                per_axis.push(taps::<T>(g[r - 1 - i].to_f64(), d, mode, padding, align));
            }
            // Every combination of one tap per axis with a nonzero read: its offset in a plane and weight.
            corners.clear();
            corners.push((0, 1.0));
            for (i, axis) in per_axis.iter().enumerate() {
                let stride: usize = dims[i + 1..].iter().product();
                let mut next = Vec::with_capacity(corners.len() * axis.len());
                for &(off, w) in &corners {
                    for &(idx, wt) in axis {
                        if let Some(idx) = idx {
                            next.push((off + idx * stride, w * wt));
                        }
                    }
                }
                corners = next;
            }
            for ch in 0..c {
                let src = &x[(b * c + ch) * plane..][..plane];
                let v: f64 = corners.iter().map(|&(off, w)| w * src[off].to_f64()).sum();
                y[(b * c + ch) * points + p] = T::from_f64(v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corners_of_a_grid_read_the_corner_pixels_when_aligned() {
        // X [1, 1, 2, 3] = 0..6; grid points (-1,-1) (1,-1) (-1,1) (1,1) as (x, y).
        let x: Vec<f32> = (0..6).map(|v| v as f32).collect();
        let grid = [-1.0f32, -1.0, 1.0, -1.0, -1.0, 1.0, 1.0, 1.0];
        let mut y = [0.0f32; 4];
        let how = |padding, align| Sampling { mode: GridMode::Linear, padding, align };
        grid_sample(&x, &[1, 1, 2, 3], &grid, &[1, 2, 2, 2], how(GridPadding::Zeros, true), &mut y);
        assert_eq!(y, [0.0, 2.0, 3.0, 5.0]);
        // Not aligned, the corners are half a pixel outside: a quarter of the corner pixel with zero padding.
        grid_sample(&x, &[1, 1, 2, 3], &grid, &[1, 2, 2, 2], how(GridPadding::Zeros, false), &mut y);
        assert_eq!(y, [0.0, 0.5, 0.75, 1.25]);
        grid_sample(&x, &[1, 1, 2, 3], &grid, &[1, 2, 2, 2], how(GridPadding::Border, false), &mut y);
        assert_eq!(y, [0.0, 2.0, 3.0, 5.0]);
    }

    #[test]
    fn reflection_mirrors_at_the_borders() {
        assert_eq!(reflect(-0.75, -0.5, 2.5), -0.25);
        assert_eq!(reflect(3.0, -0.5, 2.5), 2.0);
        assert_eq!(reflect(6.0, -0.5, 2.5), -0.5 + 0.5);
        assert_eq!(reflect(1.0, -0.5, 2.5), 1.0);
    }
}
