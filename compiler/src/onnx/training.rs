//! The `ai.onnx.preview.training` domain (version 1): the optimizers `Adagrad`, `Momentum` (standard and Nesterov)
//! and `Adam`, imported as their update equations ([`super::expand`]), one set of nodes per tensor they update.
//! 1. **Inputs** are the learning rate `R` and the step count `T` (scalars), then `n` tensors `X`, their gradients
//!    `G` and their states (`H` for Adagrad; `V` for Momentum; `V` then `H` for Adam); the outputs are the new `X`,
//!    then the new states, in the same order. An input count that does not split into those groups is an error.
//! 2. **Equations** are the specification's, computed in each tensor's type with `T` cast to it: the gradient is
//!    regularized (`G + norm_coefficient · X`); Adagrad decays the rate by `1 + T · decay_factor`; Momentum scales
//!    the first step's gradient by 1 instead of `beta`; Adam corrects the rate by `√(1 − betaᵀ) / (1 − alphaᵀ)` once
//!    `T > 0` and shrinks the result by `1 − norm_coefficient_post`.

use stowage_runtime::DatumType;

use super::expand::{int, Ex};
use crate::error::ImportErrorKind as E;

/// The domain.
pub const TRAINING_DOMAIN: &str = "ai.onnx.preview.training";

/// The op types of the domain this file expands.
pub const TRAINING_OPS: &[&str] = &["Adagrad", "Adam", "Momentum"];

fn attr(ex: &Ex<'_, '_>, name: &str, default: f32) -> Result<f64, E> {
    Ok(f64::from(ex.attrs().float_or(name, default).map_err(|e| ex.attr_err(e))?))
}

/// Expands the optimizer of `ex`; its outputs.
pub(super) fn expand(ex: &mut Ex<'_, '_>) -> Result<Vec<Option<String>>, E> {
    let op = ex.node.op_type().to_string();
    let states = if op == "Adam" { 2 } else { 1 };
    let count = ex.node.input.len();
    let groups = 2 + states;
    if count < 2 + groups || !(count - 2).is_multiple_of(groups) {
        return Err(ex.fail(format!(
            "has {count} inputs: it takes R, T, then the same number of tensors, gradients and {} states",
            if states == 2 { "V and H" } else { "" }
        )));
    }
    let n = (count - 2) / groups;
    let (r, t) = (ex.input(0)?, ex.input(1)?);
    let mut news = vec![Vec::new(); 1 + states];
    for i in 0..n {
        let x = ex.input(2 + i)?;
        let g = ex.input(2 + n + i)?;
        let s: Vec<String> = (0..states).map(|k| ex.input(2 + (2 + k) * n + i)).collect::<Result<_, _>>()?;
        let xt = ex.ty(&x)?;
        if !xt.dt.is_float() || ex.ty(&g)?.shape != xt.shape {
            return Err(ex.fail(format!("tensor {i} is {xt}: it must be a float tensor of its gradient's shape")));
        }
        let dt = xt.dt;
        let cast = |ex: &mut Ex<'_, '_>, v: &str| -> Result<String, E> {
            if ex.ty(v)?.dt == dt {
                return Ok(v.to_string());
            }
            ex.op("Cast", &[v], vec![int("to", i64::from(super::tensor::onnx_type(dt) as i32))])
        };
        let (rf, tf) = (cast(ex, &r)?, cast(ex, &t)?);
        let norm = ex.scalar(dt, attr(ex, "norm_coefficient", 0.0)?)?;
        let nx = ex.op("Mul", &[&norm, &x], vec![])?;
        let gr = ex.op("Add", &[&nx, &g], vec![])?;
        let updated = match op.as_str() {
            "Adagrad" => adagrad(ex, dt, &x, &gr, &s[0], &rf, &tf)?,
            "Momentum" => momentum(ex, dt, &x, &gr, &s[0], &rf, &t)?,
            _ => adam(ex, dt, &x, &gr, &s[0], &s[1], &rf, &tf, &t)?,
        };
        for (k, v) in updated.into_iter().enumerate() {
            news[k].push(v);
        }
    }
    Ok(news.into_iter().flatten().map(Some).collect())
}

/// `T > 0` as a boolean scalar.
fn started(ex: &mut Ex<'_, '_>, t: &str) -> Result<String, E> {
    let zero = ex.scalar(ex.ty(t)?.dt, 0.0)?;
    ex.op("Greater", &[t, &zero], vec![])
}

fn adagrad(ex: &mut Ex<'_, '_>, dt: DatumType, x: &str, gr: &str, h: &str, r: &str, t: &str) -> Result<Vec<String>, E> {
    let decay = ex.scalar(dt, attr(ex, "decay_factor", 0.0)?)?;
    let one = ex.scalar(dt, 1.0)?;
    let td = ex.op("Mul", &[t, &decay], vec![])?;
    let den = ex.op("Add", &[&one, &td], vec![])?;
    let rate = ex.op("Div", &[r, &den], vec![])?;
    let g2 = ex.op("Mul", &[gr, gr], vec![])?;
    let h_new = ex.op("Add", &[h, &g2], vec![])?;
    let eps = ex.scalar(dt, attr(ex, "epsilon", 1e-6)?)?;
    let sq = ex.op("Sqrt", &[&h_new], vec![])?;
    let ad = ex.op("Add", &[&sq, &eps], vec![])?;
    let step = ex.op("Div", &[gr, &ad], vec![])?;
    let step = ex.op("Mul", &[&rate, &step], vec![])?;
    Ok(vec![ex.op("Sub", &[x, &step], vec![])?, h_new])
}

fn momentum(
    ex: &mut Ex<'_, '_>,
    dt: DatumType,
    x: &str,
    gr: &str,
    v: &str,
    r: &str,
    t: &str,
) -> Result<Vec<String>, E> {
    let (alpha, beta) = (ex.scalar(dt, attr(ex, "alpha", 0.0)?)?, ex.scalar(dt, attr(ex, "beta", 0.0)?)?);
    let nesterov = match ex.attrs().string("mode").map_err(|e| ex.attr_err(e))?.as_deref() {
        Some("standard") => false,
        Some("nesterov") => true,
        other => {
            return Err(ex.attr_fail("mode", format!("must be 'standard' or 'nesterov', found {other:?}")));
        }
    };
    let one = ex.scalar(dt, 1.0)?;
    let on = started(ex, t)?;
    let b = ex.op("Where", &[&on, &beta, &one], vec![])?;
    let av = ex.op("Mul", &[&alpha, v], vec![])?;
    let bg = ex.op("Mul", &[&b, gr], vec![])?;
    let v_new = ex.op("Add", &[&av, &bg], vec![])?;
    let dir = if nesterov {
        let an = ex.op("Mul", &[&alpha, &v_new], vec![])?;
        ex.op("Add", &[gr, &an], vec![])?
    } else {
        v_new.clone()
    };
    let step = ex.op("Mul", &[r, &dir], vec![])?;
    Ok(vec![ex.op("Sub", &[x, &step], vec![])?, v_new])
}

#[allow(clippy::too_many_arguments)]
fn adam(
    ex: &mut Ex<'_, '_>,
    dt: DatumType,
    x: &str,
    gr: &str,
    v: &str,
    h: &str,
    r: &str,
    tf: &str,
    t: &str,
) -> Result<Vec<String>, E> {
    let (a, b) = (attr(ex, "alpha", 0.9)?, attr(ex, "beta", 0.999)?);
    let (alpha, beta) = (ex.scalar(dt, a)?, ex.scalar(dt, b)?);
    let (one_a, one_b) = (ex.scalar(dt, 1.0 - a)?, ex.scalar(dt, 1.0 - b)?);
    let av = ex.op("Mul", &[&alpha, v], vec![])?;
    let ag = ex.op("Mul", &[&one_a, gr], vec![])?;
    let v_new = ex.op("Add", &[&av, &ag], vec![])?;
    let g2 = ex.op("Mul", &[gr, gr], vec![])?;
    let bh = ex.op("Mul", &[&beta, h], vec![])?;
    let bg = ex.op("Mul", &[&one_b, &g2], vec![])?;
    let h_new = ex.op("Add", &[&bh, &bg], vec![])?;
    let eps = ex.scalar(dt, attr(ex, "epsilon", 0.0)?)?;
    let sq = ex.op("Sqrt", &[&h_new], vec![])?;
    let hs = ex.op("Add", &[&sq, &eps], vec![])?;
    // R · √(1 − betaᵀ) / (1 − alphaᵀ) once T > 0.
    let one = ex.scalar(dt, 1.0)?;
    let bt = ex.op("Pow", &[&beta, tf], vec![])?;
    let at = ex.op("Pow", &[&alpha, tf], vec![])?;
    let nb = ex.op("Sub", &[&one, &bt], vec![])?;
    let na = ex.op("Sub", &[&one, &at], vec![])?;
    let sb = ex.op("Sqrt", &[&nb], vec![])?;
    let corr = ex.op("Div", &[&sb, &na], vec![])?;
    let rc = ex.op("Mul", &[r, &corr], vec![])?;
    let on = started(ex, t)?;
    let rate = ex.op("Where", &[&on, &rc, r], vec![])?;
    let ratio = ex.op("Div", &[&v_new, &hs], vec![])?;
    let step = ex.op("Mul", &[&rate, &ratio], vec![])?;
    let x_new = ex.op("Sub", &[x, &step], vec![])?;
    let post = ex.scalar(dt, 1.0 - attr(ex, "norm_coefficient_post", 0.0)?)?;
    let x_new = ex.op("Mul", &[&post, &x_new], vec![])?;
    Ok(vec![x_new, v_new, h_new])
}
