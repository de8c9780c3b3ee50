//! `TopK`: the `k` largest or smallest elements of each lane along an axis, with their indices.
//!
//! Each lane is selected (`select_nth_unstable_by`, linear on average) and only its first `k` sorted, so a small
//! `k` over a long axis (a classifier's top 5 of 1,000) costs about one pass. Ties keep index order, and a NaN
//! counts as larger than every number (onnxruntime's order), so results are the same on every run.

use std::cmp::Ordering;

/// `a` against `b`, NaN above every number and equal to NaN.
fn order<T: PartialOrd>(a: &T, b: &T) -> Ordering {
    #[allow(clippy::eq_op)]
    let nan = |v: &T| v != v;
    a.partial_cmp(b).unwrap_or_else(|| nan(a).cmp(&nan(b)))
}

/// Writes the `k` largest (`largest`) or smallest elements of each lane of `x` (of `shape`) along `axis` into
/// `values`, and their positions along the axis into `indices` (both of `shape` with `k` along `axis`), sorted.
pub fn top_k<T: Copy + PartialOrd>(
    x: &[T],
    shape: &[usize],
    axis: usize,
    k: usize,
    largest: bool,
    values: &mut [T],
    indices: &mut [i64],
) {
    let n = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let outer: usize = shape[..axis].iter().product();
    if k == 0 || n == 0 {
        return;
    }
    let mut lane: Vec<usize> = Vec::with_capacity(n);
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| x[(o * n + j) * inner + i];
            let rank = |a: &usize, b: &usize| {
                let by_value = order(&at(*a), &at(*b));
                let by_value = if largest { by_value.reverse() } else { by_value };
                by_value.then(a.cmp(b))
            };
            lane.clear();
            lane.extend(0..n);
            if k < n {
                lane.select_nth_unstable_by(k - 1, rank);
            }
            lane[..k].sort_unstable_by(rank);
            for (j, &p) in lane[..k].iter().enumerate() {
                let to = (o * k + j) * inner + i;
                values[to] = at(p);
                indices[to] = p as i64;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_largest_in_order_with_ties_by_index() {
        let x = [1.0f32, 5.0, 3.0, 5.0, f32::NAN, 0.0];
        let (mut v, mut i) = ([0.0f32; 3], [0i64; 3]);
        top_k(&x, &[6], 0, 3, true, &mut v, &mut i);
        assert!(v[0].is_nan());
        assert_eq!((&v[1..], i), (&[5.0, 5.0][..], [4, 1, 3]));
        top_k(&x, &[6], 0, 3, false, &mut v, &mut i);
        assert_eq!((v, i), ([0.0, 1.0, 3.0], [5, 0, 2]));
    }

    #[test]
    fn works_along_an_inner_axis() {
        // [2, 3, 2]: lanes along axis 1.
        let x = [1, 9, 2, 8, 3, 7, 6, 4, 5, 5, 4, 6];
        let (mut v, mut i) = ([0i32; 4], [0i64; 4]);
        top_k(&x, &[2, 3, 2], 1, 1, true, &mut v, &mut i);
        assert_eq!((v, i), ([3, 9, 6, 6], [2, 0, 0, 2]));
    }
}
