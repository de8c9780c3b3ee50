//! Inference for the ops that move data or compute shapes: Shape, ConstantOfShape, Reshape, Flatten, Squeeze,
//! Unsqueeze, Transpose, Concat, Split, Slice, Gather, Expand, Tile, Pad and Range.

use stowage_runtime::DatumType;

use super::{broadcast, dims, invalid, normalize_axis, InferError, Inputs};
use crate::ir::{Op, ValueType};

pub(super) fn infer(op: &mut Op, ins: Inputs<'_>, outputs: usize) -> Result<Vec<ValueType>, InferError> {
    let x = ins.ty(0)?;
    let rank = x.rank();
    let one = |shape: Vec<usize>| Ok(vec![ValueType::new(x.dt, shape)]);
    match op {
        Op::Shape { start, end } => {
            let clamp = |a: i64| (if a < 0 { a + rank as i64 } else { a }).clamp(0, rank as i64) as usize;
            let (s, e) = (clamp(*start), clamp(end.unwrap_or(rank as i64)));
            Ok(vec![ValueType::new(DatumType::I64, vec![e.saturating_sub(s)])])
        }
        Op::ConstantOfShape { value } => {
            if x.rank() != 1 {
                return invalid(format!("the shape input must be 1-D, got {:?}", x.shape));
            }
            let shape = dims(&ins.ints(0)?.unwrap_or_default(), "shape")?;
            Ok(vec![ValueType::new(value.dt(), shape)])
        }
        Op::Reshape { allowzero } => {
            let spec = ins.ints(1)?.unwrap_or_default();
            one(reshape(&x.shape, &spec, *allowzero)?)
        }
        Op::Flatten { axis } => {
            let a = if *axis == rank as i64 {
                rank
            } else {
                normalize_axis(*axis, rank.max(1)).map_err(|_| bad_axis(*axis, rank))?
            };
            if a > rank {
                return Err(bad_axis(*axis, rank));
            }
            *axis = a as i64;
            one(vec![x.shape[..a].iter().product(), x.shape[a..].iter().product()])
        }
        Op::Squeeze => {
            let shape = match ins.ints(1)? {
                None => x.shape.iter().copied().filter(|&d| d != 1).collect(),
                Some(axes) => {
                    let mut drop = vec![false; rank];
                    for a in axes {
                        let a = normalize_axis(a, rank)?;
                        if x.shape[a] != 1 {
                            return invalid(format!("cannot squeeze axis {a} of size {}", x.shape[a]));
                        }
                        drop[a] = true;
                    }
                    x.shape.iter().zip(drop).filter(|(_, d)| !d).map(|(&s, _)| s).collect()
                }
            };
            one(shape)
        }
        Op::Unsqueeze => {
            let axes = ins.ints(1)?.unwrap_or_default();
            let out_rank = rank + axes.len();
            let mut new = vec![false; out_rank];
            for a in axes {
                let a = normalize_axis(a, out_rank)?;
                if std::mem::replace(&mut new[a], true) {
                    return invalid(format!("axis {a} is repeated"));
                }
            }
            let mut rest = x.shape.iter();
            one(new.iter().map(|&n| if n { 1 } else { rest.next().copied().unwrap_or(1) }).collect())
        }
        Op::Transpose { perm } => {
            let p = perm.get_or_insert_with(|| (0..rank).rev().collect());
            let mut seen = vec![false; rank];
            if p.len() != rank || p.iter().any(|&a| a >= rank || std::mem::replace(&mut seen[a], true)) {
                return invalid(format!("perm {p:?} is not a permutation of {rank} axes"));
            }
            one(p.iter().map(|&a| x.shape[a]).collect())
        }
        Op::Concat { axis } => {
            let a = normalize_axis(*axis, rank)?;
            *axis = a as i64;
            let mut shape = x.shape.clone();
            for i in 1..ins.len() {
                ins.same_dt(i)?;
                let s = ins.shape(i)?;
                let agree = s.len() == rank && (0..rank).all(|j| j == a || s[j] == x.shape[j]);
                if !agree {
                    return invalid(format!(
                        "input {i} has shape {s:?}, which does not fit {:?} along axis {a}",
                        x.shape
                    ));
                }
                shape[a] += s[a];
            }
            one(shape)
        }
        Op::Split { axis, num_outputs } => {
            let a = normalize_axis(*axis, rank)?;
            *axis = a as i64;
            let d = x.shape[a];
            let sizes = match (ins.ints(1)?, *num_outputs) {
                (Some(split), _) => {
                    let split = dims(&split, "split")?;
                    if split.len() != outputs || split.iter().sum::<usize>() != d {
                        return invalid(format!("split {split:?} does not cut {d} into {outputs} parts"));
                    }
                    split
                }
                (None, Some(n)) => {
                    if n == 0 || n != outputs {
                        return invalid(format!("num_outputs is {n} but the node has {outputs} outputs"));
                    }
                    let chunk = d.div_ceil(n);
                    (0..n).map(|i| chunk.min(d.saturating_sub(i * chunk))).collect()
                }
                (None, None) => {
                    if outputs == 0 || d % outputs != 0 {
                        return invalid(format!("cannot split {d} into {outputs} equal parts"));
                    }
                    vec![d / outputs; outputs]
                }
            };
            Ok(sizes
                .into_iter()
                .map(|s| {
                    let mut shape = x.shape.clone();
                    shape[a] = s;
                    ValueType::new(x.dt, shape)
                })
                .collect())
        }
        Op::Slice => {
            let starts = ins.ints(1)?.unwrap_or_default();
            let ends = ins.ints(2)?.unwrap_or_default();
            let axes = ins.ints(3)?.unwrap_or_else(|| (0..starts.len() as i64).collect());
            let steps = ins.ints(4)?.unwrap_or_else(|| vec![1; starts.len()]);
            if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
                return invalid("starts, ends, axes and steps must have the same length");
            }
            let mut shape = x.shape.clone();
            let mut seen = vec![false; rank];
            for i in 0..starts.len() {
                let a = normalize_axis(axes[i], rank)?;
                if std::mem::replace(&mut seen[a], true) {
                    return invalid(format!("axis {a} is repeated"));
                }
                let (start, end, step) = slice_bounds(x.shape[a], starts[i], ends[i], steps[i])?;
                shape[a] = slice_len(start, end, step);
            }
            one(shape)
        }
        Op::Gather { axis } => {
            let a = normalize_axis(*axis, rank)?;
            *axis = a as i64;
            ins.expect_dt(1, |d| matches!(d, DatumType::I32 | DatumType::I64), "i32 or i64")?;
            let mut shape = x.shape[..a].to_vec();
            shape.extend_from_slice(ins.shape(1)?);
            shape.extend_from_slice(&x.shape[a + 1..]);
            one(shape)
        }
        Op::Scatter { axis, .. } => {
            ins.expect_dt(1, |d| matches!(d, DatumType::I32 | DatumType::I64), "i32 or i64")?;
            ins.same_dt(2)?;
            let (idx, upd) = (ins.shape(1)?.to_vec(), ins.shape(2)?.to_vec());
            match axis {
                Some(axis) => {
                    *axis = normalize_axis(*axis, rank)? as i64;
                    if idx != upd || idx.len() != rank {
                        return invalid(format!(
                            "indices {idx:?} and updates {upd:?} must have one shape, of data's rank {rank}"
                        ));
                    }
                    if let Some(k) = (0..rank).find(|&k| k as i64 != *axis && idx[k] > x.shape[k]) {
                        return invalid(format!(
                            "indices {idx:?} are longer than data {:?} along axis {k}, not the scattered one",
                            x.shape
                        ));
                    }
                }
                None => {
                    let k = *idx.last().ok_or_else(|| InferError::Invalid("indices must have an axis".into()))?;
                    let mut want = idx[..idx.len() - 1].to_vec();
                    want.extend_from_slice(x.shape.get(k..).unwrap_or(&[]));
                    if k > rank || upd != want {
                        return invalid(format!(
                            "updates are {upd:?}: for indices {idx:?} into data {:?} they must be {want:?}",
                            x.shape
                        ));
                    }
                }
            }
            one(x.shape.clone())
        }
        Op::GatherNd { batch_dims } => {
            ins.expect_dt(1, |d| d == DatumType::I64, "i64")?;
            let idx = ins.shape(1)?.to_vec();
            let b = *batch_dims;
            let k = idx.last().copied().unwrap_or(usize::MAX);
            if idx.is_empty() || b >= idx.len() || b >= rank || b + k > rank || idx[..b] != x.shape[..b] {
                return invalid(format!(
                    "indices {idx:?} do not index data {:?} with batch_dims {b}: the first {b} axes must agree and \
                     the last axis of indices be at most {}",
                    x.shape,
                    rank.saturating_sub(b)
                ));
            }
            let mut shape = idx[..idx.len() - 1].to_vec();
            shape.extend_from_slice(&x.shape[b + k..]);
            one(shape)
        }
        Op::Cumulative { .. } => {
            ins.expect_dt(0, |d| d != DatumType::Bool, "a numeric type")?;
            ins.expect_dt(1, |d| matches!(d, DatumType::I32 | DatumType::I64), "i32 or i64")?;
            if ins.ty(1)?.element_count() != Some(1) {
                return invalid(format!("axis must have one element, found shape {:?}", ins.shape(1)?));
            }
            if rank == 0 {
                return invalid("x must have at least one axis");
            }
            // A constant axis is checked here; one given at run time, by the kernel.
            if ins.get(1).is_some_and(|f| f.value.is_some()) {
                if let Some(axis) = ins.ints(1)?.and_then(|v| v.first().copied()) {
                    normalize_axis(axis, rank)?;
                }
            }
            one(x.shape.clone())
        }
        Op::GatherElements { axis } => {
            let a = normalize_axis(*axis, rank)?;
            *axis = a as i64;
            ins.expect_dt(1, |d| matches!(d, DatumType::I32 | DatumType::I64), "i32 or i64")?;
            let shape = ins.shape(1)?.to_vec();
            if shape.len() != rank {
                return invalid(format!("indices have rank {}, data {rank}: they must be equal", shape.len()));
            }
            if let Some(ax) = (0..rank).find(|&k| k != a && shape[k] > x.shape[k]) {
                return invalid(format!(
                    "indices of shape {shape:?} are longer than data {:?} along axis {ax}, not the gathered one",
                    x.shape
                ));
            }
            one(shape)
        }
        Op::Expand => {
            let target = dims(&ins.ints(1)?.unwrap_or_default(), "shape")?;
            one(broadcast(&x.shape, &target)?)
        }
        Op::Tile => {
            let repeats = dims(&ins.ints(1)?.unwrap_or_default(), "repeats")?;
            if repeats.len() != rank {
                return invalid(format!("repeats has {} values for rank {rank}", repeats.len()));
            }
            let shape: Option<Vec<usize>> = x.shape.iter().zip(&repeats).map(|(&d, &r)| d.checked_mul(r)).collect();
            one(shape.ok_or_else(|| InferError::Invalid("tiled shape overflows".into()))?)
        }
        Op::Pad { .. } => {
            let pads = ins.ints(1)?.unwrap_or_default();
            let axes: Vec<usize> = match ins.ints(3)? {
                Some(axes) => axes.iter().map(|&a| normalize_axis(a, rank)).collect::<Result<_, _>>()?,
                None => (0..rank).collect(),
            };
            if pads.len() != 2 * axes.len() {
                return invalid(format!("pads has {} values for {} axes", pads.len(), axes.len()));
            }
            if let Some(v) = ins.get(2) {
                ins.same_dt(2)?;
                if v.ty.element_count() != Some(1) {
                    return invalid("constant_value must be a scalar");
                }
            }
            let mut shape = x.shape.clone();
            for (i, &a) in axes.iter().enumerate() {
                let d = shape[a] as i128 + pads[i] as i128 + pads[axes.len() + i] as i128;
                shape[a] = usize::try_from(d).or_else(|_| invalid(format!("padding makes axis {a} negative ({d})")))?;
            }
            one(shape)
        }
        Op::Range => {
            for i in 1..3 {
                ins.same_dt(i)?;
            }
            for i in 0..3 {
                if ins.ty(i)?.element_count() != Some(1) {
                    return invalid(format!("input {i} must be a scalar"));
                }
            }
            let count = if x.dt.is_float() {
                let v: Vec<f64> =
                    (0..3).map(|i| ins.floats(i).map(|v| v.unwrap_or_default()[0])).collect::<Result<_, _>>()?;
                if v[2] == 0.0 || !v.iter().all(|x| x.is_finite()) {
                    return invalid("Range needs a finite, non-zero delta and finite bounds");
                }
                ((v[1] - v[0]) / v[2]).ceil().max(0.0)
            } else {
                let v: Vec<i64> =
                    (0..3).map(|i| ins.ints(i).map(|v| v.unwrap_or_default()[0])).collect::<Result<_, _>>()?;
                if v[2] == 0 {
                    return invalid("Range needs a non-zero delta");
                }
                let span = v[1] as i128 - v[0] as i128;
                let d = v[2] as i128;
                (span / d + i128::from(span % d != 0 && (span < 0) == (d < 0))).max(0) as f64
            };
            if count > super::MAX_ELEMENTS as f64 {
                return invalid(format!("Range would have {count} elements"));
            }
            one(vec![count as usize])
        }
        _ => unreachable!("shape_ops::infer called for {}", op.name()),
    }
}

fn bad_axis(axis: i64, rank: usize) -> InferError {
    InferError::Invalid(format!("axis {axis} is out of range for rank {rank}"))
}

/// Resolved `(start, end, step)` of one sliced axis of length `dim`, following ONNX's clamping rules.
pub fn slice_bounds(dim: usize, start: i64, end: i64, step: i64) -> Result<(i128, i128, i128), InferError> {
    if step == 0 {
        return invalid("slice step is 0");
    }
    let d = dim as i128;
    if d == 0 {
        return Ok((0, 0, step as i128));
    }
    let fix = |v: i64| if v < 0 { v as i128 + d } else { v as i128 };
    let (s, e) = (fix(start), fix(end));
    Ok(if step > 0 {
        (s.clamp(0, d), e.clamp(0, d), step as i128)
    } else {
        (s.clamp(0, d - 1), e.clamp(-1, d - 1), step as i128)
    })
}

/// Number of elements a resolved slice takes.
pub fn slice_len(start: i128, end: i128, step: i128) -> usize {
    let n = if step > 0 { (end - start + step - 1) / step } else { (start - end + (-step) - 1) / (-step) };
    n.max(0) as usize
}

/// The output shape of Reshape: 0 copies the input's dimension (unless `allowzero`), one -1 is inferred.
pub fn reshape(input: &[usize], spec: &[i64], allowzero: bool) -> Result<Vec<usize>, InferError> {
    let total: usize = input.iter().product();
    let mut shape = Vec::with_capacity(spec.len());
    let mut infer_at = None;
    for (i, &d) in spec.iter().enumerate() {
        shape.push(match d {
            -1 if infer_at.is_none() => {
                infer_at = Some(i);
                1
            }
            0 if !allowzero => match input.get(i) {
                Some(&d) => d,
                None => return invalid(format!("shape {spec:?} copies axis {i}, which the input {input:?} lacks")),
            },
            d if d >= 0 => d as usize,
            _ => return invalid(format!("shape {spec:?} has an invalid dimension {d}")),
        });
    }
    let known = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
    match (infer_at, known) {
        (_, None) => invalid(format!("shape {spec:?} overflows")),
        (Some(i), Some(k)) => {
            if k == 0 || !total.is_multiple_of(k) {
                return invalid(format!("cannot reshape {input:?} to {spec:?}"));
            }
            shape[i] = total / k;
            Ok(shape)
        }
        (None, Some(k)) if k == total => Ok(shape),
        (None, Some(_)) => invalid(format!("cannot reshape {input:?} ({total} elements) to {spec:?}")),
    }
}
