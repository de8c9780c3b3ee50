//! Reductions: ONNX `ReduceMax`, `ReduceMean`, `ReduceMin`, `ReduceSum` ([`reduce`]) and `ArgMax` / `ArgMin`
//! ([`argmax`], [`argmin`]).
//!
//! Input and output are packed row-major. The reduced axes are either dropped from the output or kept with size
//! 1; both give the same element order, so the kernels only need the input shape.

use core::fmt::Debug;

/// Which reduction [`reduce`] computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceKind {
    /// Largest element (NaN propagates for floats); `−∞` / the type's minimum for an empty reduction.
    Max,
    /// Arithmetic mean. For integers, the sum (wrapping in the element type) divided by the count, truncated
    /// toward zero as numpy's `mean(dtype=int)` does; an empty reduction gives NaN for floats and 0 for integers.
    Mean,
    /// Smallest element (NaN propagates for floats); `+∞` / the type's maximum for an empty reduction.
    Min,
    /// Sum (wrapping for integers); 0 for an empty reduction.
    Sum,
    /// Product (wrapping in the element type for integers); 1 for an empty reduction.
    Prod,
}

/// Element types [`reduce`] supports: `f32`, `f64`, `i8`…`i64`, `u8`…`u64`. Each has an accumulator type
/// (f64 for floats, so f32 sums are accurate; i64 / u64 with wrapping adds for integers, which wraps exactly like
/// adding in the narrow type once converted back) and the identities of max and min.
pub trait ReduceElem: Copy + Send + Sync + Debug + 'static {
    /// Accumulator type.
    type Acc: Copy + Debug;
    /// Identity of addition.
    const ACC_ZERO: Self::Acc;
    /// Identity of multiplication.
    const ACC_ONE: Self::Acc;
    /// Result of `Max` over nothing: `−∞` or the type's minimum.
    const LOWEST: Self::Acc;
    /// Result of `Min` over nothing: `+∞` or the type's maximum.
    const HIGHEST: Self::Acc;
    /// Widens an element.
    fn to_acc(self) -> Self::Acc;
    /// Narrows an accumulator back to an element (wrapping for integers).
    fn from_acc(acc: Self::Acc) -> Self;
    /// `a + b` (wrapping for integers).
    fn add(a: Self::Acc, b: Self::Acc) -> Self::Acc;
    /// `a · b` (wrapping for integers, which wraps exactly like multiplying in the narrow type).
    fn mul(a: Self::Acc, b: Self::Acc) -> Self::Acc;
    /// Larger of two (NaN if either is NaN).
    fn max(a: Self::Acc, b: Self::Acc) -> Self::Acc;
    /// Smaller of two (NaN if either is NaN).
    fn min(a: Self::Acc, b: Self::Acc) -> Self::Acc;
    /// `sum / count` as an element (truncating toward zero for integers, after wrapping `sum` to the type).
    fn mean(sum: Self::Acc, count: usize) -> Self;
}

macro_rules! impl_reduce_float {
    ($t:ty) => {
        impl ReduceElem for $t {
            type Acc = f64;
            const ACC_ZERO: f64 = 0.0;
            const ACC_ONE: f64 = 1.0;
            const LOWEST: f64 = f64::NEG_INFINITY;
            const HIGHEST: f64 = f64::INFINITY;
            #[inline]
            fn to_acc(self) -> f64 {
                self as f64
            }
            #[inline]
            fn from_acc(acc: f64) -> Self {
                acc as $t
            }
            #[inline]
            fn add(a: f64, b: f64) -> f64 {
                a + b
            }
            #[inline]
            fn mul(a: f64, b: f64) -> f64 {
                a * b
            }
            #[inline]
            fn max(a: f64, b: f64) -> f64 {
                if a.is_nan() || b > a || b.is_nan() {
                    if a.is_nan() {
                        a
                    } else {
                        b
                    }
                } else {
                    a
                }
            }
            #[inline]
            fn min(a: f64, b: f64) -> f64 {
                if a.is_nan() || b < a || b.is_nan() {
                    if a.is_nan() {
                        a
                    } else {
                        b
                    }
                } else {
                    a
                }
            }
            #[inline]
            fn mean(sum: f64, count: usize) -> Self {
                (sum / count as f64) as $t
            }
        }
    };
}
impl_reduce_float!(f32);
impl_reduce_float!(f64);

macro_rules! impl_reduce_int {
    ($t:ty, $acc:ty) => {
        impl ReduceElem for $t {
            type Acc = $acc;
            const ACC_ZERO: $acc = 0;
            const ACC_ONE: $acc = 1;
            const LOWEST: $acc = <$t>::MIN as $acc;
            const HIGHEST: $acc = <$t>::MAX as $acc;
            #[inline]
            fn to_acc(self) -> $acc {
                self as $acc
            }
            #[inline]
            fn from_acc(acc: $acc) -> Self {
                acc as $t
            }
            #[inline]
            fn add(a: $acc, b: $acc) -> $acc {
                a.wrapping_add(b)
            }
            #[inline]
            fn mul(a: $acc, b: $acc) -> $acc {
                a.wrapping_mul(b)
            }
            #[inline]
            fn max(a: $acc, b: $acc) -> $acc {
                Ord::max(a, b)
            }
            #[inline]
            fn min(a: $acc, b: $acc) -> $acc {
                Ord::min(a, b)
            }
            #[inline]
            fn mean(sum: $acc, count: usize) -> Self {
                if count == 0 {
                    return 0;
                }
                // Wrap to the element type first (numpy sums in it), then divide toward zero in the wide type.
                ((sum as $t) as $acc / count as $acc) as $t
            }
        }
    };
}
impl_reduce_int!(i8, i64);
impl_reduce_int!(i16, i64);
impl_reduce_int!(i32, i64);
impl_reduce_int!(i64, i64);
impl_reduce_int!(u8, u64);
impl_reduce_int!(u16, u64);
impl_reduce_int!(u32, u64);
impl_reduce_int!(u64, u64);

/// Coalesces the axes of `shape` into runs of adjacent axes that are all reduced or all kept, dropping size-1
/// axes. Returns `(size, reduced)` per run.
fn coalesce(shape: &[usize], axes: &[usize]) -> Vec<(usize, bool)> {
    let mut runs: Vec<(usize, bool)> = Vec::new();
    for (d, &n) in shape.iter().enumerate() {
        if n == 1 {
            continue;
        }
        let red = axes.contains(&d);
        match runs.last_mut() {
            Some((size, r)) if *r == red => *size *= n,
            _ => runs.push((n, red)),
        }
    }
    runs
}

/// Reduces `x` (shape `x_shape`) over `axes` (sorted, unique, each `< x_shape.len()`) into `y`, whose length is
/// the product of the kept axes. An empty `axes` reduces nothing (`y` is a copy of `x`, or the mean/sum/max/min
/// of single elements); callers implementing `noop_with_empty_axes = 0` pass all axes.
///
/// # Panics
/// On invalid axes or slice lengths.
pub fn reduce<T: ReduceElem>(x: &[T], x_shape: &[usize], axes: &[usize], kind: ReduceKind, y: &mut [T]) {
    assert!(axes.windows(2).all(|w| w[0] < w[1]), "reduce: axes must be sorted and unique: {axes:?}");
    assert!(axes.iter().all(|&a| a < x_shape.len()), "reduce: axis out of range: {axes:?} for {x_shape:?}");
    assert_eq!(x.len(), x_shape.iter().product::<usize>(), "reduce: X length");
    let out_len: usize = x_shape.iter().enumerate().filter(|(d, _)| !axes.contains(d)).map(|(_, &n)| n).product();
    assert_eq!(y.len(), out_len, "reduce: Y length");
    let count: usize = axes.iter().map(|&a| x_shape[a]).product();
    let init = match kind {
        ReduceKind::Max => T::LOWEST,
        ReduceKind::Min => T::HIGHEST,
        ReduceKind::Mean | ReduceKind::Sum => T::ACC_ZERO,
        ReduceKind::Prod => T::ACC_ONE,
    };
    // One loop per kind (not a function pointer), so that each inlines its operation.
    let acc = match kind {
        ReduceKind::Max => accumulate(x, x_shape, axes, init, out_len, T::max),
        ReduceKind::Min => accumulate(x, x_shape, axes, init, out_len, T::min),
        ReduceKind::Mean | ReduceKind::Sum => accumulate(x, x_shape, axes, init, out_len, T::add),
        ReduceKind::Prod => accumulate(x, x_shape, axes, init, out_len, T::mul),
    };
    for (yv, &a) in y.iter_mut().zip(&acc) {
        *yv = match kind {
            ReduceKind::Mean => T::mean(a, count),
            _ => T::from_acc(a),
        };
    }
}

/// `op` folded over the reduced axes of `x`, from `init`, into `out_len` accumulators.
fn accumulate<T: ReduceElem>(
    x: &[T],
    x_shape: &[usize],
    axes: &[usize],
    init: T::Acc,
    out_len: usize,
    op: impl Fn(T::Acc, T::Acc) -> T::Acc,
) -> Vec<T::Acc> {
    let mut acc = vec![init; out_len];
    if !x.is_empty() {
        let runs = coalesce(x_shape, axes);
        // Strides of each run in x and in the accumulator (0 for reduced runs).
        let mut x_str = vec![0; runs.len()];
        let mut a_str = vec![0; runs.len()];
        let (mut xs, mut as_) = (1, 1);
        for (i, &(n, red)) in runs.iter().enumerate().rev() {
            x_str[i] = xs;
            xs *= n;
            if !red {
                a_str[i] = as_;
                as_ *= n;
            }
        }
        match runs.split_last() {
            None => acc[0] = op(acc[0], x[0].to_acc()),
            Some((&(inner, inner_red), outer)) => {
                let outer_count: usize = outer.iter().map(|r| r.0).product();
                let mut idx = vec![0usize; outer.len()];
                let (mut xo, mut ao) = (0usize, 0usize);
                for _ in 0..outer_count {
                    let xr = &x[xo..xo + inner];
                    if inner_red {
                        // Eight partial results, each its own chain: one chain of dependent adds waited for each
                        // add (1 ns an element); these overlap, and the compiler vectorises them. Each partial
                        // starts from `init`, the operation's identity, and they are combined in a fixed order,
                        // so a run gives the same bits on any number of threads.
                        let mut part = [init; 8];
                        let chunks = xr.chunks_exact(8);
                        let rest = chunks.remainder();
                        for c in chunks {
                            for (p, &v) in part.iter_mut().zip(c) {
                                *p = op(*p, v.to_acc());
                            }
                        }
                        let pair = |i: usize| op(part[i], part[i + 1]);
                        let whole = op(op(pair(0), pair(2)), op(pair(4), pair(6)));
                        let a = &mut acc[ao];
                        *a = op(*a, whole);
                        for &v in rest {
                            *a = op(*a, v.to_acc());
                        }
                    } else {
                        for (a, &v) in acc[ao..ao + inner].iter_mut().zip(xr) {
                            *a = op(*a, v.to_acc());
                        }
                    }
                    // Advance the outer multi-index.
                    let mut d = outer.len();
                    while d > 0 {
                        d -= 1;
                        idx[d] += 1;
                        xo += x_str[d];
                        ao += a_str[d];
                        if idx[d] < outer[d].0 {
                            break;
                        }
                        xo -= x_str[d] * outer[d].0;
                        ao -= a_str[d] * outer[d].0;
                        idx[d] = 0;
                    }
                }
            }
        }
    }
    acc
}

/// Whether a value is unordered with itself (NaN).
#[inline]
fn unordered<T: PartialOrd>(v: &T) -> bool {
    v.partial_cmp(v).is_none()
}

/// Shared body of [`argmax`] and [`argmin`]: `better(v, best)` says whether `v` beats the current best strictly.
fn arg_reduce<T: PartialOrd + Copy>(
    x: &[T],
    x_shape: &[usize],
    axis: usize,
    select_last_index: bool,
    y: &mut [i64],
    better: impl Fn(&T, &T) -> bool,
) {
    assert!(axis < x_shape.len(), "arg reduce: axis {axis} out of range for {x_shape:?}");
    assert_eq!(x.len(), x_shape.iter().product::<usize>(), "arg reduce: X length");
    let outer: usize = x_shape[..axis].iter().product();
    let n = x_shape[axis];
    let inner: usize = x_shape[axis + 1..].iter().product();
    assert_eq!(y.len(), outer * inner, "arg reduce: Y length");
    if n == 0 {
        y.fill(0);
        return;
    }
    for o in 0..outer {
        for i in 0..inner {
            let at = |k: usize| x[(o * n + k) * inner + i];
            let mut best = at(0);
            let mut best_k = 0;
            let mut best_nan = unordered(&best);
            for k in 1..n {
                let v = at(k);
                if best_nan {
                    // numpy: the first NaN wins (the last one with select_last_index).
                    if select_last_index && unordered(&v) {
                        best_k = k;
                    }
                    continue;
                }
                if unordered(&v) {
                    best = v;
                    best_k = k;
                    best_nan = true;
                } else if better(&v, &best) || (select_last_index && v == best) {
                    best = v;
                    best_k = k;
                }
            }
            y[o * inner + i] = best_k as i64;
        }
    }
}

/// ONNX `ArgMax` along `axis`: the index of the largest element of each slice, the first one on ties (the last
/// with `select_last_index`). As in numpy, a NaN counts as the maximum (the first NaN, or the last with
/// `select_last_index`). `y` has `x`'s shape with `axis` removed or kept as 1.
///
/// # Panics
/// On an invalid axis or slice lengths.
pub fn argmax<T: PartialOrd + Copy>(x: &[T], x_shape: &[usize], axis: usize, select_last_index: bool, y: &mut [i64]) {
    arg_reduce(x, x_shape, axis, select_last_index, y, |v, b| v > b);
}

/// ONNX `ArgMin` along `axis`: like [`argmax`] with the smallest element (NaN still wins, as in numpy).
///
/// # Panics
/// On an invalid axis or slice lengths.
pub fn argmin<T: PartialOrd + Copy>(x: &[T], x_shape: &[usize], axis: usize, select_last_index: bool, y: &mut [i64]) {
    arg_reduce(x, x_shape, axis, select_last_index, y, |v, b| v < b);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Naive reduction over a 3-D tensor, for cross-checking.
    fn naive(x: &[f64], shape: [usize; 3], axes: &[usize], kind: ReduceKind) -> Vec<f64> {
        let keep: Vec<usize> = (0..3).filter(|d| !axes.contains(d)).collect();
        let out_len: usize = keep.iter().map(|&d| shape[d]).product();
        let mut out = vec![Vec::new(); out_len];
        for i in 0..shape[0] {
            for j in 0..shape[1] {
                for k in 0..shape[2] {
                    let idx = [i, j, k];
                    let o = keep.iter().fold(0, |acc, &d| acc * shape[d] + idx[d]);
                    out[o].push(x[(i * shape[1] + j) * shape[2] + k]);
                }
            }
        }
        out.iter()
            .map(|v| match kind {
                ReduceKind::Max => v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                ReduceKind::Min => v.iter().copied().fold(f64::INFINITY, f64::min),
                ReduceKind::Sum => v.iter().sum(),
                ReduceKind::Mean => v.iter().sum::<f64>() / v.len() as f64,
                ReduceKind::Prod => v.iter().product(),
            })
            .collect()
    }

    #[test]
    fn reduce_all_axis_sets() {
        let shape = [3, 4, 5];
        let x: Vec<f64> = (0..60).map(|v| ((v * 37) % 23) as f64 - 11.0).collect();
        let sets: [&[usize]; 8] = [&[], &[0], &[1], &[2], &[0, 1], &[0, 2], &[1, 2], &[0, 1, 2]];
        for axes in sets {
            for kind in [ReduceKind::Max, ReduceKind::Min, ReduceKind::Sum, ReduceKind::Mean, ReduceKind::Prod] {
                let want = naive(&x, shape, axes, kind);
                let mut y = vec![0.0; want.len()];
                reduce(&x, &shape, axes, kind, &mut y);
                for (a, b) in y.iter().zip(&want) {
                    // Relative to the value: products grow large.
                    assert!((a - b).abs() < 1e-12 * b.abs().max(1.0), "{axes:?} {kind:?}: {y:?} vs {want:?}");
                }
                // Same through f32.
                let x32: Vec<f32> = x.iter().map(|&v| v as f32).collect();
                let mut y32 = vec![0.0f32; want.len()];
                reduce(&x32, &shape, axes, kind, &mut y32);
                for (a, b) in y32.iter().zip(&want).filter(|(_, b)| b.abs() < f64::from(f32::MAX)) {
                    assert!((*a as f64 - b).abs() < 1e-5 * b.abs().max(1.0), "{axes:?} {kind:?}");
                }
            }
        }
        // Size-1 axes in the middle.
        let x: Vec<f32> = (0..6).map(|v| v as f32).collect();
        let mut y = [0.0f32; 3];
        reduce(&x, &[2, 1, 3], &[0, 1], ReduceKind::Sum, &mut y);
        assert_eq!(y, [3.0, 5.0, 7.0]);
    }

    #[test]
    fn reduce_integers() {
        // Mean of ints truncates toward zero.
        let x = [-3i32, -4, 5, 6];
        let mut y = [0i32; 2];
        reduce(&x, &[2, 2], &[1], ReduceKind::Mean, &mut y);
        assert_eq!(y, [-3, 5]);
        // i8 sums wrap like numpy's.
        let x = [100i8, 100, 100];
        let mut y = [0i8; 1];
        reduce(&x, &[3], &[0], ReduceKind::Sum, &mut y);
        assert_eq!(y, [44]);
        reduce(&x, &[3], &[0], ReduceKind::Mean, &mut y);
        assert_eq!(y, [14]); // 300 wraps to 44, 44 / 3
        let x = [7u64, u64::MAX, 3];
        let mut y = [0u64; 1];
        reduce(&x, &[3], &[0], ReduceKind::Max, &mut y);
        assert_eq!(y, [u64::MAX]);
        reduce(&x, &[3], &[0], ReduceKind::Min, &mut y);
        assert_eq!(y, [3]);
        let x = [-1i16, 2, -7];
        let mut y = [0i16; 1];
        reduce(&x, &[3], &[0], ReduceKind::Min, &mut y);
        assert_eq!(y, [-7]);
        let x = [1u8, 2];
        let mut y = [0u8; 1];
        reduce(&x, &[2], &[0], ReduceKind::Sum, &mut y);
        assert_eq!(y, [3]);
        let mut y = [0i64; 1];
        reduce(&[4i64, 5], &[2], &[0], ReduceKind::Mean, &mut y);
        assert_eq!(y, [4]);
        let mut y = [0u16; 1];
        reduce(&[9u16, 1], &[2], &[0], ReduceKind::Max, &mut y);
        assert_eq!(y, [9]);
        let mut y = [0u32; 1];
        reduce(&[9u32, 1], &[2], &[0], ReduceKind::Mean, &mut y);
        assert_eq!(y, [5]);
    }

    #[test]
    fn reduce_empty_and_nan() {
        let mut y = [0.0f32; 2];
        reduce::<f32>(&[], &[2, 0], &[1], ReduceKind::Max, &mut y);
        assert_eq!(y, [f32::NEG_INFINITY; 2]);
        reduce::<f32>(&[], &[2, 0], &[1], ReduceKind::Min, &mut y);
        assert_eq!(y, [f32::INFINITY; 2]);
        reduce::<f32>(&[], &[2, 0], &[1], ReduceKind::Sum, &mut y);
        assert_eq!(y, [0.0; 2]);
        let mut y = [0i8; 2];
        reduce::<i8>(&[], &[2, 0], &[1], ReduceKind::Max, &mut y);
        assert_eq!(y, [i8::MIN; 2]);
        reduce::<i8>(&[], &[2, 0], &[1], ReduceKind::Min, &mut y);
        assert_eq!(y, [i8::MAX; 2]);
        let mut y = [0.0f32; 1];
        reduce(&[1.0, f32::NAN, 3.0], &[3], &[0], ReduceKind::Max, &mut y);
        assert!(y[0].is_nan());
        reduce(&[f32::NAN, 1.0], &[2], &[0], ReduceKind::Min, &mut y);
        assert!(y[0].is_nan());
    }

    #[test]
    fn argmax_argmin() {
        // [2, 3]: ties and select_last_index.
        let x = [1.0f32, 3.0, 3.0, 2.0, 0.0, 2.0];
        let mut y = [0i64; 2];
        argmax(&x, &[2, 3], 1, false, &mut y);
        assert_eq!(y, [1, 0]);
        argmax(&x, &[2, 3], 1, true, &mut y);
        assert_eq!(y, [2, 2]);
        argmin(&x, &[2, 3], 1, false, &mut y);
        assert_eq!(y, [0, 1]);
        let mut y = [0i64; 3];
        argmax(&x, &[2, 3], 0, false, &mut y);
        assert_eq!(y, [1, 0, 0]);
        argmin(&x, &[2, 3], 0, true, &mut y);
        assert_eq!(y, [0, 1, 1]);
        // NaN wins.
        let x = [1.0f32, f32::NAN, 5.0, f32::NAN];
        let mut y = [0i64; 1];
        argmax(&x, &[4], 0, false, &mut y);
        assert_eq!(y, [1]);
        argmax(&x, &[4], 0, true, &mut y);
        assert_eq!(y, [3]);
        argmax(&[2i32, 9, 9], &[3], 0, false, &mut y);
        assert_eq!(y, [1]);
    }
}
