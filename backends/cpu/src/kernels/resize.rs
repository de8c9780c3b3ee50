//! ONNX `Resize` (opset 19 semantics, which also covers the older opsets' attribute subsets): nearest, linear
//! and cubic interpolation over any number of axes, every coordinate transformation mode, `exclude_outside`,
//! `extrapolation_value` and antialiasing (linear and cubic, when downscaling).
//!
//! `x` and `y` are packed row-major tensors of the same rank. The resize is separable: it runs one axis at a time
//! (axes whose scale is 1 and whose size does not change are skipped), each output coordinate being a weighted
//! sum of a few input coordinates along that axis — the weights and source indices are computed once per axis.
//! Like the ONNX reference, intermediate values and weights are f64 and edge taps clamp to the border
//! (edge padding).

use super::gemm::Float;

pub use stowage_kir::resize::{
    plan_axis, AxisPlan, CoordinateTransform, NearestMode, ResizeMode, ResizeParams, ResizeSpec,
};

/// Applies one axis plan to `src` viewed as `[outer, in_len, inner]`, producing `[outer, out_len, inner]`.
fn apply_axis(src: &[f64], outer: usize, in_len: usize, inner: usize, plan: &AxisPlan, extrapolation: f64) -> Vec<f64> {
    let out_len = plan.extrapolate.len();
    let mut dst = vec![0.0f64; outer * out_len * inner];
    if dst.is_empty() {
        return dst;
    }
    let n = plan.taps;
    for (sb, db) in src.chunks(in_len * inner).zip(dst.chunks_mut(out_len * inner)) {
        for (o, row) in db.chunks_mut(inner).enumerate() {
            if plan.extrapolate[o] {
                row.fill(extrapolation);
                continue;
            }
            let (idx, coef) = (&plan.idx[o * n..][..n], &plan.coef[o * n..][..n]);
            if inner == 1 {
                row[0] = idx.iter().zip(coef).map(|(&i, &c)| c * sb[i]).sum();
                continue;
            }
            for (&i, &c) in idx.iter().zip(coef) {
                for (d, &s) in row.iter_mut().zip(&sb[i * inner..][..inner]) {
                    *d += c * s;
                }
            }
        }
    }
    dst
}

/// ONNX `Resize` of `x` (shape `x_shape`) to `y` (shape `y_shape`, same rank); see [`ResizeParams`] for the
/// attributes. Output sizes come from `y_shape`, the coordinate mapping from `p.scales`.
///
/// # Panics
/// On inconsistent shapes, parameters or slice lengths.
pub fn resize<T: Float>(x: &[T], x_shape: &[usize], p: &ResizeParams<'_>, y: &mut [T], y_shape: &[usize]) {
    resize_on(x, x_shape, p, y, y_shape, 1)
}

/// [`resize`] on `threads`: a resize that picks elements (nearest) splits its output rows between them.
pub fn resize_on<T: Float + Send + Sync>(
    x: &[T],
    x_shape: &[usize],
    p: &ResizeParams<'_>,
    y: &mut [T],
    y_shape: &[usize],
    threads: usize,
) {
    let rank = x_shape.len();
    assert_eq!(y_shape.len(), rank, "resize: output rank");
    assert_eq!(p.scales.len(), rank, "resize: one scale per axis");
    assert_eq!(x.len(), x_shape.iter().product::<usize>(), "resize: X length");
    assert_eq!(y.len(), y_shape.iter().product::<usize>(), "resize: Y length");
    if y.is_empty() {
        return;
    }
    assert!(!x.is_empty(), "resize: empty input with a non-empty output");
    let plans: Vec<Option<AxisPlan>> = (0..rank).map(|a| plan_axis(p, a, rank, x_shape[a], y_shape[a])).collect();
    let one_tap = |p: &AxisPlan| p.taps == 1 && p.coef.iter().all(|&c| c == 1.0) && !p.extrapolate.contains(&true);
    if rank > 0 && plans.iter().flatten().all(one_tap) {
        pick(x, x_shape, &plans, y, y_shape, threads);
    } else {
        separable(x, x_shape, plans, p.extrapolation_value, y, y_shape);
    }
}

/// The resize one axis at a time, in f64.
fn separable<T: Float>(
    x: &[T],
    x_shape: &[usize],
    plans: Vec<Option<AxisPlan>>,
    extrapolation: f32,
    y: &mut [T],
    y_shape: &[usize],
) {
    let mut cur: Vec<f64> = x.iter().map(|v| v.to_f64()).collect();
    let mut shape = x_shape.to_vec();
    for (axis, plan) in plans.into_iter().enumerate() {
        if let Some(plan) = plan {
            let outer: usize = shape[..axis].iter().product();
            let inner: usize = shape[axis + 1..].iter().product();
            cur = apply_axis(&cur, outer, shape[axis], inner, &plan, extrapolation as f64);
        } else {
            assert_eq!(x_shape[axis], y_shape[axis]);
        }
        shape[axis] = y_shape[axis];
    }
    for (yv, &v) in y.iter_mut().zip(&cur) {
        *yv = T::from_f64(v);
    }
}

/// Output elements below which a resize stays on one thread.
const PARALLEL_MIN: usize = 1 << 15;

/// A resize in which every output element is one input element (nearest, no extrapolation): each output row
/// picks its elements from one input row, and a row that picks from the same input row as the one before is a
/// copy of it (an upscale repeats rows). On several threads each takes a band of whole output rows; a band's
/// first row is picked, not copied, so the bytes are the same on any number of threads.
fn pick<T: Copy + Send + Sync>(
    x: &[T],
    x_shape: &[usize],
    plans: &[Option<AxisPlan>],
    y: &mut [T],
    y_shape: &[usize],
    threads: usize,
) {
    use rayon::prelude::*;
    let rank = x_shape.len();
    let idx: Vec<Vec<usize>> =
        (0..rank).map(|a| plans[a].as_ref().map_or_else(|| (0..y_shape[a]).collect(), |p| p.idx.clone())).collect();
    let mut in_strides = vec![1usize; rank];
    for a in (0..rank.saturating_sub(1)).rev() {
        in_strides[a] = in_strides[a + 1] * x_shape[a + 1];
    }
    let width = y_shape[rank - 1].max(1);
    let rows = y.len() / width;
    let band = |first: usize, y: &mut [T]| pick_rows(x, x_shape, &idx, &in_strides, y_shape, first, y);
    if threads > 1 && y.len() >= PARALLEL_MIN && rows >= 2 * threads {
        // Four bands a thread, so that a slow one is made up by the others.
        let per = rows.div_ceil(4 * threads);
        y.par_chunks_mut(per * width).enumerate().for_each(|(b, part)| band(b * per, part));
    } else {
        band(0, y);
    }
}

/// Output rows `first ..` of [`pick`], into `y` (whole rows).
fn pick_rows<T: Copy>(
    x: &[T],
    x_shape: &[usize],
    idx: &[Vec<usize>],
    in_strides: &[usize],
    y_shape: &[usize],
    first: usize,
    y: &mut [T],
) {
    let rank = x_shape.len();
    let last = &idx[rank - 1];
    let width = y_shape[rank - 1];
    // The multi-index of row `first` over the output's outer axes.
    let mut o = vec![0usize; rank - 1];
    let mut rest = first;
    for a in (0..rank - 1).rev() {
        o[a] = rest % y_shape[a];
        rest /= y_shape[a];
    }
    let mut previous: Option<(usize, usize)> = None;
    for r in 0..y.len() / width.max(1) {
        let from: usize = o.iter().enumerate().map(|(a, &i)| idx[a][i] * in_strides[a]).sum();
        let start = r * width;
        match previous {
            Some((p_from, p_start)) if p_from == from => y.copy_within(p_start..p_start + width, start),
            _ => {
                let src = &x[from..from + x_shape[rank - 1]];
                for (d, &i) in y[start..start + width].iter_mut().zip(last) {
                    *d = src[i];
                }
                previous = Some((from, start));
            }
        }
        for a in (0..rank - 1).rev() {
            o[a] += 1;
            if o[a] < y_shape[a] {
                break;
            }
            o[a] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(mode: ResizeMode, ct: CoordinateTransform, scales: &[f32]) -> ResizeParams<'_> {
        ResizeParams {
            mode,
            coordinate_transform: ct,
            nearest_mode: NearestMode::RoundPreferFloor,
            antialias: false,
            scales,
            roi: None,
            extrapolation_value: 0.0,
            cubic_coeff_a: -0.75,
            exclude_outside: false,
        }
    }

    fn close(a: &[f32], b: &[f32], tol: f32) {
        assert_eq!(a.len(), b.len());
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!((x - y).abs() <= tol, "at {i}: {x} vs {y}\n{a:?}\n{b:?}");
        }
    }

    const DATA_2X2: [f32; 4] = [1.0, 2.0, 3.0, 4.0];

    #[test]
    fn picking_agrees_with_the_separable_resize() {
        // Nearest up and down over three axes at once, every nearest mode, against the f64 path.
        let xs = [2usize, 5, 7, 6];
        let x: Vec<f32> = (0..xs.iter().product::<usize>()).map(|i| (i * 37 % 101) as f32 - 50.0).collect();
        let ys = [2usize, 9, 7, 13];
        let scales = [1.0, 1.8, 1.0, 13.0 / 6.0];
        for (ct, nm) in [
            (CoordinateTransform::Asymmetric, NearestMode::Floor),
            (CoordinateTransform::HalfPixel, NearestMode::RoundPreferFloor),
            (CoordinateTransform::AlignCorners, NearestMode::Ceil),
            (CoordinateTransform::PytorchHalfPixel, NearestMode::RoundPreferCeil),
        ] {
            let p = ResizeParams { nearest_mode: nm, ..params(ResizeMode::Nearest, ct, &scales) };
            let plans: Vec<Option<AxisPlan>> = (0..4).map(|a| plan_axis(&p, a, 4, xs[a], ys[a])).collect();
            let mut want = vec![0.0; ys.iter().product()];
            separable(&x, &xs, plans.clone(), 0.0, &mut want, &ys);
            let mut got = vec![f32::NAN; want.len()];
            pick(&x, &xs, &plans, &mut got, &ys, 1);
            assert_eq!(got, want, "{ct:?} {nm:?}");
            let mut through = vec![f32::NAN; want.len()];
            resize(&x, &xs, &p, &mut through, &ys);
            assert_eq!(through, want, "{ct:?} {nm:?}");
        }
    }

    #[test]
    fn picking_on_two_threads_gives_the_same_bytes() {
        // An upscale by 2 and by 1.5 over an output large enough to split, bands starting mid-plane.
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        for (xs, ys) in [([1usize, 7, 40, 30], [1usize, 7, 80, 60]), ([2, 3, 60, 41], [2, 3, 90, 61])] {
            let x: Vec<f32> = (0..xs.iter().product::<usize>()).map(|i| (i * 37 % 101) as f32 - 50.0).collect();
            let scales: Vec<f32> = (0..4).map(|a| ys[a] as f32 / xs[a] as f32).collect();
            let p = params(ResizeMode::Nearest, CoordinateTransform::Asymmetric, &scales);
            let mut want = vec![0.0; ys.iter().product()];
            resize(&x, &xs, &p, &mut want, &ys);
            assert!(want.len() >= PARALLEL_MIN);
            let mut got = vec![f32::NAN; want.len()];
            pool.install(|| resize_on(&x, &xs, &p, &mut got, &ys, 2));
            assert_eq!(got, want, "{xs:?} → {ys:?}");
        }
    }

    #[test]
    fn nearest_2x2_to_4x4() {
        let scales = [1.0, 1.0, 2.0, 2.0];
        let p = params(ResizeMode::Nearest, CoordinateTransform::HalfPixel, &scales);
        let mut y = vec![0.0; 16];
        resize(&DATA_2X2, &[1, 1, 2, 2], &p, &mut y, &[1, 1, 4, 4]);
        #[rustfmt::skip]
        let want = [1.0, 1.0, 2.0, 2.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0, 3.0, 3.0, 4.0, 4.0];
        assert_eq!(y, want);
        // ONNX test_resize_upsample_scales_nearest: scales 2 × 3.
        let scales = [1.0, 1.0, 2.0, 3.0];
        let p = params(ResizeMode::Nearest, CoordinateTransform::HalfPixel, &scales);
        let mut y = vec![0.0; 24];
        resize(&DATA_2X2, &[1, 1, 2, 2], &p, &mut y, &[1, 1, 4, 6]);
        let row = |a: f32, b: f32| [a, a, a, b, b, b];
        let want: Vec<f32> = [row(1.0, 2.0), row(1.0, 2.0), row(3.0, 4.0), row(3.0, 4.0)].concat();
        assert_eq!(y, want);
    }

    #[test]
    fn linear_2x2_to_4x4() {
        let scales = [1.0, 1.0, 2.0, 2.0];
        let p = params(ResizeMode::Linear, CoordinateTransform::HalfPixel, &scales);
        let mut y = vec![0.0; 16];
        resize(&DATA_2X2, &[1, 1, 2, 2], &p, &mut y, &[1, 1, 4, 4]);
        #[rustfmt::skip]
        let want = [
            1.0, 1.25, 1.75, 2.0,
            1.5, 1.75, 2.25, 2.5,
            2.5, 2.75, 3.25, 3.5,
            3.0, 3.25, 3.75, 4.0,
        ];
        assert_eq!(y, want);
        // align_corners: the corners map onto each other, thirds in between.
        let p = params(ResizeMode::Linear, CoordinateTransform::AlignCorners, &scales);
        resize(&DATA_2X2, &[1, 1, 2, 2], &p, &mut y, &[1, 1, 4, 4]);
        let t = 1.0 / 3.0;
        let row = |a: f32| [a, a + t, a + 2.0 * t, a + 1.0];
        let want: Vec<f32> = [row(1.0), row(1.0 + 2.0 * t), row(1.0 + 4.0 * t), row(3.0)].concat();
        close(&y, &want, 1e-6);
    }

    #[test]
    fn nearest_modes_and_asymmetric() {
        // 1-D [0, 10, 20, 30] downscaled by 0.5 with asymmetric: x = 2y -> [0, 20].
        let x = [0.0f32, 10.0, 20.0, 30.0];
        let scales = [0.5];
        let p = params(ResizeMode::Nearest, CoordinateTransform::Asymmetric, &scales);
        let mut y = [0.0; 2];
        resize(&x, &[4], &p, &mut y, &[2]);
        assert_eq!(y, [0.0, 20.0]);
        // Upscale 1-D by 4 with asymmetric: x = y / 4 -> 0, .25, .5, .75, 1, ...
        let scales = [4.0];
        let mut y = [0.0; 8];
        let x2 = [0.0f32, 1.0];
        for (mode, want) in [
            (NearestMode::RoundPreferFloor, [0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0]),
            (NearestMode::RoundPreferCeil, [0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]),
            (NearestMode::Floor, [0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]),
            (NearestMode::Ceil, [0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]),
        ] {
            let p = ResizeParams {
                nearest_mode: mode,
                ..params(ResizeMode::Nearest, CoordinateTransform::Asymmetric, &scales)
            };
            resize(&x2, &[2], &p, &mut y, &[8]);
            assert_eq!(y, want, "{mode:?}");
        }
    }

    #[test]
    fn tf_crop_and_resize_extrapolates() {
        // 1-D [0, 1, 2, 3, 4], roi [0.5, 1.5] -> 3 outputs at x = 2, 4, 6: the last is outside.
        let x = [0.0f32, 1.0, 2.0, 3.0, 4.0];
        let scales = [0.6];
        let roi = [0.5, 1.5];
        let p = ResizeParams {
            roi: Some(&roi),
            extrapolation_value: 10.0,
            ..params(ResizeMode::Linear, CoordinateTransform::TfCropAndResize, &scales)
        };
        let mut y = [0.0; 3];
        resize(&x, &[5], &p, &mut y, &[3]);
        // out_w = 3, x = y · 1 · 4 / 2 + 2.
        assert_eq!(y, [2.0, 4.0, 10.0]);
    }

    #[test]
    fn identity_and_f64() {
        let x: Vec<f64> = (0..12).map(|v| v as f64).collect();
        let scales = [1.0, 1.0, 1.0];
        for mode in [ResizeMode::Nearest, ResizeMode::Linear, ResizeMode::Cubic] {
            let p = params(mode, CoordinateTransform::HalfPixel, &scales);
            let mut y = vec![0.0; 12];
            resize(&x, &[2, 2, 3], &p, &mut y, &[2, 2, 3]);
            assert_eq!(y, x);
        }
    }

    #[test]
    fn exclude_outside_renormalises() {
        // Cubic (A = −0.75) upscaling of [1, 2, 3, 4] by 2, half_pixel: x(0) = −0.25, taps −2, −1, 0, 1 with
        // weights w(1.75) = −0.03515625, w(0.75) = 0.26171875, w(0.25) = 0.87890625, w(1.25) = −0.10546875.
        let scales = [2.0];
        let x = [1.0f32, 2.0, 3.0, 4.0];
        let mut y = [0.0f32; 8];
        let p = params(ResizeMode::Cubic, CoordinateTransform::HalfPixel, &scales);
        resize(&x, &[4], &p, &mut y, &[8]);
        // Edge-clamped: taps −2 and −1 read x[0].
        assert!((y[0] - 0.894_531_25).abs() < 1e-7, "{y:?}");
        let p = ResizeParams { exclude_outside: true, ..p };
        resize(&x, &[4], &p, &mut y, &[8]);
        // Excluded and renormalised: (0.87890625·1 − 0.10546875·2) / 0.7734375 = 19/22.
        assert!((y[0] - 19.0 / 22.0).abs() < 1e-6, "{y:?}");
    }

    /// Outputs of the ONNX reference implementation (onnx 1.23.2, `Resize` opset 19) on a 1×1×3×4 input; the
    /// `sizes`-driven cases pass 0.0 as the scale. The reference computes the cubic
    /// weights partly in f32, hence the tolerance.
    #[test]
    fn matches_onnx_reference() {
        let x = [0.5f32, 2.0, -1.0, 3.5, 1.0, 4.0, 2.5, -2.0, 3.0, -0.5, 1.5, 0.0];
        #[rustfmt::skip]
        let cases: [(ResizeParams<'_>, &[usize], &[f64]); 10] = [
        // cubic_half_pixel_up
        (
            ResizeParams {
                mode: ResizeMode::Cubic,
                coordinate_transform: CoordinateTransform::HalfPixel,
                nearest_mode: NearestMode::RoundPreferFloor,
                antialias: false,
                scales: &[1.0, 1.0, 2.0, 1.5],
                roi: None,
                extrapolation_value: 0.0,
                cubic_coeff_a: -0.75,
                exclude_outside: false,
            },
            &[1, 1, 6, 6],
            &[0.33079034090042114, 1.41424560546875, 1.3576743602752686, -1.3656071424484253, 1.05938720703125, 4.553102493286133, 0.36342382431030273, 1.83807373046875, 2.350539207458496, 0.05900771915912628, 0.74493408203125, 2.3880624771118164, 0.3853558301925659, 2.55572509765625, 4.043097019195557, 2.4287045001983643, 0.21673583984375, -1.2059330940246582, 1.359545111656189, 2.40008544921875, 3.3417575359344482, 3.164630651473999, 0.20635986328125, -2.540976047515869, 2.735861301422119, 1.45904541015625, 0.6425710916519165, 1.8512041568756104, 0.71966552734375, -0.8631595373153687, 3.574267625808716, 0.89605712890625, -0.9773739576339722, 1.0845937728881836, 1.02484130859375, 0.10819504410028458],
        ),
        // cubic_a05_exclude_down
        (
            ResizeParams {
                mode: ResizeMode::Cubic,
                coordinate_transform: CoordinateTransform::HalfPixel,
                nearest_mode: NearestMode::RoundPreferFloor,
                antialias: false,
                scales: &[1.0, 1.0, 0.7, 0.6],
                roi: None,
                extrapolation_value: 0.0,
                cubic_coeff_a: -0.5,
                exclude_outside: true,
            },
            &[1, 1, 2, 2],
            &[1.1501539945602417, -0.43753182888031006, 1.9723924398422241, 1.935685396194458],
        ),
        // linear_antialias_sizes
        (
            ResizeParams {
                mode: ResizeMode::Linear,
                coordinate_transform: CoordinateTransform::HalfPixel,
                nearest_mode: NearestMode::RoundPreferFloor,
                antialias: true,
                scales: &[0.0, 0.0, 0.0, 0.0],
                roi: None,
                extrapolation_value: 0.0,
                cubic_coeff_a: -0.75,
                exclude_outside: false,
            },
            &[1, 1, 2, 3],
            &[1.2121212482452393, 1.4166666269302368, 1.2575757503509521, 1.9696969985961914, 1.4166666269302368, 0.01515151560306549],
        ),
        // cubic_antialias_scales
        (
            ResizeParams {
                mode: ResizeMode::Cubic,
                coordinate_transform: CoordinateTransform::HalfPixel,
                nearest_mode: NearestMode::RoundPreferFloor,
                antialias: true,
                scales: &[1.0, 1.0, 0.6, 0.5],
                roi: None,
                extrapolation_value: 0.0,
                cubic_coeff_a: -0.75,
                exclude_outside: false,
            },
            &[1, 1, 1, 2],
            &[1.5765578746795654, 1.1597939729690552],
        ),
        // linear_half_pixel_symmetric
        (
            ResizeParams {
                mode: ResizeMode::Linear,
                coordinate_transform: CoordinateTransform::HalfPixelSymmetric,
                nearest_mode: NearestMode::RoundPreferFloor,
                antialias: false,
                scales: &[1.0, 1.0, 1.7, 0.6],
                roi: None,
                extrapolation_value: 0.0,
                cubic_coeff_a: -0.75,
                exclude_outside: false,
            },
            &[1, 1, 5, 2],
            &[1.5, 0.49999985098838806, 2.117647171020508, 0.7058823108673096, 3.0, 1.0000001192092896, 1.627450942993164, 1.0000001192092896, 0.666666567325592, 1.0],
        ),
        // linear_pytorch_one
        (
            ResizeParams {
                mode: ResizeMode::Linear,
                coordinate_transform: CoordinateTransform::PytorchHalfPixel,
                nearest_mode: NearestMode::RoundPreferFloor,
                antialias: false,
                scales: &[0.0, 0.0, 0.0, 0.0],
                roi: None,
                extrapolation_value: 0.0,
                cubic_coeff_a: -0.75,
                exclude_outside: false,
            },
            &[1, 1, 1, 3],
            &[0.75, 0.5, 2.75],
        ),
        // cubic_tf_crop
        (
            ResizeParams {
                mode: ResizeMode::Cubic,
                coordinate_transform: CoordinateTransform::TfCropAndResize,
                nearest_mode: NearestMode::RoundPreferFloor,
                antialias: false,
                scales: &[0.0, 0.0, 0.0, 0.0],
                roi: Some(&[0.0, 0.0, 0.2, 0.3, 1.0, 1.0, 1.3, 0.9]),
                extrapolation_value: 7.0,
                cubic_coeff_a: -0.75,
                exclude_outside: false,
            },
            &[1, 1, 3, 3],
            &[3.053102493286133, 0.8850881457328796, 0.8748723268508911, 1.9227389097213745, 2.62575101852417, -0.42476344108581543, 7.000000476837158, 7.000002861022949, 6.999996662139893],
        ),
        // nearest_ceil_sizes
        (
            ResizeParams {
                mode: ResizeMode::Nearest,
                coordinate_transform: CoordinateTransform::HalfPixel,
                nearest_mode: NearestMode::RoundPreferCeil,
                antialias: false,
                scales: &[0.0, 0.0, 0.0, 0.0],
                roi: None,
                extrapolation_value: 0.0,
                cubic_coeff_a: -0.75,
                exclude_outside: false,
            },
            &[1, 1, 2, 5],
            &[0.5, 2.0, -1.0, -1.0, 3.5, 3.0, -0.5, 1.5, 1.5, 0.0],
        ),
        // nearest_floor_align
        (
            ResizeParams {
                mode: ResizeMode::Nearest,
                coordinate_transform: CoordinateTransform::AlignCorners,
                nearest_mode: NearestMode::Floor,
                antialias: false,
                scales: &[1.0, 1.0, 1.5, 1.5],
                roi: None,
                extrapolation_value: 0.0,
                cubic_coeff_a: -0.75,
                exclude_outside: false,
            },
            &[1, 1, 4, 6],
            &[0.5, 0.5, 2.0, 2.0, -1.0, 3.5, 0.5, 0.5, 2.0, 2.0, -1.0, 3.5, 1.0, 1.0, 4.0, 4.0, 2.5, -2.0, 1.0, 1.0, 4.0, 4.0, 2.5, -2.0],
        ),
        // linear_asymmetric_up
        (
            ResizeParams {
                mode: ResizeMode::Linear,
                coordinate_transform: CoordinateTransform::Asymmetric,
                nearest_mode: NearestMode::RoundPreferFloor,
                antialias: false,
                scales: &[1.0, 1.0, 1.5, 2.25],
                roi: None,
                extrapolation_value: 0.0,
                cubic_coeff_a: -0.75,
                exclude_outside: false,
            },
            &[1, 1, 4, 9],
            &[0.5, 1.1666666269302368, 1.8333333730697632, 1.0, -0.3333333432674408, 4.440892098500626e-16, 2.0, 3.5, 3.5, 0.8333333134651184, 1.9444444179534912, 3.055555582046509, 2.6666667461395264, 1.7777777910232544, 1.0, 0.3333333432674408, -0.1666666716337204, -0.1666666716337204, 1.6666666269302368, 2.0370371341705322, 2.407407522201538, 2.3888888359069824, 2.2407407760620117, 1.3888888359069824, -0.1666666716337204, -1.3333333730697632, -1.3333333730697632, 3.0, 1.4444444179534912, -0.1111111119389534, 0.1666666716337204, 1.0555555820465088, 1.1666666269302368, 0.5, 0.0, 0.0],
        ),
        ];
        for (i, (p, shape, want)) in cases.iter().enumerate() {
            let mut y = vec![0.0f32; want.len()];
            resize(&x, &[1, 1, 3, 4], p, &mut y, shape);
            for (j, (a, b)) in y.iter().zip(want.iter()).enumerate() {
                assert!((*a as f64 - b).abs() < 2e-5, "case {i} at {j}: {a} vs {b}\n{y:?}");
            }
        }
    }
}
