//! Index-addressed reads and writes: ONNX `ScatterElements` (and the older `Scatter`), `ScatterND` and `GatherND`
//! on packed row-major data. Indices are resolved to element offsets first (negative ones count from the end of
//! their axis; one out of range is an error naming it), then the elements move.

use crate::error::{CpuError, Result};

/// How a scattered update meets the element it lands on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Combine {
    /// The update replaces it (the last of duplicate indices wins).
    Replace,
    /// Summed.
    Add,
    /// Multiplied.
    Mul,
    /// The larger.
    Max,
    /// The smaller.
    Min,
}

fn strides(shape: &[usize]) -> Vec<usize> {
    let mut st = vec![1usize; shape.len()];
    for a in (0..shape.len().saturating_sub(1)).rev() {
        st[a] = st[a + 1] * shape[a + 1];
    }
    st
}

fn resolve(i: i64, dim: usize, what: &str) -> Result<usize> {
    let d = dim as i64;
    let j = if i < 0 { i + d } else { i };
    if (0..d).contains(&j) {
        Ok(j as usize)
    } else {
        Err(CpuError::NotImplemented(format!("{what} index {i} is out of range for an axis of {dim}")))
    }
}

/// For `ScatterElements`: the offset in data of each update element (indices and updates share a shape of
/// data's rank; the index replaces the position along `axis`).
pub fn element_targets(data: &[usize], axis: usize, indices: &[i64], shape: &[usize]) -> Result<Vec<usize>> {
    let st = strides(data);
    let rank = shape.len();
    let mut pos = vec![0usize; rank];
    let mut out = Vec::with_capacity(indices.len());
    for &i in indices {
        let j = resolve(i, data[axis], "ScatterElements")?;
        out.push((0..rank).map(|a| if a == axis { j } else { pos[a] } * st[a]).sum());
        for a in (0..rank).rev() {
            pos[a] += 1;
            if pos[a] < shape[a] {
                break;
            }
            pos[a] = 0;
        }
    }
    Ok(out)
}

/// The offset in data of each `k`-tuple of `indices` (shape `[…, k]`), with the length of the slice each
/// addresses, looking at data from axis `batch` on within batch `b` of `batches` (`GatherND`'s `batch_dims`).
pub fn tuple_offsets(data: &[usize], batch: usize, indices: &[i64], shape: &[usize]) -> Result<(Vec<usize>, usize)> {
    let k = *shape.last().unwrap_or(&0);
    let inner = &data[batch..];
    if k > inner.len() {
        return Err(CpuError::NotImplemented(format!("index tuples of {k} for data of shape {data:?}")));
    }
    let st = strides(inner);
    let per_batch: usize = inner.iter().product();
    let slice: usize = inner[k..].iter().product();
    let batches: usize = data[..batch].iter().product::<usize>().max(1);
    let tuples =
        indices.len().checked_div(k).unwrap_or_else(|| shape[..shape.len().saturating_sub(1)].iter().product());
    let per = tuples / batches;
    let mut out = Vec::with_capacity(tuples);
    for t in 0..tuples {
        let mut off = (t / per.max(1)) * per_batch;
        for a in 0..k {
            off += resolve(indices[t * k + a], inner[a], "ND")? * st[a];
        }
        out.push(off);
    }
    Ok((out, slice))
}

/// `data` with each update combined into the element at its target.
pub fn scatter<T: super::dtype::Arith>(data: &[T], updates: &[T], targets: &[usize], how: Combine) -> Vec<T> {
    let mut y = data.to_vec();
    for (&u, &t) in updates.iter().zip(targets) {
        let v = y[t];
        y[t] = match how {
            Combine::Replace => u,
            Combine::Add => v.add(u),
            Combine::Mul => v.mul(u),
            Combine::Max => {
                if u > v || u.is_nan() {
                    u
                } else {
                    v
                }
            }
            Combine::Min => {
                if u < v || u.is_nan() {
                    u
                } else {
                    v
                }
            }
        };
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_targets_replace_the_axis_and_wrap_negatives() {
        // data [3, 3], indices [[1, 0, 2], [0, 2, 1]] along axis 0.
        let t = element_targets(&[3, 3], 0, &[1, 0, 2, 0, 2, -2], &[2, 3]).unwrap();
        assert_eq!(t, [3, 1, 8, 0, 7, 5]);
        assert!(element_targets(&[3, 3], 1, &[3], &[1, 1]).is_err());
    }

    #[test]
    fn tuples_address_slices_per_batch() {
        // data [2, 2, 2], one tuple per batch of one index (batch_dims 1): slices of 2.
        let (off, slice) = tuple_offsets(&[2, 2, 2], 1, &[1, 0], &[2, 1]).unwrap();
        assert_eq!((off, slice), (vec![2, 4], 2));
        // No batch, tuples of 2 into [2, 2]: single elements.
        let (off, slice) = tuple_offsets(&[2, 2], 0, &[0, 0, 1, 1], &[2, 2]).unwrap();
        assert_eq!((off, slice), (vec![0, 3], 1));
    }

    #[test]
    fn reductions_combine_duplicates() {
        let d = [1.0f32, 2.0, 3.0];
        assert_eq!(scatter(&d, &[5.0, 7.0], &[1, 1], Combine::Replace), [1.0, 7.0, 3.0]);
        assert_eq!(scatter(&d, &[5.0, 7.0], &[1, 1], Combine::Add), [1.0, 14.0, 3.0]);
        assert_eq!(scatter(&d, &[5.0, 7.0], &[1, 1], Combine::Mul), [1.0, 70.0, 3.0]);
        assert_eq!(scatter(&d, &[5.0, 0.5], &[1, 2], Combine::Max), [1.0, 5.0, 3.0]);
        assert_eq!(scatter(&d, &[5.0, 0.5], &[1, 2], Combine::Min), [1.0, 2.0, 0.5]);
    }
}
