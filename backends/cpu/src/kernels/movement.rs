//! Ops that move elements without arithmetic: Transpose, Concat, Split, Slice, Gather, Tile, Pad and Expand.
//! They work on bytes, one element being `dt.size_of()` bytes, so every datum type is covered by one code path.
//! Inputs are packed row-major tensors (a strided view is packed first).

use stowage_runtime::{DatumType, Tensor};

use super::broadcast;
use crate::error::{CpuError, Result};

/// The bytes of `x` in row-major order: borrowed when it is packed, else a packed copy.
fn packed_bytes<'t>(x: &'t Tensor<'_>) -> Result<std::borrow::Cow<'t, [u8]>> {
    if x.is_row_major() {
        Ok(std::borrow::Cow::Borrowed(x.as_bytes()?))
    } else {
        Ok(std::borrow::Cow::Owned(x.to_row_major()?.as_bytes()?.to_vec()))
    }
}

fn strides(shape: &[usize]) -> Vec<usize> {
    let mut st = vec![1; shape.len()];
    for a in (0..shape.len().saturating_sub(1)).rev() {
        st[a] = st[a + 1] * shape[a + 1];
    }
    st
}

/// Copies element `source(i)` of `x` to element `i` of a new tensor of `shape`, for every `i` in row-major order.
fn gather_elements(
    x: &Tensor<'_>,
    shape: &[usize],
    mut source: impl FnMut(&[usize]) -> usize,
) -> Result<Tensor<'static>> {
    let size = x.dt().size_of();
    let src = packed_bytes(x)?;
    let count: usize = shape.iter().product();
    let mut out = Vec::with_capacity(count * size);
    let mut idx = vec![0usize; shape.len()];
    for _ in 0..count {
        let at = source(&idx) * size;
        out.extend_from_slice(&src[at..at + size]);
        for a in (0..shape.len()).rev() {
            idx[a] += 1;
            if idx[a] < shape[a] {
                break;
            }
            idx[a] = 0;
        }
    }
    Ok(crate::storage::tensor_from_bytes(x.dt(), shape, &out)?)
}

/// Permutes axes: output axis `i` is input axis `perm[i]`. Elements are copied as words of their size, with
/// the innermost output axis in the inner loop.
pub fn transpose(x: &Tensor<'_>, perm: &[usize]) -> Result<Tensor<'static>> {
    let src = packed_bytes(x)?;
    let shape: Vec<usize> = perm.iter().map(|&a| x.shape()[a]).collect();
    let st = strides(x.shape());
    let pst: Vec<usize> = perm.iter().map(|&a| st[a]).collect();
    let dt = x.dt();
    Ok(match dt.size_of() {
        1 => crate::storage::tensor_from_bytes(
            dt,
            &shape,
            bytemuck::cast_slice(&permute_copy::<u8>(&src, &shape, &pst)),
        )?,
        2 => crate::storage::tensor_from_bytes(
            dt,
            &shape,
            bytemuck::cast_slice(&permute_copy::<u16>(&src, &shape, &pst)),
        )?,
        4 => crate::storage::tensor_from_bytes(
            dt,
            &shape,
            bytemuck::cast_slice(&permute_copy::<u32>(&src, &shape, &pst)),
        )?,
        _ => crate::storage::tensor_from_bytes(
            dt,
            &shape,
            bytemuck::cast_slice(&permute_copy::<u64>(&src, &shape, &pst)),
        )?,
    })
}

/// The elements of `src` at the offsets `pst` gives for each index of `shape`, in row-major order (offsets in
/// elements of `W`).
fn permute_copy<W: bytemuck::Pod>(src: &[u8], shape: &[usize], pst: &[usize]) -> Vec<W> {
    // Borrowed storage is aligned; a copied one may not be, and then is copied once more into words.
    let words: std::borrow::Cow<'_, [W]> = match bytemuck::try_cast_slice(src) {
        Ok(w) => std::borrow::Cow::Borrowed(w),
        Err(_) => std::borrow::Cow::Owned(
            src.chunks_exact(std::mem::size_of::<W>()).map(bytemuck::pod_read_unaligned).collect(),
        ),
    };
    let src = words.as_ref();
    let count: usize = shape.iter().product();
    let mut out = vec![W::zeroed(); count];
    let dst = out.as_mut_slice();
    let rank = shape.len();
    if rank == 0 || dst.is_empty() {
        dst.copy_from_slice(&src[..dst.len()]);
        return out;
    }
    let (inner, inner_stride) = (shape[rank - 1], pst[rank - 1]);
    let mut idx = vec![0usize; rank - 1];
    let mut base = 0usize;
    for row in dst.chunks_exact_mut(inner) {
        for (j, d) in row.iter_mut().enumerate() {
            *d = src[base + j * inner_stride];
        }
        for a in (0..rank - 1).rev() {
            idx[a] += 1;
            base += pst[a];
            if idx[a] < shape[a] {
                break;
            }
            base -= pst[a] * shape[a];
            idx[a] = 0;
        }
    }
    out
}

/// Joins tensors along `axis`.
pub fn concat(xs: &[&Tensor<'_>], axis: usize, out: &[usize]) -> Result<Tensor<'static>> {
    let first = xs.first().ok_or_else(|| CpuError::NotImplemented("Concat of nothing".into()))?;
    let size = first.dt().size_of();
    let outer: usize = out[..axis].iter().product();
    let packed: Vec<std::borrow::Cow<'_, [u8]>> = xs.iter().map(|x| packed_bytes(x)).collect::<Result<_>>()?;
    let chunks: Vec<(&[u8], usize)> =
        packed.iter().zip(xs).map(|(p, x)| (p.as_ref(), x.shape()[axis..].iter().product::<usize>() * size)).collect();
    let mut r = Vec::with_capacity(out.iter().product::<usize>() * size);
    for o in 0..outer {
        for (bytes, chunk) in &chunks {
            r.extend_from_slice(&bytes[o * chunk..(o + 1) * chunk]);
        }
    }
    Ok(crate::storage::tensor_from_bytes(first.dt(), out, &r)?)
}

/// Cuts `x` along `axis` into parts of the given sizes.
pub fn split(x: &Tensor<'_>, axis: usize, sizes: &[usize]) -> Result<Vec<Tensor<'static>>> {
    // Each part through `slice`, so that it is written where the executor offers (the host arena's rule 2).
    let (mut starts, steps) = (vec![0i64; x.shape().len()], vec![1i64; x.shape().len()]);
    let mut parts = Vec::with_capacity(sizes.len());
    for &s in sizes {
        let mut shape = x.shape().to_vec();
        shape[axis] = s;
        parts.push(slice(x, &starts, &steps, &shape)?);
        starts[axis] += s as i64;
    }
    Ok(parts)
}

/// Strided slice: for each listed axis, elements `start, start+step, …` (resolved bounds), `out` elements long.
pub fn slice(x: &Tensor<'_>, starts: &[i64], steps: &[i64], out: &[usize]) -> Result<Tensor<'static>> {
    let st = strides(x.shape());
    gather_elements(x, out, |idx| {
        idx.iter().enumerate().map(|(a, &i)| (starts[a] + i as i64 * steps[a]) as usize * st[a]).sum()
    })
}

/// Gathers slices of `x` along `axis` at `indices` (negative indices count from the end).
pub fn gather(x: &Tensor<'_>, axis: usize, indices: &Tensor<'_>, out: &[usize]) -> Result<Tensor<'static>> {
    let dim = x.shape()[axis] as i64;
    let idx: Vec<i64> = match indices.dt() {
        DatumType::I32 => indices.to_vec::<i32>()?.into_iter().map(i64::from).collect(),
        _ => indices.to_vec::<i64>()?,
    };
    let mut resolved = Vec::with_capacity(idx.len());
    for &i in &idx {
        let j = if i < 0 { i + dim } else { i };
        if !(0..dim).contains(&j) {
            return Err(CpuError::NotImplemented(format!("Gather index {i} is out of range for an axis of {dim}")));
        }
        resolved.push(j as usize);
    }
    let st = strides(x.shape());
    let ist = strides(indices.shape());
    let irank = indices.shape().len();
    gather_elements(x, out, |o| {
        let k: usize = o[axis..axis + irank].iter().zip(&ist).map(|(&i, &s)| i * s).sum();
        let before: usize = o[..axis].iter().zip(&st).map(|(&i, &s)| i * s).sum();
        let after: usize = o[axis + irank..].iter().zip(&st[axis + 1..]).map(|(&i, &s)| i * s).sum();
        before + resolved[k] * st[axis] + after
    })
}

/// Repeats `x` along each axis.
pub fn tile(x: &Tensor<'_>, out: &[usize]) -> Result<Tensor<'static>> {
    let st = strides(x.shape());
    let shape = x.shape().to_vec();
    gather_elements(x, out, |o| o.iter().enumerate().map(|(a, &i)| (i % shape[a]) * st[a]).sum())
}

/// How Pad fills.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PadKind {
    /// A constant.
    Constant,
    /// Mirror, edge not repeated.
    Reflect,
    /// Repeat the edge.
    Edge,
    /// Wrap around.
    Wrap,
}

/// Pads (or, with negative pads, crops) `x`; `begins[a]` elements before axis `a`, to `out`.
pub fn pad(
    x: &Tensor<'_>,
    begins: &[i64],
    kind: PadKind,
    value: Option<&Tensor<'_>>,
    out: &[usize],
) -> Result<Tensor<'static>> {
    let size = x.dt().size_of();
    let fill: Vec<u8> = match value {
        Some(v) => v.to_row_major()?.as_bytes()?.get(..size).map(<[u8]>::to_vec).unwrap_or_else(|| vec![0; size]),
        None => vec![0; size],
    };
    let shape = x.shape().to_vec();
    if kind != PadKind::Constant && shape.iter().zip(out).any(|(&d, &o)| d == 0 && o > 0) {
        return Err(CpuError::NotImplemented("Pad of an empty axis in reflect, edge or wrap mode".into()));
    }
    let st = strides(&shape);
    let src = packed_bytes(x)?;
    let count: usize = out.iter().product();
    let mut r = Vec::with_capacity(count * size);
    let mut idx = vec![0usize; out.len()];
    for _ in 0..count {
        let mut offset = Some(0usize);
        for a in 0..out.len() {
            let d = shape[a] as i64;
            let mut i = idx[a] as i64 - begins[a];
            if !(0..d).contains(&i) {
                i = match kind {
                    PadKind::Constant => {
                        offset = None;
                        break;
                    }
                    PadKind::Edge => i.clamp(0, d - 1),
                    PadKind::Wrap => i.rem_euclid(d),
                    PadKind::Reflect => {
                        if d == 1 {
                            0
                        } else {
                            let period = 2 * (d - 1);
                            let m = i.rem_euclid(period);
                            if m < d {
                                m
                            } else {
                                period - m
                            }
                        }
                    }
                };
            }
            offset = offset.map(|o| o + i as usize * st[a]);
        }
        match offset {
            Some(o) => r.extend_from_slice(&src[o * size..(o + 1) * size]),
            None => r.extend_from_slice(&fill),
        }
        for a in (0..out.len()).rev() {
            idx[a] += 1;
            if idx[a] < out[a] {
                break;
            }
            idx[a] = 0;
        }
    }
    Ok(crate::storage::tensor_from_bytes(x.dt(), out, &r)?)
}

/// Broadcasts `x` to `out` (Expand).
pub fn expand(x: &Tensor<'_>, out: &[usize]) -> Result<Tensor<'static>> {
    let st = broadcast::strides_for(x.shape(), out);
    gather_elements(x, out, |o| o.iter().zip(&st).map(|(&i, &s)| i * s).sum())
}
