//! BatchNormalization folded into the Conv before it: with `s = scale / sqrt(var + eps)`, the Conv's weights
//! become `W * s` (per output channel) and its bias `(B - mean) * s + beta`. Applies when the Conv's output feeds
//! only the BatchNorm, and weights, bias and the BatchNorm's parameters are constants of a float type.
//!
//! A per-channel scale or shift after a Conv, `Mul(conv, s)` or `Add(conv, t)` with a constant `s` or `t` of one
//! value per output channel (shape `[M, 1, …]`, `[1, M, 1, …]`) or one value in all, is folded the same way: `W·s`
//! and `B·s`, or `B + t` (Paddle2ONNX writes PP-OCR's batch norms so). It applies under the same conditions, and
//! when the Mul or Add gives the Conv's own shape and type.
//!
//! An inference BatchNormalization with constant parameters that cannot be folded (DenseNet's, after a Concat)
//! becomes `x * s + t` with per-channel constants `s` and `t = beta - mean * s` of shape `[C, 1, …]`: two
//! elementwise ops that a backend can fuse with what follows (a ReLU, usually).

use stowage_runtime::{DatumType, Tensor};

use crate::consts;
use crate::ir::{Binary, Edit, Graph, Op};

/// Folds every eligible Conv + BatchNormalization pair, then turns the other constant ones into a scale and shift.
pub fn run(g: &mut Graph) -> usize {
    fold_into_conv(g) + fold_affine_into_conv(g) + decompose(g)
}

/// Folds each `Mul(conv, s)` and `Add(conv, t)` with per-output-channel constants into the Conv before it.
fn fold_affine_into_conv(g: &mut Graph) -> usize {
    let mut folded = 0;
    let mut edit = Edit::new(g);
    for n in g.order().to_vec() {
        let node = g.node(n);
        let scale = match node.op {
            Op::Binary(Binary::Mul) => true,
            Op::Binary(Binary::Add) => false,
            _ => continue,
        };
        let (Some(a), Some(b), Some(Some(y))) = (node.inputs[0], node.inputs[1], node.outputs.first().copied()) else {
            continue;
        };
        // The Conv's output (read by this node alone) and the per-channel constant, in either order.
        let pick = [(a, b), (b, a)].into_iter().find_map(|(x, c)| {
            let conv = g.producer(x)?;
            let ok = matches!(g.node(conv).op, Op::Conv(_)) && edit.uses(x) == 1 && g.ty(x) == g.ty(y);
            let per = per_channel(g, c, g.ty(x).rank(), *g.ty(x).shape.get(1)?)?;
            ok.then_some((x, conv, per))
        });
        let Some((x, conv, per)) = pick else { continue };
        let cn = g.node(conv);
        let Some(w) = cn.inputs[1].and_then(|v| g.const_value(v)) else { continue };
        let m = per.len();
        let bias = match cn.inputs.get(2).copied().flatten() {
            Some(bv) => match g.const_value(bv).and_then(|t| consts::to_f64s(t).ok()) {
                Some(bias) => bias,
                None => continue,
            },
            None => vec![0.0; m],
        };
        if !w.dt().is_float() || w.shape().first() != Some(&m) || bias.len() != m {
            continue;
        }
        let (new_w, new_b): (Option<Tensor<'static>>, Vec<f64>) = if scale {
            let Some(w2) = scaled(w, &per) else { continue };
            (Some(w2), bias.iter().zip(&per).map(|(b, s)| b * s).collect())
        } else {
            (None, bias.iter().zip(&per).map(|(b, t)| b + t).collect())
        };
        let Ok(new_b) = consts::from_f64s(w.dt(), &[m], &new_b) else { continue };
        let name = cn.name.clone();
        let mut inputs = cn.inputs.clone();
        inputs.truncate(2);
        if let Some(w2) = new_w {
            inputs[1] = Some(g.add_const(format!("{name}.weight_scaled"), w2));
        }
        inputs.push(Some(g.add_const(format!("{name}.bias_{}", if scale { "scaled" } else { "shifted" }), new_b)));
        edit.set_inputs(g, conv, inputs);
        edit.replace_uses(g, y, x);
        edit.remove(g, n);
        folded += 1;
    }
    edit.finish(g);
    folded
}

/// The `m` values of a float constant `c` that gives one value per channel (axis 1) of a rank-`rank` output: one
/// value in all, or `m` along the channel axis and 1 on every other (shapes `[M, 1, …]` right-aligned).
fn per_channel(g: &Graph, c: crate::ir::ValueId, rank: usize, m: usize) -> Option<Vec<f64>> {
    let t = g.const_value(c)?;
    if !t.dt().is_float() {
        return None;
    }
    let values = consts::to_f64s(t).ok()?;
    if values.len() == 1 {
        return Some(vec![values[0]; m]);
    }
    let shape = t.shape();
    if shape.len() > rank || shape.len() + 1 < rank || values.len() != m {
        return None;
    }
    let channel_axis = 1 + shape.len() - rank;
    let fits = shape.iter().enumerate().all(|(j, &d)| d == if j == channel_axis { m } else { 1 });
    fits.then_some(values)
}

/// `w` (first axis the output channels) times `s` per output channel, rounded once from f64 (for f32, in one pass
/// and without an f64 copy of the weights).
fn scaled(w: &Tensor<'static>, s: &[f64]) -> Option<Tensor<'static>> {
    let per = w.len() / s.len().max(1);
    if let (DatumType::F32, Ok(src)) = (w.dt(), w.as_slice::<f32>()) {
        if per * s.len() != src.len() {
            return None;
        }
        // Written in place into the new tensor: no growing `Vec`, no copy after (ResNet-50's 25 M weights took
        // 90 ms through an iterator of unknown length).
        let mut out = Tensor::zeros(DatumType::F32, w.shape()).ok()?;
        let dst = out.as_slice_mut::<f32>().ok()?;
        for ((d, row), &k) in dst.chunks_mut(per.max(1)).zip(src.chunks(per.max(1))).zip(s) {
            for (o, &x) in d.iter_mut().zip(row) {
                *o = (f64::from(x) * k) as f32;
            }
        }
        return Some(out);
    }
    let mut wv = consts::to_f64s(w).ok()?;
    for (i, x) in wv.iter_mut().enumerate() {
        *x *= s[i / per.max(1)];
    }
    consts::from_f64s(w.dt(), w.shape(), &wv).ok()
}

fn decompose(g: &mut Graph) -> usize {
    let mut count = 0;
    let mut edit = Edit::new(g);
    for bn in g.order().to_vec() {
        let node = g.node(bn);
        let Op::BatchNorm { epsilon, training: false, .. } = node.op else { continue };
        let (Some(x), Some(Some(y))) = (node.inputs[0], node.outputs.first().copied()) else { continue };
        let params: Option<Vec<Vec<f64>>> = node.inputs[1..5]
            .iter()
            .map(|v| v.and_then(|v| g.const_value(v)).and_then(|t| consts::to_f64s(t).ok()))
            .collect();
        let Some(p) = params else { continue };
        let ty = g.ty(x).clone();
        if !ty.dt.is_float() || ty.rank() < 2 {
            continue;
        }
        let c = ty.shape[1];
        let s: Vec<f64> = (0..c).map(|i| p[0][i] / (p[3][i] + f64::from(epsilon)).sqrt()).collect();
        let t: Vec<f64> = (0..c).map(|i| p[1][i] - p[2][i] * s[i]).collect();
        let mut pshape = vec![c];
        pshape.resize(ty.rank() - 1, 1);
        let (Ok(st), Ok(tt)) = (consts::from_f64s(ty.dt, &pshape, &s), consts::from_f64s(ty.dt, &pshape, &t)) else {
            continue;
        };
        let name = node.name.clone();
        let out_name = g.value(y).name.clone();
        let sv = g.add_const(format!("{name}.scale"), st);
        let tv = g.add_const(format!("{name}.shift"), tt);
        let mul = edit.insert_before(
            g,
            bn,
            format!("{name}.mul"),
            Op::Binary(Binary::Mul),
            vec![Some(x), Some(sv)],
            vec![Some((format!("{out_name}.scaled"), ty.clone()))],
        );
        let Some(Some(scaled)) = g.node(mul).outputs.first().copied() else { continue };
        let add = edit.insert_before(
            g,
            bn,
            name,
            Op::Binary(Binary::Add),
            vec![Some(scaled), Some(tv)],
            vec![Some((out_name, ty))],
        );
        let Some(Some(shifted)) = g.node(add).outputs.first().copied() else { continue };
        edit.replace_uses(g, y, shifted);
        edit.remove(g, bn);
        count += 1;
    }
    edit.finish(g);
    count
}

fn fold_into_conv(g: &mut Graph) -> usize {
    let mut folded = 0;
    // Decisions read the use counts from before the pass, as they always have; `edit` keeps the order changes.
    let uses = g.use_counts();
    let mut edit = Edit::new(g);
    for bn in g.order().to_vec() {
        let node = g.node(bn);
        let Op::BatchNorm { epsilon, training: false, .. } = node.op else { continue };
        let (Some(x), Some(Some(y))) = (node.inputs[0], node.outputs.first().copied()) else { continue };
        let Some(conv) = g.producer(x) else { continue };
        if uses[x] != 1 || !matches!(g.node(conv).op, Op::Conv(_)) {
            continue;
        }
        let params: Option<Vec<Vec<f64>>> = node.inputs[1..5]
            .iter()
            .map(|v| v.and_then(|v| g.const_value(v)).and_then(|t| consts::to_f64s(t).ok()))
            .collect();
        let Some(params) = params else { continue };
        let cn = g.node(conv);
        let Some(w) = cn.inputs[1].and_then(|v| g.const_value(v)) else { continue };
        let bias = match cn.inputs.get(2).copied().flatten() {
            Some(b) => match g.const_value(b).and_then(|t| consts::to_f64s(t).ok()) {
                Some(b) => Some(b),
                None => continue,
            },
            None => None,
        };
        let Some((new_w, new_b)) = fold(w, bias, &params, f64::from(epsilon)) else { continue };
        let old_w = cn.inputs[1].filter(|&v| uses[v] == 1);
        let name = cn.name.clone();
        let w_id = g.add_const(format!("{name}.weight_bn"), new_w);
        let b_id = g.add_const(format!("{name}.bias_bn"), new_b);
        let mut inputs = g.node(conv).inputs.clone();
        inputs.truncate(1);
        inputs.push(Some(w_id));
        inputs.push(Some(b_id));
        edit.set_inputs(g, conv, inputs);
        edit.replace_uses(g, y, x);
        edit.remove(g, bn);
        // The unfolded weights had no other reader: their bytes go now, not when the graph does.
        if let Some(v) = old_w {
            if let Ok(empty) = Tensor::zeros(g.ty(v).dt, &[0]) {
                g.make_const(v, empty);
            }
        }
        folded += 1;
    }
    edit.finish(g);
    folded
}

fn fold(
    w: &Tensor<'static>,
    bias: Option<Vec<f64>>,
    p: &[Vec<f64>],
    eps: f64,
) -> Option<(Tensor<'static>, Tensor<'static>)> {
    let (scale, beta, mean, var) = (&p[0], &p[1], &p[2], &p[3]);
    let m = *w.shape().first()?;
    if !w.dt().is_float() || scale.len() != m {
        return None;
    }
    let s: Vec<f64> = (0..m).map(|c| scale[c] / (var[c] + eps).sqrt()).collect();
    let b = bias.unwrap_or_else(|| vec![0.0; m]);
    let bv: Vec<f64> = (0..m).map(|c| (b[c] - mean[c]) * s[c] + beta[c]).collect();
    let new_b = consts::from_f64s(w.dt(), &[m], &bv).ok()?;
    Some((scaled(w, &s)?, new_b))
}
