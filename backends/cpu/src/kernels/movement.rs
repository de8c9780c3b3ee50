//! Ops that move elements without arithmetic: Transpose, Concat, Split, Slice, Gather, Tile, Pad and Expand.
//! They work on bytes, one element being `dt.size_of()` bytes, so every datum type is covered by one code path,
//! and write their output straight into its storage (most are one `strided::copy`). Inputs are packed row-major
//! tensors or, where the copy walks a lattice, any view read in place.

use rayon::prelude::*;
use stowage_runtime::{DatumType, Tensor, TensorStorage};

use super::strided::{self, Side};
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

/// Byte steps of a packed row-major `shape` of `size`-byte elements.
fn byte_steps(shape: &[usize], size: usize) -> Vec<isize> {
    strides(shape).into_iter().map(|s| (s * size) as isize).collect()
}

/// `x`'s bytes and the lattice its elements lie on in them, whatever its layout (a transposed or padded view is
/// read in place, not packed first).
fn source<'t>(x: &'t Tensor<'_>) -> Result<(&'t [u8], Side)> {
    let size = x.dt().size_of();
    let bytes = x.storage().materialize()?;
    let (layout, shape) = (x.layout(), x.shape());
    let span = layout.span_bytes(x.dt(), shape)?;
    if !shape.contains(&0) && layout.offset().checked_add(span).is_none_or(|end| end > bytes.len()) {
        return Err(CpuError::NotImplemented(format!(
            "a {shape:?} view of {} bytes over storage of {}",
            span,
            bytes.len()
        )));
    }
    let steps = layout.strides().iter().map(|&s| (s * size) as isize).collect();
    Ok((bytes, Side { base: layout.offset() as isize, steps }))
}

/// A new tensor of `out` whose element `i` is `x`'s at the lattice `read` makes of `x`'s own.
fn lattice(x: &Tensor<'_>, out: &[usize], read: impl FnOnce(&Side) -> Side) -> Result<Tensor<'static>> {
    let size = x.dt().size_of();
    let (src, own) = source(x)?;
    let from = read(&own);
    Ok(crate::storage::tensor_filled(x.dt(), out, |dst| {
        strided::copy(dst, &Side::packed(out, size), src, &from, out, size)
    })?)
}

/// Permutes axes: output axis `i` is input axis `perm[i]`.
pub fn transpose(x: &Tensor<'_>, perm: &[usize]) -> Result<Tensor<'static>> {
    let shape: Vec<usize> = perm.iter().map(|&a| x.shape()[a]).collect();
    lattice(x, &shape, |s| Side { base: s.base, steps: perm.iter().map(|&a| s.steps[a]).collect() })
}

/// Joins tensors along `axis`. An input the plan placed where the output has its bytes (`Buffer::inside`: its
/// producer wrote it into the output's region) is not copied; the others are. On several threads, a large output
/// is copied in bands of its inner positions, each thread the same band of every row (`cols.rs`), as the
/// convolutions around it split their output positions.
pub fn concat(xs: &[&Tensor<'_>], axis: usize, out: &[usize], threads: usize) -> Result<Tensor<'static>> {
    Ok(join(xs, axis, out, threads)?.0)
}

/// [`concat`], and the bytes it copied.
fn join(xs: &[&Tensor<'_>], axis: usize, out: &[usize], threads: usize) -> Result<(Tensor<'static>, usize)> {
    let first = xs.first().ok_or_else(|| CpuError::NotImplemented("Concat of nothing".into()))?;
    let size = first.dt().size_of();
    let outer: usize = out[..axis].iter().product();
    let inner = out[axis + 1..].iter().product::<usize>() * size;
    // Bytes of each input per block of the outer axes, and where each starts in the output's block.
    let spans: Vec<usize> = xs.iter().map(|x| x.shape()[axis..].iter().product::<usize>() * size).collect();
    let starts: Vec<usize> = spans.iter().scan(0, |at, &s| Some(std::mem::replace(at, *at + s))).collect();
    let block: usize = spans.iter().sum();
    // Every byte of the output is an input's: in place already, or copied below.
    let mut buf = crate::HostBuffer::joined(first.dt(), out)?;
    let here = buf.region().map(|(arena, offset)| (std::sync::Arc::clone(arena), offset));
    let in_place: Vec<bool> = xs
        .iter()
        .zip(&starts)
        .map(|(x, &at)| {
            let found =
                x.storage().as_any().and_then(|s| s.downcast_ref::<crate::HostBuffer>()).and_then(|h| h.region());
            match (&here, found) {
                (Some((arena, offset)), Some((a, o))) => {
                    outer == 1
                        && std::sync::Arc::ptr_eq(arena, a)
                        && o == offset + at
                        && x.is_row_major()
                        && x.layout().offset() == 0
                }
                _ => false,
            }
        })
        .collect();
    let packed: Vec<Option<std::borrow::Cow<'_, [u8]>>> = xs
        .iter()
        .zip(&in_place)
        .map(|(x, &skip)| (!skip).then(|| packed_bytes(x)).transpose())
        .collect::<Result<_>>()?;
    let dst = buf.host_bytes_mut()?;
    if outer * block != dst.len() || (inner > 0 && spans.iter().any(|s| s % inner != 0)) {
        return Err(CpuError::NotImplemented(format!(
            "Concat: inputs of {} bytes for an output of {}",
            outer * block,
            dst.len()
        )));
    }
    let copied = outer * packed.iter().zip(&spans).filter(|(p, _)| p.is_some()).map(|(_, s)| s).sum::<usize>();
    if dst.is_empty() {
        return Ok((buf.into_tensor()?, 0));
    }
    if threads > 1 && dst.len() >= PARALLEL_BYTES && inner >= 2 * BAND_BYTES {
        // The output's rows to copy (each an input's row of `inner` bytes): the output row and its source.
        let rows: Vec<(usize, &[u8])> = (0..outer)
            .flat_map(|o| {
                let (spans, starts) = (&spans, &starts);
                packed.iter().enumerate().filter_map(|(k, p)| Some((k, p.as_deref()?))).flat_map(move |(k, bytes)| {
                    let first = (o * block + starts[k]) / inner;
                    bytes[o * spans[k]..(o + 1) * spans[k]].chunks(inner).enumerate().map(move |(j, r)| (first + j, r))
                })
            })
            .collect();
        let per = inner.div_ceil(threads).next_multiple_of(BAND_BYTES);
        let bands = super::cols::Cols::whole(dst, outer * block / inner, inner, inner).split(per);
        bands.into_par_iter().for_each(|mut band| {
            let (c0, w) = (band.first_column(), band.width());
            for &(r, src) in &rows {
                band.row(r).copy_from_slice(&src[c0..c0 + w]);
            }
        });
        return Ok((buf.into_tensor()?, copied));
    }
    for o in 0..outer {
        for (k, bytes) in packed.iter().enumerate().filter_map(|(k, p)| Some((k, p.as_deref()?))) {
            let at = o * block + starts[k];
            dst[at..at + spans[k]].copy_from_slice(&bytes[o * spans[k]..(o + 1) * spans[k]]);
        }
    }
    Ok((buf.into_tensor()?, copied))
}

/// Output bytes from which [`concat`] copies on several threads.
const PARALLEL_BYTES: usize = 1 << 16;
/// Bytes of a row per band of [`concat`] on several threads, at least: a cache line.
const BAND_BYTES: usize = 64;

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
    let empty = out.contains(&0);
    lattice(x, out, |s| Side {
        base: if empty {
            s.base
        } else {
            s.base + starts.iter().zip(&s.steps).map(|(&b, &t)| b as isize * t).sum::<isize>()
        },
        steps: steps.iter().zip(&s.steps).map(|(&k, &t)| k as isize * t).collect(),
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
    // Each index takes one contiguous chunk (the axes after `axis`) of each outer slice.
    let size = x.dt().size_of();
    let outer: usize = x.shape()[..axis].iter().product();
    let chunk = x.shape()[axis + 1..].iter().product::<usize>() * size;
    let src = packed_bytes(x)?;
    Ok(crate::storage::tensor_filled(x.dt(), out, |dst| {
        let mut at = 0;
        for o in 0..outer {
            for &j in &resolved {
                let from = (o * dim as usize + j) * chunk;
                dst[at..at + chunk].copy_from_slice(&src[from..from + chunk]);
                at += chunk;
            }
        }
    })?)
}

/// ONNX `GatherElements`: output element at position `p` (of the indices' shape) is `x` at `p` with axis `axis`
/// replaced by `indices[p]` (negative indices count from the end).
pub fn gather_elements(x: &Tensor<'_>, axis: usize, indices: &Tensor<'_>) -> Result<Tensor<'static>> {
    let dim = x.shape()[axis] as i64;
    let idx: Vec<i64> = match indices.dt() {
        DatumType::I32 => indices.to_vec::<i32>()?.into_iter().map(i64::from).collect(),
        _ => indices.to_vec::<i64>()?,
    };
    let out = indices.shape().to_vec();
    let rank = out.len();
    // Packed strides of x, in elements.
    let mut st = vec![1usize; rank];
    for a in (0..rank.saturating_sub(1)).rev() {
        st[a] = st[a + 1] * x.shape()[a + 1];
    }
    let size = x.dt().size_of();
    let src = packed_bytes(x)?;
    let mut pos = vec![0usize; rank];
    let mut offsets = Vec::with_capacity(idx.len());
    for &i in &idx {
        let j = if i < 0 { i + dim } else { i };
        if !(0..dim).contains(&j) {
            return Err(CpuError::NotImplemented(format!(
                "GatherElements index {i} is out of range for an axis of {dim}"
            )));
        }
        let base: usize = (0..rank).filter(|&a| a != axis).map(|a| pos[a] * st[a]).sum();
        offsets.push((base + j as usize * st[axis]) * size);
        for a in (0..rank).rev() {
            pos[a] += 1;
            if pos[a] < out[a] {
                break;
            }
            pos[a] = 0;
        }
    }
    Ok(crate::storage::tensor_filled(x.dt(), &out, |dst| {
        for (d, &from) in dst.chunks_exact_mut(size).zip(&offsets) {
            d.copy_from_slice(&src[from..from + size]);
        }
    })?)
}

/// Repeats `x` along each axis: axis `a` of the output is `out[a] / x[a]` copies of `x`'s, so the output is `x`
/// broadcast into the shape `[r0, x0, r1, x1, …]`.
pub fn tile(x: &Tensor<'_>, out: &[usize]) -> Result<Tensor<'static>> {
    let mut shape = Vec::with_capacity(2 * out.len());
    for (a, &n) in out.iter().enumerate() {
        shape.extend([n.checked_div(x.shape()[a]).unwrap_or(0), x.shape()[a]]);
    }
    let size = x.dt().size_of();
    let (src, own) = source(x)?;
    let from = Side { base: own.base, steps: own.steps.iter().flat_map(|&t| [0, t]).collect() };
    Ok(crate::storage::tensor_filled(x.dt(), out, |dst| {
        strided::copy(dst, &Side::packed(&shape, size), src, &from, &shape, size)
    })?)
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
    if kind == PadKind::Constant {
        // The fill everywhere, then the part of `x` that stays (all of it, or less where a pad is negative) as one
        // lattice copy into the interior.
        let (src, own) = source(x)?;
        let (xst, ost) = (own.steps, byte_steps(out, size));
        let (mut region, mut from, mut to) = (Vec::with_capacity(out.len()), own.base, 0isize);
        for a in 0..out.len() {
            let b = begins[a];
            let (lo, hi) = (b.max(0), (shape[a] as i64 + b).min(out[a] as i64));
            region.push((hi - lo).max(0) as usize);
            to += lo as isize * ost[a];
            from += (lo - b) as isize * xst[a];
        }
        return Ok(crate::storage::tensor_filled(x.dt(), out, |dst| {
            if fill.iter().any(|&b| b != 0) {
                for e in dst.chunks_exact_mut(size) {
                    e.copy_from_slice(&fill);
                }
            }
            strided::copy(dst, &Side { base: to, steps: ost }, src, &Side { base: from, steps: xst }, &region, size)
        })?);
    }
    // Reflect, edge and wrap: each axis's source offset for every output index, once; then each output row of the
    // last axis is copied through its table (one lookup per element, no per-axis arithmetic).
    let st = strides(&shape);
    let src = packed_bytes(x)?;
    let count: usize = out.iter().product();
    let source = |o: usize, a: usize| -> usize {
        let d = shape[a] as i64;
        let i = o as i64 - begins[a];
        let i = if (0..d).contains(&i) {
            i
        } else {
            match kind {
                PadKind::Edge => i.clamp(0, d - 1),
                PadKind::Wrap => i.rem_euclid(d),
                PadKind::Reflect if d == 1 => 0,
                // (Constant pads returned above.)
                PadKind::Reflect | PadKind::Constant => {
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
        i as usize * st[a]
    };
    let tables: Vec<Vec<usize>> = (0..out.len()).map(|a| (0..out[a]).map(|o| source(o, a)).collect()).collect();
    let mut r = vec![0u8; count * size];
    let Some((row, outer_tables)) = tables.split_last() else {
        // A scalar: itself.
        r.copy_from_slice(&src[..size]);
        return Ok(crate::storage::tensor_from_bytes(x.dt(), out, &r)?);
    };
    let mut idx = vec![0usize; outer_tables.len()];
    for dst in r.chunks_exact_mut((row.len() * size).max(1)).take(if row.is_empty() { 0 } else { count / row.len() }) {
        let base: usize = idx.iter().zip(outer_tables).map(|(&i, t)| t[i]).sum();
        for (d, &t) in dst.chunks_exact_mut(size).zip(row) {
            let o = (base + t) * size;
            d.copy_from_slice(&src[o..o + size]);
        }
        for a in (0..idx.len()).rev() {
            idx[a] += 1;
            if idx[a] < outer_tables[a].len() {
                break;
            }
            idx[a] = 0;
        }
    }
    Ok(crate::storage::tensor_from_bytes(x.dt(), out, &r)?)
}

/// Broadcasts `x` to `out` (Expand): axes of one element (and the missing leading ones) step by zero.
pub fn expand(x: &Tensor<'_>, out: &[usize]) -> Result<Tensor<'static>> {
    let pad = out.len() - x.shape().len();
    lattice(x, out, |s| Side {
        base: s.base,
        steps: (0..out.len()).map(|a| if a < pad || x.shape()[a - pad] == 1 { 0 } else { s.steps[a - pad] }).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::concat;
    use crate::storage::tensor_from;

    /// Two threads copy bands of every row in place of one thread copying in order: the same bytes, for a join
    /// along the channels of one image, along rows with several outer blocks, and along the last axis.
    #[test]
    fn concat_on_two_threads_gives_the_same_bytes() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        // (first shape, second shape, axis)
        type Case<'a> = (&'a [usize], &'a [usize], usize);
        let cases: [Case<'_>; 3] = [
            (&[1, 3, 40, 70], &[1, 5, 40, 70], 1),
            (&[2, 4, 30, 81], &[2, 4, 17, 81], 2),
            (&[3, 90, 67], &[3, 90, 70], 2),
        ];
        for (a_shape, b_shape, axis) in cases {
            let a: Vec<f32> = (0..a_shape.iter().product::<usize>()).map(|i| i as f32).collect();
            let b: Vec<f32> = (0..b_shape.iter().product::<usize>()).map(|i| -(i as f32)).collect();
            let (a, b) = (tensor_from(a_shape, &a).expect("a"), tensor_from(b_shape, &b).expect("b"));
            let mut out = a_shape.to_vec();
            out[axis] += b_shape[axis];
            let one = concat(&[&a, &b], axis, &out, 1).expect("one thread");
            let two = pool.install(|| concat(&[&a, &b], axis, &out, 2)).expect("two threads");
            assert!(one.len() * 4 >= super::PARALLEL_BYTES, "{out:?}: large enough to split");
            assert_eq!(one.to_vec::<f32>().expect("one"), two.to_vec::<f32>().expect("two"), "{out:?} along {axis}");
            // And against the definition, at a few places.
            let (outer, a_rows) = (out[..axis].iter().product::<usize>(), a_shape[axis..].iter().product::<usize>());
            let got = two.to_vec::<f32>().expect("two");
            let row = out[axis..].iter().product::<usize>();
            for o in 0..outer {
                assert_eq!(got[o * row], (o * a_rows) as f32, "{out:?}: block {o} starts with a");
                assert_eq!(got[o * row + a_rows], -((o * (row - a_rows)) as f32), "{out:?}: then b");
            }
        }
    }

    /// Inputs written where the output has them (the plan's `Buffer::inside`) are not copied; an input elsewhere
    /// is, on one thread and on two.
    #[test]
    fn a_concat_copies_only_what_is_not_in_place() {
        use crate::arena::{offer, HostArena};
        use stowage_runtime::DatumType;
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let (a_shape, b_shape, out) = ([1, 16, 40, 40], [1, 8, 40, 40], [1, 24, 40, 40]);
        let (a_bytes, b_bytes) = (16 * 1600 * 4, 8 * 1600 * 4);
        let arena = HostArena::new(a_bytes + b_bytes).expect("arena");
        let make = |shape: &[usize], at: Option<(usize, usize)>, sign: f32| {
            let _offer = offer(&arena, &[at]);
            let mut t = crate::storage::output(DatumType::F32, shape).expect("made");
            t.as_slice_mut::<f32>().expect("write").iter_mut().enumerate().for_each(|(i, v)| *v = sign * i as f32);
            t
        };
        let a = make(&a_shape, Some((0, a_bytes)), 1.0);
        for (b_at, threads, copied) in [(Some((a_bytes, b_bytes)), 1, 0), (None, 1, b_bytes), (None, 2, b_bytes)] {
            let b = make(&b_shape, b_at, -1.0);
            // The offer is the running thread's, as in a program's run (`Program::run_here`).
            let region = Some((0, a_bytes + b_bytes));
            let (got, n) = pool
                .install(|| {
                    let _offer = offer(&arena, &[region]);
                    super::join(&[&a, &b], 1, &out, threads)
                })
                .expect("joins");
            assert_eq!(n, copied, "b at {b_at:?}, {threads} threads: bytes copied");
            let got = got.to_vec::<f32>().expect("read");
            let want: Vec<f32> = (0..16 * 1600).map(|i| i as f32).chain((0..8 * 1600).map(|i| -(i as f32))).collect();
            assert_eq!(got, want, "b at {b_at:?}, {threads} threads");
        }
    }
}
