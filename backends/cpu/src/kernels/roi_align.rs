//! `RoiAlign`: each region of interest of `rois` (`[R, 4]`: x1, y1, x2, y2 in input coordinates times
//! `spatial_scale`) pooled to `out_h × out_w` bins over the channels of its image (`batch_indices`), each bin the
//! average or the maximum of a grid of bilinear samples, as ONNX's reference and onnxruntime compute it:
//! 1. With `half_pixel` the region starts half a pixel earlier and may be smaller than a pixel; without it (the
//!    legacy `output_half_pixel`) it is at least one pixel on each side.
//! 2. A bin has `sampling_ratio` samples a side, or `ceil(extent / bins)` when it is 0.
//! 3. A sample more than one pixel outside the image counts 0; one closer is clamped to the border.
//! 4. A region whose grid would take more than [`MAX_SAMPLES`] samples is an error naming it; an image with no
//!    pixels pools to zeros.
//! 5. `max` takes, per sample, the largest of its four weighted corners, then the largest over the samples
//!    (onnxruntime's definition, not the maximum of interpolated values).

/// The most bilinear samples one region takes (rule 2's grid over all its bins): a larger grid, from a huge region
/// or `sampling_ratio`, is an error rather than an allocation that cannot succeed.
pub const MAX_SAMPLES: usize = 1 << 24;

/// How the regions are pooled.
#[derive(Clone, Copy, Debug)]
pub struct RoiPooling {
    /// Maximum instead of average.
    pub max: bool,
    /// Half-pixel coordinates (rule 1).
    pub half_pixel: bool,
    /// Output bins per region.
    pub out: (usize, usize),
    /// Samples per bin side (0: adaptive, rule 2).
    pub sampling_ratio: usize,
    /// Input coordinates per region coordinate.
    pub spatial_scale: f64,
}

/// One sample: four flat positions in an image plane and their weights.
#[derive(Clone, Copy, Default)]
struct Tap {
    pos: [usize; 4],
    w: [f64; 4],
}

/// Pools `x` (`[N, C, H, W]` as `shape`) over `rois` with `batch` image indices into `y` (`[R, C, out_h, out_w]`).
/// An image index outside `[0, N)` is an error naming the region.
pub fn roi_align(
    x: &[f64],
    shape: [usize; 4],
    rois: &[f64],
    batch: &[i64],
    how: RoiPooling,
    y: &mut [f64],
) -> Result<(), String> {
    let [n, c, h, w] = shape;
    let (oh, ow) = how.out;
    let offset = if how.half_pixel { 0.5 } else { 0.0 };
    let plane = h * w;
    for (r, roi) in rois.chunks_exact(4).enumerate() {
        let b = batch.get(r).copied().unwrap_or(-1);
        let b = usize::try_from(b)
            .ok()
            .filter(|&b| b < n)
            .ok_or_else(|| format!("batch_indices[{r}] is {b}: X has {n} images"))?;
        let start_w = roi[0] * how.spatial_scale - offset;
        let start_h = roi[1] * how.spatial_scale - offset;
        let mut roi_w = roi[2] * how.spatial_scale - offset - start_w;
        let mut roi_h = roi[3] * how.spatial_scale - offset - start_h;
        if !how.half_pixel {
            roi_w = roi_w.max(1.0);
            roi_h = roi_h.max(1.0);
        }
        let (bin_h, bin_w) = (roi_h / oh as f64, roi_w / ow as f64);
        let grid = |extent: f64, bins: usize| {
            if how.sampling_ratio > 0 {
                how.sampling_ratio
            } else {
                (extent / bins as f64).ceil().max(0.0) as usize
            }
        };
        let (gh, gw) = (grid(roi_h, oh), grid(roi_w, ow));
        let samples = gh.checked_mul(gw).and_then(|g| g.checked_mul(oh * ow)).filter(|&s| s <= MAX_SAMPLES);
        if samples.is_none() {
            return Err(format!(
                "region {r} ({:?}) takes {gh} × {gw} samples in each of its {oh} × {ow} bins: more than {MAX_SAMPLES} \
                 (its extent over the bins, or sampling_ratio)",
                &roi[..4]
            ));
        }
        if plane == 0 {
            // An empty image: every bin is 0.
            y[r * c * oh * ow..(r + 1) * c * oh * ow].fill(0.0);
            continue;
        }
        let count = (gh * gw).max(1) as f64;
        // The taps of every bin, shared by the channels.
        let mut taps = Vec::with_capacity(oh * ow * gh * gw);
        for ph in 0..oh {
            for pw in 0..ow {
                for iy in 0..gh {
                    let yy = start_h + ph as f64 * bin_h + (iy as f64 + 0.5) * bin_h / gh as f64;
                    for ix in 0..gw {
                        let xx = start_w + pw as f64 * bin_w + (ix as f64 + 0.5) * bin_w / gw as f64;
                        taps.push(tap(yy, xx, h, w));
                    }
                }
            }
        }
        for ch in 0..c {
            let img = &x[(b * c + ch) * plane..(b * c + ch + 1) * plane];
            let out = &mut y[(r * c + ch) * oh * ow..(r * c + ch + 1) * oh * ow];
            for (bin, o) in out.iter_mut().enumerate() {
                let samples = &taps[bin * gh * gw..(bin + 1) * gh * gw];
                *o = if how.max {
                    samples
                        .iter()
                        .map(|t| (0..4).map(|k| t.w[k] * img[t.pos[k]]).fold(f64::NEG_INFINITY, f64::max))
                        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
                        .unwrap_or(0.0)
                } else {
                    samples.iter().map(|t| (0..4).map(|k| t.w[k] * img[t.pos[k]]).sum::<f64>()).sum::<f64>() / count
                };
            }
        }
    }
    Ok(())
}

/// The bilinear tap at `(y, x)` of an `h × w` plane (rule 3).
fn tap(y: f64, x: f64, h: usize, w: usize) -> Tap {
    if y < -1.0 || y > h as f64 || x < -1.0 || x > w as f64 || h == 0 || w == 0 {
        return Tap::default();
    }
    // The two neighbours along one axis of extent `n`, and the fraction past the first (clamped at the end).
    let corners = |v: f64, n: usize| {
        let v = v.max(0.0);
        let lo = v as usize;
        if lo >= n - 1 {
            (n - 1, n - 1, 0.0)
        } else {
            (lo, lo + 1, v - lo as f64)
        }
    };
    let ((y0, y1, ly), (x0, x1, lx)) = (corners(y, h), corners(x, w));
    let (hy, hx) = (1.0 - ly, 1.0 - lx);
    Tap { pos: [y0 * w + x0, y0 * w + x1, y1 * w + x0, y1 * w + x1], w: [hy * hx, hy * lx, ly * hx, ly * lx] }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_region_over_the_whole_image_averages_its_samples_and_bad_indices_are_named() {
        // A 2×2 image, one region covering it, one bin with 2×2 samples at the pixel centres (legacy coordinates).
        let x = [1.0, 2.0, 3.0, 4.0];
        let how = RoiPooling { max: false, half_pixel: false, out: (1, 1), sampling_ratio: 2, spatial_scale: 1.0 };
        let mut y = [0.0];
        roi_align(&x, [1, 1, 2, 2], &[0.0, 0.0, 1.0, 1.0], &[0], how, &mut y).expect("runs");
        assert!((y[0] - 2.5).abs() < 1e-12, "{y:?}");
        let err = roi_align(&x, [1, 1, 2, 2], &[0.0, 0.0, 1.0, 1.0], &[3], how, &mut y).unwrap_err();
        assert!(err.contains("batch_indices[0] is 3"), "{err}");
        // Rule 4: a region a million pixels wide would take 10^12 samples; an image with no pixels pools to 0.
        let adaptive = RoiPooling { sampling_ratio: 0, ..how };
        let err = roi_align(&x, [1, 1, 2, 2], &[0.0, 0.0, 1e6, 1e6], &[0], adaptive, &mut y).unwrap_err();
        assert!(err.contains("region 0") && err.contains("samples"), "{err}");
        let mut y = [7.0];
        roi_align(&[], [1, 1, 0, 4], &[0.0, 0.0, 2.0, 2.0], &[0], how, &mut y).expect("runs");
        assert_eq!(y, [0.0]);
    }
}
