//! Compile-time evaluation of ops on constants, for constant folding.
//!
//! Covers the ops that compute shapes and build weights (Shape, ConstantOfShape, Reshape, Gather, Concat, Slice,
//! Cast, Range, elementwise arithmetic…), not the heavy ones (Conv, MatMul, pooling): those run on a backend.
//! [`evaluate`] returns `None` for an op it does not fold, or when folding would hide a run-time error (integer
//! division by zero, an index out of range): the node then stays in the graph.

mod arith;
pub mod text;

use stowage_runtime::{small_types, DatumType, Tensor};

use crate::consts;
use crate::consts::strides;
use crate::infer::slice_bounds;
use crate::ir::{Graph, Op, ValueId, ValueType};

/// The outputs of `op` on constant `inputs`, whose output types were inferred as `types`; `None` when not folded.
/// `inputs[i]` is `None` for an omitted optional input. Shape is folded from types alone: its input may be
/// any value, so the caller passes the input's type in `input_types`.
pub fn evaluate(
    op: &Op,
    inputs: &[Option<&Tensor<'static>>],
    input_types: &[Option<&ValueType>],
    types: &[ValueType],
) -> Option<Vec<Tensor<'static>>> {
    let out = types.first()?;
    if let Op::Shape { .. } = op {
        let shape = &input_types.first().copied().flatten()?.shape;
        let (start, end) = shape_range(op, shape.len());
        let dims: Vec<i64> = shape[start..end].iter().map(|&d| d as i64).collect();
        return Some(vec![Tensor::from_vec(&[dims.len()], dims).ok()?]);
    }
    let x = inputs.first().copied().flatten()?;
    let result = match op {
        Op::Identity | Op::Reshape { .. } | Op::Flatten { .. } | Op::Squeeze | Op::Unsqueeze => {
            Tensor::from_bytes(out.dt, &out.shape, x.as_bytes().ok()?).ok()?
        }
        Op::Dropout { .. } => {
            let training = inputs.get(2).copied().flatten().map(consts::to_i64s);
            if !matches!(training, None | Some(Ok(_))) || training.is_some_and(|t| t.is_ok_and(|t| t != [0])) {
                return None;
            }
            let mut outs = vec![Tensor::from_bytes(out.dt, &out.shape, x.as_bytes().ok()?).ok()?];
            if let Some(mask) = types.get(1) {
                outs.push(Tensor::from_vec(&mask.shape, vec![true; x.len()]).ok()?);
            }
            return Some(outs);
        }
        Op::ConstantOfShape { value } => consts::splat(value, &out.shape).ok()?,
        // Strings (`text.rs`): read, compared and cast; a string that is not a number stays for run time, where its
        // error names the node.
        Op::Cast { to, .. } if x.dt() == DatumType::Str && *to == DatumType::Str => x.to_row_major().ok()?,
        Op::Cast { to, .. } if x.dt() == DatumType::Str => text::parse(x, *to).ok()?,
        Op::Cast { to: DatumType::Str, .. } => text::print(x).ok()?,
        Op::Binary(crate::ir::Binary::Equal) if x.dt() == DatumType::Str => {
            text::equal(x, inputs.get(1).copied().flatten()?, &out.shape).ok()?
        }
        Op::Text(t) => match t {
            crate::ir::Text::Concat => text::concat(x, inputs.get(1).copied().flatten()?, &out.shape).ok()?,
            crate::ir::Text::FullMatch { pattern } => text::full_match(&text::full_pattern(pattern).ok()?, x).ok()?,
            crate::ir::Text::Case { upper } => text::change_case(x, *upper).ok()?,
            crate::ir::Text::Lookup => {
                let get = |i: usize| inputs.get(i).copied().flatten();
                text::Table::new(get(1)?, get(2)?, get(3)?).ok()?.apply(x).ok()?
            }
        },
        Op::Cast { to, mode } if to.is_small() || x.dt().is_small() => {
            let values = consts::to_f64s(x).ok()?;
            let bytes: Vec<u8> = match to {
                DatumType::I4 | DatumType::U4 | DatumType::I2 | DatumType::U2
                    if !x.dt().is_float() && !x.dt().is_small() =>
                {
                    consts::to_i64s(x).ok()?.into_iter().map(|v| small_types::wrap(*to, v)).collect()
                }
                _ if to.is_small() => {
                    values.iter().map(|&v| small_types::encode(*to, v, mode.saturate, mode.rounding)).collect()
                }
                _ => return Some(vec![consts::from_f64s(*to, &out.shape, &values).ok()?]),
            };
            Tensor::from_bytes(*to, &out.shape, &bytes).ok()?
        }
        Op::Cast { to, .. } => {
            if x.dt().is_float() {
                consts::from_f64s(*to, &out.shape, &consts::to_f64s(x).ok()?).ok()?
            } else {
                consts::from_i64s(*to, &out.shape, &consts::to_i64s(x).ok()?).ok()?
            }
        }
        Op::Transpose { perm: Some(perm) } => {
            let st = strides(x.shape());
            strided(x, &out.shape, 0, &perm.iter().map(|&p| st[p] as isize).collect::<Vec<_>>())?
        }
        Op::Expand => {
            let map = broadcast_strides(x.shape(), &out.shape);
            strided(x, &out.shape, 0, &map.iter().map(|&s| s as isize).collect::<Vec<_>>())?
        }
        Op::Tile => {
            let st = strides(x.shape());
            let sh = x.shape().to_vec();
            remap(x, &out.shape, |idx| Some(idx.iter().enumerate().map(|(a, &i)| (i % sh[a]) * st[a]).sum()))?
        }
        Op::Gather { axis } => {
            let axis = *axis as usize;
            let indices = consts::to_i64s(inputs.get(1).copied().flatten()?).ok()?;
            let ishape = inputs.get(1).copied().flatten()?.shape().to_vec();
            let (st, dim) = (strides(x.shape()), x.shape()[axis] as i64);
            let ist = strides(&ishape);
            remap(x, &out.shape, |idx| {
                let k: usize = idx[axis..axis + ishape.len()].iter().zip(&ist).map(|(&i, &s)| i * s).sum();
                let mut j = *indices.get(k)?;
                if j < 0 {
                    j += dim;
                }
                if !(0..dim).contains(&j) {
                    return None;
                }
                let before: usize = idx[..axis].iter().zip(&st).map(|(&i, &s)| i * s).sum();
                let after: usize = idx[axis + ishape.len()..].iter().zip(&st[axis + 1..]).map(|(&i, &s)| i * s).sum();
                Some(before + j as usize * st[axis] + after)
            })?
        }
        Op::Slice => {
            let get = |i: usize| inputs.get(i).copied().flatten().map(|t| consts::to_i64s(t).ok());
            let starts = get(1)??;
            let ends = get(2)??;
            let axes = get(3).unwrap_or_else(|| Some((0..starts.len() as i64).collect()))?;
            let steps = get(4).unwrap_or_else(|| Some(vec![1; starts.len()]))?;
            let rank = x.shape().len();
            let (mut begin, mut step) = (vec![0i128; rank], vec![1i128; rank]);
            for i in 0..starts.len() {
                let a = if axes[i] < 0 { axes[i] + rank as i64 } else { axes[i] } as usize;
                let (s, _, st) = slice_bounds(x.shape()[a], starts[i], ends[i], steps[i]).ok()?;
                begin[a] = s;
                step[a] = st;
            }
            let st = strides(x.shape());
            let base = (0..rank).map(|a| begin[a] * st[a] as i128).sum::<i128>();
            let steps = (0..rank).map(|a| isize::try_from(step[a] * st[a] as i128).ok()).collect::<Option<Vec<_>>>()?;
            strided(x, &out.shape, isize::try_from(base).ok()?, &steps)?
        }
        Op::Concat { axis } => {
            let axis = *axis as usize;
            let parts: Vec<&Tensor<'static>> = inputs.iter().copied().collect::<Option<_>>()?;
            let mut bytes = Vec::with_capacity(out.byte_len()?);
            let outer: usize = out.shape[..axis].iter().product();
            for o in 0..outer {
                for p in &parts {
                    let b = p.as_bytes().ok()?;
                    let chunk = b.len() / outer.max(1);
                    bytes.extend_from_slice(&b[o * chunk..(o + 1) * chunk]);
                }
            }
            Tensor::from_bytes(out.dt, &out.shape, &bytes).ok()?
        }
        Op::Range => {
            let v: Vec<f64> = (0..3)
                .map(|i| consts::to_f64s(inputs.get(i).copied().flatten()?).ok()?.first().copied())
                .collect::<Option<_>>()?;
            let n = out.shape[0];
            if out.dt.is_float() {
                consts::from_f64s(out.dt, &out.shape, &(0..n).map(|i| v[0] + i as f64 * v[2]).collect::<Vec<_>>())
                    .ok()?
            } else {
                let v: Vec<i64> =
                    (0..3).map(|i| consts::to_i64s(inputs[i]?).ok()?.first().copied()).collect::<Option<_>>()?;
                consts::from_i64s(
                    out.dt,
                    &out.shape,
                    &(0..n as i64).map(|i| v[0].wrapping_add(i.wrapping_mul(v[2]))).collect::<Vec<_>>(),
                )
                .ok()?
            }
        }
        op if op.is_elementwise() => arith::elementwise(op, inputs, out)?,
        _ => return None,
    };
    Some(vec![result])
}

/// Evaluates a node of `graph` if its inputs are constants (Shape needs only its input's type); `types` are its
/// output types.
pub fn fold_node(
    graph: &Graph,
    op: &Op,
    inputs: &[Option<ValueId>],
    types: &[ValueType],
) -> Option<Vec<Tensor<'static>>> {
    let values: Vec<Option<&Tensor<'static>>> = inputs.iter().map(|v| v.and_then(|v| graph.const_value(v))).collect();
    let shape_only = matches!(op, Op::Shape { .. });
    if !shape_only && inputs.iter().zip(&values).any(|(v, t)| v.is_some() && t.is_none()) {
        return None;
    }
    let input_types: Vec<Option<&ValueType>> = inputs.iter().map(|v| v.map(|v| graph.ty(v))).collect();
    evaluate(op, &values, &input_types, types)
}

/// Start and end axes of a Shape op for an input of `rank`.
fn shape_range(op: &Op, rank: usize) -> (usize, usize) {
    let Op::Shape { start, end } = op else { return (0, rank) };
    let clamp = |a: i64| (if a < 0 { a + rank as i64 } else { a }).clamp(0, rank as i64) as usize;
    let (s, e) = (clamp(*start), clamp(end.unwrap_or(rank as i64)));
    (s, e.max(s))
}

/// Strides (in elements) that read an input of `shape` broadcast to `out` (0 along broadcast axes).
pub(crate) fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let st = strides(shape);
    let pad = out.len() - shape.len();
    (0..out.len()).map(|a| if a < pad || shape[a - pad] == 1 { 0 } else { st[a - pad] }).collect()
}

/// A tensor of `shape` whose element at each index `i` is `x`'s element at `base + Σ i[a]·steps[a]` (in elements;
/// `None` where that falls outside `x`), a row of the innermost axis at a time: folding a transposed, sliced or
/// expanded weight matrix is one pass with no call per element.
fn strided(x: &Tensor<'_>, shape: &[usize], base: isize, steps: &[isize]) -> Option<Tensor<'static>> {
    let size = x.dt().size_of();
    let bytes = x.as_bytes().ok()?;
    let count: usize = shape.iter().product();
    let mut out = vec![0u8; count * size];
    let rank = shape.len();
    let n = shape.last().copied().unwrap_or(1);
    let step = steps.last().copied().unwrap_or(0);
    let mut idx = vec![0usize; rank.saturating_sub(1)];
    if count > 0 {
        for row in out.chunks_exact_mut(n * size) {
            let first = base + idx.iter().zip(steps).map(|(&i, &s)| i as isize * s).sum::<isize>();
            for (j, dst) in row.chunks_exact_mut(size).enumerate() {
                let at = usize::try_from(first + j as isize * step).ok()? * size;
                dst.copy_from_slice(bytes.get(at..at + size)?);
            }
            for a in (0..idx.len()).rev() {
                idx[a] += 1;
                if idx[a] < shape[a] {
                    break;
                }
                idx[a] = 0;
            }
        }
    }
    Tensor::from_bytes(x.dt(), shape, &out).ok()
}

/// A tensor of `shape` whose element at each index is `x`'s element at `source(index)`; `None` if any is.
fn remap(x: &Tensor<'_>, shape: &[usize], source: impl Fn(&[usize]) -> Option<usize>) -> Option<Tensor<'static>> {
    let size = x.dt().size_of();
    let bytes = x.as_bytes().ok()?;
    let count: usize = shape.iter().product();
    let mut out = Vec::with_capacity(count * size);
    let mut idx = vec![0usize; shape.len()];
    for _ in 0..count {
        let at = source(&idx)? * size;
        out.extend_from_slice(bytes.get(at..at + size)?);
        for a in (0..shape.len()).rev() {
            idx[a] += 1;
            if idx[a] < shape[a] {
                break;
            }
            idx[a] = 0;
        }
    }
    Tensor::from_bytes(x.dt(), shape, &out).ok()
}
