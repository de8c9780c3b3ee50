//! Signal windows (`HannWindow`, `HammingWindow`, `BlackmanWindow`) imported as constants ([`super::expand`]):
//! their one input, the window's length, sets the output's shape, so it is known when the model is imported (a
//! constant, a folded shape computation, or an input fixed with `--input-value`), and the whole window is computed
//! then, in f64, and stored in `output_datatype`. A length known only at run time, a negative or fractional one,
//! and a window over the size limit are one-line errors naming the node. `MelWeightMatrix` is made the same way: a
//! constant `[dft_length / 2 + 1, num_mel_bins]` of triangular filters, their edges spaced evenly on the mel scale
//! (`2595 · log10(1 + f / 700)`) between the two edge frequencies and rounded down to spectrogram bins, as the
//! specification's reference computes them.

use std::f64::consts::PI;

use super::expand::Ex;
use crate::consts;
use crate::error::ImportErrorKind as E;

/// The op types this file expands.
pub const WINDOW_OPS: &[&str] = &["BlackmanWindow", "HammingWindow", "HannWindow", "MelWeightMatrix"];

/// The one number of input `i` (named `what`), which must be known at import.
fn scalar(ex: &Ex<'_, '_>, i: usize, what: &str) -> Result<f64, E> {
    let v = ex.input(i)?;
    let t =
        ex.value(&v).ok_or_else(|| ex.needs_value(format!("{what} must be known at import: it sets the output")))?;
    match consts::to_f64s(t).map_err(|e| ex.fail(format!("{what}: {e}")))?.as_slice() {
        [x] => Ok(*x),
        other => Err(ex.fail(format!("{what} must be one number, found {} elements", other.len()))),
    }
}

/// `MelWeightMatrix(num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz)`.
fn mel(ex: &mut Ex<'_, '_>) -> Result<Vec<Option<String>>, E> {
    let (bins, length, rate) =
        (scalar(ex, 0, "num_mel_bins")?, scalar(ex, 1, "dft_length")?, scalar(ex, 2, "sample_rate")?);
    let (low, high) = (scalar(ex, 3, "lower_edge_hertz")?, scalar(ex, 4, "upper_edge_hertz")?);
    let whole = |x: f64| x >= 1.0 && x.fract() == 0.0 && x < 2f64.powi(31);
    if !whole(bins) || !whole(length) || !whole(rate) || !(0.0..=high).contains(&low) {
        return Err(ex.fail(format!(
            "num_mel_bins {bins}, dft_length {length} and sample_rate {rate} must be positive whole numbers, and \
             0 ≤ lower_edge_hertz ({low}) ≤ upper_edge_hertz ({high})"
        )));
    }
    let code = ex.attrs().int_or("output_datatype", 1).map_err(|e| ex.attr_err(e))?;
    let dt = i32::try_from(code)
        .map_err(|_| code.to_string())
        .and_then(super::tensor::datum_type)
        .map_err(|e| ex.attr_fail("output_datatype", e))?;
    let (m, spectrum) = (bins as usize, length as usize / 2 + 1);
    if spectrum.checked_mul(m).and_then(|n| n.checked_mul(8)).is_none_or(|b| b > ex.limit()) {
        return Err(ex.fail(format!("a matrix of {spectrum} × {m} is larger than the size limit")));
    }
    let to_mel = |f: f64| 2595.0 * (f / 700.0).ln_1p() / 10f64.ln();
    let (lo, hi) = (to_mel(low), to_mel(high));
    let step = (hi - lo) / (m + 2) as f64;
    let edges: Vec<usize> = (0..m + 2)
        .map(|k| {
            let hz = 700.0 * ((k as f64 * step + lo) / 2595.0 * 10f64.ln()).exp_m1();
            (((length + 1.0) * hz) / rate).floor().clamp(0.0, (spectrum - 1) as f64) as usize
        })
        .collect();
    let mut w = vec![0.0; spectrum * m];
    for i in 0..m {
        let (left, centre, right) = (edges[i], edges[i + 1], edges[i + 2]);
        if centre == left {
            w[centre * m + i] = 1.0;
        } else {
            for j in left..=centre {
                w[j * m + i] = (j - left) as f64 / (centre - left) as f64;
            }
        }
        for j in centre..right {
            w[j * m + i] = (right - j) as f64 / (right - centre) as f64;
        }
    }
    let t = consts::from_f64s(dt, &[spectrum, m], &w).map_err(|e| ex.fail(e.to_string()))?;
    Ok(vec![Some(ex.constant("mel", t))])
}

/// Expands the op of `ex`: the window, a constant.
pub(super) fn expand(ex: &mut Ex<'_, '_>) -> Result<Vec<Option<String>>, E> {
    if ex.node.op_type() == "MelWeightMatrix" {
        return mel(ex);
    }
    let v = ex.input(0)?;
    let size =
        ex.value(&v).ok_or_else(|| ex.needs_value("size must be known at import: it sets the output's shape"))?;
    let size = match consts::to_f64s(size).map_err(|e| ex.fail(format!("size: {e}")))?.as_slice() {
        [n] if *n >= 0.0 && n.fract() == 0.0 && *n < 2f64.powi(53) => *n as usize,
        other => return Err(ex.fail(format!("size is {other:?}: a window's length is one whole number, at least 0"))),
    };
    let attrs = ex.attrs();
    let periodic = attrs.int_or("periodic", 1).map_err(|e| ex.attr_err(e))?;
    let code = attrs.int_or("output_datatype", 1).map_err(|e| ex.attr_err(e))?;
    let dt = i32::try_from(code)
        .map_err(|_| code.to_string())
        .and_then(super::tensor::datum_type)
        .map_err(|e| ex.attr_fail("output_datatype", e))?;
    if size.checked_mul(dt.size_of()).is_none_or(|b| b > ex.limit()) {
        return Err(ex.fail(format!("a window of {size} elements is larger than the size limit")));
    }
    // The period: the length for a periodic window, one less for a symmetric one.
    let period = if periodic == 0 { size as f64 - 1.0 } else { size as f64 };
    let op = ex.node.op_type();
    let values: Vec<f64> = (0..size)
        .map(|n| {
            let x = n as f64 / period;
            match op {
                "HannWindow" => (PI * x).sin().powi(2),
                "HammingWindow" => 25.0 / 46.0 - (21.0 / 46.0) * (2.0 * PI * x).cos(),
                _ => 0.42 - 0.5 * (2.0 * PI * x).cos() + 0.08 * (4.0 * PI * x).cos(),
            }
        })
        .collect();
    let t = consts::from_f64s(dt, &[size], &values).map_err(|e| ex.fail(e.to_string()))?;
    Ok(vec![Some(ex.constant("window", t))])
}
