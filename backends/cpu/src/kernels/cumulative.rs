//! Running sums and products along one axis (ONNX `CumSum`, `CumProd`), for every numeric datum type, on packed
//! row-major data.

use super::dtype::Arith;

/// How a running total is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cumulation {
    /// Products instead of sums.
    pub product: bool,
    /// Each element gets the total of those before it (the identity for the first).
    pub exclusive: bool,
    /// From the end of the axis towards its start.
    pub reverse: bool,
}

/// The running totals of `x` (shape `shape`) along `axis`: `y[…, k, …]` combines `x` at the positions up to `k`
/// (from `k` on with `reverse`; `k` itself left out with `exclusive`). Integers wrap, as [`Arith`] does.
///
/// # Panics
/// If `axis` is not an axis of `shape` or `x` does not have `shape`'s element count.
pub fn cumulate<T: Arith>(x: &[T], shape: &[usize], axis: usize, how: Cumulation) -> Vec<T> {
    assert!(axis < shape.len(), "cumulate: axis {axis} of {shape:?}");
    assert_eq!(x.len(), shape.iter().product::<usize>(), "cumulate: element count");
    let n = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let outer: usize = shape[..axis].iter().product();
    let identity = if how.product { T::from_f64(1.0) } else { T::zero() };
    let mut y = vec![identity; x.len()];
    for o in 0..outer {
        for i in 0..inner {
            let mut acc = identity;
            for step in 0..n {
                let k = if how.reverse { n - 1 - step } else { step };
                let at = (o * n + k) * inner + i;
                let next = if how.product { acc.mul(x[at]) } else { acc.add(x[at]) };
                y[at] = if how.exclusive { acc } else { next };
                acc = next;
            }
        }
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUM: Cumulation = Cumulation { product: false, exclusive: false, reverse: false };

    #[test]
    fn sums_and_products_each_way_along_an_inner_axis() {
        // [2, 3]: along axis 1.
        let x = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        assert_eq!(cumulate(&x, &[2, 3], 1, SUM), [1.0, 3.0, 6.0, 4.0, 9.0, 15.0]);
        let ex = Cumulation { exclusive: true, ..SUM };
        assert_eq!(cumulate(&x, &[2, 3], 1, ex), [0.0, 1.0, 3.0, 0.0, 4.0, 9.0]);
        let rev = Cumulation { reverse: true, ..SUM };
        assert_eq!(cumulate(&x, &[2, 3], 1, rev), [6.0, 5.0, 3.0, 15.0, 11.0, 6.0]);
        let both = Cumulation { reverse: true, exclusive: true, ..SUM };
        assert_eq!(cumulate(&x, &[2, 3], 1, both), [5.0, 3.0, 0.0, 11.0, 6.0, 0.0]);
        let prod = Cumulation { product: true, ..SUM };
        assert_eq!(cumulate(&x, &[2, 3], 1, prod), [1.0, 2.0, 6.0, 4.0, 20.0, 120.0]);
        // Along axis 0.
        assert_eq!(cumulate(&x, &[2, 3], 0, SUM), [1.0, 2.0, 3.0, 5.0, 7.0, 9.0]);
    }

    #[test]
    fn integers_wrap() {
        assert_eq!(cumulate(&[100i8, 100, 100], &[3], 0, SUM), [100, -56, 44]);
        let prod = Cumulation { product: true, ..SUM };
        assert_eq!(cumulate(&[16u8, 16, 2], &[3], 0, prod), [16, 0, 0]);
    }
}
