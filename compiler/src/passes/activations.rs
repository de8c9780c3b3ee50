//! Activations spelled out in several ops, recognised as the one op they compute, so that a backend sees (and a
//! convolution's epilogue takes) one `HardSwish` where an exporter wrote four nodes. Paddle2ONNX writes every
//! HardSwish of PP-OCR and PicoDet as `x · Clip(x + 3, 0, 6) / 6`; older PyTorch exports write `x ·
//! HardSigmoid(x)`. The rules:
//!
//! 1. **Exact forms only.** `Div(Mul(x, Clip(Add(x, 3), 0, 6)), 6)`, the same with `Mul(…, 1/6)` in place of the
//!    division, and `Mul(x, HardSigmoid(x))` with `α = 1/6`, `β = 1/2`; the operands of Add and Mul in either
//!    order; every constant a float scalar (one element) of that value (1/6 within one f32 step, 2⁻²⁶).
//! 2. **Nothing else reads the parts.** Every value between `x` and the last node has that chain's next node as
//!    its only reader and is no graph output; `x` itself may have other readers.
//! 3. **Same type and shape.** `x` and the last node's output have the same float type and shape; the new node
//!    takes the last node's name and its output's name, so outputs and later nodes read it unchanged.
//!
//! The rewrite changes the rounding by at most a few ulps (`x/6 + 1/2` against `(x + 3)/6`), as onnxruntime's own
//! fusion of the same pattern does. Tests: `compiler/tests/passes.rs` (`hard_swish_*`). The pass then recognises
//! GELU (`gelu.rs`, its own rules).

use crate::ir::{Binary, Edit, Graph, Op, Unary, ValueId};

/// Rewrites every spelled-out HardSwish as one node; returns how many.
pub fn run(g: &mut Graph) -> usize {
    let mut count = 0;
    let outputs: Vec<ValueId> = g.outputs().iter().map(|o| o.value).collect();
    let mut edit = Edit::new(g);
    for last in g.order().to_vec() {
        let Some((x, parts)) = hard_swish(g, &edit, &outputs, last) else { continue };
        let Some(Some(y)) = g.node(last).outputs.first().copied() else { continue };
        let (name, out_name, ty) = (g.node(last).name.clone(), g.value(y).name.clone(), g.ty(y).clone());
        let node =
            edit.insert_before(g, last, name, Op::Unary(Unary::HardSwish), vec![Some(x)], vec![Some((out_name, ty))]);
        let Some(Some(new_y)) = g.node(node).outputs.first().copied() else { continue };
        edit.replace_uses(g, y, new_y);
        edit.remove(g, last);
        for n in parts {
            edit.remove(g, n);
        }
        count += 1;
    }
    edit.finish(g);
    count + super::gelu::run(g)
}

/// The input of the HardSwish that `last` ends (rule 1), with the nodes before `last` that make it up.
fn hard_swish(
    g: &Graph,
    edit: &Edit,
    outputs: &[ValueId],
    last: crate::ir::NodeId,
) -> Option<(ValueId, Vec<crate::ir::NodeId>)> {
    let node = g.node(last);
    let y = node.outputs.first().copied().flatten()?;
    let (a, b) = (node.inputs.first().copied().flatten()?, node.inputs.get(1).copied().flatten()?);
    // A value only the chain reads (rule 2), and the node that makes it.
    let inner = |v: ValueId, op: fn(&Op) -> bool| -> Option<crate::ir::NodeId> {
        let p = g.producer(v)?;
        (edit.uses(v) == 1 && !outputs.contains(&v) && op(&g.node(p).op)).then_some(p)
    };
    let is_mul = |op: &Op| matches!(op, Op::Binary(Binary::Mul));
    let (x, mut parts) = match &node.op {
        // Div(Mul(x, Clip(…)), 6)
        Op::Binary(Binary::Div) if scalar(g, b) == Some(6.0) => {
            let m = inner(a, is_mul)?;
            let (x, clip_parts) = times_clip(g, &inner, m)?;
            (x, [vec![m], clip_parts].concat())
        }
        Op::Binary(Binary::Mul) => {
            // Mul(Mul(x, Clip(…)), 1/6), either order.
            let sixth = [(a, b), (b, a)].into_iter().find(|&(_, c)| scalar(g, c).is_some_and(is_sixth));
            if let Some((m, _)) = sixth {
                let m = inner(m, is_mul)?;
                let (x, clip_parts) = times_clip(g, &inner, m)?;
                (x, [vec![m], clip_parts].concat())
            } else {
                // Mul(x, HardSigmoid(x)), either order.
                let is_hsig = |op: &Op| matches!(op, Op::Unary(Unary::HardSigmoid { alpha, beta }) if is_sixth(f64::from(*alpha)) && *beta == 0.5);
                [(a, b), (b, a)].into_iter().find_map(|(x, h)| {
                    let hs = inner(h, is_hsig)?;
                    (g.node(hs).inputs.first() == Some(&Some(x))).then(|| (x, vec![hs]))
                })?
            }
        }
        _ => return None,
    };
    // Rule 3.
    let (tx, ty) = (g.ty(x), g.ty(y));
    if !tx.dt.is_float() || tx != ty {
        return None;
    }
    parts.dedup();
    Some((x, parts))
}

/// For `m = Mul(x, Clip(Add(x, 3), 0, 6))` (operands in either order): `x`, and the Clip and Add nodes.
fn times_clip(
    g: &Graph,
    inner: &dyn Fn(ValueId, fn(&Op) -> bool) -> Option<crate::ir::NodeId>,
    m: crate::ir::NodeId,
) -> Option<(ValueId, Vec<crate::ir::NodeId>)> {
    let mul = g.node(m);
    let (p, q) = (mul.inputs.first().copied().flatten()?, mul.inputs.get(1).copied().flatten()?);
    [(p, q), (q, p)].into_iter().find_map(|(x, c)| {
        let clip = inner(c, |op| matches!(op, Op::Clip))?;
        let cn = g.node(clip);
        let bounds = (cn.inputs.get(1).copied().flatten(), cn.inputs.get(2).copied().flatten());
        let (Some(lo), Some(hi)) = bounds else { return None };
        if scalar(g, lo) != Some(0.0) || scalar(g, hi) != Some(6.0) {
            return None;
        }
        let add = inner(cn.inputs.first().copied().flatten()?, |op| matches!(op, Op::Binary(Binary::Add)))?;
        let an = g.node(add);
        let (u, v) = (an.inputs.first().copied().flatten()?, an.inputs.get(1).copied().flatten()?);
        let plus_three = (u == x && scalar(g, v) == Some(3.0)) || (v == x && scalar(g, u) == Some(3.0));
        plus_three.then(|| (x, vec![clip, add]))
    })
}

/// The value of a constant float scalar (one element; a rank that would broadcast `x` to another shape fails
/// rule 3).
fn scalar(g: &Graph, v: ValueId) -> Option<f64> {
    let t = g.const_value(v)?;
    if !t.dt().is_float() || t.len() != 1 {
        return None;
    }
    crate::consts::to_f64s(t).ok().map(|s| s[0])
}

/// 1/6 as an f32 or f64 constant holds it: within one f32 step there (2⁻²⁶ ≈ 1.5e-8).
fn is_sixth(v: f64) -> bool {
    (v - 1.0 / 6.0).abs() <= 1.5e-8
}
