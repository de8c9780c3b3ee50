//! `FlexAttention` of the `ai.onnx.preview` domain (version 1), imported as its function body ([`super::expand`])
//! with its modifier subgraphs inlined. The rules:
//! 1. **Shapes.** `Q` is `[B, Hq, L, D]`, `K` `[B, Hkv, S, D]`, `V` `[B, Hkv, S, Dv]`; `Hq` a multiple of `Hkv`, each
//!    K/V head serving a contiguous group of query heads (a `Gather` of heads `h / (Hq / Hkv)`). Anything else is an
//!    error naming the input.
//! 2. **Scale** (`scale`, else `1/√D`) is applied as its square root to `Q` and to `K` before their product, in
//!    their type, as the function body does; the scores are then cast to `softmax_precision` (f64 for f64
//!    inputs, else f32, unless the attribute says otherwise).
//! 3. **Modifiers.** `score_mod` runs on the scores before the softmax over the last axis, `prob_mod` on the
//!    probabilities after it, each imported once with its input bound to the value it modifies (as a `Loop` body
//!    is, `unroll.rs`); a subgraph without exactly one input and one output is an error naming the attribute.
//! 4. The probabilities are cast back to `V`'s type for the product with `V`.

use stowage_runtime::DatumType;

use super::expand::{int, ints, Ex};
use crate::error::ImportErrorKind as E;

/// The domain.
pub const PREVIEW_DOMAIN: &str = "ai.onnx.preview";

/// The op types of the domain this file expands.
pub const PREVIEW_OPS: &[&str] = &["FlexAttention"];

fn cast(ex: &mut Ex<'_, '_>, v: &str, to: DatumType) -> Result<String, E> {
    if ex.ty(v)?.dt == to {
        return Ok(v.to_string());
    }
    ex.op("Cast", &[v], vec![int("to", i64::from(super::tensor::onnx_type(to) as i32))])
}

/// `v` through the modifier subgraph `attr`, if the node has one (rule 3).
fn modified(ex: &mut Ex<'_, '_>, attr: &str, v: String, it: usize) -> Result<String, E> {
    let Some(g) = ex.node.attribute.iter().find(|a| a.name() == attr).and_then(|a| a.g.as_ref()) else {
        return Ok(v);
    };
    if g.input.len() != 1 || g.output.len() != 1 {
        return Err(ex.attr_fail(
            attr,
            format!(
                "has {} inputs and {} outputs: a modifier takes one tensor and gives one",
                g.input.len(),
                g.output.len()
            ),
        ));
    }
    let inits = super::unroll::initializers(ex, g)?;
    let out = super::unroll::iteration(ex, g, it, std::slice::from_ref(&v), &inits)?;
    let (before, after) = (ex.ty(&v)?, ex.ty(&out[0])?);
    if before != after {
        return Err(ex.attr_fail(attr, format!("turns {before} into {after}: a modifier keeps shape and type")));
    }
    Ok(out[0].clone())
}

/// Expands `FlexAttention`; its output.
pub(super) fn expand(ex: &mut Ex<'_, '_>) -> Result<Vec<Option<String>>, E> {
    let (q, k, v) = (ex.input(0)?, ex.input(1)?, ex.input(2)?);
    let (qt, kt, vt) = (ex.ty(&q)?, ex.ty(&k)?, ex.ty(&v)?);
    if qt.rank() != 4 || kt.rank() != 4 || vt.rank() != 4 {
        return Err(ex.fail(format!("Q is {qt}, K is {kt}, V is {vt}: all must have rank 4")));
    }
    if !qt.dt.is_float() || kt.dt != qt.dt || vt.dt != qt.dt {
        return Err(ex.fail(format!("Q is {qt}, K is {kt}, V is {vt}: they must be floats of one type")));
    }
    let (hq, hkv, d) = (qt.shape[1], kt.shape[1], qt.shape[3]);
    if kt.shape[3] != d || kt.shape[0] != qt.shape[0] || vt.shape[..3] != kt.shape[..3] {
        return Err(ex.fail(format!("K is {kt} and V is {vt}: they must fit Q {qt} (batch, heads, head size)")));
    }
    if hkv == 0 || hq % hkv != 0 {
        return Err(ex.fail(format!("Q has {hq} heads and K {hkv}: Q's must be a multiple of K's")));
    }
    let (k, v) = if hq == hkv {
        (k, v)
    } else {
        let heads: Vec<i64> = (0..hq).map(|h| (h / (hq / hkv)) as i64).collect();
        let idx = ex.ints(&heads)?;
        (ex.op("Gather", &[&k, &idx], vec![int("axis", 1)])?, ex.op("Gather", &[&v, &idx], vec![int("axis", 1)])?)
    };
    let scale = match ex.attrs().float_or("scale", f32::NAN).map_err(|e| ex.attr_err(e))? {
        s if s.is_nan() => 1.0 / (d.max(1) as f64).sqrt(),
        s => f64::from(s),
    };
    let root = ex.scalar(qt.dt, scale.sqrt())?;
    let qs = ex.op("Mul", &[&q, &root], vec![])?;
    let ks = ex.op("Mul", &[&k, &root], vec![])?;
    let kt_ = ex.op("Transpose", &[&ks], vec![ints("perm", vec![0, 1, 3, 2])])?;
    let scores = ex.op("MatMul", &[&qs, &kt_], vec![])?;
    let precision = match ex.attrs().int("softmax_precision").map_err(|e| ex.attr_err(e))? {
        Some(code) => super::tensor::datum_type(code as i32)
            .ok()
            .filter(|d| d.is_float())
            .ok_or_else(|| ex.attr_fail("softmax_precision", format!("is {code}: it must be a float type")))?,
        None if qt.dt == DatumType::F64 => DatumType::F64,
        None => DatumType::F32,
    };
    let scores = cast(ex, &scores, precision)?;
    let scores = modified(ex, "score_mod", scores, 0)?;
    let probs = ex.op("Softmax", &[&scores], vec![int("axis", -1)])?;
    let probs = modified(ex, "prob_mod", probs, 1)?;
    let probs = cast(ex, &probs, vt.dt)?;
    Ok(vec![Some(ex.op("MatMul", &[&probs, &v], vec![])?)])
}
