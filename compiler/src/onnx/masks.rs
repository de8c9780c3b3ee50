//! Ops that select elements by their indices, imported as a comparison of indices and a `Where` or `Cast`
//! ([`super::expand`]): `Trilu` (a triangle of the last two axes), `EyeLike` (a constant), `OneHot` (indices
//! compared with a range along the new axis) and `Hardmax` (the `ArgMax` along an axis compared with a range). The
//! index tables are constants made at import, within the size limit; what depends on the data (`Trilu`'s `k` given
//! at run time, `OneHot`'s indices, `Hardmax`'s maxima) is compared at run time.

use stowage_runtime::{DatumType, Tensor};

use super::expand::{int, Ex};
use crate::consts;
use crate::error::ImportErrorKind as E;

/// The op types this file expands.
pub const MASK_OPS: &[&str] = &["EyeLike", "Hardmax", "OneHot", "Trilu"];

/// Expands the op of `ex`; its outputs.
pub(super) fn expand(ex: &mut Ex<'_, '_>) -> Result<Vec<Option<String>>, E> {
    let y = match ex.node.op_type() {
        "Trilu" => trilu(ex)?,
        "EyeLike" => eye_like(ex)?,
        "OneHot" => one_hot(ex)?,
        "Hardmax" => hardmax(ex)?,
        other => return Err(ex.fail(format!("'{other}' has no expansion"))),
    };
    Ok(vec![Some(y)])
}

/// A constant of `dt` and `shape` from one value per element, checked against the size limit before it is made.
pub(super) fn table(
    ex: &mut Ex<'_, '_>,
    dt: DatumType,
    shape: &[usize],
    at: impl Fn(&[usize]) -> i64,
) -> Result<String, E> {
    let count = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
    let bytes = count.and_then(|n| n.checked_mul(dt.size_of()));
    match bytes {
        Some(b) if b <= ex.limit() => {}
        _ => return Err(ex.fail(format!("its index table of shape {shape:?} is larger than the size limit"))),
    }
    let mut index = vec![0usize; shape.len()];
    let mut values = Vec::with_capacity(count.unwrap_or(0));
    for _ in 0..count.unwrap_or(0) {
        values.push(at(&index));
        for ax in (0..shape.len()).rev() {
            index[ax] += 1;
            if index[ax] < shape[ax] {
                break;
            }
            index[ax] = 0;
        }
    }
    let t = consts::from_i64s(dt, shape, &values).map_err(|e| ex.fail(e.to_string()))?;
    Ok(ex.constant("table", t))
}

/// The one int64 element of constant input `i` (a scalar or a one-element tensor), if it is constant.
fn const_int(ex: &Ex<'_, '_>, i: usize, what: &str) -> Result<Option<i64>, E> {
    let Some(v) = ex.optional(i) else { return Ok(None) };
    let Some(t) = ex.value(&v) else { return Ok(None) };
    let vals = consts::to_i64s(t).map_err(|e| ex.fail(format!("{what}: {e}")))?;
    match vals.as_slice() {
        [k] => Ok(Some(*k)),
        _ => Err(ex.fail(format!("{what} must have one element, found {}", vals.len()))),
    }
}

/// `Trilu`: the elements of the last two axes on or above (`upper`) or on or below the `k`-th diagonal, zeros
/// elsewhere.
fn trilu(ex: &mut Ex<'_, '_>) -> Result<String, E> {
    let x = ex.input(0)?;
    let xt = ex.ty(&x)?;
    let upper = ex.attrs().int_or("upper", 1).map_err(|e| ex.attr_err(e))? != 0;
    if xt.rank() < 2 {
        return Err(ex.fail(format!("input is {xt}: it needs at least two axes")));
    }
    let (n, m) = (xt.shape[xt.rank() - 2], xt.shape[xt.rank() - 1]);
    // j − i, against which k is compared.
    let keep = match const_int(ex, 1, "k")? {
        Some(k) => table(ex, DatumType::Bool, &[n, m], |ij| {
            let d = ij[1] as i64 - ij[0] as i64;
            i64::from(if upper { d >= k } else { d <= k })
        })?,
        None => {
            let d = table(ex, DatumType::I64, &[n, m], |ij| ij[1] as i64 - ij[0] as i64)?;
            let k = match ex.optional(1) {
                Some(k) => k,
                None => ex.ints(&[0])?,
            };
            let op = if upper { "GreaterOrEqual" } else { "LessOrEqual" };
            ex.op(op, &[&d, &k], vec![])?
        }
    };
    let zero = ex.scalar(xt.dt, 0.0)?;
    ex.op("Where", &[&keep, &x, &zero], vec![])
}

/// `EyeLike`: ones on the `k`-th diagonal of a matrix of the input's shape, in `dtype` (the input's by default).
fn eye_like(ex: &mut Ex<'_, '_>) -> Result<String, E> {
    let x = ex.input(0)?;
    let xt = ex.ty(&x)?;
    let a = ex.attrs();
    let k = a.int_or("k", 0).map_err(|e| ex.attr_err(e))?;
    let dt = match a.int("dtype").map_err(|e| ex.attr_err(e))? {
        Some(code) => super::tensor::datum_type(code as i32).map_err(|m| ex.attr_fail("dtype", m))?,
        None => xt.dt,
    };
    if xt.rank() != 2 {
        return Err(ex.fail(format!("input is {xt}: it must be a matrix")));
    }
    table(ex, dt, &xt.shape, |ij| i64::from(ij[1] as i64 - ij[0] as i64 == k))
}

/// `OneHot`: `values[1]` where the new axis's index equals the index (negative ones count from `depth`),
/// `values[0]` elsewhere.
fn one_hot(ex: &mut Ex<'_, '_>) -> Result<String, E> {
    let (indices, values) = (ex.input(0)?, ex.input(2)?);
    let it = ex.ty(&indices)?;
    let depth = const_int_or_float(ex, 1)?;
    let depth = usize::try_from(depth).map_err(|_| ex.fail(format!("depth is {depth}: it must be at least 0")))?;
    let rank = it.rank() as i64 + 1;
    let axis = ex.attrs().int_or("axis", -1).map_err(|e| ex.attr_err(e))?;
    let axis = if axis < 0 { axis + rank } else { axis };
    if !(0..rank).contains(&axis) {
        return Err(ex.attr_fail("axis", format!("must be in [-{rank}, {rank}), the output's rank")));
    }
    let idx = ex.op("Cast", &[&indices], vec![int("to", 7)])?;
    let zero = ex.ints(&[0])?;
    let d = ex.ints(&[depth as i64])?;
    let negative = ex.op("Less", &[&idx, &zero], vec![])?;
    let wrapped = ex.op("Add", &[&idx, &d], vec![])?;
    let idx = ex.op("Where", &[&negative, &wrapped, &idx], vec![])?;
    let ax = ex.ints(&[axis])?;
    let idx = ex.op("Unsqueeze", &[&idx, &ax], vec![])?;
    // 0 … depth−1 along the new axis, against the indices broadcast over it.
    let mut shape = vec![1usize; (rank - axis) as usize];
    shape[0] = depth;
    let range = table(ex, DatumType::I64, &shape, |i| i[0] as i64)?;
    let hot = ex.op("Equal", &[&idx, &range], vec![])?;
    let (off, on) = (ex.ints(&[0])?, ex.ints(&[1])?);
    let scalar = ex.ints(&[])?;
    let off = ex.op("Gather", &[&values, &off], vec![])?;
    let on = ex.op("Gather", &[&values, &on], vec![])?;
    let off = ex.op("Reshape", &[&off, &scalar], vec![])?;
    let on = ex.op("Reshape", &[&on, &scalar], vec![])?;
    ex.op("Where", &[&hot, &on, &off], vec![])
}

/// OneHot's `depth`, a constant of any numeric type (floats are truncated, as the reference does).
fn const_int_or_float(ex: &Ex<'_, '_>, i: usize) -> Result<i64, E> {
    let v = ex.input(i)?;
    let t: &Tensor<'static> =
        ex.value(&v).ok_or_else(|| ex.fail("depth must be a constant: it sets the output's shape"))?;
    let vals = consts::to_f64s(t).map_err(|e| ex.fail(format!("depth: {e}")))?;
    match vals.as_slice() {
        [d] if d.is_finite() && d.abs() < 2f64.powi(62) => Ok(d.trunc() as i64),
        [d] => Err(ex.fail(format!("depth is {d}: it must be a finite integer"))),
        _ => Err(ex.fail(format!("depth must have one element, found {}", vals.len()))),
    }
}

/// `Hardmax`: 1 at the first maximum along `axis`, 0 elsewhere. Before opset 13 the input is seen as a matrix of
/// the axes before `axis` by those from it, as the op then defined.
fn hardmax(ex: &mut Ex<'_, '_>) -> Result<String, E> {
    let x = ex.input(0)?;
    let xt = ex.ty(&x)?;
    let old = ex.opset() < 13;
    let rank = xt.rank() as i64;
    let axis = ex.attrs().int_or("axis", if old { 1 } else { -1 }).map_err(|e| ex.attr_err(e))?;
    let axis = if axis < 0 { axis + rank } else { axis };
    if !(0..rank.max(1)).contains(&axis) {
        return Err(ex.attr_fail("axis", format!("must be in [-{rank}, {rank})")));
    }
    let axis = axis as usize;
    let (input, shape, axis) = if old {
        let rows: usize = xt.shape[..axis].iter().product();
        let cols: usize = xt.shape[axis..].iter().product();
        let s = ex.ints(&[rows as i64, cols as i64])?;
        (ex.op("Reshape", &[&x, &s], vec![])?, vec![rows, cols], 1)
    } else {
        (x.clone(), xt.shape.clone(), axis)
    };
    let at = ex.op("ArgMax", &[&input], vec![int("axis", axis as i64), int("keepdims", 1)])?;
    let mut range_shape = vec![1usize; shape.len() - axis];
    range_shape[0] = shape[axis];
    let range = table(ex, DatumType::I64, &range_shape, |i| i[0] as i64)?;
    let hot = ex.op("Equal", &[&at, &range], vec![])?;
    let to = i64::from(super::tensor::onnx_type(xt.dt) as i32);
    let y = ex.op("Cast", &[&hot], vec![int("to", to)])?;
    if old {
        let s = ex.ints(&xt.shape.iter().map(|&d| d as i64).collect::<Vec<_>>())?;
        ex.op("Reshape", &[&y, &s], vec![])
    } else {
        Ok(y)
    }
}
