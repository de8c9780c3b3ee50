//! Layer normalisation spelled out in reductions and elementwise ops, recognised as one `LayerNormalization` node.
//! Exporters write it so below opset 17, where ONNX has no such op: PyTorch's `nn.LayerNorm` at opset 13 (openWakeWord's
//! verifier models), paddle2onnx at opset 12 (PaddleOCR's recogniser, five of them), BERTs exported at opset 11 to 14.
//! Kept apart, each is two reductions and up to seven elementwise steps over the same rows, each a pass over memory
//! and a step of the executor; as one node it is one pass per row (onnxruntime's `LayerNormFusion` does the same).
//! The rules:
//!
//! 1. **The form.** `m = ReduceMean(x)`, `d = Sub(x, m)`, `q = Pow(d, 2)` or `Mul(d, d)`, `v = ReduceMean(q)`,
//!    `e = Add(v, ε)` (either order), `s = Sqrt(e)`, `n = Div(d, s)`; then, where they follow, `Mul(n, γ)` and
//!    after it `Add(·, β)` (either order). Both reductions keep their axes and reduce the same ones, the last `k` axes of
//!    `x` (`axis = rank − k`); `ε` is a float constant of one element.
//! 2. **Nothing else reads the parts**: `m`, `d`, `q`, `v`, `e`, `s` (and `n` and the product where a scale or a
//!    bias is taken) are read only by the form's own nodes and are no graph output (as `activations.rs`'s rule 2).
//! 3. **Scale and bias are per element of a row.** `γ` and `β` are constants of `x`'s type that vary only along the
//!    normalised axes (every other axis of theirs is 1), so they are the node's `scale` and `bias` reshaped to
//!    `x.shape[axis..]`; a constant that varies along another axis is not taken (the form ends before it), and a
//!    form with no `Mul` gets a scale of ones.
//! 4. **f32, same shape.** `x` is f32 (the type every backend's `LayerNormalization` takes), and `d`, `n` and the
//!    last node's output have `x`'s type and shape; the new node takes the last node's name and its output's name.
//!
//! The rewrite changes rounding: the backends compute the statistics in higher precision and multiply by
//! `1 / √(v + ε)` where the form divides (onnxruntime's fusion does the same). Tests: `compiler/tests/passes.rs`
//! (`layer_norm_*`).

use std::collections::HashMap;

use stowage_runtime::{DatumType, Tensor};

use crate::ir::{Binary, Edit, Graph, NodeId, Op, Reduce, Unary, ValueId};

/// Rewrites every spelled-out layer normalisation as one node; returns how many.
pub fn run(g: &mut Graph) -> usize {
    let mut readers: HashMap<ValueId, Vec<NodeId>> = HashMap::new();
    for &n in g.order() {
        for &v in g.node(n).inputs.iter().flatten() {
            readers.entry(v).or_default().push(n);
        }
    }
    let outputs: Vec<ValueId> = g.outputs().iter().map(|o| o.value).collect();
    let mut count = 0;
    let mut edit = Edit::new(g);
    let mut taken: Vec<NodeId> = Vec::new();
    for div in g.order().to_vec() {
        if taken.contains(&div) || !matches!(g.node(div).op, Op::Binary(Binary::Div)) {
            continue;
        }
        let Some(found) = form(g, &edit, &outputs, div) else { continue };
        if found.parts.iter().any(|p| taken.contains(p)) {
            continue;
        }
        let Form { x, axis, epsilon, mut parts } = found;
        let shape = g.ty(x).shape.clone();
        let row = &shape[axis..];
        // The scale and bias that follow (rules 2 and 3).
        let only_reader = |v: ValueId, op: Binary| -> Option<NodeId> {
            match readers.get(&v).map(Vec::as_slice) {
                Some([r]) if !outputs.contains(&v) && matches!(g.node(*r).op, Op::Binary(b) if b == op) => Some(*r),
                _ => None,
            }
        };
        let mut last = div;
        let mut affine: [Option<Tensor<'static>>; 2] = [None, None];
        for (k, op) in [Binary::Mul, Binary::Add].into_iter().enumerate() {
            let Some(v) = out(g, last) else { break };
            let Some(next) = only_reader(v, op) else { break };
            let Some(t) = per_row(g, next, v, row, &shape) else { break };
            affine[k] = Some(t);
            parts.push(next);
            last = next;
        }
        let [scale, bias] = affine;
        let Some(y) = out(g, last) else { continue };
        let Ok(scale) = scale.map_or_else(|| Tensor::from_slice(row, &vec![1.0f32; row.iter().product()]), Ok) else {
            continue;
        };
        let name = g.node(last).name.clone();
        let mut inputs = vec![Some(x), Some(g.add_const(format!("{name}::scale"), scale))];
        if let Some(b) = bias {
            inputs.push(Some(g.add_const(format!("{name}::bias"), b)));
        }
        let (out_name, ty) = (g.value(y).name.clone(), g.ty(y).clone());
        let op = Op::LayerNorm { axis: axis as i64, epsilon, stash: DatumType::F32 };
        let node = edit.insert_before(g, last, name, op, inputs, vec![Some((out_name, ty))]);
        let Some(Some(new_y)) = g.node(node).outputs.first().copied() else { continue };
        edit.replace_uses(g, y, new_y);
        for &n in &parts {
            edit.remove(g, n);
        }
        taken.extend(parts);
        count += 1;
    }
    edit.finish(g);
    count
}

/// A form found back from its `Div` (rule 1): its input, first normalised axis, ε, and its nodes.
struct Form {
    x: ValueId,
    axis: usize,
    epsilon: f32,
    parts: Vec<NodeId>,
}

/// The one output of node `n`.
fn out(g: &Graph, n: NodeId) -> Option<ValueId> {
    g.node(n).outputs.first().copied().flatten()
}

/// The form that ends at `div` (rules 1, 2 and 4).
fn form(g: &Graph, edit: &Edit, outputs: &[ValueId], div: NodeId) -> Option<Form> {
    let node = |v: ValueId| g.producer(v).map(|n| (n, g.node(n)));
    let inputs = |n: NodeId| -> Option<(ValueId, ValueId)> {
        match g.node(n).inputs[..] {
            [Some(a), Some(b)] => Some((a, b)),
            _ => None,
        }
    };
    let (d, s) = inputs(div)?;
    let (sqrt, sqrt_node) = node(s)?;
    if !matches!(sqrt_node.op, Op::Unary(Unary::Sqrt)) {
        return None;
    }
    let e = sqrt_node.inputs.first().copied().flatten()?;
    let (add, add_node) = node(e)?;
    if !matches!(add_node.op, Op::Binary(Binary::Add)) {
        return None;
    }
    let (a, b) = inputs(add)?;
    let (v, epsilon) = match (scalar(g, a), scalar(g, b)) {
        (None, Some(eps)) => (a, eps),
        (Some(eps), None) => (b, eps),
        _ => return None,
    };
    let (var, _) = node(v)?;
    let (q, axes) = mean_of(g, var)?;
    let (square, square_node) = node(q)?;
    let squares_d = match (&square_node.op, inputs(square)?) {
        (Op::Binary(Binary::Mul), (a, b)) => a == d && b == d,
        (Op::Binary(Binary::Pow), (a, two)) => a == d && scalar(g, two) == Some(2.0),
        _ => false,
    };
    if !squares_d {
        return None;
    }
    let (sub, sub_node) = node(d)?;
    if !matches!(sub_node.op, Op::Binary(Binary::Sub)) {
        return None;
    }
    let (x, m) = inputs(sub)?;
    let (mean, _) = node(m)?;
    let (x_again, axes_again) = mean_of(g, mean)?;
    let shape = &g.ty(x).shape;
    let axis = shape.len().checked_sub(axes.len())?;
    if x_again != x || axes != axes_again || axes != (axis..shape.len()).collect::<Vec<_>>() {
        return None;
    }
    // Rule 4.
    let ty = g.ty(x);
    let same = |v: ValueId| g.ty(v) == ty;
    if ty.dt != DatumType::F32 || !same(d) || !out(g, div).is_some_and(same) {
        return None;
    }
    // Rule 2: each part's value is read only by the form (d by the square, once or twice, and by the Div).
    let parts = vec![mean, sub, square, var, add, sqrt, div];
    for &n in &parts[..parts.len() - 1] {
        let v = out(g, n)?;
        let reads = parts.iter().flat_map(|&p| g.node(p).inputs.iter().flatten()).filter(|&&w| w == v).count();
        if edit.uses(v) as usize != reads || outputs.contains(&v) {
            return None;
        }
    }
    Some(Form { x, axis, epsilon: epsilon as f32, parts })
}

/// For a `ReduceMean` node that keeps its axes: its input and its axes, made non-negative and sorted.
fn mean_of(g: &Graph, n: NodeId) -> Option<(ValueId, Vec<usize>)> {
    let node = g.node(n);
    if !matches!(node.op, Op::Reduce { kind: Reduce::Mean, keepdims: true, .. }) {
        return None;
    }
    let x = node.inputs.first().copied().flatten()?;
    let axes = g.const_value(node.inputs.get(1).copied().flatten()?)?;
    let rank = g.ty(x).rank() as i64;
    let mut axes: Vec<usize> = crate::consts::to_f64s(axes)
        .ok()?
        .iter()
        .map(|&a| {
            let a = a as i64;
            let a = if a < 0 { a + rank } else { a };
            usize::try_from(a).ok().filter(|&a| (a as i64) < rank)
        })
        .collect::<Option<_>>()?;
    axes.sort_unstable();
    axes.dedup();
    // No axes reduce every axis (or none, with `noop_with_empty_axes`): not a layer norm's last axes.
    if axes.is_empty() {
        return None;
    }
    Some((x, axes))
}

/// Rule 3: the constant operand of `next` (which reads `v`) as a tensor of shape `row`, where it is f32, varies only
/// along the row's axes, and `next` keeps `v`'s shape.
fn per_row(g: &Graph, next: NodeId, v: ValueId, row: &[usize], shape: &[usize]) -> Option<Tensor<'static>> {
    let c = match g.node(next).inputs[..] {
        [Some(a), Some(c)] if a == v => c,
        [Some(c), Some(a)] if a == v => c,
        _ => return None,
    };
    let t = g.const_value(c)?;
    let y = out(g, next)?;
    if t.dt() != DatumType::F32 || g.ty(y) != g.ty(v) || t.shape().len() > shape.len() {
        return None;
    }
    // Right-aligned against x: outside the row every axis is 1; along it each is 1 or the row's.
    let lead = shape.len() - row.len();
    let pad = shape.len() - t.shape().len();
    for (i, &dim) in t.shape().iter().enumerate() {
        let at = pad + i;
        let fits = if at < lead { dim == 1 } else { dim == 1 || dim == shape[at] };
        if !fits {
            return None;
        }
    }
    // Broadcast along the row where the constant has 1s (a per-row scalar): the node takes the row's shape.
    let data = t.to_vec::<f32>().ok()?;
    let own: Vec<usize> = (lead..shape.len()).map(|at| if at < pad { 1 } else { t.shape()[at - pad] }).collect();
    let mut strides = vec![0; row.len()];
    let mut stride = 1;
    for j in (0..row.len()).rev() {
        strides[j] = if own[j] == 1 { 0 } else { stride };
        stride *= own[j];
    }
    let full = (0..row.iter().product::<usize>())
        .map(|k| {
            // Element k of the row, mapped into the constant (index 0 along its axes of 1).
            let (mut rem, mut at) = (k, 0);
            for j in (0..row.len()).rev() {
                at += rem % row[j] * strides[j];
                rem /= row[j];
            }
            data.get(at).copied()
        })
        .collect::<Option<Vec<f32>>>()?;
    Tensor::from_slice(row, &full).ok()
}

/// The value of a float constant of one element.
fn scalar(g: &Graph, v: ValueId) -> Option<f64> {
    let t = g.const_value(v)?;
    if !t.dt().is_float() || t.len() != 1 {
        return None;
    }
    crate::consts::to_f64s(t).ok().map(|s| s[0])
}
