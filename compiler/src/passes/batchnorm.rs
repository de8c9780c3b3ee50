//! BatchNormalization folded into the Conv before it: with `s = scale / sqrt(var + eps)`, the Conv's weights
//! become `W * s` (per output channel) and its bias `(B - mean) * s + beta`. Applies when the Conv's output feeds
//! only the BatchNorm, and weights, bias and the BatchNorm's parameters are constants of a float type.
//!
//! An inference BatchNormalization with constant parameters that cannot be folded (DenseNet's, after a Concat)
//! becomes `x * s + t` with per-channel constants `s` and `t = beta - mean * s` of shape `[C, 1, …]`: two
//! elementwise ops that a backend can fuse with what follows (a ReLU, usually).

use stowage_runtime::{DatumType, Tensor};

use crate::consts;
use crate::ir::{Binary, Edit, Graph, Op};

/// Folds every eligible Conv + BatchNormalization pair, then turns the other constant ones into a scale and shift.
pub fn run(g: &mut Graph) -> usize {
    fold_into_conv(g) + decompose(g)
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
    let per = w.len() / m.max(1);
    let s: Vec<f64> = (0..m).map(|c| scale[c] / (var[c] + eps).sqrt()).collect();
    let b = bias.unwrap_or_else(|| vec![0.0; m]);
    let bv: Vec<f64> = (0..m).map(|c| (b[c] - mean[c]) * s[c] + beta[c]).collect();
    let new_b = consts::from_f64s(w.dt(), &[m], &bv).ok()?;
    if let (DatumType::F32, Ok(src)) = (w.dt(), w.as_slice::<f32>()) {
        // The common case, in one pass and without an f64 copy of the weights (the same rounding: the product
        // in f64, then to f32).
        let out: Vec<f32> = src
            .chunks(per.max(1))
            .zip(&s)
            .flat_map(|(row, &k)| row.iter().map(move |&x| (f64::from(x) * k) as f32))
            .collect();
        return Some((Tensor::from_vec(w.shape(), out).ok()?, new_b));
    }
    let mut wv = consts::to_f64s(w).ok()?;
    for (i, x) in wv.iter_mut().enumerate() {
        *x *= s[i / per];
    }
    Some((consts::from_f64s(w.dt(), w.shape(), &wv).ok()?, new_b))
}
