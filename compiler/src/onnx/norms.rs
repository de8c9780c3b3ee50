//! Normalisations that ONNX defines as functions, imported as their bodies ([`super::expand`]):
//! `RMSNormalization` (opset 23) and `GroupNormalization` (opset 18, with a scale and bias per group; opset 21, per
//! channel). Statistics are computed in the `stash_type` (f32 by default) and the result cast back to the input's
//! type where it is narrower, as the bodies do.

use stowage_runtime::DatumType;

use super::expand::{int, Ex};
use crate::error::ImportErrorKind as E;

/// The op types this file expands.
pub const NORM_OPS: &[&str] = &["GroupNormalization", "RMSNormalization"];

/// Expands the op of `ex`; its outputs.
pub(super) fn expand(ex: &mut Ex<'_, '_>) -> Result<Vec<Option<String>>, E> {
    let y = match ex.node.op_type() {
        "RMSNormalization" => rms(ex)?,
        "GroupNormalization" => group(ex)?,
        other => return Err(ex.fail(format!("'{other}' has no expansion"))),
    };
    Ok(vec![Some(y)])
}

/// The input cast to the stash type (`stash_type`, f32 by default) when the two differ, with that type.
fn stashed(ex: &mut Ex<'_, '_>, x: &str, dt: DatumType) -> Result<(String, DatumType), E> {
    let code = ex.attrs().int_or("stash_type", 1).map_err(|e| ex.attr_err(e))?;
    let stash = super::tensor::datum_type(code as i32).map_err(|m| ex.attr_fail("stash_type", m))?;
    if !stash.is_float() {
        return Err(ex.attr_fail("stash_type", format!("must be a float type, found {stash}")));
    }
    if stash == dt {
        return Ok((x.to_string(), dt));
    }
    Ok((ex.op("Cast", &[x], vec![int("to", code)])?, stash))
}

/// `x` cast back from `from` to `to` where they differ.
fn back(ex: &mut Ex<'_, '_>, x: &str, from: DatumType, to: DatumType) -> Result<String, E> {
    if from == to {
        return Ok(x.to_string());
    }
    let code = i64::from(super::tensor::onnx_type(to) as i32);
    ex.op("Cast", &[x], vec![int("to", code)])
}

fn epsilon(ex: &Ex<'_, '_>) -> Result<f64, E> {
    Ok(f64::from(ex.attrs().float_or("epsilon", 1e-5).map_err(|e| ex.attr_err(e))?))
}

/// `RMSNormalization`: `x / √(mean(x²) + ε) · scale` over the axes from `axis` on.
fn rms(ex: &mut Ex<'_, '_>) -> Result<String, E> {
    let (x, scale) = (ex.input(0)?, ex.input(1)?);
    let xt = ex.ty(&x)?;
    let rank = xt.rank() as i64;
    let axis = ex.attrs().int_or("axis", -1).map_err(|e| ex.attr_err(e))?;
    let axis = if axis < 0 { axis + rank } else { axis };
    if !(0..rank).contains(&axis) {
        return Err(ex.attr_fail("axis", format!("must be in [-{rank}, {rank}) for X of {xt}")));
    }
    let eps = epsilon(ex)?;
    let (xs, st) = stashed(ex, &x, xt.dt)?;
    let sq = ex.op("Mul", &[&xs, &xs], vec![])?;
    let axes = ex.ints(&(axis..rank).collect::<Vec<_>>())?;
    let ms = ex.op("ReduceMean", &[&sq, &axes], vec![int("keepdims", 1)])?;
    let e = ex.scalar(st, eps)?;
    let ms = ex.op("Add", &[&ms, &e], vec![])?;
    let rms = ex.op("Sqrt", &[&ms], vec![])?;
    let n = ex.op("Div", &[&xs, &rms], vec![])?;
    let n = back(ex, &n, st, xt.dt)?;
    ex.op("Mul", &[&n, &scale], vec![])
}

/// `GroupNormalization`: the channels in `num_groups` groups, each normalised over its channels and the spatial
/// axes, then scaled and shifted per group (opset 18) or per channel (from 21).
fn group(ex: &mut Ex<'_, '_>) -> Result<String, E> {
    let (x, scale, bias) = (ex.input(0)?, ex.input(1)?, ex.input(2)?);
    let xt = ex.ty(&x)?;
    let groups = ex
        .attrs()
        .int("num_groups")
        .map_err(|e| ex.attr_err(e))?
        .ok_or_else(|| ex.attr_fail("num_groups", "is required"))?;
    if xt.rank() < 2 {
        return Err(ex.fail(format!("X is {xt}: it needs a batch and a channel axis")));
    }
    let (n, c) = (xt.shape[0] as i64, xt.shape[1] as i64);
    if groups <= 0 || c % groups != 0 {
        return Err(ex.attr_fail("num_groups", format!("is {groups}: it must be positive and divide X's {c} channels")));
    }
    let eps = epsilon(ex)?;
    let (xs, st) = stashed(ex, &x, xt.dt)?;
    // [N, G, C/G · spatial…]: each group's elements in one row.
    let rows = ex.ints(&[n, groups, -1])?;
    let g = ex.op("Reshape", &[&xs, &rows], vec![])?;
    let last = ex.ints(&[2])?;
    let mean = ex.op("ReduceMean", &[&g, &last], vec![int("keepdims", 1)])?;
    let d = ex.op("Sub", &[&g, &mean], vec![])?;
    let sq = ex.op("Mul", &[&d, &d], vec![])?;
    let var = ex.op("ReduceMean", &[&sq, &last], vec![int("keepdims", 1)])?;
    let e = ex.scalar(st, eps)?;
    let ve = ex.op("Add", &[&var, &e], vec![])?;
    let sd = ex.op("Sqrt", &[&ve], vec![])?;
    let normed = ex.op("Div", &[&d, &sd], vec![])?;
    let normed = back(ex, &normed, st, xt.dt)?;
    let whole = ex.ints(&xt.shape.iter().map(|&d| d as i64).collect::<Vec<_>>())?;
    if ex.opset() < 21 {
        // Scale and bias per group: [G, 1] against [N, G, rest].
        let one = ex.ints(&[1])?;
        let s = ex.op("Unsqueeze", &[&scale, &one], vec![])?;
        let b = ex.op("Unsqueeze", &[&bias, &one], vec![])?;
        let m = ex.op("Mul", &[&normed, &s], vec![])?;
        let y = ex.op("Add", &[&m, &b], vec![])?;
        return ex.op("Reshape", &[&y, &whole], vec![]);
    }
    let y = ex.op("Reshape", &[&normed, &whole], vec![])?;
    // Scale and bias per channel: [C, 1, …] against [N, C, spatial…].
    let spatial: Vec<i64> = (1..xt.rank() as i64 - 1).collect();
    let (s, b) = if spatial.is_empty() {
        (scale, bias)
    } else {
        let ax = ex.ints(&spatial)?;
        (ex.op("Unsqueeze", &[&scale, &ax], vec![])?, ex.op("Unsqueeze", &[&bias, &ax], vec![])?)
    };
    let m = ex.op("Mul", &[&y, &s], vec![])?;
    ex.op("Add", &[&m, &b], vec![])
}
