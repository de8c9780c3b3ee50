//! Channel blocks: a 4-D f32 value `[N, C, H, W]` held as `[N, ⌈C/16⌉, H, W, 16]`, the layout the planner gives
//! the values of convolution chains on a CPU with AVX-512F (`stowage_compiler::plan::blocked`). A position's 16
//! channels are one vector, so a pool is vector maxima and sums, and a convolution's output tile (`conv_blocks.rs`)
//! is stored as it sits in its registers. The rules:
//!
//! 1. **Whole blocks.** Channel `c` of position `(y, x)` in batch item `n` is element
//!    `((n·G + c / 16)·H·W + y·W + x)·16 + c % 16`, `G = ⌈C/16⌉` ([`Blocks::at`]). Where `C` is not a multiple of
//!    16 the last block's lanes past `C` are padding: written by every kernel (zero by [`to_blocks`], whatever a
//!    kernel's arithmetic gives elsewhere) and read by none as a channel, so no value depends on them.
//! 2. **The plain kernels' values.** Each kernel here computes what its plain counterpart computes: BatchNormalization
//!    `norm.rs`'s coefficients and `x·a + b`, bit for bit; MaxPool the
//!    maxima of `f32::max` (NaN loses to a number, padding is absent; a window with no input element is 0, as
//!    `pool.rs` writes), bit for bit; AveragePool the sum in window order, in f32, over the `count_include_pad`
//!    divisor of `pool.rs` (whose paths sum in f64 or multiply by the divisor's inverse: equal within rounding);
//!    GlobalAveragePool the sum over positions in f64 over their count, GlobalMaxPool the maximum, or NaN where a
//!    channel holds one (a NaN of its own, not the first one's payload).
//! 3. **Threads.** Work splits over batch items × blocks (and output rows for the pools), each writing its own
//!    part of the output; small work stays on one thread.
//!
//! Tests: `blocks_round_trip_with_zero_padding`, `blocked_batch_norm_gives_the_plain_values`,
//! `blocked_pools_give_the_plain_values` here; the convolution's in
//! `conv_blocks.rs`; whole models through the planner in `tests/tests/conformance.rs` (`STOWAGE_BLOCKED`).

use rayon::prelude::*;

use super::pool::PoolParams;

/// Channels per block: one AVX-512 vector of f32.
pub const BLOCK: usize = 16;

/// Below this many output floats a kernel here runs on one thread.
const PARALLEL_MIN: usize = 1 << 14;

/// The geometry of a blocked value (rule 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Blocks {
    /// Batch items.
    pub n: usize,
    /// Channels (not padded).
    pub c: usize,
    /// Height.
    pub h: usize,
    /// Width.
    pub w: usize,
}

impl Blocks {
    /// The geometry of a value of shape `[n, c, h, w]`; `None` for another rank.
    pub fn of(shape: &[usize]) -> Option<Blocks> {
        match *shape {
            [n, c, h, w] => Some(Blocks { n, c, h, w }),
            _ => None,
        }
    }

    /// Blocks per batch item, `⌈C/16⌉`.
    pub fn groups(&self) -> usize {
        self.c.div_ceil(BLOCK)
    }

    /// Floats held, padding included.
    pub fn len(&self) -> usize {
        self.n * self.groups() * self.h * self.w * BLOCK
    }

    /// True when it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The shape a blocked tensor of it has in a program: the channels rounded up to whole blocks.
    pub fn padded_shape(&self) -> Vec<usize> {
        vec![self.n, self.groups() * BLOCK, self.h, self.w]
    }

    /// The element of channel `c` at `(y, x)` of batch item `n` (rule 1).
    pub fn at(&self, n: usize, c: usize, y: usize, x: usize) -> usize {
        ((n * self.groups() + c / BLOCK) * self.h * self.w + y * self.w + x) * BLOCK + c % BLOCK
    }
}

/// Splits `y` into `parts`-long chunks and runs `f(index, chunk)` on each, in parallel when worth it (rule 3).
fn each_part(y: &mut [f32], parts: usize, threads: usize, f: impl Fn(usize, &mut [f32]) + Sync + Send) {
    if parts == 0 || y.is_empty() {
        return;
    }
    if threads > 1 && y.len() >= PARALLEL_MIN {
        y.par_chunks_mut(parts).enumerate().for_each(|(i, c)| f(i, c));
    } else {
        y.chunks_mut(parts).enumerate().for_each(|(i, c)| f(i, c));
    }
}

/// `x` (`[N, C, H, W]`, packed) into channel blocks `y` (rule 1; padding lanes zero).
///
/// # Panics
/// On lengths that do not match `b`.
pub fn to_blocks(x: &[f32], b: Blocks, y: &mut [f32], threads: usize) {
    let hw = b.h * b.w;
    assert_eq!(x.len(), b.n * b.c * hw, "blocks: a plain input of {} floats for {b:?}", x.len());
    assert_eq!(y.len(), b.len(), "blocks: an output of {} floats for {b:?}", y.len());
    let groups = b.groups();
    each_part(y, hw * BLOCK, threads, |i, part| {
        let (n, g) = (i / groups, i % groups);
        let lanes = BLOCK.min(b.c - g * BLOCK);
        for (p, out) in part.chunks_exact_mut(BLOCK).enumerate() {
            for (l, o) in out.iter_mut().enumerate() {
                *o = if l < lanes { x[(n * b.c + g * BLOCK + l) * hw + p] } else { 0.0 };
            }
        }
    });
}

/// Channel blocks `x` back to a packed `[N, C, H, W]` `y` (rule 1: padding lanes dropped).
///
/// # Panics
/// On lengths that do not match `b`.
pub fn from_blocks(x: &[f32], b: Blocks, y: &mut [f32], threads: usize) {
    let hw = b.h * b.w;
    assert_eq!(x.len(), b.len(), "blocks: a blocked input of {} floats for {b:?}", x.len());
    assert_eq!(y.len(), b.n * b.c * hw, "blocks: a plain output of {} floats for {b:?}", y.len());
    each_part(y, hw, threads, |i, plane| {
        let (n, c) = (i / b.c, i % b.c);
        let src = &x[b.at(n, c, 0, 0) - c % BLOCK..][..hw * BLOCK];
        for (p, o) in plane.iter_mut().enumerate() {
            *o = src[p * BLOCK + c % BLOCK];
        }
    });
}

/// One axis of a 2-D pool: per output, the range of taps inside the input and the first one's coordinate, and the
/// `count_include_pad` divisor's factor (taps inside the padded extent).
struct Axis {
    /// Per output: (first tap inside, taps inside, the first's input coordinate).
    inside: Vec<(usize, usize, usize)>,
    padded: Vec<usize>,
    dilation: usize,
}

impl Axis {
    fn new(len: usize, out: usize, taps: usize, stride: usize, dilation: usize, (pb, pe): (usize, usize)) -> Axis {
        let inside = (0..out)
            .map(|o| {
                // Tap t reads coordinate o·stride + t·dilation − pb.
                let at = |t: usize| (o * stride + t * dilation).checked_sub(pb).filter(|&q| q < len);
                let first = (0..taps).find(|&t| at(t).is_some());
                match first {
                    Some(f) => {
                        let count = (f..taps).take_while(|&t| at(t).is_some()).count();
                        (f, count, at(f).unwrap_or(0))
                    }
                    None => (0, 0, 0),
                }
            })
            .collect();
        let padded =
            (0..out).map(|o| (0..taps).filter(|t| o * stride + t * dilation < pb + len + pe).count()).collect();
        Axis { inside, padded, dilation }
    }
}

/// Which 2-D pool [`pool`] computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// Maxima (`f32::max`).
    Max,
    /// Means; `true`: padding counts in the divisor.
    Average(bool),
}

/// A 2-D MaxPool or AveragePool from channel blocks `x` (geometry `b`) to channel blocks `y` (`[N, C, oh, ow]`),
/// the values of `pool.rs` (rule 2).
///
/// # Panics
/// On a pool that is not 2-D or lengths that do not match.
pub fn pool(
    x: &[f32],
    b: Blocks,
    p: &PoolParams<'_>,
    kind: Pooling,
    y: &mut [f32],
    (oh, ow): (usize, usize),
    threads: usize,
) {
    assert!(p.kernel.len() == 2 && p.pads.len() == 4, "blocks: a pool of {} axes", p.kernel.len());
    assert!(super::sgemm512::available(), "blocks: pools need AVX-512F");
    let o = Blocks { h: oh, w: ow, ..b };
    assert_eq!(x.len(), b.len(), "blocks: a pool input of {} floats for {b:?}", x.len());
    assert_eq!(y.len(), o.len(), "blocks: a pool output of {} floats for {o:?}", y.len());
    let at = |v: &[usize], i: usize| v.get(i).copied().unwrap_or(1);
    let rows = Axis::new(b.h, oh, p.kernel[0], at(p.strides, 0), at(p.dilations, 0), (p.pads[0], p.pads[2]));
    let cols = Axis::new(b.w, ow, p.kernel[1], at(p.strides, 1), at(p.dilations, 1), (p.pads[1], p.pads[3]));
    let plane = b.h * b.w * BLOCK;
    // One part per output row of each block.
    each_part(y, ow * BLOCK, threads, |i, row| {
        let (nb, oy) = (i / oh.max(1), i % oh.max(1));
        let src = &x[nb * plane..][..plane];
        // SAFETY: AVX-512F (asserted above).
        unsafe { pool_row(src, b.w, &rows, &cols, oy, kind, row) }
    });
}

/// One output row of one block: `row` holds `ow` positions of 16 lanes.
///
/// # Safety
/// AVX-512F is there.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn pool_row(src: &[f32], w: usize, rows: &Axis, cols: &Axis, oy: usize, kind: Pooling, row: &mut [f32]) {
    use std::arch::x86_64::*;
    let (_, ny, y0) = rows.inside[oy];
    let (dy, dx) = (rows.dilation * w * BLOCK, cols.dilation * BLOCK);
    for (ox, out) in row.chunks_exact_mut(BLOCK).enumerate() {
        let (_, nx, x0) = cols.inside[ox];
        let first = (y0 * w + x0) * BLOCK;
        let last = first + ny.saturating_sub(1) * dy + nx.saturating_sub(1) * dx;
        assert!(ny * nx == 0 || last + BLOCK <= src.len(), "blocks: a window past its plane");
        let base = src.as_ptr().wrapping_add(first);
        // SAFETY: taps i < ny, j < nx only (the loops below): at most `last`, whose block is inside `src` (asserted).
        let tap = |i: usize, j: usize| unsafe { _mm512_loadu_ps(base.add(i * dy + j * dx)) };
        let mut acc = match kind {
            Pooling::Max if ny * nx > 0 => {
                // `f32::max`: NaN loses to a number. `max_ps` gives its second operand where either is NaN, so a
                // NaN tap keeps the maximum so far; from a first tap with NaN lanes the slow form below.
                let first = tap(0, 0);
                let mut m = first;
                for i in 0..ny {
                    for j in 0..nx {
                        m = _mm512_max_ps(tap(i, j), m);
                    }
                }
                if _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(first, first) != 0 {
                    m = _mm512_set1_ps(f32::NAN);
                    for i in 0..ny {
                        for j in 0..nx {
                            // Lanes whose maximum is still NaN take the tap.
                            let (v, empty) = (tap(i, j), _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(m, m));
                            m = _mm512_mask_mov_ps(_mm512_max_ps(v, m), empty, v);
                        }
                    }
                }
                m
            }
            // A window with no input element (a dilation spanning the input): `pool.rs` writes 0.
            Pooling::Max => _mm512_setzero_ps(),
            Pooling::Average(_) => {
                let mut sum = _mm512_setzero_ps();
                for i in 0..ny {
                    for j in 0..nx {
                        sum = _mm512_add_ps(sum, tap(i, j));
                    }
                }
                sum
            }
        };
        if let Pooling::Average(include_pad) = kind {
            let d = if include_pad { rows.padded[oy] * cols.padded[ox] } else { ny * nx } as f32;
            acc = _mm512_div_ps(acc, _mm512_set1_ps(d));
        }
        // SAFETY: `out` is a bounds-checked slice of 16 floats.
        unsafe { _mm512_storeu_ps(out.as_mut_ptr(), acc) };
    }
}

/// [`pool_row`] where the target is not x86-64 (never called: the planner gives no blocks there).
#[cfg(not(target_arch = "x86_64"))]
unsafe fn pool_row(_: &[f32], _: usize, _: &Axis, _: &Axis, _: usize, _: Pooling, _: &mut [f32]) {
    unreachable!("channel blocks outside x86-64")
}

/// GlobalMaxPool (`max`) or GlobalAveragePool from channel blocks `x` to a packed `[N, C]` `y` (`[N, C, 1, 1]`),
/// the values of `pool::global_pool` (rule 2).
///
/// # Panics
/// On lengths that do not match `b`.
pub fn global_pool(x: &[f32], b: Blocks, max: bool, y: &mut [f32]) {
    assert!(super::sgemm512::available(), "blocks: pools need AVX-512F");
    assert_eq!(x.len(), b.len(), "blocks: a pool input of {} floats for {b:?}", x.len());
    assert_eq!(y.len(), b.n * b.c, "blocks: a pool output of {} floats for {b:?}", y.len());
    let hw = b.h * b.w;
    for n in 0..b.n {
        for g in 0..b.groups() {
            let src = &x[b.at(n, g * BLOCK, 0, 0)..][..hw * BLOCK];
            // SAFETY: AVX-512F (asserted above).
            let acc = unsafe { global_block(src, max) };
            let lanes = BLOCK.min(b.c - g * BLOCK);
            for (l, &a) in acc.iter().enumerate().take(lanes) {
                y[n * b.c + g * BLOCK + l] = if max { a as f32 } else { (a / hw as f64) as f32 };
            }
        }
    }
}

/// The maxima (a NaN where a channel has one, as `pool::global_pool`'s scan) or the sums in f64 of one block's
/// positions.
///
/// # Safety
/// AVX-512F is there (it only lets the compiler use it).
#[cfg_attr(target_arch = "x86_64", target_feature(enable = "avx512f"))]
unsafe fn global_block(src: &[f32], max: bool) -> [f64; BLOCK] {
    if max {
        let (mut acc, mut nan) = ([f32::NEG_INFINITY; BLOCK], [false; BLOCK]);
        for v in src.chunks_exact(BLOCK) {
            for ((a, n), &v) in acc.iter_mut().zip(&mut nan).zip(v) {
                *n |= v.is_nan();
                *a = if v > *a { v } else { *a };
            }
        }
        std::array::from_fn(|l| if nan[l] { f64::NAN } else { f64::from(acc[l]) })
    } else {
        let mut acc = [0f64; BLOCK];
        for v in src.chunks_exact(BLOCK) {
            acc.iter_mut().zip(v).for_each(|(a, &v)| *a += f64::from(v));
        }
        acc
    }
}

/// ONNX `BatchNormalization` (inference form) over blocks: each channel's `x·a + b` with `a = scale / √(var + ε)`
/// and `b = bias − mean·a`, computed as `norm.rs` computes them (rule 2: bit for bit); padding lanes take 0 and 0.
///
/// # Panics
/// On lengths that do not match `b`.
#[allow(clippy::too_many_arguments)]
pub fn batch_norm(
    x: &[f32],
    b: Blocks,
    [scale, bias, mean, var]: [&[f32]; 4],
    epsilon: f32,
    y: &mut [f32],
    threads: usize,
) {
    assert_eq!(x.len(), b.len(), "blocks: a BatchNormalization input of {} floats for {b:?}", x.len());
    assert_eq!(y.len(), b.len(), "blocks: a BatchNormalization output of {} floats for {b:?}", y.len());
    for p in [scale, bias, mean, var] {
        assert_eq!(p.len(), b.c, "blocks: BatchNormalization parameters of {} values for {b:?}", p.len());
    }
    let mut coef = vec![(0.0f32, 0.0f32); b.groups() * BLOCK];
    for (c, k) in coef.iter_mut().enumerate().take(b.c) {
        let a = scale[c] / (var[c] + epsilon).sqrt();
        *k = (a, bias[c] - mean[c] * a);
    }
    let (groups, hw) = (b.groups(), b.h * b.w);
    each_part(y, hw * BLOCK, threads, |i, part| {
        let coef = &coef[i % groups * BLOCK..][..BLOCK];
        let src = &x[i * hw * BLOCK..][..hw * BLOCK];
        for (yv, xv) in part.chunks_exact_mut(BLOCK).zip(src.chunks_exact(BLOCK)) {
            for ((o, &v), &(a, k)) in yv.iter_mut().zip(xv).zip(coef) {
                *o = v * a + k;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::pool as plain;

    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n).map(|i| ((i * 7 + seed * 13) % 29) as f32 / 7.0 - 2.0).collect()
    }

    /// Rule 1: every channel where `at` says, padding lanes zero, and back again.
    #[test]
    fn blocks_round_trip_with_zero_padding() {
        for (b, threads) in [(Blocks { n: 2, c: 20, h: 3, w: 5 }, 1), (Blocks { n: 1, c: 32, h: 40, w: 41 }, 2)] {
            let x = values(b.n * b.c * b.h * b.w, 1);
            let mut y = vec![f32::NAN; b.len()];
            to_blocks(&x, b, &mut y, threads);
            for n in 0..b.n {
                for c in 0..b.groups() * BLOCK {
                    for (yy, xx) in [(0, 0), (b.h - 1, b.w - 1), (1, 2)] {
                        let want = if c < b.c { x[((n * b.c + c) * b.h + yy) * b.w + xx] } else { 0.0 };
                        assert_eq!(y[b.at(n, c, yy, xx)], want, "{b:?} n {n} c {c}");
                    }
                }
            }
            let mut back = vec![f32::NAN; x.len()];
            from_blocks(&y, b, &mut back, threads);
            assert_eq!(back, x);
        }
    }

    /// Rule 2: BatchNormalization in blocks gives `norm.rs`'s values bit for bit.
    #[test]
    fn blocked_batch_norm_gives_the_plain_values() {
        let b = Blocks { n: 2, c: 19, h: 5, w: 7 };
        let x = values(b.n * b.c * b.h * b.w, 5);
        let p: Vec<Vec<f32>> = (0..4).map(|k| values(b.c, k + 7).iter().map(|v| v.abs() + 0.25).collect()).collect();
        let mut want = vec![0.0; x.len()];
        crate::kernels::norm::batch_norm(&x, &[b.n, b.c, b.h, b.w], &p[0], &p[1], &p[2], &p[3], 1e-3, &mut want);
        let mut xb = vec![0.0; b.len()];
        to_blocks(&x, b, &mut xb, 1);
        for threads in [1, 2] {
            let mut yb = vec![f32::NAN; b.len()];
            batch_norm(&xb, b, [&p[0], &p[1], &p[2], &p[3]], 1e-3, &mut yb, threads);
            let mut got = vec![0.0; x.len()];
            from_blocks(&yb, b, &mut got, 1);
            assert_eq!(got, want);
        }
    }

    /// Rule 2: each pool gives `pool.rs`'s values, NaN and padding included.
    #[test]
    fn blocked_pools_give_the_plain_values() {
        if !crate::kernels::sgemm512::available() {
            return;
        }
        let b = Blocks { n: 2, c: 19, h: 9, w: 11 };
        let mut x = values(b.n * b.c * b.h * b.w, 3);
        x[5] = f32::NAN;
        x[200] = f32::NAN;
        let shape = [b.n, b.c, b.h, b.w];
        let mut xb = vec![0.0; b.len()];
        to_blocks(&x, b, &mut xb, 1);
        type Case<'a> = (&'a [usize], &'a [usize], &'a [usize], &'a [usize]);
        let cases: [Case<'_>; 3] = [
            (&[3, 3], &[2, 2], &[1, 1], &[1, 1, 1, 1]),
            (&[2, 3], &[1, 2], &[1, 2], &[0, 2, 1, 0]),
            (&[3, 3], &[1, 1], &[1, 1], &[0, 0, 0, 0]),
        ];
        for (kernel, strides, dilations, pads) in cases {
            let p = PoolParams { kernel, strides, dilations, pads };
            let out =
                |i: usize, d: usize| (d + pads[i] + pads[i + 2] - dilations[i] * (kernel[i] - 1) - 1) / strides[i] + 1;
            let (oh, ow) = (out(0, b.h), out(1, b.w));
            let os = [b.n, b.c, oh, ow];
            let o = Blocks { h: oh, w: ow, ..b };
            for kind in [Pooling::Max, Pooling::Average(true), Pooling::Average(false)] {
                let mut want = vec![0.0; b.n * b.c * oh * ow];
                match kind {
                    Pooling::Max => plain::max_pool(&x, &shape, &p, &mut want, &os, None, false, 1),
                    Pooling::Average(pad) => plain::average_pool(&x, &shape, &p, pad, &mut want, &os, 1),
                }
                for threads in [1, 2] {
                    let mut got = vec![f32::NAN; o.len()];
                    pool(&xb, b, &p, kind, &mut got, (oh, ow), threads);
                    let mut plain_got = vec![0.0; want.len()];
                    from_blocks(&got, o, &mut plain_got, 1);
                    for (i, (a, w)) in plain_got.iter().zip(&want).enumerate() {
                        assert!(
                            a.to_bits() == w.to_bits() || (a - w).abs() < 1e-6,
                            "{kind:?} {kernel:?} [{i}]: {a} vs {w}"
                        );
                    }
                }
            }
        }
        // A window whose taps all fall outside the input (rows and columns −1 and 2 of a 2 × 2 plane): 0, as
        // `pool.rs` writes.
        let small = Blocks { n: 1, c: 16, h: 2, w: 2 };
        let p = PoolParams { kernel: &[2, 2], strides: &[1, 1], dilations: &[3, 3], pads: &[1, 1, 1, 1] };
        let xs = values(64, 5);
        let mut want = vec![f32::NAN; 16];
        plain::max_pool(&xs, &[1, 16, 2, 2], &p, &mut want, &[1, 16, 1, 1], None, false, 1);
        let mut blocked_x = vec![0.0; small.len()];
        to_blocks(&xs, small, &mut blocked_x, 1);
        let mut got = vec![f32::NAN; 16];
        pool(&blocked_x, small, &p, Pooling::Max, &mut got, (1, 1), 1);
        assert_eq!(got, want);
        assert!(got.iter().all(|&v| v == 0.0), "{got:?}");
        for max in [true, false] {
            let mut want = vec![0.0; b.n * b.c];
            plain::global_pool(&x, &shape, max, &mut want, 1);
            let mut got = vec![0.0; b.n * b.c];
            global_pool(&xb, b, max, &mut got);
            for (i, (a, w)) in got.iter().zip(&want).enumerate() {
                let same = a.to_bits() == w.to_bits() || (a.is_nan() && w.is_nan()) || (a - w).abs() < 1e-6;
                assert!(same, "global max {max} [{i}]: {a} vs {w}");
            }
        }
    }
}
