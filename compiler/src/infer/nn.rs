//! Inference for the neural-network ops: convolution, pooling, normalisations, products, softmax, reductions,
//! ArgMax and Resize.

use stowage_runtime::DatumType;

use super::{dims, invalid, normalize_axis, InferError, Inputs};
use crate::ir::{AspectRatioPolicy, AutoPad, CoordinateTransform, Op, PoolKind, ValueType, Window};

pub(super) fn infer(op: &mut Op, ins: Inputs<'_>, outputs: usize) -> Result<Vec<ValueType>, InferError> {
    let x = ins.ty(0)?;
    Ok(match op {
        Op::Conv(conv) => {
            ins.expect_dt(0, DatumType::is_float, "a float type")?;
            ins.same_dt(1)?;
            let w = ins.shape(1)?;
            if x.rank() < 3 || w.len() != x.rank() {
                return invalid(format!("X {:?} and W {:?} must have the same rank, at least 3", x.shape, w));
            }
            let group = conv.group;
            if group == 0 || x.shape[1] != w[1] * group || w[0] % group != 0 {
                return invalid(format!(
                    "X has {} channels but W {:?} with group {group} expects {}",
                    x.shape[1],
                    w,
                    w[1] * group
                ));
            }
            if let Some(b) = ins.get(2) {
                ins.same_dt(2)?;
                if b.ty.shape != [w[0]] {
                    return invalid(format!("B has shape {:?}, expected [{}]", b.ty.shape, w[0]));
                }
            }
            let spatial = &w[2..];
            if conv.window.kernel.is_empty() {
                conv.window.kernel = spatial.to_vec();
            } else if conv.window.kernel != spatial {
                return invalid(format!("kernel_shape {:?} disagrees with W {:?}", conv.window.kernel, w));
            }
            let out = window_output(&mut conv.window, &x.shape[2..], false)?;
            let mut shape = vec![x.shape[0], w[0]];
            shape.extend(out);
            vec![ValueType::new(x.dt, shape)]
        }
        Op::Pool(pool) => {
            if x.rank() < 3 {
                return invalid(format!("X must have rank 3 or more, got {:?}", x.shape));
            }
            let out = window_output(&mut pool.window, &x.shape[2..], true)?;
            let mut shape = x.shape[..2].to_vec();
            shape.extend(out);
            let mut types = vec![ValueType::new(x.dt, shape.clone())];
            if outputs > 1 {
                if pool.kind != PoolKind::Max {
                    return invalid("only MaxPool has an Indices output");
                }
                types.push(ValueType::new(DatumType::I64, shape));
            }
            types
        }
        Op::GlobalPool(_) => {
            if x.rank() < 3 {
                return invalid(format!("X must have rank 3 or more, got {:?}", x.shape));
            }
            let mut shape = x.shape[..2].to_vec();
            shape.resize(x.rank(), 1);
            vec![ValueType::new(x.dt, shape)]
        }
        Op::Lrn { size, .. } => {
            if *size == 0 || x.rank() < 3 {
                return invalid(format!("LRN needs size >= 1 and rank >= 3, got size {size} and {:?}", x.shape));
            }
            vec![x.clone()]
        }
        Op::BatchNorm { training, .. } => {
            if x.rank() < 2 {
                return invalid(format!("X must have rank 2 or more, got {:?}", x.shape));
            }
            for i in 1..5 {
                let s = ins.shape(i)?;
                if s != [x.shape[1]] {
                    return invalid(format!(
                        "input {i} has shape {s:?}, expected [{}] (the channel count)",
                        x.shape[1]
                    ));
                }
            }
            if outputs > 1 && !*training {
                return invalid("only training-mode BatchNormalization (training_mode=1) has more than one output");
            }
            let mut types = vec![x.clone()];
            for i in 1..outputs.min(3) {
                types.push(ins.ty(i + 2)?.clone());
            }
            types
        }
        Op::LayerNorm { axis, stash, .. } => {
            let a = normalize_axis(*axis, x.rank())?;
            *axis = a as i64;
            let norm = &x.shape[a..];
            for i in 1..3 {
                if let Some(p) = ins.get(i) {
                    super::broadcast(&p.ty.shape, norm)
                        .ok()
                        .filter(|s| s == norm)
                        .ok_or_else(|| InferError::Broadcast { a: p.ty.shape.clone(), b: norm.to_vec() })?;
                }
            }
            let mut stats = x.shape[..a].to_vec();
            stats.resize(x.rank(), 1);
            let mut types = vec![x.clone()];
            for _ in 1..outputs.min(3) {
                types.push(ValueType::new(*stash, stats.clone()));
            }
            types
        }
        Op::Gemm(g) => {
            let (a, b) = (x, ins.ty(1)?);
            ins.same_dt(1)?;
            if a.rank() != 2 || b.rank() != 2 {
                return invalid(format!("A {:?} and B {:?} must be 2-D", a.shape, b.shape));
            }
            let (m, ka) = if g.trans_a { (a.shape[1], a.shape[0]) } else { (a.shape[0], a.shape[1]) };
            let (kb, n) = if g.trans_b { (b.shape[1], b.shape[0]) } else { (b.shape[0], b.shape[1]) };
            if ka != kb {
                return invalid(format!("inner dimensions differ: A {:?} and B {:?}", a.shape, b.shape));
            }
            if let Some(c) = ins.get(2) {
                ins.same_dt(2)?;
                let s = super::broadcast(&c.ty.shape, &[m, n])?;
                if s != [m, n] {
                    return Err(InferError::Broadcast { a: c.ty.shape.clone(), b: vec![m, n] });
                }
            }
            vec![ValueType::new(a.dt, vec![m, n])]
        }
        Op::MatMul => {
            ins.same_dt(1)?;
            vec![ValueType::new(x.dt, matmul_shape(&x.shape, ins.shape(1)?)?)]
        }
        Op::Softmax { axis, .. } => {
            ins.expect_dt(0, DatumType::is_float, "a float type")?;
            if x.rank() == 0 {
                return invalid("Softmax of a scalar");
            }
            *axis = normalize_axis(*axis, x.rank())? as i64;
            vec![x.clone()]
        }
        Op::Reduce { keepdims, noop_with_empty_axes, .. } => {
            let axes = ins.ints(1)?.unwrap_or_default();
            let (keepdims, noop) = (*keepdims, *noop_with_empty_axes);
            if axes.is_empty() && noop {
                return Ok(vec![x.clone()]);
            }
            let mut reduced = vec![axes.is_empty(); x.rank()];
            for &a in &axes {
                reduced[normalize_axis(a, x.rank())?] = true;
            }
            let shape: Vec<usize> = x
                .shape
                .iter()
                .zip(&reduced)
                .filter_map(|(&d, &r)| match (r, keepdims) {
                    (false, _) => Some(d),
                    (true, true) => Some(1),
                    (true, false) => None,
                })
                .collect();
            vec![ValueType::new(x.dt, shape)]
        }
        Op::ArgMax { axis, keepdims, .. } => {
            let a = normalize_axis(*axis, x.rank())?;
            *axis = a as i64;
            let mut shape = x.shape.clone();
            if x.shape[a] == 0 {
                return invalid(format!("ArgMax along axis {a} of length 0"));
            }
            if *keepdims {
                shape[a] = 1;
            } else {
                shape.remove(a);
            }
            vec![ValueType::new(DatumType::I64, shape)]
        }
        Op::TopK { axis, .. } => {
            let a = normalize_axis(*axis, x.rank())?;
            *axis = a as i64;
            let k = match ins.ints(1)?.as_deref() {
                Some(&[k]) => k,
                Some(k) => return invalid(format!("K must have one element, found {}", k.len())),
                None => return invalid("K must be a constant (give it with --input-value)"),
            };
            if k < 0 || k as usize > x.shape[a] {
                return invalid(format!("K is {k}: it must be in [0, {}], the length of axis {a}", x.shape[a]));
            }
            let mut shape = x.shape.clone();
            shape[a] = k as usize;
            vec![ValueType::new(x.dt, shape.clone()), ValueType::new(DatumType::I64, shape)]
        }
        Op::GridSample { .. } => {
            ins.expect_dt(0, DatumType::is_float, "a float type")?;
            ins.same_dt(1)?;
            let g = ins.shape(1)?;
            let r = x.rank().saturating_sub(2);
            if r == 0 || g.len() != r + 2 || g[0] != x.shape[0] || g[r + 1] != r {
                return invalid(format!(
                    "grid {g:?} must be [N, H1…Hr, r] for X {:?} [N, C, D1…Dr]: r = {r}, N = {}",
                    x.shape,
                    x.shape.first().copied().unwrap_or(0)
                ));
            }
            let mut shape = x.shape[..2].to_vec();
            shape.extend(&g[1..=r]);
            vec![ValueType::new(x.dt, shape)]
        }
        Op::Resize(r) => {
            let rank = x.rank();
            let axes: Vec<usize> = match &r.axes {
                Some(axes) => axes.iter().map(|&a| normalize_axis(a, rank)).collect::<Result<_, _>>()?,
                None => (0..rank).collect(),
            };
            let roi = ins.floats(1)?.filter(|v| !v.is_empty());
            let scales = ins.floats(2)?.filter(|v| !v.is_empty());
            let sizes = ins.ints(3)?.filter(|v| !v.is_empty());
            let mut full_scales = vec![1.0f64; rank];
            let mut shape = x.shape.clone();
            match (scales, sizes) {
                (Some(_), Some(_)) => return invalid("give scales or sizes, not both"),
                (None, None) => return invalid("one of scales and sizes is required"),
                (Some(s), None) => {
                    if s.len() != axes.len() {
                        return invalid(format!("scales has {} values for {} axes", s.len(), axes.len()));
                    }
                    for (&a, &s) in axes.iter().zip(&s) {
                        if !(s > 0.0 && s.is_finite()) {
                            return invalid(format!("scale {s} must be positive"));
                        }
                        full_scales[a] = s;
                        let extent = match (&roi, r.coordinate_transform) {
                            (Some(roi), CoordinateTransform::TfCropAndResize) if roi.len() == 2 * axes.len() => {
                                let i = axes.iter().position(|&b| b == a).unwrap_or(0);
                                roi[axes.len() + i] - roi[i]
                            }
                            _ => 1.0,
                        };
                        shape[a] = checked_dim((x.shape[a] as f64 * extent * s).floor())?;
                    }
                }
                (None, Some(sz)) => {
                    if sz.len() != axes.len() {
                        return invalid(format!("sizes has {} values for {} axes", sz.len(), axes.len()));
                    }
                    let sz = dims(&sz, "sizes")?;
                    let ratios: Vec<f64> = axes.iter().zip(&sz).map(|(&a, &s)| s as f64 / x.shape[a] as f64).collect();
                    let uniform = match r.aspect_ratio {
                        AspectRatioPolicy::Stretch => None,
                        AspectRatioPolicy::NotLarger => ratios.iter().copied().reduce(f64::min),
                        AspectRatioPolicy::NotSmaller => ratios.iter().copied().reduce(f64::max),
                    };
                    for (i, &a) in axes.iter().enumerate() {
                        match uniform {
                            None => {
                                full_scales[a] = ratios[i];
                                shape[a] = sz[i];
                            }
                            Some(u) => {
                                full_scales[a] = u;
                                shape[a] = checked_dim((u * x.shape[a] as f64 + 0.5).floor())?;
                            }
                        }
                    }
                }
            }
            r.scales = full_scales.iter().map(|&s| s as f32).collect();
            vec![ValueType::new(x.dt, shape)]
        }
        _ => unreachable!("nn::infer called for {}", op.name()),
    })
}

fn checked_dim(x: f64) -> Result<usize, InferError> {
    if (0.0..=(super::MAX_ELEMENTS as f64)).contains(&x) {
        Ok(x as usize)
    } else {
        invalid(format!("output dimension {x} is out of range"))
    }
}

/// numpy's matmul shape rule: 1-D operands are promoted and the added axis dropped; batch axes broadcast.
pub fn matmul_shape(a: &[usize], b: &[usize]) -> Result<Vec<usize>, InferError> {
    if a.is_empty() || b.is_empty() {
        return invalid("MatMul operands must have rank 1 or more");
    }
    let a2: Vec<usize> = if a.len() == 1 { vec![1, a[0]] } else { a.to_vec() };
    let b2: Vec<usize> = if b.len() == 1 { vec![b[0], 1] } else { b.to_vec() };
    let (m, k) = (a2[a2.len() - 2], a2[a2.len() - 1]);
    let (kb, n) = (b2[b2.len() - 2], b2[b2.len() - 1]);
    if k != kb {
        return invalid(format!("inner dimensions differ: A {a:?} and B {b:?}"));
    }
    let mut shape = super::broadcast(&a2[..a2.len() - 2], &b2[..b2.len() - 2])
        .map_err(|_| InferError::Broadcast { a: a.to_vec(), b: b.to_vec() })?;
    if a.len() > 1 {
        shape.push(m);
    }
    if b.len() > 1 {
        shape.push(n);
    }
    Ok(shape)
}

/// The largest stride, dilation, pad or kernel extent a window takes (2^31 − 1).
const WINDOW_MAX: usize = i32::MAX as usize;

/// Resolves `auto_pad` into explicit pads and computes the spatial output size of a window.
fn window_output(w: &mut Window, input: &[usize], pooling: bool) -> Result<Vec<usize>, InferError> {
    let n = input.len();
    if w.kernel.len() != n {
        return invalid(format!("kernel_shape has {} axes, the input {n} spatial axes", w.kernel.len()));
    }
    for (name, v) in [("strides", &mut w.strides), ("dilations", &mut w.dilations)] {
        if v.is_empty() {
            *v = vec![1; n];
        }
        if v.len() != n || v.contains(&0) {
            return invalid(format!("{name} {v:?} must have {n} values, all at least 1"));
        }
    }
    if w.pads.is_empty() {
        w.pads = vec![0; 2 * n];
    }
    if w.pads.len() != 2 * n {
        return invalid(format!("pads {:?} must have {} values", w.pads, 2 * n));
    }
    // Kernels compute input coordinates as `o·stride + k·dilation − pad` in isize: bounded here, none overflows.
    for (name, v) in
        [("strides", &w.strides), ("dilations", &w.dilations), ("pads", &w.pads), ("kernel_shape", &w.kernel)]
    {
        if let Some(big) = v.iter().find(|&&x| x > WINDOW_MAX) {
            return invalid(format!("{name} {v:?}: {big} is larger than {WINDOW_MAX}, the most stowage takes"));
        }
    }
    let mut out = Vec::with_capacity(n);
    for (i, &d) in input.iter().enumerate() {
        let (d, k, s, dil) = (d as i128, w.kernel[i] as i128, w.strides[i] as i128, w.dilations[i] as i128);
        if k == 0 {
            return invalid("kernel_shape has a zero");
        }
        let span = dil * (k - 1) + 1;
        let size = match w.auto_pad {
            AutoPad::SameUpper | AutoPad::SameLower => {
                if d == 0 {
                    return invalid(format!("spatial axis {i} is empty"));
                }
                let o = (d + s - 1) / s;
                let total = ((o - 1) * s + span - d).max(0);
                let (small, big) = (total / 2, total - total / 2);
                let (begin, end) = if w.auto_pad == AutoPad::SameUpper { (small, big) } else { (big, small) };
                w.pads[i] = begin as usize;
                w.pads[n + i] = end as usize;
                o
            }
            AutoPad::Valid | AutoPad::NotSet => {
                if w.auto_pad == AutoPad::Valid {
                    w.pads[i] = 0;
                    w.pads[n + i] = 0;
                }
                // As onnxruntime: a pool's pad at least its kernel could make a window of padding alone.
                let pad = w.pads[i].max(w.pads[n + i]);
                if pooling && pad as i128 >= k {
                    return invalid(format!(
                        "attribute 'pads' {:?}: the pad of {pad} on spatial axis {i} must be smaller than the \
                         kernel ({k}, kernel_shape {:?}), or a window could lie wholly in the padding",
                        w.pads, w.kernel
                    ));
                }
                let padded = d + w.pads[i] as i128 + w.pads[n + i] as i128;
                if padded < span {
                    return invalid(format!(
                        "the window ({span} with dilation) is larger than the padded input ({padded}) on spatial axis {i}"
                    ));
                }
                if pooling && w.ceil_mode {
                    let mut o = (padded - span + s - 1) / s + 1;
                    if (o - 1) * s >= d + w.pads[i] as i128 {
                        o -= 1;
                    }
                    o
                } else {
                    (padded - span) / s + 1
                }
            }
        };
        out.push(usize::try_from(size).or_else(|_| invalid("output size is negative"))?);
    }
    w.auto_pad = AutoPad::NotSet;
    Ok(out)
}
