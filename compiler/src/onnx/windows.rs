//! Signal windows (`HannWindow`, `HammingWindow`, `BlackmanWindow`) imported as constants ([`super::expand`]):
//! their one input, the window's length, sets the output's shape, so it is known when the model is imported (a
//! constant, a folded shape computation, or an input fixed with `--input-value`), and the whole window is computed
//! then, in f64, and stored in `output_datatype`. A length known only at run time, a negative or fractional one,
//! and a window over the size limit are one-line errors naming the node.

use std::f64::consts::PI;

use super::expand::Ex;
use crate::consts;
use crate::error::ImportErrorKind as E;

/// The op types this file expands.
pub const WINDOW_OPS: &[&str] = &["BlackmanWindow", "HammingWindow", "HannWindow"];

/// Expands the op of `ex`: the window, a constant.
pub(super) fn expand(ex: &mut Ex<'_, '_>) -> Result<Vec<Option<String>>, E> {
    let v = ex.input(0)?;
    let size = ex.value(&v).ok_or_else(|| ex.fail("size must be known at import: it sets the output's shape"))?;
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
