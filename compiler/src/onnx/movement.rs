//! Data movement imported as gathers ([`super::expand`]), and the ops whose output's shape depends on values:
//! 1. **ReverseSequence** reverses the first `sequence_lens[b]` steps of each batch element `b` along the time axis
//!    and keeps the rest in place. The lengths may be known only at run time: the index of every element is computed
//!    from them (`t < len ? len − 1 − t : t`, in i64) and read with one `GatherElements` along the time axis. A
//!    length past the time axis is the gather's index error at run time.
//! 2. **Compress** keeps the positions where its condition is true: a `Gather` of those positions along `axis` (of
//!    the flattened input without one). The condition sets the output's shape, so it must be known at compile time
//!    (a constant or an input given with `--input-value`); the data may be known only at run time.
//! 3. **NonZero** is folded: its input must be known at compile time, and its output is a constant. Values whose
//!    shape is known only at run time are the control-flow issue's (docs/compiler.md says so); until then the error
//!    names the node and says which input to give with `--input-value`.

use stowage_runtime::{DatumType, Tensor};

use super::expand::{int, Ex};
use crate::consts;
use crate::error::ImportErrorKind as E;

/// The op types this file expands.
pub const MOVEMENT_OPS: &[&str] = &["Compress", "NonZero", "ReverseSequence"];

/// Expands the op of `ex`; its outputs.
pub(super) fn expand(ex: &mut Ex<'_, '_>) -> Result<Vec<Option<String>>, E> {
    match ex.node.op_type() {
        "Compress" => return Ok(vec![Some(compress(ex)?)]),
        "NonZero" => return Ok(vec![Some(non_zero(ex)?)]),
        _ => {}
    }
    let (x, lens) = (ex.input(0)?, ex.input(1)?);
    let (xt, lt) = (ex.ty(&x)?, ex.ty(&lens)?);
    let a = ex.attrs();
    let err = |e| ex.attr_err(e);
    let (batch, time) = (a.int_or("batch_axis", 1).map_err(err)?, a.int_or("time_axis", 0).map_err(err)?);
    if xt.rank() < 2 || !matches!((batch, time), (0, 1) | (1, 0)) {
        return Err(ex.fail(format!(
            "batch_axis {batch} and time_axis {time} must be 0 and 1 of an input of 2 or more axes, found {xt}"
        )));
    }
    let (b, t) = (batch as usize, time as usize);
    if lt.shape != [xt.shape[b]] {
        return Err(
            ex.fail(format!("sequence_lens is {lt}: it must have one length per batch element ({})", xt.shape[b]))
        );
    }
    // Steps along the time axis and lengths along the batch axis, each with ones elsewhere.
    let mut tshape = vec![1i64; xt.rank()];
    tshape[t] = xt.shape[t] as i64;
    let steps = stowage_runtime::Tensor::from_vec(&[xt.shape[t]], (0..xt.shape[t] as i64).collect::<Vec<_>>())
        .map_err(|e| ex.fail(e.to_string()))?;
    let steps = ex.constant("steps", steps);
    let ts = ex.ints(&tshape)?;
    let steps = ex.op("Reshape", &[&steps, &ts], vec![])?;
    let mut bshape = vec![1i64; xt.rank()];
    bshape[b] = xt.shape[b] as i64;
    let lens = ex.op("Cast", &[&lens], vec![int("to", 7)])?;
    let bs = ex.ints(&bshape)?;
    let lens = ex.op("Reshape", &[&lens, &bs], vec![])?;
    let inside = ex.op("Less", &[&steps, &lens], vec![])?;
    let one = ex.ints(&[1])?;
    let last = ex.op("Sub", &[&lens, &one], vec![])?;
    let back = ex.op("Sub", &[&last, &steps], vec![])?;
    let idx = ex.op("Where", &[&inside, &back, &steps], vec![])?;
    let whole = ex.ints(&xt.shape.iter().map(|&d| d as i64).collect::<Vec<_>>())?;
    let idx = ex.op("Expand", &[&idx, &whole], vec![])?;
    Ok(vec![Some(ex.op("GatherElements", &[&x, &idx], vec![int("axis", time)])?)])
}

/// The constant value of input `i` (named `what`), which sets the output's shape (rules 2, 3).
fn known(ex: &Ex<'_, '_>, i: usize, what: &str) -> Result<Tensor<'static>, E> {
    let v = ex.input(i)?;
    ex.value(&v).cloned().ok_or_else(|| {
        ex.needs_value(format!(
            "its output's shape depends on the values of {what} ('{v}'), which are known only at run time: give them \
             with --input-value"
        ))
    })
}

/// Whether each element of `t` is nonzero (a NaN is).
fn nonzero_mask(ex: &Ex<'_, '_>, t: &Tensor<'static>) -> Result<Vec<bool>, E> {
    Ok(if t.dt().is_float() {
        consts::to_f64s(t).map_err(|e| ex.fail(e.to_string()))?.iter().map(|&x| x != 0.0).collect()
    } else if t.dt() == DatumType::Bool {
        t.as_slice::<bool>().map_err(|e| ex.fail(e.to_string()))?.to_vec()
    } else {
        consts::to_i64s(t).map_err(|e| ex.fail(e.to_string()))?.iter().map(|&x| x != 0).collect()
    })
}

/// `Compress(input, condition)` along `axis`, or over the flattened input (rule 2).
fn compress(ex: &mut Ex<'_, '_>) -> Result<String, E> {
    let x = ex.input(0)?;
    let xt = ex.ty(&x)?;
    let cond = known(ex, 1, "condition")?;
    let keep = nonzero_mask(ex, &cond)?;
    let axis = ex.attrs().int("axis").map_err(|e| ex.attr_err(e))?;
    let (x, axis) = match axis {
        Some(a) => {
            let r = xt.rank() as i64;
            if !(-r..r).contains(&a) {
                return Err(ex.attr_fail("axis", format!("is {a}: it must be in [-{r}, {r}) for input {xt}")));
            }
            (x, if a < 0 { a + r } else { a } as usize)
        }
        None => {
            let flat = ex.ints(&[-1])?;
            (ex.op("Reshape", &[&x, &flat], vec![])?, 0)
        }
    };
    let len = ex.ty(&x)?.shape[axis];
    if keep.len() > len {
        return Err(ex.fail(format!("condition has {} elements, more than the {len} along axis {axis}", keep.len())));
    }
    let idx: Vec<i64> = keep.iter().enumerate().filter(|(_, &k)| k).map(|(i, _)| i as i64).collect();
    let idx = ex.ints(&idx)?;
    ex.op("Gather", &[&x, &idx], vec![int("axis", axis as i64)])
}

/// `NonZero(x)` of a constant `x`: the indices of its nonzero elements, `[rank, count]` (rule 3).
fn non_zero(ex: &mut Ex<'_, '_>) -> Result<String, E> {
    let t = known(ex, 0, "X")?;
    let mask = nonzero_mask(ex, &t)?;
    let shape = t.shape().to_vec();
    let hits: Vec<usize> = mask.iter().enumerate().filter(|(_, &m)| m).map(|(i, _)| i).collect();
    let rank = shape.len().max(1);
    let mut out = vec![0i64; rank * hits.len()];
    for (j, &flat) in hits.iter().enumerate() {
        let mut rest = flat;
        for a in (0..shape.len()).rev() {
            out[a * hits.len() + j] = (rest % shape[a]) as i64;
            rest /= shape[a];
        }
    }
    let t = Tensor::from_vec(&[rank, hits.len()], out).map_err(|e| ex.fail(e.to_string()))?;
    Ok(ex.constant("nonzero", t))
}
