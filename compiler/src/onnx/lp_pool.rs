//! `LpPool` imported as `(Σ_window |x|^p)^(1/p)`: the window sums are a depthwise convolution with weights of
//! ones ([`super::expand`]), so padding counts as zeros, and strides, dilations and `auto_pad` are the
//! convolution's. `ceil_mode` (opset 18) has no convolution form and is refused for now.

use super::expand::{int, ints, Ex};
use crate::error::ImportErrorKind as E;

/// The op types this file expands.
pub const LP_POOL_OPS: &[&str] = &["LpPool"];

/// Expands the `LpPool` node of `ex`; its outputs.
pub(super) fn expand(ex: &mut Ex<'_, '_>) -> Result<Vec<Option<String>>, E> {
    let x = ex.input(0)?;
    let xt = ex.ty(&x)?;
    if xt.rank() < 3 || !xt.dt.is_float() {
        return Err(ex.fail(format!("X is {xt}: it must be a float tensor [N, C, spatial…]")));
    }
    let a = ex.attrs();
    let err = |e| ex.attr_err(e);
    let p = a.int_or("p", 2).map_err(err)?;
    let kernel = a.ints("kernel_shape").map_err(err)?.ok_or_else(|| ex.attr_fail("kernel_shape", "is required"))?;
    if a.int_or("ceil_mode", 0).map_err(err)? != 0 {
        return Err(ex.attr_fail("ceil_mode", "1 is not supported yet"));
    }
    if p <= 0 {
        return Err(ex.attr_fail("p", format!("must be at least 1, found {p}")));
    }
    let spatial = xt.rank() - 2;
    if kernel.len() != spatial || kernel.iter().any(|&k| k <= 0) {
        return Err(ex.attr_fail("kernel_shape", format!("must be {spatial} positive sizes, found {kernel:?}")));
    }
    let mut conv_attrs = vec![ints("kernel_shape", kernel.clone()), int("group", xt.shape[1] as i64)];
    for name in ["strides", "pads", "dilations"] {
        if let Some(v) = a.ints(name).map_err(err)? {
            conv_attrs.push(ints(name, v));
        }
    }
    if let Some(pad) = a.string("auto_pad").map_err(err)? {
        conv_attrs.push(super::expand::string("auto_pad", &pad));
    }
    // |x|^p, summed over each window by a convolution of ones, one channel per group.
    let abs = ex.op("Abs", &[&x], vec![])?;
    let pe = ex.scalar(xt.dt, p as f64)?;
    let powered = if p == 1 { abs } else { ex.op("Pow", &[&abs, &pe], vec![])? };
    let mut wshape = vec![xt.shape[1], 1];
    wshape.extend(kernel.iter().map(|&k| k as usize));
    let zeros = ex.zeros(xt.dt, &wshape)?;
    let one = ex.scalar(xt.dt, 1.0)?;
    let w = ex.op("Add", &[&zeros, &one], vec![])?;
    let sums = ex.op("Conv", &[&powered, &w], conv_attrs)?;
    if p == 1 {
        return Ok(vec![Some(sums)]);
    }
    let inv = ex.scalar(xt.dt, 1.0 / p as f64)?;
    Ok(vec![Some(ex.op("Pow", &[&sums, &inv], vec![])?)])
}
