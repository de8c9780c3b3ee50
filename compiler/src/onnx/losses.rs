//! The losses ONNX defines as functions, imported as their bodies ([`super::expand`]): `NegativeLogLikelihoodLoss`
//! (each position's class picked from the input with `GatherElements`, negated and weighted) and
//! `SoftmaxCrossEntropyLoss` (the same over `LogSoftmax` along the classes, which is its optional second output).
//! `ignore_index` zeroes a position's loss and its weight; `reduction` is `none`, `sum` or `mean` (the weighted
//! sum over the sum of the weights, as the specification's bodies compute it).

use stowage_runtime::DatumType;

use super::expand::{int, Ex};
use crate::error::ImportErrorKind as E;

/// The op types this file expands.
pub const LOSS_OPS: &[&str] = &["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"];

/// Expands the op of `ex`; its outputs.
pub(super) fn expand(ex: &mut Ex<'_, '_>) -> Result<Vec<Option<String>>, E> {
    let (x, target) = (ex.input(0)?, ex.input(1)?);
    let weight = ex.optional(2);
    let xt = ex.ty(&x)?;
    if xt.rank() < 2 || !xt.dt.is_float() {
        return Err(ex.fail(format!("input 0 is {xt}: it must be a float tensor [N, C, …]")));
    }
    let tt = ex.ty(&target)?;
    if !matches!(tt.dt, DatumType::I32 | DatumType::I64) {
        return Err(ex.fail(format!("input 1 (the targets) is {tt}: it must be i32 or i64")));
    }
    let want: Vec<usize> = xt.shape.iter().enumerate().filter(|&(a, _)| a != 1).map(|(_, &d)| d).collect();
    if tt.shape != want {
        return Err(ex.fail(format!("input 1 (the targets) is {tt}: its shape must be {want:?}, input 0's without C")));
    }
    let a = ex.attrs();
    let reduction = a.string("reduction").map_err(|e| ex.attr_err(e))?.unwrap_or_else(|| "mean".into());
    if !matches!(reduction.as_str(), "none" | "sum" | "mean") {
        return Err(ex.attr_fail("reduction", format!("must be 'none', 'sum' or 'mean', found '{reduction}'")));
    }
    let ignore = a.int("ignore_index").map_err(|e| ex.attr_err(e))?;
    if ex.node.op_type() == "SoftmaxCrossEntropyLoss" {
        let log_prob = ex.op("LogSoftmax", &[&x], vec![int("axis", 1)])?;
        let loss = nll(ex, &log_prob, &target, weight.as_deref(), xt.dt, ignore, &reduction)?;
        let second = if ex.optional_output(1) { Some(log_prob) } else { None };
        return Ok(vec![Some(loss), second]);
    }
    Ok(vec![Some(nll(ex, &x, &target, weight.as_deref(), xt.dt, ignore, &reduction)?)])
}

/// `−x[n, target[n, …], …] · weight[target[n, …]]`, reduced.
fn nll(
    ex: &mut Ex<'_, '_>,
    x: &str,
    target: &str,
    weight: Option<&str>,
    dt: DatumType,
    ignore: Option<i64>,
    reduction: &str,
) -> Result<String, E> {
    let target = ex.op("Cast", &[target], vec![int("to", 7)])?;
    // An ignored position reads class 0 (any valid one) and is zeroed below.
    let ignored = match ignore {
        Some(i) => {
            let iv = ex.ints(&[i])?;
            Some(ex.op("Equal", &[&target, &iv], vec![])?)
        }
        None => None,
    };
    let zero = ex.ints(&[0])?;
    let safe = match &ignored {
        Some(m) => ex.op("Where", &[m, &zero, &target], vec![])?,
        None => target,
    };
    let one = ex.ints(&[1])?;
    let idx = ex.op("Unsqueeze", &[&safe, &one], vec![])?;
    let picked = ex.op("GatherElements", &[x, &idx], vec![int("axis", 1)])?;
    let picked = ex.op("Squeeze", &[&picked, &one], vec![])?;
    let loss = ex.op("Neg", &[&picked], vec![])?;
    // An ignored position's loss is 0 whatever class 0 holds (−∞ times a zero weight would be NaN).
    let loss = match &ignored {
        Some(m) => {
            let zero = ex.scalar(dt, 0.0)?;
            ex.op("Where", &[m, &zero, &loss], vec![])?
        }
        None => loss,
    };
    // Each position's weight: its class's, or 1; 0 where ignored.
    let w = match weight {
        Some(w) => Some(ex.op("Gather", &[w, &safe], vec![])?),
        None => None,
    };
    let loss = match &w {
        Some(w) => ex.op("Mul", &[&loss, w], vec![])?,
        None => loss,
    };
    // The weights the mean divides by: 0 where ignored.
    let w = match (&ignored, w) {
        (Some(m), w) => {
            let zero = ex.scalar(dt, 0.0)?;
            let w = match w {
                Some(w) => w,
                None => ex.scalar(dt, 1.0)?,
            };
            Some(ex.op("Where", &[m, &zero, &w], vec![])?)
        }
        (None, w) => w,
    };
    let all = |ex: &mut Ex<'_, '_>, v: &str| ex.op("ReduceSum", &[v], vec![int("keepdims", 0)]);
    match (reduction, w) {
        ("none", _) => Ok(loss),
        ("sum", _) => all(ex, &loss),
        (_, None) => ex.op("ReduceMean", &[&loss], vec![int("keepdims", 0)]),
        (_, Some(w)) => {
            // The weights at every position (a scalar weight from an ignore mask alone already has the shape).
            let shape = ex.ty(&loss)?.shape;
            let s = ex.ints(&shape.iter().map(|&d| d as i64).collect::<Vec<_>>())?;
            let w = ex.op("Expand", &[&w, &s], vec![])?;
            let num = all(ex, &loss)?;
            let den = all(ex, &w)?;
            ex.op("Div", &[&num, &den], vec![])
        }
    }
}
