//! `LinearAttention` (the recurrent attention of linear and gated delta-rule models) imported as its recurrence,
//! unrolled over the static sequence ([`super::expand`] rule 4: it counts against the same budgets as the RNNs). The
//! rules:
//! 1. **State per head.** Query, key and value `[B, T, H · D]` are split into heads `[B, H, T, D]` and computed in
//!    f32; the state `[B, H_kv, d_k, d_v]` starts at `past_state` (zeros when absent) and is the second output,
//!    in `past_state`'s type.
//! 2. **One step per position**, in order: with gating the state is multiplied by `exp(decay_t)` (per head or per
//!    key feature); with the delta rule the value becomes `beta_t · (v_t − k_t · S)`; then `S += k_tᵀ v_t`, and the
//!    output is `scale · q_t · S` (`scale` 0 or absent: `1/√d_k`), each query head reading the state of its key
//!    head (`q_num_heads / kv_num_heads` query heads per key head, as `Attention`'s grouped heads).
//! 3. **Inputs that the rule forbids or needs** (a `decay` without gating, no `beta` with the delta rule), head
//!    counts that do not divide, and a state of the wrong shape are errors naming the input or attribute.

use stowage_runtime::DatumType;

use super::expand::{int, ints, Ex};
use crate::error::ImportErrorKind as E;

/// The op types this file expands.
pub const LINEAR_ATTENTION_OPS: &[&str] = &["LinearAttention"];

/// `x` `[B, T, H · D]` as f32 heads `[B, H, T, D]`.
fn heads(ex: &mut Ex<'_, '_>, x: &str, h: usize) -> Result<String, E> {
    let t = ex.ty(x)?;
    let x = if t.dt == DatumType::F32 { x.to_string() } else { ex.op("Cast", &[x], vec![int("to", 1)])? };
    let shape = ex.ints(&[t.shape[0] as i64, t.shape[1] as i64, h as i64, (t.shape[2] / h) as i64])?;
    let x = ex.op("Reshape", &[&x, &shape], vec![])?;
    ex.op("Transpose", &[&x], vec![ints("perm", vec![0, 2, 1, 3])])
}

/// `x` `[B, H, T, D]` split into its `t` steps `[B, H, 1, D]`.
fn steps(ex: &mut Ex<'_, '_>, x: &str, t: usize) -> Result<Vec<String>, E> {
    if t == 1 {
        return Ok(vec![x.to_string()]);
    }
    let sizes = ex.ints(&vec![1; t])?;
    ex.op_n("Split", &[x, &sizes], t, vec![int("axis", 2)])
}

/// Expands the `LinearAttention` node of `ex`; its outputs.
pub(super) fn expand(ex: &mut Ex<'_, '_>) -> Result<Vec<Option<String>>, E> {
    let (q, k, v) = (ex.input(0)?, ex.input(1)?, ex.input(2)?);
    let (past, decay, beta) = (ex.optional(3), ex.optional(4), ex.optional(5));
    let a = ex.attrs();
    let err = |e| ex.attr_err(e);
    let hq = a.int("q_num_heads").map_err(err)?.ok_or_else(|| ex.attr_fail("q_num_heads", "is required"))?;
    let hkv = a.int("kv_num_heads").map_err(err)?.ok_or_else(|| ex.attr_fail("kv_num_heads", "is required"))?;
    let scale = a.float_or("scale", 0.0).map_err(err)?;
    let rule = a.string("update_rule").map_err(err)?.unwrap_or_else(|| "gated_delta".into());
    let (gating, delta) = match rule.as_str() {
        "linear" => (false, false),
        "gated" => (true, false),
        "delta" => (false, true),
        "gated_delta" => (true, true),
        other => {
            return Err(ex.attr_fail(
                "update_rule",
                format!("must be 'linear', 'gated', 'delta' or 'gated_delta', found '{other}'"),
            ))
        }
    };
    if hq <= 0 || hkv <= 0 || hq % hkv != 0 {
        return Err(
            ex.attr_fail("q_num_heads", format!("is {hq}: it must be a positive multiple of kv_num_heads ({hkv})"))
        );
    }
    let (qt, kt, vt) = (ex.ty(&q)?, ex.ty(&k)?, ex.ty(&v)?);
    let (hq, hkv) = (hq as usize, hkv as usize);
    let fits = |t: &crate::ir::ValueType, h: usize| {
        t.rank() == 3 && t.shape[2].is_multiple_of(h) && t.shape[..2] == qt.shape[..2]
    };
    if !fits(&qt, hq) || !fits(&kt, hkv) || !fits(&vt, hkv) || !qt.dt.is_float() {
        return Err(ex.fail(format!(
            "query {qt}, key {kt} and value {vt} must be float [B, T, heads · D] with {hq} query and {hkv} key heads"
        )));
    }
    let (b, t) = (qt.shape[0], qt.shape[1]);
    let (dk, dv) = (kt.shape[2] / hkv, vt.shape[2] / hkv);
    if qt.shape[2] / hq != dk {
        return Err(ex.fail(format!("query's heads have {} features, key's {dk}: they must agree", qt.shape[2] / hq)));
    }
    for (given, needed, what) in [(decay.is_some(), gating, "decay"), (beta.is_some(), delta, "beta")] {
        if given != needed {
            let verb = if needed { "needs" } else { "forbids" };
            return Err(ex.attr_fail("update_rule", format!("'{rule}' {verb} the {what} input")));
        }
    }
    ex.spend(t * 16)?;
    let (q4, k4, v4) = (heads(ex, &q, hq)?, heads(ex, &k, hkv)?, heads(ex, &v, hkv)?);
    let (qs, ks, vs) = (steps(ex, &q4, t)?, steps(ex, &k4, t)?, steps(ex, &v4, t)?);
    // Decay per key head ([.., 1]) or per key feature ([.., d_k]), each step as [B, H_kv, d_k or 1, 1].
    let gs = match &decay {
        Some(d) => {
            let dt = ex.ty(d)?;
            let per = match dt.shape.get(2) {
                Some(&n) if dt.rank() == 3 && n == hkv => 1,
                Some(&n) if dt.rank() == 3 && n == hkv * dk => dk,
                _ => return Err(ex.fail(format!("decay is {dt}: its last axis must be {hkv} or {}", hkv * dk))),
            };
            let d4 = heads(ex, d, hkv)?;
            let e = ex.op("Exp", &[&d4], vec![])?;
            let shape = ex.ints(&[b as i64, hkv as i64, per as i64, 1])?;
            steps(ex, &e, t)?
                .into_iter()
                .map(|g| ex.op("Reshape", &[&g, &shape], vec![]))
                .collect::<Result<Vec<_>, _>>()?
        }
        None => vec![],
    };
    let bs = match &beta {
        Some(be) => {
            let bt = ex.ty(be)?;
            let hb = bt.shape.get(2).copied().filter(|&n| bt.rank() == 3 && (n == hkv || n == 1));
            let Some(hb) = hb else {
                return Err(ex.fail(format!("beta is {bt}: its last axis must be {hkv} or 1")));
            };
            let b4 = heads(ex, be, hb)?;
            steps(ex, &b4, t)?
        }
        None => vec![],
    };
    let state_shape = [b, hkv, dk, dv];
    let (mut state, state_dt) = match &past {
        Some(p) => {
            let pt = ex.ty(p)?;
            if pt.shape != state_shape {
                return Err(ex.fail(format!("past_state is {pt}: it must be [{b}, {hkv}, {dk}, {dv}]")));
            }
            let s = if pt.dt == DatumType::F32 { p.clone() } else { ex.op("Cast", &[p], vec![int("to", 1)])? };
            (s, pt.dt)
        }
        None => (ex.zeros(DatumType::F32, &state_shape)?, qt.dt),
    };
    let scale = if scale == 0.0 { 1.0 / (dk as f64).sqrt() } else { f64::from(scale) };
    let scale = ex.scalar(DatumType::F32, scale)?;
    let column = ex.ints(&[b as i64, hkv as i64, dk as i64, 1])?;
    let group = hq / hkv;
    let mut outs = Vec::with_capacity(t);
    for i in 0..t {
        if gating {
            state = ex.op("Mul", &[&state, &gs[i]], vec![])?;
        }
        let mut vi = vs[i].clone();
        if delta {
            let got = ex.op("MatMul", &[&ks[i], &state], vec![])?;
            let diff = ex.op("Sub", &[&vi, &got], vec![])?;
            vi = ex.op("Mul", &[&bs[i], &diff], vec![])?;
        }
        let kc = ex.op("Reshape", &[&ks[i], &column], vec![])?;
        let outer = ex.op("Mul", &[&kc, &vi], vec![])?;
        state = ex.op("Add", &[&state, &outer], vec![])?;
        let read = if group == 1 {
            state.clone()
        } else {
            let at = ex.ints(&[2])?;
            let s5 = ex.op("Unsqueeze", &[&state, &at], vec![])?;
            let wide = ex.ints(&[b as i64, hkv as i64, group as i64, dk as i64, dv as i64])?;
            let s5 = ex.op("Expand", &[&s5, &wide], vec![])?;
            let to = ex.ints(&[b as i64, hq as i64, dk as i64, dv as i64])?;
            ex.op("Reshape", &[&s5, &to], vec![])?
        };
        let o = ex.op("MatMul", &[&qs[i], &read], vec![])?;
        outs.push(ex.op("Mul", &[&o, &scale], vec![])?);
    }
    let refs: Vec<&str> = outs.iter().map(String::as_str).collect();
    let y = if t == 1 { outs[0].clone() } else { ex.op("Concat", &refs, vec![int("axis", 2)])? };
    let y = ex.op("Transpose", &[&y], vec![ints("perm", vec![0, 2, 1, 3])])?;
    let flat = ex.ints(&[b as i64, t as i64, (hq * dv) as i64])?;
    let y = ex.op("Reshape", &[&y, &flat], vec![])?;
    let back = |ex: &mut Ex<'_, '_>, x: &str, dt: DatumType| -> Result<String, E> {
        if dt == DatumType::F32 {
            return ex.op("Identity", &[x], vec![]);
        }
        ex.op("Cast", &[x], vec![int("to", i64::from(super::tensor::onnx_type(dt) as i32))])
    };
    let y = back(ex, &y, qt.dt)?;
    let present = back(ex, &state, state_dt)?;
    Ok(vec![Some(y), Some(present)])
}
