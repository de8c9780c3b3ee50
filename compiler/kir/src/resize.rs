//! ONNX `Resize`'s interpolation tables (opset 19 semantics, which also covers the older opsets' attribute subsets):
//! nearest, linear and cubic interpolation, every coordinate transformation mode, `exclude_outside`,
//! `extrapolation_value` and antialiasing (linear and cubic, when downscaling).
//!
//! A resize is separable: it runs one axis at a time (axes whose scale is 1 and whose size does not change are
//! skipped), each output coordinate being a weighted sum of a few input coordinates along that axis. [`plan_axis`]
//! computes those weights and source indices once per axis, in f64 as the ONNX reference does, with edge taps
//! clamped to the border; the CPU backend applies them, the OpenCL backend compiles them into its kernels.

/// Interpolation kind (`mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResizeMode {
    /// Nearest neighbour, rounded per [`NearestMode`].
    Nearest,
    /// Linear (bilinear, trilinear, …) interpolation.
    Linear,
    /// Cubic convolution with coefficient `cubic_coeff_a`.
    Cubic,
}

/// How an output coordinate maps back to an input coordinate (`coordinate_transformation_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoordinateTransform {
    /// `x = (y + 0.5) / scale − 0.5`.
    HalfPixel,
    /// Like `HalfPixel`, shifted so that the centres of input and output coincide when the output size was
    /// rounded: `x = in/2 · (1 − out / (scale·in)) + (y + 0.5) / scale − 0.5`.
    HalfPixelSymmetric,
    /// Like `HalfPixel`, except that `x = −0.5` when the output length is 1 (as PyTorch does).
    PytorchHalfPixel,
    /// `x = y · (in − 1) / (out − 1)` (0 when the output length is 1).
    AlignCorners,
    /// `x = y / scale`.
    Asymmetric,
    /// TensorFlow's crop-and-resize over the region of interest `roi`; coordinates outside the input give
    /// `extrapolation_value`.
    TfCropAndResize,
}

/// Rounding of the source coordinate for [`ResizeMode::Nearest`] (`nearest_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NearestMode {
    /// Round half down.
    RoundPreferFloor,
    /// Round half up.
    RoundPreferCeil,
    /// Round down.
    Floor,
    /// Round up.
    Ceil,
}

/// Resize attributes, resolved by the caller.
#[derive(Clone, Copy, Debug)]
pub struct ResizeParams<'a> {
    /// Interpolation kind.
    pub mode: ResizeMode,
    /// Output-to-input coordinate mapping.
    pub coordinate_transform: CoordinateTransform,
    /// Rounding for nearest mode.
    pub nearest_mode: NearestMode,
    /// Antialiasing (widened linear / cubic kernels when downscaling); ignored for nearest.
    pub antialias: bool,
    /// One scale per axis of `x`: the scale the output shape was computed with, as the model gave it (the
    /// reference uses the f32 value), 1.0 on axes not resized. When the output shape came from `sizes` (with the
    /// default `stretch` aspect-ratio policy), pass 0.0: the kernel then uses the exact ratio `out / in` in f64,
    /// as the reference does (an f32 `out / in` can tip nearest-neighbour rounding at exact ties). For the
    /// `not_larger` / `not_smaller` policies pass the policy's scale.
    pub scales: &'a [f32],
    /// For `tf_crop_and_resize`: `[start₀ … start_{r−1}, end₀ … end_{r−1}]` over all `r` axes of `x`
    /// (normalised coordinates). Ignored by the other modes; `None` means the whole input.
    pub roi: Option<&'a [f32]>,
    /// Value of output elements whose source lies outside the input (`tf_crop_and_resize` only).
    pub extrapolation_value: f32,
    /// Cubic coefficient `A` (usually −0.75).
    pub cubic_coeff_a: f32,
    /// Give taps outside the input weight 0 and renormalise the others.
    pub exclude_outside: bool,
}

/// [`ResizeParams`] owning its slices: what lowering resolves once and a kernel borrows on every run.
#[derive(Clone, Debug)]
pub struct ResizeSpec {
    /// Interpolation kind.
    pub mode: ResizeMode,
    /// Output-to-input coordinate mapping.
    pub coordinate_transform: CoordinateTransform,
    /// Rounding for nearest mode.
    pub nearest_mode: NearestMode,
    /// Antialiasing.
    pub antialias: bool,
    /// One scale per axis (see [`ResizeParams::scales`]).
    pub scales: Vec<f32>,
    /// The region of interest over every axis, for `tf_crop_and_resize`.
    pub roi: Option<Vec<f32>>,
    /// Value outside the input.
    pub extrapolation_value: f32,
    /// Cubic coefficient `A`.
    pub cubic_coeff_a: f32,
    /// Renormalise taps inside the input.
    pub exclude_outside: bool,
}

impl ResizeSpec {
    /// The parameters borrowing this spec.
    pub fn params(&self) -> ResizeParams<'_> {
        ResizeParams {
            mode: self.mode,
            coordinate_transform: self.coordinate_transform,
            nearest_mode: self.nearest_mode,
            antialias: self.antialias,
            scales: &self.scales,
            roi: self.roi.as_deref(),
            extrapolation_value: self.extrapolation_value,
            cubic_coeff_a: self.cubic_coeff_a,
            exclude_outside: self.exclude_outside,
        }
    }
}

/// The interpolation of one axis: for output coordinate `o`, `Σⱼ coef[o·taps + j] · in[idx[o·taps + j]]`, or the
/// extrapolation value where `extrapolate[o]`. The OpenCL backend compiles these tables into its kernels.
#[derive(Clone, Debug)]
pub struct AxisPlan {
    /// Taps per output coordinate.
    pub taps: usize,
    /// Input coordinate of each tap.
    pub idx: Vec<usize>,
    /// Weight of each tap.
    pub coef: Vec<f64>,
    /// Output coordinates whose source lies outside the input (`tf_crop_and_resize`).
    pub extrapolate: Vec<bool>,
}

/// The scale of an axis in f64: the given one, or the exact ratio `out / in` when it is not positive (the output
/// size came from `sizes`).
fn effective_scale(scale: f32, in_len: usize, out_len: usize) -> f64 {
    if scale > 0.0 {
        scale as f64
    } else {
        out_len as f64 / in_len as f64
    }
}

/// Weights of the cubic convolution kernel at distance `x` (Keys' kernel with parameter `a`).
fn cubic_weight(x: f64, a: f64) -> f64 {
    let x = x.abs();
    if x <= 1.0 {
        ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
    } else {
        0.0
    }
}

/// Interpolation weights for a source coordinate at fraction `r ∈ (0, 1]` past tap `first + taps/2 − 1`, i.e.
/// the taps are at relative positions `first, first + 1, …` measured from the base coordinate `x − r`.
/// Returns `(first, weights)`.
fn kernel_weights(p: &ResizeParams<'_>, r: f64, scale: f64) -> (i64, Vec<f64>) {
    let a = p.cubic_coeff_a as f64;
    match (p.mode, p.antialias) {
        (ResizeMode::Nearest, _) => {
            let upper = if r == 1.0 {
                true
            } else {
                match p.nearest_mode {
                    NearestMode::RoundPreferFloor => r > 0.5,
                    NearestMode::RoundPreferCeil => r >= 0.5,
                    NearestMode::Floor => false,
                    NearestMode::Ceil => true,
                }
            };
            (0, if upper { vec![0.0, 1.0] } else { vec![1.0, 0.0] })
        }
        (ResizeMode::Linear, false) => (0, vec![1.0 - r, r]),
        (ResizeMode::Cubic, false) => {
            (-1, [r + 1.0, r, 1.0 - r, 2.0 - r].iter().map(|&d| cubic_weight(d, a)).collect())
        }
        (ResizeMode::Linear, true) => {
            let s = scale.min(1.0);
            let first = (-1.0 / s).floor() as i64 + 1;
            let n = 2 - 2 * first;
            let w: Vec<f64> = (0..n).map(|j| (1.0 - (((first + j) as f64 - r) * s).abs()).clamp(0.0, 1.0)).collect();
            let sum: f64 = w.iter().sum();
            (first, w.iter().map(|v| v / sum).collect())
        }
        (ResizeMode::Cubic, true) => {
            let s = scale.min(1.0);
            let first = (-2.0 / s).floor() as i64 + 1;
            let n = 2 - 2 * first;
            let w: Vec<f64> = (0..n).map(|j| cubic_weight(s * ((first + j) as f64 - r), a)).collect();
            let sum: f64 = w.iter().sum();
            (first, w.iter().map(|v| v / sum).collect())
        }
    }
}

/// Plans the interpolation of `axis` (of `rank`) from `in_len` to `out_len`; `None` if it is the identity.
pub fn plan_axis(p: &ResizeParams<'_>, axis: usize, rank: usize, in_len: usize, out_len: usize) -> Option<AxisPlan> {
    let tf = p.coordinate_transform == CoordinateTransform::TfCropAndResize;
    let roi = match p.roi {
        Some(roi) if tf => {
            assert_eq!(roi.len(), 2 * rank, "resize: roi must hold 2·rank values");
            (roi[axis], roi[rank + axis])
        }
        _ => (0.0, 1.0),
    };
    let scale = effective_scale(p.scales[axis], in_len, out_len);
    if (scale - 1.0).abs() <= 1e-9 * scale.abs().max(1.0) && out_len == in_len && roi == (0.0, 1.0) {
        return None;
    }
    let in_f = in_len as f64;
    let out_w = scale * in_f;
    let last = in_f - 1.0;
    let mut plan = AxisPlan { taps: 0, idx: Vec::new(), coef: Vec::new(), extrapolate: vec![false; out_len] };
    for o in 0..out_len {
        let y = o as f64;
        let x = match p.coordinate_transform {
            CoordinateTransform::HalfPixel => (y + 0.5) / scale - 0.5,
            CoordinateTransform::HalfPixelSymmetric => {
                let adjustment = out_len as f64 / out_w;
                let offset = in_f / 2.0 * (1.0 - adjustment);
                offset + (y + 0.5) / scale - 0.5
            }
            CoordinateTransform::PytorchHalfPixel => {
                if out_w == 1.0 {
                    -0.5
                } else {
                    (y + 0.5) / scale - 0.5
                }
            }
            CoordinateTransform::AlignCorners => {
                if out_w == 1.0 {
                    0.0
                } else {
                    y * last / (out_w - 1.0)
                }
            }
            CoordinateTransform::Asymmetric => y / scale,
            CoordinateTransform::TfCropAndResize => {
                // As in the reference, the roi arithmetic is f32 (it decides which border outputs extrapolate).
                let (start, end) = roi;
                let last32 = in_len as f32 - 1.0;
                let x = if out_w == 1.0 {
                    ((end - start) * last32 / 2.0) as f64
                } else {
                    y * (end - start) as f64 * last / (out_w - 1.0)
                };
                x + (start * last32) as f64
            }
        };
        if tf && (x < 0.0 || x > last) {
            plan.extrapolate[o] = true;
        }
        // The taps are taken left of x: at an integer x the fraction is 1 from the previous coordinate.
        let fl = x.floor();
        let (base, r) = if x == fl { (fl as i64 - 1, 1.0) } else { (fl as i64, x - fl) };
        let (first, mut w) = kernel_weights(p, r, scale);
        let n = w.len();
        if plan.taps == 0 {
            plan.taps = n;
            plan.idx.reserve(out_len * n);
            plan.coef.reserve(out_len * n);
        }
        assert_eq!(n, plan.taps, "resize: kernel size changed along an axis");
        if p.exclude_outside {
            for (j, wj) in w.iter_mut().enumerate() {
                let i = base + first + j as i64;
                if i < 0 || i >= in_len as i64 {
                    *wj = 0.0;
                }
            }
            let sum: f64 = w.iter().sum();
            let sum = if sum == 0.0 { 1.0 } else { sum };
            for wj in &mut w {
                *wj /= sum;
            }
        }
        for (j, &wj) in w.iter().enumerate() {
            let i = (base + first + j as i64).clamp(0, in_len as i64 - 1);
            plan.idx.push(i as usize);
            plan.coef.push(wj);
        }
    }
    if p.mode == ResizeMode::Nearest {
        // Keep only the chosen tap (weight 1, or 0 if exclude_outside removed it): no 0·x products.
        let mut idx = Vec::with_capacity(out_len);
        let mut coef = Vec::with_capacity(out_len);
        for o in 0..out_len {
            let (i, c) = (&plan.idx[o * 2..o * 2 + 2], &plan.coef[o * 2..o * 2 + 2]);
            let j = if c[1] > c[0] || (c[0] == 0.0 && c[1] == 0.0) { 1 } else { 0 };
            idx.push(i[j]);
            coef.push(c[j]);
        }
        plan.taps = 1;
        plan.idx = idx;
        plan.coef = coef;
    }
    Some(plan)
}
