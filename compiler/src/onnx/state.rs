//! The ops of decoder models that carry state from one call to the next, imported as the ops stowage has
//! ([`super::expand`]): `CausalConvWithState` (a depthwise causal convolution whose last `k − 1` inputs are the
//! next call's state) and `TensorScatter` (a cache written at per-batch positions).
//! 1. **Causal convolution.** The past state (zeros when absent) is joined before the input along time, a depthwise
//!    `Conv` of the kernel's width runs over the whole, `silu`/`swish` is applied in f32 for half floats, and the new
//!    state is the joined sequence's last `k − 1` steps.
//! 2. **Cache writes.** `update`'s step `s` of batch element `b` goes to position `write_indices[b] + s` along
//!    `axis` (modulo the cache's length when `mode` is `circular`): one `ScatterElements` with indices computed from
//!    `write_indices`, which may be known only at run time. A position past the cache is the scatter's index error.
//! 3. Shapes that disagree are errors naming the input and what it must be.

use super::expand::{int, Ex};
use crate::error::ImportErrorKind as E;

/// The op types this file expands.
pub const STATE_OPS: &[&str] = &["CausalConvWithState", "TensorScatter"];

/// Expands the op of `ex`; its outputs.
pub(super) fn expand(ex: &mut Ex<'_, '_>) -> Result<Vec<Option<String>>, E> {
    match ex.node.op_type() {
        "CausalConvWithState" => causal_conv(ex),
        "TensorScatter" => Ok(vec![Some(tensor_scatter(ex)?)]),
        other => Err(ex.fail(format!("'{other}' has no expansion"))),
    }
}

/// `CausalConvWithState(input, weight, bias?, past_state?)` (rule 1): output and present state.
fn causal_conv(ex: &mut Ex<'_, '_>) -> Result<Vec<Option<String>>, E> {
    let (x, w, bias, past) = (ex.input(0)?, ex.input(1)?, ex.optional(2), ex.optional(3));
    let (xt, wt) = (ex.ty(&x)?, ex.ty(&w)?);
    if xt.rank() != 3 || !xt.dt.is_float() {
        return Err(ex.fail(format!("input is {xt}: it must be a float tensor [batch, channels, length]")));
    }
    let (b, c, len) = (xt.shape[0], xt.shape[1], xt.shape[2]);
    if wt.rank() != 3 || wt.shape[0] != c || wt.shape[1] != 1 || wt.shape[2] == 0 {
        return Err(ex.fail(format!("weight is {wt}: it must be [{c}, 1, k], one kernel per channel")));
    }
    let k = wt.shape[2];
    let act = ex.attrs().string("activation").map_err(|e| ex.attr_err(e))?;
    let silu = match act.as_deref() {
        None | Some("none") => false,
        Some("silu") | Some("swish") => true,
        Some(other) => {
            return Err(ex.attr_fail("activation", format!("must be 'none', 'silu' or 'swish', found '{other}'")))
        }
    };
    let state = match past {
        Some(p) => {
            let pt = ex.ty(&p)?;
            if pt.shape != [b, c, k - 1] || pt.dt != xt.dt {
                return Err(ex.fail(format!("past_state is {pt}: it must be {}[{b},{c},{}]", xt.dt, k - 1)));
            }
            Some(p)
        }
        None if k > 1 => Some(ex.zeros(xt.dt, &[b, c, k - 1])?),
        None => None,
    };
    let joined = match &state {
        Some(s) => ex.op("Concat", &[s, &x], vec![int("axis", 2)])?,
        None => x.clone(),
    };
    let mut inputs = vec![joined.as_str(), w.as_str()];
    if let Some(bias) = &bias {
        inputs.push(bias);
    }
    let conv = ex.op("Conv", &inputs, vec![int("group", c as i64)])?;
    let y = if silu {
        let narrow = !matches!(xt.dt, stowage_runtime::DatumType::F32 | stowage_runtime::DatumType::F64);
        let v = if narrow { ex.op("Cast", &[&conv], vec![int("to", 1)])? } else { conv };
        let s = ex.op("Sigmoid", &[&v], vec![])?;
        let y = ex.op("Mul", &[&v, &s], vec![])?;
        if narrow {
            let code = i64::from(super::tensor::onnx_type(xt.dt) as i32);
            ex.op("Cast", &[&y], vec![int("to", code)])?
        } else {
            y
        }
    } else {
        conv
    };
    let total = (len + k - 1) as i64;
    let present = if k > 1 {
        let (st, en, ax) = (ex.ints(&[len as i64])?, ex.ints(&[total])?, ex.ints(&[2])?);
        ex.op("Slice", &[&joined, &st, &en, &ax], vec![])?
    } else {
        ex.zeros(xt.dt, &[b, c, 0])?
    };
    Ok(vec![Some(y), Some(present)])
}

/// `TensorScatter(past_cache, update, write_indices?)` (rule 2).
fn tensor_scatter(ex: &mut Ex<'_, '_>) -> Result<String, E> {
    let (cache, update, at) = (ex.input(0)?, ex.input(1)?, ex.optional(2));
    let (ct, ut) = (ex.ty(&cache)?, ex.ty(&update)?);
    let r = ct.rank() as i64;
    let a = ex.attrs();
    let err = |e| ex.attr_err(e);
    let axis = a.int_or("axis", -2).map_err(err)?;
    let circular = match a.string("mode").map_err(err)?.as_deref() {
        None | Some("linear") => false,
        Some("circular") => true,
        Some(other) => return Err(ex.attr_fail("mode", format!("must be 'linear' or 'circular', found '{other}'"))),
    };
    if !(-r..r).contains(&axis) || (axis + r) % r == 0 {
        return Err(ex.attr_fail("axis", format!("is {axis}: it must name an axis of {ct} after the batch axis")));
    }
    let axis = ((axis + r) % r) as usize;
    let fits = ut.rank() == ct.rank()
        && ut.dt == ct.dt
        && (0..ct.rank()).all(|i| if i == axis { ut.shape[i] <= ct.shape[i] } else { ut.shape[i] == ct.shape[i] });
    if !fits {
        return Err(
            ex.fail(format!("update is {ut}: it must be {ct} with at most {} along axis {axis}", ct.shape[axis]))
        );
    }
    let batch = ct.shape[0];
    let at = match at {
        Some(w) => {
            let wt = ex.ty(&w)?;
            if wt.shape != [batch] {
                return Err(
                    ex.fail(format!("write_indices is {wt}: it must have one position per batch element ({batch})"))
                );
            }
            ex.op("Cast", &[&w], vec![int("to", 7)])?
        }
        None => ex.ints(&vec![0; batch])?,
    };
    let mut bshape = vec![1i64; ct.rank()];
    bshape[0] = batch as i64;
    let bs = ex.ints(&bshape)?;
    let at = ex.op("Reshape", &[&at, &bs], vec![])?;
    let steps = stowage_runtime::Tensor::from_vec(&[ut.shape[axis]], (0..ut.shape[axis] as i64).collect::<Vec<_>>())
        .map_err(|e| ex.fail(e.to_string()))?;
    let steps = ex.constant("steps", steps);
    let mut sshape = vec![1i64; ct.rank()];
    sshape[axis] = ut.shape[axis] as i64;
    let ss = ex.ints(&sshape)?;
    let steps = ex.op("Reshape", &[&steps, &ss], vec![])?;
    let mut idx = ex.op("Add", &[&at, &steps], vec![])?;
    if circular {
        let m = ex.ints(&[ct.shape[axis] as i64])?;
        idx = ex.op("Mod", &[&idx, &m], vec![])?;
    }
    let whole = ex.ints(&ut.shape.iter().map(|&d| d as i64).collect::<Vec<_>>())?;
    let idx = ex.op("Expand", &[&idx, &whole], vec![])?;
    ex.op("ScatterElements", &[&cache, &idx, &update], vec![int("axis", axis as i64)])
}
