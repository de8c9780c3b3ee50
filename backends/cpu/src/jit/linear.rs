//! Linear chains evaluated in AVX-512 registers, a block of 64 elements through every instruction at once.
//!
//! The tile form ([`super::wide::Wide`]) stores each instruction's tile and reads it back in the next: a
//! BatchNorm's scale, shift and ReLU cost three stores and three loads a vector, and ran at about 2 elements a
//! nanosecond where a loop holding the value in a register runs at 11 (`examples/chain_speed`). The chains that
//! glue convolutions together (a scale and shift, an activation, a residual addition) are mostly *linear*, and
//! those run here, the value kept in four `zmm` registers from the first instruction to the store.
//!
//! 1. **Which chains.** A chain is linear when its result is reached from one start by a path of instructions,
//!    each reading the one before it on the path and otherwise only *leaves*: constants, inputs of one value per
//!    row (stride 0 along the innermost axis, any element type), contiguous f32 inputs (stride 4), and f32
//!    inputs of 16 values repeated along the row (a per-channel operand of a value in channel blocks, whose rows
//!    are a plane of blocks of 16 channels: [`super::wide::Wide`] makes them). The start
//!    is a leaf, or a two-leaf instruction. Instructions off the path are dead and not evaluated. Every function
//!    on the path is one of [`native_unary`] and [`native_binary`], and the output is contiguous f32. Anything
//!    else ([`Linear::new`] returns `None`: a logarithm, two computed values meeting, a strided or integer input
//!    read per element) runs as tiles. Tested by `only_linear_native_chains_qualify`.
//! 2. **Bit for bit.** Each native function is the IEEE operation its scalar definition (`stowage_kir::func`)
//!    performs, in the same order and with the same operands (no FMA contraction, a division where the definition
//!    divides), and comparisons treat NaN and signed zeros as the definition's branches do (`Relu` keeps `-0` and
//!    NaN, `Max` and `Min` give NaN when either side is NaN). Tanh, erf and both GELUs are the definitions'
//!    rational approximations, coefficient by coefficient; the sigmoid is `act.rs`'s, whose exponential is
//!    `exp_f32`'s operations in order (rule 3 there). Tested on NaN, infinities and signed zeros against
//!    `Chain::eval` by `every_native_function_matches_the_scalar_definition_bit_for_bit`.
//! 3. **Within the row.** A row is read and written in blocks of [`BLOCK`] elements; the last block's lanes past
//!    the row are masked off in every load and store, so no byte outside the operands' extents is touched
//!    (`rows_of_every_length_touch_only_their_elements`).
//! 4. **Per-row values once.** A leaf of one value per row is read (and converted to f32 as the tile form
//!    converts it) once per row by the caller, not per block.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use stowage_kir::{BinaryFn, Chain, Inst, UnaryFn};

/// Vectors of 16 lanes held per block.
const VECTORS: usize = 8;
/// Elements per block (rule 3).
pub const BLOCK: usize = 16 * VECTORS;

/// An operand that is not computed on the path (rule 1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Leaf {
    /// The same number everywhere.
    Const(f32),
    /// Input `k`, one value per row.
    Row(usize),
    /// Input `k`, contiguous f32 along the row.
    Tile(usize),
    /// Input `k`, 16 f32 from the row's first element, the same for every 16 elements of the row.
    Lanes(usize),
}

/// One instruction on the path: the running value `v` becomes …
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Step {
    /// `f(v)`
    Unary(UnaryFn),
    /// `f(v, leaf)`
    Left(BinaryFn, Leaf),
    /// `f(leaf, v)`
    Right(BinaryFn, Leaf),
}

/// A linear chain (rule 1): its start and the path from it.
#[derive(Clone, Debug, PartialEq)]
pub struct Linear {
    /// The value the path starts from.
    pub first: Leaf,
    /// The path, in order.
    pub steps: Vec<Step>,
}

/// The unary functions evaluated in registers (rule 2).
pub fn native_unary(f: UnaryFn) -> bool {
    use UnaryFn as U;
    matches!(
        f,
        U::Relu
            | U::LeakyRelu(_)
            | U::Neg
            | U::Abs
            | U::Sqrt
            | U::Reciprocal
            | U::HardSigmoid(..)
            | U::HardSwish
            | U::Tanh
            | U::Erf
            | U::Sigmoid
            | U::Gelu(_)
    )
}

/// The binary functions evaluated in registers (rule 2).
pub fn native_binary(f: BinaryFn) -> bool {
    use BinaryFn as B;
    matches!(f, B::Add | B::Sub | B::Mul | B::Div | B::Max | B::Min | B::PRelu)
}

impl Linear {
    /// The linear form of `chain` (rule 1), where `input(k)` is input `k` as a leaf (`None`: an input this form
    /// cannot read); `None` when the chain is not linear or holds a function that is not native.
    pub fn new(chain: &Chain, input: impl Fn(usize) -> Option<Leaf>) -> Option<Linear> {
        let insts = &chain.insts;
        // Some(leaf) for a leaf instruction, None for a computed one; an unreadable input ends the attempt.
        let leaf = |i: usize| -> Option<Option<Leaf>> {
            match insts[i] {
                Inst::Const(c) => Some(Some(Leaf::Const(c))),
                Inst::Input(k) => Some(input(k)),
                Inst::Unary(..) | Inst::Binary(..) => None,
            }
        };
        let mut steps = Vec::new();
        let mut at = insts.len().checked_sub(1)?;
        let first = loop {
            match insts[at] {
                Inst::Const(_) | Inst::Input(_) => break leaf(at)??,
                Inst::Unary(f, a) => {
                    if !native_unary(f) {
                        return None;
                    }
                    steps.push(Step::Unary(f));
                    at = a;
                }
                Inst::Binary(f, a, b) => {
                    if !native_binary(f) || a >= at || b >= at {
                        return None;
                    }
                    match (leaf(a), leaf(b)) {
                        (None, None) => return None,
                        (None, Some(l)) | (Some(_), Some(l)) => {
                            steps.push(Step::Left(f, l?));
                            at = a;
                        }
                        (Some(l), None) => {
                            steps.push(Step::Right(f, l?));
                            at = b;
                        }
                    }
                }
            }
        };
        if steps.is_empty() {
            return None;
        }
        steps.reverse();
        Some(Linear { first, steps })
    }

    /// Elements `0..n` of one row: `ins[k]` is input `k`'s first element of the row for its [`Leaf::Tile`]s and
    /// [`Leaf::Lanes`], `row[k]` its value for its [`Leaf::Row`]s (rule 4).
    ///
    /// # Safety
    /// The CPU has AVX-512F; each `ins[k]` a tile leaf names is readable for `n` f32, each a lanes leaf names for
    /// 16 f32, and `out` writable for `n` f32, which no input reads.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    pub unsafe fn row(&self, ins: &[*const f32], row: &[f32], out: *mut f32, n: usize) {
        let mut j = 0;
        while j + BLOCK <= n {
            // SAFETY: elements j .. j + BLOCK ≤ n of the row (the caller's contract).
            unsafe { self.block::<VECTORS, false>(ins, row, out, j, &[u16::MAX; VECTORS]) };
            j += BLOCK;
        }
        // The rest in one block of as few vectors as hold it, the lanes past the row masked off (rule 3): a row of
        // 49 is one pass of four vectors, not four passes of one.
        let rest = n - j;
        // SAFETY: each call covers elements j .. n, the lanes past them masked off.
        unsafe {
            match rest {
                0 => {}
                1..=16 => self.block::<1, true>(ins, row, out, j, &masks(rest)),
                17..=64 => self.block::<4, true>(ins, row, out, j, &masks(rest)),
                _ => self.block::<VECTORS, true>(ins, row, out, j, &masks(rest)),
            }
        }
    }

    /// Elements `j ..` of the row in `N` vectors; with `MASKED`, only the lanes of vector `r` in `masks[r]` are
    /// read and written.
    ///
    /// # Safety
    /// As [`Linear::row`]'s, for the elements read and written.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn block<const N: usize, const MASKED: bool>(
        &self,
        ins: &[*const f32],
        row: &[f32],
        out: *mut f32,
        j: usize,
        masks: &[u16; N],
    ) {
        // SAFETY: the caller's contract is `leaf`'s.
        let mut v = unsafe { leaf::<N, MASKED>(self.first, ins, row, j, masks) };
        for step in &self.steps {
            match *step {
                Step::Unary(f) => unary(f, &mut v),
                Step::Left(f, l) | Step::Right(f, l) => {
                    // SAFETY: as above.
                    let o = unsafe { leaf::<N, MASKED>(l, ins, row, j, masks) };
                    v = if matches!(step, Step::Right(..)) { binary(f, &o, &v) } else { binary(f, &v, &o) };
                }
            }
        }
        for (r, &x) in v.iter().enumerate() {
            let p = out.wrapping_add(j + 16 * r);
            // SAFETY: as the loads: within the row's `n` elements of the output, masked-off lanes not written.
            unsafe {
                if MASKED {
                    _mm512_mask_storeu_ps(p, masks[r], x)
                } else {
                    _mm512_storeu_ps(p, x)
                }
            }
        }
    }
}

/// The lane masks of `N` vectors holding the first `lanes` elements.
fn masks<const N: usize>(lanes: usize) -> [u16; N] {
    std::array::from_fn(|r| ((1u32 << lanes.saturating_sub(16 * r).min(16)) - 1) as u16)
}

/// A leaf's `N` vectors for elements `j ..` of the row (with `MASKED`, the lanes off in `masks` read as 0).
///
/// # Safety
/// A [`Leaf::Tile`]'s lanes that are read lie within the row of its input, a [`Leaf::Lanes`]' 16 f32 are readable
/// (`Linear::row`'s contract).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn leaf<const N: usize, const MASKED: bool>(
    l: Leaf,
    ins: &[*const f32],
    row: &[f32],
    j: usize,
    masks: &[u16; N],
) -> [__m512; N] {
    match l {
        Leaf::Const(c) => [_mm512_set1_ps(c); N],
        Leaf::Row(k) => [_mm512_set1_ps(row[k]); N],
        // SAFETY: the caller's contract: 16 f32 readable there. Lanes past the row are not stored.
        Leaf::Lanes(k) => [unsafe { _mm512_loadu_ps(ins[k]) }; N],
        Leaf::Tile(k) => {
            let mut v = [_mm512_setzero_ps(); N];
            for (r, x) in v.iter_mut().enumerate() {
                let p = ins[k].wrapping_add(j + 16 * r);
                // SAFETY: the caller's contract; masked-off lanes are not read.
                *x = unsafe {
                    if MASKED {
                        _mm512_maskz_loadu_ps(masks[r], p)
                    } else {
                        _mm512_loadu_ps(p)
                    }
                };
            }
            v
        }
    }
}

/// `f(x)` lane by lane over a block, as `unary_scalar` computes it (rule 2); only [`native_unary`] functions reach
/// here. One match per block, each arm a loop over its vectors.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn unary<const N: usize>(f: UnaryFn, v: &mut [__m512; N]) {
    // SAFETY: the intrinsics need AVX-512F, which the only caller (`Linear::block`, into which this is inlined)
    // is compiled for and runs on.
    unsafe {
        use UnaryFn as U;
        macro_rules! each {
            (|$x:ident| $e:expr) => {
                for o in v.iter_mut() {
                    let $x = *o;
                    *o = $e;
                }
            };
        }
        let (zero, one) = (_mm512_setzero_ps(), _mm512_set1_ps(1.0));
        match f {
            // `if x < 0 { 0 } else { x }`: MAXPS gives its second operand unless the first is greater.
            U::Relu => each!(|x| _mm512_max_ps(zero, x)),
            U::LeakyRelu(a) => {
                let a = _mm512_set1_ps(a);
                each!(|x| _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_GE_OQ>(x, zero), _mm512_mul_ps(x, a), x));
            }
            U::Neg => {
                let sign = _mm512_set1_epi32(i32::MIN);
                each!(|x| _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), sign)));
            }
            U::Abs => each!(|x| _mm512_abs_ps(x)),
            U::Sqrt => each!(|x| _mm512_sqrt_ps(x)),
            U::Reciprocal => each!(|x| _mm512_div_ps(one, x)),
            U::HardSigmoid(a, b) => {
                let (a, b) = (_mm512_set1_ps(a), _mm512_set1_ps(b));
                each!(|x| clamp_unit(_mm512_add_ps(_mm512_mul_ps(a, x), b)));
            }
            U::HardSwish => {
                let (six, half) = (_mm512_set1_ps(6.0), _mm512_set1_ps(0.5));
                each!(|x| _mm512_mul_ps(x, clamp_unit(_mm512_add_ps(_mm512_div_ps(x, six), half))));
            }
            U::Tanh => each!(|x| tanh(x)),
            U::Erf => each!(|x| erf(x)),
            U::Sigmoid => each!(|x| crate::kernels::act::Act::Sigmoid.avx512(x)),
            U::Gelu(true) => {
                // `0.5 * x * (1.0 + tanh_f32(c * (x + 0.044715 * x * x * x)))`, in that order.
                let (c, k) = (_mm512_set1_ps((2.0f32 / std::f32::consts::PI).sqrt()), _mm512_set1_ps(0.044715));
                let half = _mm512_set1_ps(0.5);
                each!(|x| {
                    let cube = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(k, x), x), x);
                    let t = tanh(_mm512_mul_ps(c, _mm512_add_ps(x, cube)));
                    _mm512_mul_ps(_mm512_mul_ps(half, x), _mm512_add_ps(one, t))
                });
            }
            U::Gelu(false) => {
                // `0.5 * x * (1.0 + erf_f32(x * FRAC_1_SQRT_2))`
                let (r, half) = (_mm512_set1_ps(std::f32::consts::FRAC_1_SQRT_2), _mm512_set1_ps(0.5));
                each!(|x| _mm512_mul_ps(_mm512_mul_ps(half, x), _mm512_add_ps(one, erf(_mm512_mul_ps(x, r)))));
            }
            other => unreachable!("{other:?} is not a native unary function"),
        }
    }
}

/// `v.clamp(lo, hi)` as Rust's: below `lo` gives `lo`, above `hi` gives `hi`, NaN stays.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn clamp(v: __m512, lo: f32, hi: f32) -> __m512 {
    // SAFETY: inlined into `Linear::block`, compiled for and run with AVX-512F, as the other helpers here.
    unsafe {
        let (lo, hi) = (_mm512_set1_ps(lo), _mm512_set1_ps(hi));
        let v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask::<_CMP_LT_OQ>(v, lo), lo);
        _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask::<_CMP_GT_OQ>(v, hi), hi)
    }
}

/// `p(x²)·x / q(x²)` with Horner's rule in `p` and `q` (a multiply, then an add, per coefficient), as
/// `stowage_kir::func`'s `tanh_f32` and `erf_f32` evaluate their rational approximations.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn rational(x: __m512, p: &[f32], q: &[f32]) -> __m512 {
    // SAFETY: as `clamp`.
    unsafe {
        let x2 = _mm512_mul_ps(x, x);
        let mut num = _mm512_set1_ps(p[0]);
        for &k in &p[1..] {
            num = _mm512_add_ps(_mm512_mul_ps(num, x2), _mm512_set1_ps(k));
        }
        let mut den = _mm512_set1_ps(q[0]);
        for &k in &q[1..] {
            den = _mm512_add_ps(_mm512_mul_ps(den, x2), _mm512_set1_ps(k));
        }
        _mm512_div_ps(_mm512_mul_ps(num, x), den)
    }
}

/// `tanh_f32` on 16 lanes: NaN as it came, else clamped and the rational approximation.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn tanh(x: __m512) -> __m512 {
    use stowage_kir::func::{TANH_CLAMP, TANH_P, TANH_Q};
    // SAFETY: as `clamp`.
    unsafe {
        let r = rational(clamp(x, -TANH_CLAMP, TANH_CLAMP), &TANH_P, &TANH_Q);
        _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x), x)
    }
}

/// `erf_f32` on 16 lanes: clamped to ±4 and the rational approximation.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn erf(x: __m512) -> __m512 {
    use stowage_kir::func::{ERF_P, ERF_Q};
    rational(clamp(x, -4.0, 4.0), &ERF_P, &ERF_Q)
}

/// `v.clamp(0.0, 1.0)`: below 0 gives 0, above 1 gives 1, NaN stays.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn clamp_unit(v: __m512) -> __m512 {
    // SAFETY: the intrinsics need AVX-512F, which the only caller (`Linear::block`, into which this is inlined)
    // is compiled for and runs on.
    unsafe {
        let (zero, one) = (_mm512_setzero_ps(), _mm512_set1_ps(1.0));
        let v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask::<_CMP_LT_OQ>(v, zero), zero);
        _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask::<_CMP_GT_OQ>(v, one), one)
    }
}

/// `f(a, b)` lane by lane over a block, as `binary_scalar` computes it (rule 2); only [`native_binary`] functions
/// reach here.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn binary<const N: usize>(f: BinaryFn, a: &[__m512; N], b: &[__m512; N]) -> [__m512; N] {
    // SAFETY: the intrinsics need AVX-512F, which the only caller (`Linear::block`, into which this is inlined)
    // is compiled for and runs on.
    unsafe {
        use BinaryFn as B;
        let mut out = *a;
        // One match per block, each arm a loop over the vectors.
        macro_rules! each {
            (|$x:ident, $y:ident| $e:expr) => {
                for ((o, &$x), &$y) in out.iter_mut().zip(a).zip(b) {
                    *o = $e;
                }
            };
        }
        let (nan, zero) = (_mm512_set1_ps(f32::NAN), _mm512_setzero_ps());
        match f {
            B::Add => each!(|x, y| _mm512_add_ps(x, y)),
            B::Sub => each!(|x, y| _mm512_sub_ps(x, y)),
            B::Mul => each!(|x, y| _mm512_mul_ps(x, y)),
            B::Div => each!(|x, y| _mm512_div_ps(x, y)),
            // `a.max(b)` keeps `a` when they compare equal (signed zeros); NaN when either side is.
            B::Max => {
                each!(|x, y| _mm512_mask_mov_ps(_mm512_max_ps(y, x), _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, y), nan))
            }
            B::Min => {
                each!(|x, y| _mm512_mask_mov_ps(_mm512_min_ps(y, x), _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, y), nan))
            }
            // `if a < 0 { a * b } else { a }`
            B::PRelu => each!(|x, y| _mm512_mask_mul_ps(x, _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, zero), x, y)),
            other => unreachable!("{other:?} is not a native binary function"),
        }
        out
    }
}

#[cfg(test)]
#[path = "linear_tests.rs"]
mod tests;
