//! Dense matrix products: ONNX `Gemm` ([`gemm`]) and numpy-style `MatMul` ([`matmul`]), plus the strided
//! product [`gemm_strided`] that the convolution kernels build on.
//!
//! All operands are packed row-major slices. On one thread, f32 products run on our AVX-512 kernel
//! ([`super::sgemm512`]) where the CPU has AVX-512F; everything else goes to the [`gemm`](::gemm) crate, which packs
//! panels and runs register-blocked micro-kernels chosen at run time (AVX2/FMA, NEON, scalar; its AVX-512 kernels
//! need nightly Rust): about 123 GFLOP/s on one core here against about 190 for ours on 1024³ (the project's design
//! notes record onnxruntime at 227), and threads through rayon. Both address every operand through a row stride and a column stride
//! (in elements), so a transposed operand costs nothing: `A` stored as `[k, m]` and used as `Aᵀ` is read with row
//! stride 1 and column stride `m` instead of being copied.

use core::fmt::Debug;
use core::ops::{Add, AddAssign, Div, DivAssign, Mul, MulAssign, Neg, Sub, SubAssign};

use super::cols::Cols;
use rayon::prelude::*;

pub use super::sgemm512::{Epilogue, PackedA};

mod sealed {
    /// Restricts [`super::Float`] to the types the `gemm` crate dispatches on.
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}

/// The floating-point element types of the kernels: `f32` and `f64` (sealed; the GEMM crate only dispatches on
/// these). It carries the constants, conversions and the few libm functions the kernels need, so that a kernel
/// is written once for both precisions. Half-precision tensors are converted to `f32` by the caller.
pub trait Float:
    sealed::Sealed
    + Copy
    + Send
    + Sync
    + 'static
    + PartialOrd
    + Default
    + Debug
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + AddAssign
    + SubAssign
    + MulAssign
    + DivAssign
{
    /// `0`.
    const ZERO: Self;
    /// `1`.
    const ONE: Self;
    /// `+∞`.
    const INFINITY: Self;
    /// `−∞`.
    const NEG_INFINITY: Self;
    /// A quiet NaN.
    const NAN: Self;

    /// `0` (same as [`Float::ZERO`]).
    fn zero() -> Self {
        Self::ZERO
    }
    /// `1` (same as [`Float::ONE`]).
    fn one() -> Self {
        Self::ONE
    }
    /// Converts from `f64`, rounding to nearest.
    fn from_f64(v: f64) -> Self;
    /// Converts to `f64` (exact).
    fn to_f64(self) -> f64;
    /// Converts from `f32` (exact).
    fn from_f32(v: f32) -> Self;
    /// Converts to `f32`, rounding to nearest.
    fn to_f32(self) -> f32;
    /// Converts a count, rounding to nearest.
    fn from_usize(n: usize) -> Self;
    /// `eˣ`.
    fn exp(self) -> Self;
    /// e^x for softmax-like kernels: f32 through `stowage_kir::func::exp_f32` (within 2 ulp, and a loop of it
    /// vectorises), f64 exact.
    fn exp_fast(self) -> Self;
    /// Natural logarithm.
    fn ln(self) -> Self;
    /// Square root.
    fn sqrt(self) -> Self;
    /// `selfᵉ` for a floating exponent.
    fn powf(self, e: Self) -> Self;
    /// Absolute value.
    fn abs(self) -> Self;
    /// Largest integer not above `self`.
    fn floor(self) -> Self;
    /// Whether `self` is NaN.
    fn is_nan(self) -> bool;
}

macro_rules! impl_float {
    ($t:ty, $exp_fast:expr) => {
        impl Float for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const INFINITY: Self = <$t>::INFINITY;
            const NEG_INFINITY: Self = <$t>::NEG_INFINITY;
            const NAN: Self = <$t>::NAN;

            #[inline]
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            #[inline]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline]
            fn from_f32(v: f32) -> Self {
                v as $t
            }
            #[inline]
            fn to_f32(self) -> f32 {
                self as f32
            }
            #[inline]
            fn from_usize(n: usize) -> Self {
                n as $t
            }
            #[inline]
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            #[inline]
            fn exp_fast(self) -> Self {
                $exp_fast(self)
            }
            #[inline]
            fn ln(self) -> Self {
                <$t>::ln(self)
            }
            #[inline]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            #[inline]
            fn powf(self, e: Self) -> Self {
                <$t>::powf(self, e)
            }
            #[inline]
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            #[inline]
            fn floor(self) -> Self {
                <$t>::floor(self)
            }
            #[inline]
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
        }
    };
}
impl_float!(f32, stowage_kir::func::exp_f32);
impl_float!(f64, f64::exp);

/// One past the largest index that a `rows × cols` matrix with the given strides touches (0 if it is empty),
/// or `None` on overflow.
fn extent(rows: usize, row_stride: usize, cols: usize, col_stride: usize) -> Option<usize> {
    if rows == 0 || cols == 0 {
        return Some(0);
    }
    (rows - 1).checked_mul(row_stride)?.checked_add((cols - 1).checked_mul(col_stride)?)?.checked_add(1)
}

/// Strided matrix product into a row-major destination:
/// `dst[i·dst_rs + j] = (read_dst ? dst_coef·dst[i·dst_rs + j] : 0) + prod_coef · Σₗ a[i·a_rs + l·a_cs] · b[l·b_rs + j·b_cs]`
/// for `i < m`, `j < n`, `l < k`. Strides are in elements; a transposed operand is just swapped strides.
/// When `read_dst` is false the destination is not read (NaNs in it do not propagate).
/// `threads > 1` lets the GEMM crate split the product over that many rayon threads (of the current pool).
///
/// # Panics
/// If an operand's strides reach past its slice, or if `m > 1` and `dst_rs < n` (rows would overlap).
#[allow(clippy::too_many_arguments)]
pub fn gemm_strided<T: Float>(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [T],
    dst_rs: usize,
    read_dst: bool,
    dst_coef: T,
    a: &[T],
    a_rs: usize,
    a_cs: usize,
    b: &[T],
    b_rs: usize,
    b_cs: usize,
    prod_coef: T,
    threads: usize,
) {
    if m == 0 || n == 0 {
        return;
    }
    let dst_extent = extent(m, dst_rs, n, 1).expect("gemm: destination extent overflows");
    assert!(dst_extent <= dst.len(), "gemm: destination too short ({} < {dst_extent})", dst.len());
    assert!(m == 1 || dst_rs >= n, "gemm: destination rows overlap");
    if k == 0 {
        for row in dst.chunks_mut(dst_rs.max(n)).take(m) {
            for v in &mut row[..n] {
                *v = if read_dst { dst_coef * *v } else { T::ZERO };
            }
        }
        return;
    }
    let a_extent = extent(m, a_rs, k, a_cs).expect("gemm: lhs extent overflows");
    let b_extent = extent(k, b_rs, n, b_cs).expect("gemm: rhs extent overflows");
    assert!(a_extent <= a.len(), "gemm: lhs too short ({} < {a_extent})", a.len());
    assert!(b_extent <= b.len(), "gemm: rhs too short ({} < {b_extent})", b.len());
    if std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>() && super::sgemm512::available() {
        // SAFETY: `T` is `f32` (checked through its TypeId just above), so these are the same slices retyped.
        let (dst, a, b, dst_coef, prod_coef) = unsafe {
            (
                &mut *(dst as *mut [T] as *mut [f32]),
                &*(a as *const [T] as *const [f32]),
                &*(b as *const [T] as *const [f32]),
                dst_coef.to_f32(),
                prod_coef.to_f32(),
            )
        };
        // One row against a B whose columns are contiguous (a classifier at batch 1): threads take bands of its
        // columns, each a run of dot products (`sgemm`'s few-rows path), where a band of rows would leave one.
        if m == 1 && b_rs == 1 && a_cs == 1 && threads > 1 && n >= 8 * threads && n * k >= DOTS_PARALLEL_MIN {
            use rayon::prelude::*;
            let per = n.div_ceil(4 * threads).next_multiple_of(4);
            dst[..n].par_chunks_mut(per).enumerate().for_each(|(i, cols)| {
                let j0 = i * per;
                super::sgemm512::sgemm(
                    1,
                    cols.len(),
                    k,
                    cols,
                    n,
                    read_dst,
                    dst_coef,
                    a,
                    (a_rs, a_cs),
                    &b[j0 * b_cs..],
                    (b_rs, b_cs),
                    prod_coef,
                );
            });
            return;
        }
        // Threads take disjoint bands of destination rows (whole micro-tiles), each running the kernel on its band.
        let band = if threads > 1 && m >= 48 * threads { m.div_ceil(threads).next_multiple_of(12) } else { m };
        if band >= m {
            super::sgemm512::sgemm(
                m,
                n,
                k,
                dst,
                dst_rs,
                read_dst,
                dst_coef,
                a,
                (a_rs, a_cs),
                b,
                (b_rs, b_cs),
                prod_coef,
            );
        } else {
            use rayon::prelude::*;
            dst.par_chunks_mut(band * dst_rs).enumerate().for_each(|(i, rows)| {
                let r0 = i * band;
                let mb = band.min(m - r0);
                super::sgemm512::sgemm(
                    mb,
                    n,
                    k,
                    rows,
                    dst_rs,
                    read_dst,
                    dst_coef,
                    &a[r0 * a_rs..],
                    (a_rs, a_cs),
                    b,
                    (b_rs, b_cs),
                    prod_coef,
                );
            });
        }
        return;
    }
    let parallelism = if threads > 1 { ::gemm::Parallelism::Rayon(threads) } else { ::gemm::Parallelism::None };
    // Slices never exceed isize::MAX bytes, so every stride below a slice's length fits in an isize.
    let s = |v: usize| v as isize;
    // SAFETY: `T` is f32 or f64 (sealed), types the crate supports. The asserts above check that every element
    // the product reads lies inside `a` / `b` and every element it writes lies inside `dst`; distinct (i, j)
    // map to distinct destination elements because `dst_rs >= n` (or m == 1) with column stride 1; `dst` is a
    // unique borrow so it aliases neither operand.
    unsafe {
        ::gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            s(dst_rs),
            read_dst,
            a.as_ptr(),
            s(a_cs),
            s(a_rs),
            b.as_ptr(),
            s(b_cs),
            s(b_rs),
            dst_coef,
            prod_coef,
            false,
            false,
            false,
            parallelism,
        );
    }
}

/// [`gemm_strided`] with a left operand packed ahead of time (`a.rows()` × `a.cols()`, coefficient 1):
/// `dst[i·dst_rs + j] = epilogue((read_dst ? dst[i·dst_rs + j] : 0) + Σₗ a[i, l] · b[l·b_rs + j·b_cs])`, the
/// epilogue adding a per-row bias and applying ReLU in registers. Threads take bands of whole panels of rows.
///
/// # Panics
/// As [`gemm_strided`]; and when this CPU cannot run the packed kernel (see [`PackedA`]'s constructor,
/// [`pack_lhs`]).
#[allow(clippy::too_many_arguments)]
pub fn gemm_packed(
    a: &PackedA,
    n: usize,
    dst: &mut [f32],
    dst_rs: usize,
    read_dst: bool,
    b: &[f32],
    b_rs: usize,
    b_cs: usize,
    threads: usize,
    epilogue: Epilogue<'_>,
) {
    let (m, k) = (a.rows(), a.cols());
    if m == 0 || n == 0 {
        return;
    }
    assert!(super::sgemm512::available(), "gemm: a packed operand on a CPU without AVX-512F");
    let dst_extent = extent(m, dst_rs, n, 1).expect("gemm: destination extent overflows");
    assert!(dst_extent <= dst.len(), "gemm: destination too short ({} < {dst_extent})", dst.len());
    assert!(m == 1 || dst_rs >= n, "gemm: destination rows overlap");
    let b_extent = extent(k, b_rs, n, b_cs).expect("gemm: rhs extent overflows");
    assert!(b_extent <= b.len(), "gemm: rhs too short ({} < {b_extent})", b.len());
    let panel = super::sgemm512::PANEL_ROWS;
    let band = if threads > 1 && m >= 4 * panel * threads { m.div_ceil(threads).next_multiple_of(panel) } else { m };
    if let Some(per) = column_bands(m, n, threads) {
        // Bands of whole tiles of columns, each written in place by its thread (`cols.rs`).
        let bands = Cols::whole(dst, m, dst_rs, n).split(per);
        bands.into_par_iter().for_each(|band| {
            let b = &b[band.first_column() * b_cs..];
            super::sgemm512::sgemm_packed_cols(a, 0, m, band, read_dst, b, (b_rs, b_cs), epilogue);
        });
    } else if band >= m {
        super::sgemm512::sgemm_packed(a, 0, m, n, dst, dst_rs, read_dst, b, (b_rs, b_cs), epilogue);
    } else {
        dst.par_chunks_mut(band * dst_rs).enumerate().for_each(|(i, rows)| {
            let r0 = i * band;
            let epilogue = Epilogue { bias: epilogue.bias.map(|bias| &bias[r0..]), ..epilogue };
            super::sgemm512::sgemm_packed(
                a,
                r0,
                band.min(m - r0),
                n,
                rows,
                dst_rs,
                read_dst,
                b,
                (b_rs, b_cs),
                epilogue,
            );
        });
    }
}

/// The columns per thread when a product of `m` packed rows and `n` columns splits its columns over `threads`:
/// when there are at least [`SPLIT_COLUMNS`] per thread, and the rows are too few for bands of rows (four panels
/// per thread) or the columns outnumber them. Each thread then reads its own part of the right operand (a
/// convolution's output positions, where the thread that wrote them last left them in its cache) and all of the
/// weights; rows split the other way round.
pub fn column_bands(m: usize, n: usize, threads: usize) -> Option<usize> {
    let panel = super::sgemm512::PANEL_ROWS;
    let rows_split = m >= 4 * panel * threads;
    (threads > 1 && n >= SPLIT_COLUMNS * threads && (!rows_split || n >= m))
        .then(|| n.div_ceil(threads).next_multiple_of(NR_COLUMNS))
}

/// The fewest columns per thread for [`column_bands`].
pub const SPLIT_COLUMNS: usize = 64;

/// Multiply-adds from which a single row against contiguous columns splits its columns over threads (about 1 MB of
/// weights, tens of microseconds read).
const DOTS_PARALLEL_MIN: usize = 1 << 18;
/// Columns of the packed kernel's tile: bands of columns are whole tiles.
const NR_COLUMNS: usize = 32;

/// [`gemm_packed`] on one thread into a band of columns (`cols.rs`): `dst`'s width is the product's `n`, and `b`
/// starts at the band's first column.
pub fn gemm_packed_cols(
    a: &PackedA,
    dst: Cols<'_, f32>,
    read_dst: bool,
    b: &[f32],
    b_rs: usize,
    b_cs: usize,
    epilogue: Epilogue<'_>,
) {
    let (m, k, n) = (a.rows(), a.cols(), dst.width());
    if m == 0 || n == 0 {
        return;
    }
    assert!(super::sgemm512::available(), "gemm: a packed operand on a CPU without AVX-512F");
    assert!(dst.rows() == m, "gemm: {} destination rows for {m}", dst.rows());
    let b_extent = extent(k, b_rs, n, b_cs).expect("gemm: rhs extent overflows");
    assert!(b_extent <= b.len(), "gemm: rhs too short ({} < {b_extent})", b.len());
    super::sgemm512::sgemm_packed_cols(a, 0, m, dst, read_dst, b, (b_rs, b_cs), epilogue);
}

/// Packs a constant f32 left operand `a[i·a_rs + l·a_cs]` (`m × k`) for [`gemm_packed`], or `None` when packing
/// ahead does not pay or cannot run: fewer rows than one panel (those products take the dot and AXPY paths), or
/// no AVX-512F on this CPU. `by_panels` stores each panel contiguous over K ([`PackedA::by_panels`]).
pub fn pack_lhs(m: usize, k: usize, a: &[f32], (a_rs, a_cs): (usize, usize), by_panels: bool) -> Option<PackedA> {
    if m < super::sgemm512::PANEL_ROWS || k == 0 || !super::sgemm512::available() {
        return None;
    }
    let a_extent = extent(m, a_rs, k, a_cs).expect("gemm: lhs extent overflows");
    assert!(a_extent <= a.len(), "gemm: lhs too short ({} < {a_extent})", a.len());
    Some(if by_panels { PackedA::by_panels(m, k, a, (a_rs, a_cs)) } else { PackedA::new(m, k, a, (a_rs, a_cs)) })
}

/// Right-aligns a Gemm `C` shape (rank ≤ 2) against `[m, n]`; returns C's `(rows, cols)`.
fn c_dims(shape: &[usize], m: usize, n: usize) -> (usize, usize) {
    let (cm, cn) = match *shape {
        [] => (1, 1),
        [c] => (1, c),
        [r, c] => (r, c),
        _ => panic!("gemm: C must have rank ≤ 2, got {shape:?}"),
    };
    assert!(cm == 1 || cm == m, "gemm: C shape {shape:?} does not broadcast to [{m}, {n}]");
    assert!(cn == 1 || cn == n, "gemm: C shape {shape:?} does not broadcast to [{m}, {n}]");
    (cm, cn)
}

/// ONNX `Gemm`: `y[m, n] = alpha · op(A) · op(B) + beta · C`, where `op(A)` is `A` (shape `a_shape`) or its
/// transpose when `trans_a`, likewise for `B`, and `C` (data and shape, rank ≤ 2) is unidirectionally broadcast
/// to `[m, n]` by numpy rules (`[]`, `[1]`, `[n]`, `[1, n]`, `[m, 1]`, `[m, n]`). As in the ONNX reference, `C`
/// is ignored when `beta == 0`. All slices are packed row-major; `y` holds `m·n` elements.
///
/// # Panics
/// On inconsistent shapes or slice lengths.
#[allow(clippy::too_many_arguments)]
pub fn gemm<T: Float>(
    a: &[T],
    a_shape: [usize; 2],
    trans_a: bool,
    b: &[T],
    b_shape: [usize; 2],
    trans_b: bool,
    c: Option<(&[T], &[usize])>,
    alpha: T,
    beta: T,
    y: &mut [T],
    threads: usize,
) {
    let (m, k) = if trans_a { (a_shape[1], a_shape[0]) } else { (a_shape[0], a_shape[1]) };
    let (kb, n) = if trans_b { (b_shape[1], b_shape[0]) } else { (b_shape[0], b_shape[1]) };
    assert_eq!(k, kb, "gemm: inner dimensions differ ({a_shape:?}, {b_shape:?})");
    assert_eq!(a.len(), m * k, "gemm: A length");
    assert_eq!(b.len(), k * n, "gemm: B length");
    assert_eq!(y.len(), m * n, "gemm: Y length");
    // op(A)[i, l]: A[i, l] at i·k + l, or A[l, i] at l·m + i when transposed.
    let (a_rs, a_cs) = if trans_a { (1, m) } else { (k, 1) };
    // op(B)[l, j]: B[l, j] at l·n + j, or B[j, l] at j·k + l when transposed.
    let (b_rs, b_cs) = if trans_b { (1, k) } else { (n, 1) };
    let read_dst = match c {
        Some((c, c_shape)) if beta != T::ZERO => {
            let (cm, cn) = c_dims(c_shape, m, n);
            assert_eq!(c.len(), cm * cn, "gemm: C length");
            if m * n > 0 {
                for (i, row) in y.chunks_mut(n).enumerate() {
                    let c_row = &c[if cm == 1 { 0 } else { i * cn }..][..cn];
                    if cn == 1 {
                        row.fill(beta * c_row[0]);
                    } else {
                        for (v, &cv) in row.iter_mut().zip(c_row) {
                            *v = beta * cv;
                        }
                    }
                }
            }
            true
        }
        _ => false,
    };
    gemm_strided(m, n, k, y, n, read_dst, T::ONE, a, a_rs, a_cs, b, b_rs, b_cs, alpha, threads);
}

/// Row-major strides of `shape` (in elements).
fn strides_of(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// numpy `matmul`: `y = a @ b` for packed row-major `a` and `b`. A 1-D `a` of shape `[k]` is treated as `[1, k]`
/// and a 1-D `b` of shape `[k]` as `[k, 1]` (the added axis is absent from `y_shape`); the batch axes (all but
/// the last two) are broadcast against each other by numpy rules. `y_shape` is only checked for its element
/// count, since the layout of `y` is determined by the operands.
///
/// With `threads > 1`, many batches run in parallel (one thread each); a few large ones split each product.
///
/// # Panics
/// On inconsistent shapes or slice lengths.
pub fn matmul<T: Float>(
    a: &[T],
    a_shape: &[usize],
    b: &[T],
    b_shape: &[usize],
    y: &mut [T],
    y_shape: &[usize],
    threads: usize,
) {
    assert!(!a_shape.is_empty() && !b_shape.is_empty(), "matmul: operands must have rank ≥ 1");
    let (m, k) = match *a_shape {
        [k] => (1, k),
        [.., m, k] => (m, k),
        [] => unreachable!(),
    };
    let (kb, n) = match *b_shape {
        [k] => (k, 1),
        [.., k, n] => (k, n),
        [] => unreachable!(),
    };
    assert_eq!(k, kb, "matmul: inner dimensions differ ({a_shape:?} @ {b_shape:?})");
    assert_eq!(a.len(), a_shape.iter().product::<usize>(), "matmul: A length");
    assert_eq!(b.len(), b_shape.iter().product::<usize>(), "matmul: B length");
    let a_batch = &a_shape[..a_shape.len().saturating_sub(2)];
    let b_batch = &b_shape[..b_shape.len().saturating_sub(2)];
    let rank = a_batch.len().max(b_batch.len());
    // Broadcast batch shape, with each operand's batch strides (in matrices; 0 on broadcast axes).
    let mut batch = vec![1; rank];
    let mut a_bs = vec![0; rank];
    let mut b_bs = vec![0; rank];
    let a_st = strides_of(a_batch);
    let b_st = strides_of(b_batch);
    for i in 0..rank {
        let ai = (i + a_batch.len()).checked_sub(rank);
        let bi = (i + b_batch.len()).checked_sub(rank);
        let da = ai.map_or(1, |j| a_batch[j]);
        let db = bi.map_or(1, |j| b_batch[j]);
        batch[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => panic!("matmul: batch axes do not broadcast ({a_shape:?} @ {b_shape:?})"),
        };
        // An axis of size other than 1 exists in that operand, so its index is Some.
        if let (Some(j), true) = (ai, da != 1) {
            a_bs[i] = a_st[j];
        }
        if let (Some(j), true) = (bi, db != 1) {
            b_bs[i] = b_st[j];
        }
    }
    let count: usize = batch.iter().product();
    assert_eq!(y.len(), count * m * n, "matmul: Y length");
    assert_eq!(y_shape.iter().product::<usize>(), y.len(), "matmul: Y shape");
    if y.is_empty() {
        return;
    }
    let a_count: usize = a_batch.iter().product();
    let b_count: usize = b_batch.iter().product();
    if b_count == 1 && a_count == count {
        // B is one matrix: the batches of A stack into one tall [count·m, k] matrix.
        gemm_strided(count * m, n, k, y, n, false, T::ONE, a, k, 1, b, n, 1, T::ONE, threads);
        return;
    }
    let offsets = |mut idx: usize| {
        let (mut ao, mut bo) = (0, 0);
        for d in (0..rank).rev() {
            let i = idx % batch[d];
            idx /= batch[d];
            ao += i * a_bs[d];
            bo += i * b_bs[d];
        }
        (ao * m * k, bo * k * n)
    };
    let one = |bi: usize, yc: &mut [T], threads: usize| {
        let (ao, bo) = offsets(bi);
        gemm_strided(m, n, k, yc, n, false, T::ONE, &a[ao..], k, 1, &b[bo..], n, 1, T::ONE, threads);
    };
    if threads > 1 && count >= threads {
        y.par_chunks_mut(m * n).enumerate().for_each(|(bi, yc)| one(bi, yc, 1));
    } else {
        for (bi, yc) in y.chunks_mut(m * n).enumerate() {
            one(bi, yc, threads);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic pseudo-random values in [-1, 1).
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    #[allow(clippy::too_many_arguments)]
    fn naive_gemm(
        a: &[f32],
        ta: bool,
        b: &[f32],
        tb: bool,
        m: usize,
        n: usize,
        k: usize,
        c: impl Fn(usize, usize) -> f32,
        alpha: f32,
        beta: f32,
    ) -> Vec<f32> {
        let mut y = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut acc = 0.0f64;
                for l in 0..k {
                    let av = if ta { a[l * m + i] } else { a[i * k + l] };
                    let bv = if tb { b[j * k + l] } else { b[l * n + j] };
                    acc += av as f64 * bv as f64;
                }
                y[i * n + j] = alpha * acc as f32 + beta * c(i, j);
            }
        }
        y
    }

    fn close(a: &[f32], b: &[f32]) {
        assert_eq!(a.len(), b.len());
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!((x - y).abs() <= 1e-4 * (1.0 + y.abs()), "at {i}: {x} vs {y}");
        }
    }

    #[test]
    fn gemm_transposes_and_broadcast_c() {
        let (m, n, k) = (5, 7, 3);
        for &(ta, tb) in &[(false, false), (true, false), (false, true), (true, true)] {
            let a = values(m * k, 1);
            let b = values(k * n, 2);
            let a_shape = if ta { [k, m] } else { [m, k] };
            let b_shape = if tb { [n, k] } else { [k, n] };
            // C of shape [n] (row broadcast).
            let c_row = values(n, 3);
            let mut y = vec![f32::NAN; m * n];
            gemm(&a, a_shape, ta, &b, b_shape, tb, Some((&c_row, &[n])), 0.5, 2.0, &mut y, 1);
            close(&y, &naive_gemm(&a, ta, &b, tb, m, n, k, |_, j| c_row[j], 0.5, 2.0));
            // C of shape [m, 1] (column broadcast), two threads.
            let c_col = values(m, 4);
            let mut y2 = vec![0.0; m * n];
            let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
            pool.install(|| gemm(&a, a_shape, ta, &b, b_shape, tb, Some((&c_col, &[m, 1])), 1.5, -1.0, &mut y2, 2));
            close(&y2, &naive_gemm(&a, ta, &b, tb, m, n, k, |i, _| c_col[i], 1.5, -1.0));
            // Scalar C and no C.
            let mut y3 = vec![0.0; m * n];
            gemm(&a, a_shape, ta, &b, b_shape, tb, Some((&[3.0], &[])), 1.0, 1.0, &mut y3, 1);
            close(&y3, &naive_gemm(&a, ta, &b, tb, m, n, k, |_, _| 3.0, 1.0, 1.0));
            let mut y4 = vec![f32::NAN; m * n];
            gemm(&a, a_shape, ta, &b, b_shape, tb, None, 1.0, 1.0, &mut y4, 1);
            close(&y4, &naive_gemm(&a, ta, &b, tb, m, n, k, |_, _| 0.0, 1.0, 0.0));
        }
    }

    /// One row against a transposed B (a classifier at batch 1): columns four at a time, any K and column count,
    /// and on two threads (bands of columns) the same bytes as on one, close to the product in f64.
    #[test]
    fn one_row_against_columns_four_at_a_time_and_on_two_threads() {
        let (k, n) = (1000, 301);
        let a: Vec<f32> = (0..k).map(|i| ((i * 7 % 19) as f32 - 9.0) / 5.0).collect();
        let b: Vec<f32> = (0..n * k).map(|i| ((i * 13 % 23) as f32 - 11.0) / 7.0).collect();
        let run = |threads: usize| {
            let mut y = vec![f32::NAN; n];
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("pool");
            pool.install(|| gemm_strided(1, n, k, &mut y, n, false, 0.0, &a, k, 1, &b, 1, k, 1.5, threads));
            y
        };
        let one = run(1);
        assert_eq!(run(2), one);
        for (j, &v) in one.iter().enumerate() {
            let want: f64 = 1.5 * (0..k).map(|l| a[l] as f64 * b[j * k + l] as f64).sum::<f64>();
            assert!((v as f64 - want).abs() <= 1e-4 * want.abs().max(1.0), "column {j}: {v} against {want}");
        }
    }

    #[test]
    fn gemm_full_c_and_empty_k() {
        let a = [1.0, 2.0, 3.0, 4.0];
        let b = [5.0, 6.0, 7.0, 8.0];
        let c = [1.0, 1.0, 1.0, 1.0];
        let mut y = [0.0; 4];
        gemm(&a, [2, 2], false, &b, [2, 2], false, Some((&c, &[2, 2])), 1.0, 1.0, &mut y, 1);
        assert_eq!(y, [20.0, 23.0, 44.0, 51.0]);
        let mut y = [9.0f32; 6];
        gemm::<f32>(&[], [2, 0], false, &[], [0, 3], false, Some((&[1.0, 2.0, 3.0], &[3])), 1.0, 2.0, &mut y, 1);
        assert_eq!(y, [2.0, 4.0, 6.0, 2.0, 4.0, 6.0]);
    }

    #[test]
    fn matmul_vectors() {
        // [3] @ [3, 2] -> [2]
        let a = [1.0f64, 2.0, 3.0];
        let b = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let mut y = [0.0; 2];
        matmul(&a, &[3], &b, &[3, 2], &mut y, &[2], 1);
        assert_eq!(y, [22.0, 28.0]);
        // [2, 3] @ [3] -> [2]
        let mut y = [0.0; 2];
        matmul(&b, &[2, 3], &a, &[3], &mut y, &[2], 1);
        assert_eq!(y, [14.0, 32.0]);
        // [3] @ [3] -> []
        let mut y = [0.0; 1];
        matmul(&a, &[3], &a, &[3], &mut y, &[], 1);
        assert_eq!(y, [14.0]);
    }

    #[test]
    fn matmul_batched_broadcast() {
        // [2, 1, 2, 3] @ [3, 3, 4] -> [2, 3, 2, 4]
        let (m, k, n) = (2, 3, 4);
        let a = values(2 * m * k, 5);
        let b = values(3 * k * n, 6);
        let mut y = vec![0.0; 2 * 3 * m * n];
        for threads in [1, 2] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            pool.install(|| matmul(&a, &[2, 1, m, k], &b, &[3, k, n], &mut y, &[2, 3, m, n], threads));
            for i in 0..2 {
                for j in 0..3 {
                    let want = naive_gemm(
                        &a[i * m * k..][..m * k],
                        false,
                        &b[j * k * n..][..k * n],
                        false,
                        m,
                        n,
                        k,
                        |_, _| 0.0,
                        1.0,
                        0.0,
                    );
                    close(&y[(i * 3 + j) * m * n..][..m * n], &want);
                }
            }
        }
        // [4, 2, 3] @ [3, 4]: folded into one product.
        let a = values(4 * m * k, 7);
        let b = values(k * n, 8);
        let mut y = vec![0.0; 4 * m * n];
        matmul(&a, &[4, m, k], &b, &[k, n], &mut y, &[4, m, n], 1);
        close(&y, &naive_gemm(&a, false, &b, false, 4 * m, n, k, |_, _| 0.0, 1.0, 0.0));
        // [3] @ [2, 3, 4] -> [2, 4]
        let a = values(k, 9);
        let b = values(2 * k * n, 10);
        let mut y = vec![0.0; 2 * n];
        matmul(&a, &[k], &b, &[2, k, n], &mut y, &[2, n], 1);
        for i in 0..2 {
            let want = naive_gemm(&a, false, &b[i * k * n..][..k * n], false, 1, n, k, |_, _| 0.0, 1.0, 0.0);
            close(&y[i * n..][..n], &want);
        }
    }
}
