//! `Attention` (opsets 23 to 25) imported as the products, bias and softmax the specification defines it by
//! ([`super::expand`]), so each backend runs it with the kernels it has.
//!
//! What it takes: 3-D inputs with `q_num_heads` and `kv_num_heads` (split into heads, and joined back after) or 4-D
//! ones; a key and value cache (`past_key`, `past_value`, concatenated before the new ones, the result the
//! `present_*` outputs); grouped heads (each key and value head repeated for its group of query heads); `scale`
//! (split as √scale on each side of the product, as the reference computes it); `softcap`; a boolean or additive
//! `attn_mask`, padded with masked columns when shorter than the keys; `is_causal` and the sliding window
//! (`left_window_size`, `right_window_size`) aligned to the end of the cache; `nonpad_kv_seqlen` (a causal frontier
//! and a padding mask per batch, from run-time lengths); `softmax_precision`; the four `qk_matmul_output_mode`s
//! (0 the product, 1 after softcap, 2 after the bias, 3 the probabilities).
//! A row whose bias masks every key gives zeros, as the specification asks, not the NaN of a softmax over −∞.
//!
//! The causal and window masks of a cache of known length are constants made at import; with `nonpad_kv_seqlen`
//! they are compared at run time.

use stowage_runtime::DatumType;

use super::expand::{int, ints, Ex};
use super::masks::table;
use crate::error::ImportErrorKind as E;

/// The op types this file expands.
pub const ATTENTION_OPS: &[&str] = &["Attention"];

/// Heads of a 3-D input: `[B, S, H·D]` → `[B, H, S, D]`.
fn split_heads(ex: &mut Ex<'_, '_>, x: &str, heads: i64, what: &str) -> Result<String, E> {
    let t = ex.ty(x)?;
    let (b, s, hd) = (t.shape[0] as i64, t.shape[1] as i64, t.shape[2] as i64);
    if heads <= 0 || hd % heads != 0 {
        return Err(ex.fail(format!("{what} is {t}: {heads} heads do not divide its {hd} features")));
    }
    let shape = ex.ints(&[b, s, heads, hd / heads])?;
    let r = ex.op("Reshape", &[x, &shape], vec![])?;
    ex.op("Transpose", &[&r], vec![ints("perm", vec![0, 2, 1, 3])])
}

/// Each of `x`'s heads (axis 1) repeated `reps` times in place: `[B, H, S, D]` → `[B, H·reps, S, D]`.
fn repeat_heads(ex: &mut Ex<'_, '_>, x: &str, reps: i64) -> Result<String, E> {
    let t = ex.ty(x)?;
    let [b, h, s, d] = [t.shape[0], t.shape[1], t.shape[2], t.shape[3]].map(|v| v as i64);
    let two = ex.ints(&[2])?;
    let u = ex.op("Unsqueeze", &[x, &two], vec![])?;
    let wide = ex.ints(&[b, h, reps, s, d])?;
    let e = ex.op("Expand", &[&u, &wide], vec![])?;
    let shape = ex.ints(&[b, h * reps, s, d])?;
    ex.op("Reshape", &[&e, &shape], vec![])
}

/// `allowed ? 0 : −∞` in `dt`.
fn to_bias(ex: &mut Ex<'_, '_>, allowed: &str, dt: DatumType) -> Result<String, E> {
    let (zero, ninf) = (ex.scalar(dt, 0.0)?, ex.scalar(dt, f64::NEG_INFINITY)?);
    ex.op("Where", &[allowed, &zero, &ninf], vec![])
}

/// Expands the `Attention` node of `ex`; its outputs.
pub(super) fn expand(ex: &mut Ex<'_, '_>) -> Result<Vec<Option<String>>, E> {
    let (q, k, v) = (ex.input(0)?, ex.input(1)?, ex.input(2)?);
    let (mask, past_key, past_value, nonpad) = (ex.optional(3), ex.optional(4), ex.optional(5), ex.optional(6));
    let qt = ex.ty(&q)?;
    let dt = qt.dt;
    if !dt.is_float() || !matches!(qt.rank(), 3 | 4) {
        return Err(ex.fail(format!("Q is {qt}: it must be a float tensor of 3 or 4 axes")));
    }
    for (name, x) in [("K", &k), ("V", &v)] {
        let t = ex.ty(x)?;
        if t.rank() != qt.rank() || t.dt != dt {
            return Err(ex.fail(format!("{name} is {t} and Q {qt}: they must have one datum type and rank")));
        }
    }
    if past_key.is_some() != past_value.is_some() {
        return Err(ex.fail("past_key and past_value must be given together"));
    }
    if nonpad.is_some() && past_key.is_some() {
        return Err(ex.fail("nonpad_kv_seqlen cannot be combined with past_key and past_value"));
    }
    let a = ex.attrs();
    let err = |e| ex.attr_err(e);
    let is_causal = a.int_or("is_causal", 0).map_err(err)? != 0;
    let q_heads_attr = a.int("q_num_heads").map_err(err)?;
    let kv_heads_attr = a.int("kv_num_heads").map_err(err)?;
    let scale = if a.has("scale") { Some(a.float_or("scale", 1.0).map_err(err)?) } else { None };
    let softcap = a.float_or("softcap", 0.0).map_err(err)?;
    let precision = a.int("softmax_precision").map_err(err)?;
    let mode = a.int_or("qk_matmul_output_mode", 0).map_err(err)?;
    let left = a.int_or("left_window_size", -1).map_err(err)?;
    let right = a.int_or("right_window_size", -1).map_err(err)?;
    if !(0..=3).contains(&mode) {
        return Err(ex.attr_fail("qk_matmul_output_mode", format!("must be 0 to 3, found {mode}")));
    }
    if left < -1 || right < -1 {
        return Err(ex.attr_fail("left_window_size", "and right_window_size must be -1 or at least 0"));
    }
    // 4-D [B, H, S, D] from here.
    let three = qt.rank() == 3;
    let (q, k, v) = if three {
        let (Some(hq), Some(hkv)) = (q_heads_attr, kv_heads_attr) else {
            return Err(ex.attr_fail("q_num_heads", "and kv_num_heads are required for 3-D inputs"));
        };
        (split_heads(ex, &q, hq, "Q")?, split_heads(ex, &k, hkv, "K")?, split_heads(ex, &v, hkv, "V")?)
    } else {
        (q, k, v)
    };
    let q4 = ex.ty(&q)?;
    let head = q4.shape[3] as f64;
    let sqrt_scale = match scale {
        Some(s) => f64::from(s).sqrt(),
        None => (1.0 / head.sqrt()).sqrt(),
    };
    let concat = |ex: &mut Ex<'_, '_>, past: &Option<String>, x: &str| match past {
        Some(p) => ex.op("Concat", &[p, x], vec![int("axis", 2)]),
        None => Ok(x.to_string()),
    };
    let (k, v) = (concat(ex, &past_key, &k)?, concat(ex, &past_value, &v)?);
    let (present_k, present_v) = (k.clone(), v.clone());
    let past_len = match &past_key {
        Some(p) => ex.ty(p)?.shape.get(2).copied().unwrap_or(0) as i64,
        None => 0,
    };
    let kt = ex.ty(&k)?;
    let (q_len, kv_len) = (q4.shape[2], kt.shape[2]);
    let batch = q4.shape[0] as i64;

    // The additive bias: the mask, the causal and window masks, the padding.
    let mut bias: Option<String> = None;
    if let Some(m) = &mask {
        let mt = ex.ty(m)?;
        if mt.rank() == 0 {
            return Err(ex.fail(format!("attn_mask is {mt}: it needs at least the key axis")));
        }
        let last = mt.shape.last().copied().unwrap_or(0);
        let mut m = m.clone();
        if last < kv_len {
            let mut pads = vec![0i64; 2 * mt.rank()];
            pads[2 * mt.rank() - 1] = (kv_len - last) as i64;
            let p = ex.ints(&pads)?;
            let fill = if mt.dt == DatumType::Bool { 0.0 } else { f64::NEG_INFINITY };
            let f = ex.scalar(mt.dt, fill)?;
            m = ex.op("Pad", &[&m, &p, &f], vec![])?;
        }
        bias = Some(if mt.dt == DatumType::Bool { to_bias(ex, &m, dt)? } else { m });
    }
    let window = left >= 0 || right >= 0;
    if is_causal || window {
        // Query i (at i + offset in the sequence) against key j.
        let allowed_at = |i: i64, j: i64, off: i64| {
            let d = i + off - j;
            (!is_causal || d >= 0) && (left < 0 || d <= left) && (right < 0 || -d <= right)
        };
        let allowed = match &nonpad {
            None => table(ex, DatumType::Bool, &[q_len, kv_len], |ij| {
                i64::from(allowed_at(ij[0] as i64, ij[1] as i64, past_len))
            })?,
            Some(n) => {
                // d = i − j + (nonpad[b] − q_len), per batch: [B, 1, q, kv].
                let d0 = table(ex, DatumType::I64, &[q_len, kv_len], |ij| ij[0] as i64 - ij[1] as i64 - q_len as i64)?;
                let shape = ex.ints(&[batch, 1, 1, 1])?;
                let n64 = ex.op("Cast", &[n], vec![int("to", 7)])?;
                let off = ex.op("Reshape", &[&n64, &shape], vec![])?;
                let d = ex.op("Add", &[&d0, &off], vec![])?;
                let mut conds = Vec::new();
                let zero = ex.ints(&[0])?;
                if is_causal {
                    conds.push(ex.op("GreaterOrEqual", &[&d, &zero], vec![])?);
                }
                if left >= 0 {
                    let l = ex.ints(&[left])?;
                    conds.push(ex.op("LessOrEqual", &[&d, &l], vec![])?);
                }
                if right >= 0 {
                    let r = ex.ints(&[-right])?;
                    conds.push(ex.op("GreaterOrEqual", &[&d, &r], vec![])?);
                }
                let mut all = conds.remove(0);
                for c in conds {
                    all = ex.op("And", &[&all, &c], vec![])?;
                }
                all
            }
        };
        let t = to_bias(ex, &allowed, dt)?;
        bias = Some(match bias {
            Some(b) => ex.op("Add", &[&b, &t], vec![])?,
            None => t,
        });
    }
    if let Some(n) = &nonpad {
        let cols = table(ex, DatumType::I64, &[kv_len], |j| j[0] as i64)?;
        let shape = ex.ints(&[batch, 1, 1, 1])?;
        let n64 = ex.op("Cast", &[n], vec![int("to", 7)])?;
        let lens = ex.op("Reshape", &[&n64, &shape], vec![])?;
        let inside = ex.op("Less", &[&cols, &lens], vec![])?;
        let t = to_bias(ex, &inside, dt)?;
        bias = Some(match bias {
            Some(b) => ex.op("Add", &[&b, &t], vec![])?,
            None => t,
        });
    }

    // Grouped heads.
    let hq = q4.shape[1] as i64;
    let hk = kt.shape[1] as i64;
    let (k, v) = if hq != hk && hk > 0 && hq % hk == 0 {
        (repeat_heads(ex, &k, hq / hk)?, repeat_heads(ex, &v, hq / hk)?)
    } else {
        (k, v)
    };
    let s = ex.scalar(dt, sqrt_scale)?;
    let qs = ex.op("Mul", &[&q, &s], vec![])?;
    let kt4 = ex.op("Transpose", &[&k], vec![ints("perm", vec![0, 1, 3, 2])])?;
    let ks = ex.op("Mul", &[&kt4, &s], vec![])?;
    let mut qk = ex.op("MatMul", &[&qs, &ks], vec![])?;
    let raw = qk.clone();
    if softcap > 0.0 {
        let c = ex.scalar(dt, f64::from(softcap))?;
        let d = ex.op("Div", &[&qk, &c], vec![])?;
        let t = ex.op("Tanh", &[&d], vec![])?;
        qk = ex.op("Mul", &[&t, &c], vec![])?;
    }
    let with_bias = match &bias {
        Some(b) => ex.op("Add", &[&qk, b], vec![])?,
        None => qk.clone(),
    };
    let (soft_in, soft_dt) = match precision {
        Some(code) => {
            let pdt = super::tensor::datum_type(code as i32).map_err(|m| ex.attr_fail("softmax_precision", m))?;
            if pdt == dt {
                (with_bias.clone(), dt)
            } else {
                (ex.op("Cast", &[&with_bias], vec![int("to", code)])?, pdt)
            }
        }
        None => (with_bias.clone(), dt),
    };
    let mut probs = ex.op("Softmax", &[&soft_in], vec![int("axis", -1)])?;
    if let Some(b) = &bias {
        // Rows the bias masks entirely give zeros.
        let last = ex.ints(&[-1])?;
        let m = ex.op("ReduceMax", &[b, &last], vec![int("keepdims", 1)])?;
        let bias_dt = ex.ty(b)?.dt;
        let ninf = ex.scalar(bias_dt, f64::NEG_INFINITY)?;
        let masked = ex.op("Equal", &[&m, &ninf], vec![])?;
        let zero = ex.scalar(soft_dt, 0.0)?;
        probs = ex.op("Where", &[&masked, &zero, &probs], vec![])?;
    }
    if soft_dt != dt {
        let code = i64::from(super::tensor::onnx_type(dt) as i32);
        probs = ex.op("Cast", &[&probs], vec![int("to", code)])?;
    }
    // Mode 0 is the product itself (the specification's body); mode 1 the product after softcap, as the reference
    // computes it, which is the product where there is no softcap.
    let qk_out = match mode {
        0 => raw,
        1 => qk,
        2 => with_bias,
        _ => probs.clone(),
    };
    let y = ex.op("MatMul", &[&probs, &v], vec![])?;
    let y = if three {
        let t = ex.op("Transpose", &[&y], vec![ints("perm", vec![0, 2, 1, 3])])?;
        let yt = ex.ty(&t)?;
        let shape = ex.ints(&[yt.shape[0] as i64, yt.shape[1] as i64, -1])?;
        ex.op("Reshape", &[&t, &shape], vec![])?
    } else {
        y
    };
    Ok(vec![Some(y), Some(present_k), Some(present_v), Some(qk_out)])
}
