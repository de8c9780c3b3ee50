//! GELU spelled out in elementwise ops, recognised as one `Gelu` node. Exporters write it in many orders: jax2tf
//! (Magika) as `x · (0.5 · (1 + tanh(0.7978846 · (x + x · (x · 0.044715 x)))))`, PyTorch's tanh approximation as
//! `0.5 x · (1 + tanh(…(x + 0.044715 · x³)))`, its exact GELU as `x · 0.5 · (1 + erf(x / √2))`. Kept apart, the
//! nine to eleven nodes become a chain of as many instructions that the CPU runs a tile at a time (Magika's two:
//! 0.28 and 0.13 ms against onnxruntime's fused 0.04 and 0.02); as one node they are one function. The rules:
//!
//! 1. **The region.** For a multiply `last` and a candidate input `x` (a non-constant input of `last` or of the
//!    nodes that make `last`'s inputs), the region is every node between `x` and `last`: each reads only `x`,
//!    values the region makes, and float constants of one element, and is one of Add, Sub, Mul, Div, Pow, Neg,
//!    Sqrt, Reciprocal, Tanh, Erf. At most [`MAX_NODES`] nodes.
//! 2. **Nothing else reads the parts**: every value the region makes but `last`'s output is read only by the
//!    region's nodes and is no graph output (as `activations.rs`'s rule 2).
//! 3. **It computes GELU.** The region, evaluated in f64 on [`PROBES`] (with `stowage_kir`'s erf), matches GELU's
//!    tanh form (when the region holds a Tanh) or its erf form (when it holds an Erf) within 10⁻⁵ of each value
//!    (10⁻⁶ near zero). The two forms differ by up to 2·10⁻⁴ around ±2, so a region cannot pass for the other;
//!    a constant off by more than about 10⁻⁵ of itself fails.
//! 4. **Same type and shape.** `x` and `last`'s output have the same float type and shape; the new node takes
//!    `last`'s name and its output's name.
//!
//! The rewrite changes rounding (the backends' GELU evaluates the formula in its own order), as onnxruntime's
//! GELU fusions do. Tests: `compiler/tests/passes.rs` (`gelu_*`).

use std::collections::HashMap;

use crate::ir::{Binary, Edit, Graph, NodeId, Op, Unary, ValueId};

/// The most nodes a recognised GELU spans (rule 1).
pub const MAX_NODES: usize = 16;

/// Where the region is evaluated (rule 3): both signs, the knee, and the tails.
pub const PROBES: [f64; 15] = [-5.0, -3.0, -2.0, -1.5, -1.0, -0.5, -0.1, 0.0, 0.1, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0];

/// Rewrites every spelled-out GELU as one node; returns how many.
pub fn run(g: &mut Graph) -> usize {
    let mut count = 0;
    let outputs: Vec<ValueId> = g.outputs().iter().map(|o| o.value).collect();
    let mut edit = Edit::new(g);
    let mut taken: Vec<NodeId> = Vec::new();
    for last in g.order().to_vec() {
        if taken.contains(&last) || !matches!(g.node(last).op, Op::Binary(Binary::Mul)) {
            continue;
        }
        let found = candidates(g, last).into_iter().find_map(|x| gelu(g, &edit, &outputs, &taken, last, x));
        let Some((x, tanh, parts)) = found else { continue };
        let Some(Some(y)) = g.node(last).outputs.first().copied() else { continue };
        let (name, out_name, ty) = (g.node(last).name.clone(), g.value(y).name.clone(), g.ty(y).clone());
        let node = edit.insert_before(
            g,
            last,
            name,
            Op::Unary(Unary::Gelu { tanh }),
            vec![Some(x)],
            vec![Some((out_name, ty))],
        );
        let Some(Some(new_y)) = g.node(node).outputs.first().copied() else { continue };
        edit.replace_uses(g, y, new_y);
        for n in parts {
            edit.remove(g, n);
            taken.push(n);
        }
        count += 1;
    }
    edit.finish(g);
    count
}

/// Rule 1's candidates for `x`: the non-constant inputs of `last`, then of the nodes making them.
fn candidates(g: &Graph, last: NodeId) -> Vec<ValueId> {
    let inputs = |n: NodeId| -> Vec<ValueId> {
        g.node(n).inputs.iter().flatten().copied().filter(|&v| g.const_value(v).is_none()).collect()
    };
    let mut found = inputs(last);
    for v in found.clone() {
        if let Some(p) = g.producer(v) {
            found.extend(inputs(p).into_iter().filter(|w| !found.contains(w)).collect::<Vec<_>>());
        }
    }
    found
}

/// The region from `x` to `last` when it computes GELU (rules 1–4): `x`, whether it is the tanh form, and the
/// region's nodes, `last` included.
/// Nodes already rewritten (`taken`) belong to no other region.
fn gelu(
    g: &Graph,
    edit: &Edit,
    outputs: &[ValueId],
    taken: &[NodeId],
    last: NodeId,
    x: ValueId,
) -> Option<(ValueId, bool, Vec<NodeId>)> {
    // Rule 1: the nodes between x and last, found from last.
    let mut parts: Vec<NodeId> = Vec::new();
    let mut stack = vec![last];
    while let Some(n) = stack.pop() {
        if parts.contains(&n) {
            continue;
        }
        if !allowed(&g.node(n).op) || parts.len() == MAX_NODES || taken.contains(&n) {
            return None;
        }
        parts.push(n);
        for &v in g.node(n).inputs.iter().flatten() {
            if v == x || scalar(g, v).is_some() {
                continue;
            }
            stack.push(g.producer(v)?);
        }
    }
    // Rule 2: the parts' values are read by the region alone.
    for &n in &parts {
        let v = g.node(n).outputs.first().copied().flatten()?;
        let reads = parts.iter().flat_map(|&m| g.node(m).inputs.iter().flatten()).filter(|&&w| w == v).count();
        if n != last && (edit.uses(v) as usize != reads || outputs.contains(&v)) {
            return None;
        }
    }
    // Rule 4.
    let y = g.node(last).outputs.first().copied().flatten()?;
    if !g.ty(x).dt.is_float() || g.ty(x) != g.ty(y) {
        return None;
    }
    // Rule 3.
    let has = |u: Unary| parts.iter().any(|&n| matches!(&g.node(n).op, Op::Unary(v) if *v == u));
    let tanh = match (has(Unary::Tanh), has(Unary::Erf)) {
        (true, false) => true,
        (false, true) => false,
        _ => return None,
    };
    let order: Vec<NodeId> = g.order().iter().copied().filter(|n| parts.contains(n)).collect();
    for p in PROBES {
        let got = evaluate(g, &order, x, p)?;
        let want = reference(p, tanh);
        if (got - want).abs() > 1e-5 * want.abs().max(0.1) {
            return None;
        }
    }
    Some((x, tanh, parts))
}

/// The ops a region may hold (rule 1).
fn allowed(op: &Op) -> bool {
    use Binary as B;
    use Unary as U;
    matches!(
        op,
        Op::Binary(B::Add | B::Sub | B::Mul | B::Div | B::Pow)
            | Op::Unary(U::Neg | U::Sqrt | U::Reciprocal | U::Tanh | U::Erf)
    )
}

/// `last`'s output (the last node of `order`) at `x = p`, in f64 (rule 3).
fn evaluate(g: &Graph, order: &[NodeId], x: ValueId, p: f64) -> Option<f64> {
    let mut values: HashMap<ValueId, f64> = HashMap::from([(x, p)]);
    let mut last = None;
    for &n in order {
        let node = g.node(n);
        let arg = |i: usize| -> Option<f64> {
            let v = node.inputs.get(i).copied().flatten()?;
            values.get(&v).copied().or_else(|| scalar(g, v))
        };
        let r = match &node.op {
            Op::Binary(b) => {
                let (a, c) = (arg(0)?, arg(1)?);
                match b {
                    Binary::Add => a + c,
                    Binary::Sub => a - c,
                    Binary::Mul => a * c,
                    Binary::Div => a / c,
                    Binary::Pow => a.powf(c),
                    _ => return None,
                }
            }
            Op::Unary(u) => {
                let a = arg(0)?;
                match u {
                    Unary::Neg => -a,
                    Unary::Sqrt => a.sqrt(),
                    Unary::Reciprocal => 1.0 / a,
                    Unary::Tanh => a.tanh(),
                    Unary::Erf => f64::from(stowage_kir::func::erf_f32(a as f32)),
                    _ => return None,
                }
            }
            _ => return None,
        };
        values.insert(node.outputs.first().copied().flatten()?, r);
        last = Some(r);
    }
    last
}

/// GELU at `x`: its tanh approximation, or its erf form (with the erf rule 3 evaluates regions with).
fn reference(x: f64, tanh: bool) -> f64 {
    if tanh {
        let c = (2.0 / std::f64::consts::PI).sqrt();
        0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
    } else {
        0.5 * x * (1.0 + f64::from(stowage_kir::func::erf_f32((x * std::f64::consts::FRAC_1_SQRT_2) as f32)))
    }
}

/// The value of a float constant of one element.
fn scalar(g: &Graph, v: ValueId) -> Option<f64> {
    let t = g.const_value(v)?;
    if !t.dt().is_float() || t.len() != 1 {
        return None;
    }
    crate::consts::to_f64s(t).ok().map(|s| s[0])
}
