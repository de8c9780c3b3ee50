//! f32 depthwise 2-D convolution (one input channel per group, one output channel each) from channel blocks to
//! channel blocks (`blocked.rs`): a position's 16 channels are one vector, each tap one vector of 16 weights, so
//! every multiply-add fills its lanes whatever the plane's width (the packed kernels vectorise along rows: a 7²
//! plane fills less than half a vector). The rules:
//!
//! 1. **Sums in tap order.** Output `(y, x)` of a block is `act(bias + Σ taps w[i, j] · x[y·sh + i·dh − pt,
//!    x·sw + j·dw − pl] (+ r))`, the taps in row-major order, skipping those in the padding, one fused
//!    multiply-add each, from zero; then the bias, then a residual term laid out as the output, then the
//!    activation (`depthwise.rs`'s order of terms; its sums may associate differently, so values agree within
//!    rounding, test `blocked_depthwise_matches_the_packed_kernel`).
//! 2. **Windows clipped once per output.** The taps inside the input are a rectangle of each window, found per
//!    output row and column ahead of the loops, so the inner loop has no bounds test.
//! 3. **Threads.** Work splits over batch items × blocks × output rows; each part writes its own rows.

use rayon::prelude::*;

use super::act::Act;
use super::blocked::{Blocks, BLOCK};
use super::depthwise::Plane;

/// Weights packed for [`conv2d`]: `[⌈C/16⌉][kh·kw][16]`, the padding lanes zero.
pub struct DepthwisePack {
    c: usize,
    taps: usize,
    data: Vec<f32>,
}

impl DepthwisePack {
    /// Packs `w` (`[c, 1, kh, kw]`, `taps = kh·kw`) read through `at`.
    pub fn new(c: usize, taps: usize, at: impl Fn(usize) -> f32) -> DepthwisePack {
        let groups = c.div_ceil(BLOCK);
        let mut data = vec![0f32; groups * taps * BLOCK];
        for ch in 0..c {
            for t in 0..taps {
                data[((ch / BLOCK) * taps + t) * BLOCK + ch % BLOCK] = at(ch * taps + t);
            }
        }
        DepthwisePack { c, taps, data }
    }
}

/// Per output along one axis: the first tap inside the input, how many are, and the first's input coordinate.
fn clipped(
    len: usize,
    out: usize,
    taps: usize,
    stride: usize,
    dilation: usize,
    pad: usize,
) -> Vec<(usize, usize, usize)> {
    (0..out)
        .map(|o| {
            let at = |t: usize| (o * stride + t * dilation).checked_sub(pad).filter(|&q| q < len);
            match (0..taps).find(|&t| at(t).is_some()) {
                Some(f) => (f, (f..taps).take_while(|&t| at(t).is_some()).count(), at(f).unwrap_or(0)),
                None => (0, 0, 0),
            }
        })
        .collect()
}

/// True when [`conv2d`] runs on this CPU (AVX-512F).
pub fn available() -> bool {
    super::sgemm512::available()
}

/// `y = act(depthwise(x, w) + bias (+ r))` for `n` batch items in channel blocks (rule 1); `residual` is laid out
/// as `y`.
///
/// # Panics
/// Without AVX-512F, or on lengths that do not match the geometry.
#[allow(clippy::too_many_arguments)]
pub fn conv2d(
    x: &[f32],
    n: usize,
    g: &Plane,
    w: &DepthwisePack,
    bias: Option<&[f32]>,
    act: Act,
    residual: Option<&[f32]>,
    y: &mut [f32],
    threads: usize,
) {
    assert!(available(), "depthwise: channel blocks need AVX-512F");
    let c = w.c;
    assert_eq!(w.taps, g.kh * g.kw, "depthwise: weights of another kernel");
    let (xb, yb) = (Blocks { n, c, h: g.ih, w: g.iw }, Blocks { n, c, h: g.oh, w: g.ow });
    assert_eq!(x.len(), xb.len(), "depthwise: an input of {} floats for {xb:?}", x.len());
    assert_eq!(y.len(), yb.len(), "depthwise: an output of {} floats for {yb:?}", y.len());
    assert!(residual.is_none_or(|r| r.len() == y.len()), "depthwise: a residual term not laid out as the output");
    let groups = xb.groups();
    let mut biases = vec![0f32; groups * BLOCK];
    if let Some(b) = bias {
        biases[..c].copy_from_slice(&b[..c]);
    }
    let rows = clipped(g.ih, g.oh, g.kh, g.stride.0, g.dilation.0, g.pad.0);
    let cols = clipped(g.iw, g.ow, g.kw, g.stride.1, g.dilation.1, g.pad.1);
    let (plane_in, row_out) = (g.ih * g.iw * BLOCK, g.ow * BLOCK);
    let run = |i: usize, out: &mut [f32]| {
        let (nb, oy) = (i / g.oh, i % g.oh);
        let gi = nb % groups;
        let part = Part {
            x: &x[nb * plane_in..][..plane_in],
            w: &w.data[gi * w.taps * BLOCK..][..w.taps * BLOCK],
            bias: &biases[gi * BLOCK..][..BLOCK],
            r: residual.map(|r| &r[i * row_out..][..row_out]),
        };
        // SAFETY: AVX-512F (asserted above).
        unsafe { part.row(g, rows[oy], &cols, act, out) };
    };
    if y.is_empty() {
        return;
    }
    if threads > 1 && y.len() >= 1 << 14 {
        y.par_chunks_mut(row_out).enumerate().for_each(|(i, out)| run(i, out));
    } else {
        y.chunks_mut(row_out).enumerate().for_each(|(i, out)| run(i, out));
    }
}

/// What one output row of one block reads.
struct Part<'a> {
    /// The block's input plane, `[ih][iw][16]`.
    x: &'a [f32],
    /// The block's weights, `[taps][16]`.
    w: &'a [f32],
    bias: &'a [f32],
    /// The residual term of the row, laid out as it.
    r: Option<&'a [f32]>,
}

impl Part<'_> {
    /// The output row `out` (`[ow][16]`) whose windows' rows are `(first tap, taps, first input row)`.
    ///
    /// # Safety
    /// AVX-512F is there.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn row(
        &self,
        g: &Plane,
        (ti, ni, y0): (usize, usize, usize),
        cols: &[(usize, usize, usize)],
        act: Act,
        out: &mut [f32],
    ) {
        use std::arch::x86_64::*;
        let (dy, dx) = (g.dilation.0 * g.iw * BLOCK, g.dilation.1 * BLOCK);
        let sx = g.stride.1 * BLOCK;
        // SAFETY: a bounds-checked slice of 16 floats.
        let bias = unsafe { _mm512_loadu_ps(self.bias.as_ptr()) };
        assert!(ti + ni <= g.kh && (ti + ni) * g.kw * BLOCK <= self.w.len(), "depthwise: taps past the kernel");
        let wp = self.w.as_ptr();
        let finish = |ox: usize, acc: __m512, o: &mut [f32]| {
            let mut acc = _mm512_add_ps(acc, bias);
            if let Some(r) = self.r {
                // SAFETY: a bounds-checked slice of 16 floats.
                acc = _mm512_add_ps(acc, unsafe { _mm512_loadu_ps(r[ox * BLOCK..][..BLOCK].as_ptr()) });
            }
            // SAFETY: AVX-512F is enabled for this function; `o` is a bounds-checked slice of 16 floats.
            unsafe { _mm512_storeu_ps(o[..BLOCK].as_mut_ptr(), act.avx512(acc)) };
        };
        let ow = g.ow;
        let mut ox = 0;
        while ox < ow {
            let (tj, nj, x0) = cols[ox];
            let first = (y0 * g.iw + x0) * BLOCK;
            // Four outputs whose windows are whole along the row, side by side: four chains of sums, each tap's
            // weights loaded once for the four (rule 2: the same taps in the same order as one at a time).
            let four = ox + 4 <= ow && (ox..ox + 4).all(|o| cols[o].1 == g.kw) && nj == g.kw;
            let span = if four { 3 * sx } else { 0 };
            let last = first + span + ni.saturating_sub(1) * dy + nj.saturating_sub(1) * dx;
            assert!(ni * nj == 0 || last + BLOCK <= self.x.len(), "depthwise: a window past its plane");
            assert!(tj + nj <= g.kw, "depthwise: taps past the kernel");
            let xp = self.x.as_ptr().wrapping_add(first);
            if four {
                let mut acc = [_mm512_setzero_ps(); 4];
                for i in 0..ni {
                    for j in 0..nj {
                        // SAFETY: tap (ti + i, j) inside the kernel, inputs at most `last` (both asserted).
                        let wv = unsafe { _mm512_loadu_ps(wp.add(((ti + i) * g.kw + j) * BLOCK)) };
                        for (p, a) in acc.iter_mut().enumerate() {
                            // SAFETY: as above.
                            let v = unsafe { _mm512_loadu_ps(xp.add(p * sx + i * dy + j * dx)) };
                            *a = _mm512_fmadd_ps(wv, v, *a);
                        }
                    }
                }
                for (p, a) in acc.into_iter().enumerate() {
                    finish(ox + p, a, &mut out[(ox + p) * BLOCK..]);
                }
                ox += 4;
                continue;
            }
            let mut acc = _mm512_setzero_ps();
            for i in 0..ni {
                for j in 0..nj {
                    // SAFETY: the input block at most `last`, inside the plane; tap (ti + i, tj + j) inside the
                    // kernel (both asserted).
                    let (v, wv) = unsafe {
                        (
                            _mm512_loadu_ps(xp.add(i * dy + j * dx)),
                            _mm512_loadu_ps(wp.add(((ti + i) * g.kw + tj + j) * BLOCK)),
                        )
                    };
                    acc = _mm512_fmadd_ps(wv, v, acc);
                }
            }
            finish(ox, acc, &mut out[ox * BLOCK..]);
            ox += 1;
        }
    }

    /// [`Part::row`] where the target is not x86-64 (never called: the planner gives no blocks there).
    #[cfg(not(target_arch = "x86_64"))]
    unsafe fn row(&self, _: &Plane, _: (usize, usize, usize), _: &[(usize, usize, usize)], _: Act, _: &mut [f32]) {
        unreachable!("channel blocks outside x86-64")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::blocked::{from_blocks, to_blocks};
    use crate::kernels::depthwise::depthwise;

    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n).map(|i| ((i * 7 + seed * 13) % 23) as f32 / 11.0 - 1.0).collect()
    }

    /// Rules 1 and 2 against `depthwise.rs` over strides, dilation, asymmetric padding, kernels of 3 and 5, channels
    /// that fill their blocks or not, an activation and a residual term, one and two threads.
    #[test]
    fn blocked_depthwise_matches_the_packed_kernel() {
        if !available() {
            return;
        }
        let geo = |(ih, iw): (usize, usize), k: usize, s: usize, d: usize, pad: [usize; 4]| {
            let out = |i: usize, p: usize| (i + p - d * (k - 1) - 1) / s + 1;
            let (oh, ow) = (out(ih, pad[0] + pad[2]), out(iw, pad[1] + pad[3]));
            Plane { ih, iw, oh, ow, kh: k, kw: k, stride: (s, s), dilation: (d, d), pad: (pad[0], pad[1]) }
        };
        let cases = [
            (32, geo((14, 14), 3, 1, 1, [1, 1, 1, 1])),
            (20, geo((15, 12), 3, 2, 1, [1, 1, 0, 1])),
            (16, geo((7, 7), 5, 1, 1, [2, 2, 2, 2])),
            (48, geo((9, 11), 3, 1, 2, [2, 2, 2, 2])),
        ];
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        for (case, &(c, g)) in cases.iter().enumerate() {
            let n = 2;
            let taps = g.kh * g.kw;
            let (x, w, bias) = (values(n * c * g.ih * g.iw, case), values(c * taps, case + 1), values(c, case + 2));
            let plain_out = n * c * g.oh * g.ow;
            let mut want = vec![0f32; plain_out];
            let item = c * g.oh * g.ow;
            for b in 0..n {
                let xs = &x[b * c * g.ih * g.iw..][..c * g.ih * g.iw];
                depthwise(xs, &w, Some(&bias), c, 1, &g, Act::HardSwish, &mut want[b * item..][..item], 1);
            }
            let (xb, yb) = (Blocks { n, c, h: g.ih, w: g.iw }, Blocks { n, c, h: g.oh, w: g.ow });
            let mut x_blocked = vec![0f32; xb.len()];
            to_blocks(&x, xb, &mut x_blocked, 1);
            let pack = DepthwisePack::new(c, taps, |i| w[i]);
            for threads in [1, 2] {
                let mut got = vec![f32::NAN; yb.len()];
                pool.install(|| conv2d(&x_blocked, n, &g, &pack, Some(&bias), Act::HardSwish, None, &mut got, threads));
                let mut plain = vec![0f32; plain_out];
                from_blocks(&got, yb, &mut plain, 1);
                for (i, (a, b)) in plain.iter().zip(&want).enumerate() {
                    assert!(
                        (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                        "case {case}, {threads} threads [{i}]: {a} vs {b}"
                    );
                }
            }
            // A residual term: added after the bias, before the activation.
            let r = values(yb.len(), case + 3);
            let mut with = vec![0f32; yb.len()];
            let mut bare = vec![0f32; yb.len()];
            conv2d(&x_blocked, n, &g, &pack, Some(&bias), Act::Relu, Some(&r), &mut with, 1);
            conv2d(&x_blocked, n, &g, &pack, Some(&bias), Act::None, None, &mut bare, 1);
            for (i, ((a, b), r)) in with.iter().zip(&bare).zip(&r).enumerate() {
                assert_eq!(a.to_bits(), (b + r).max(0.0).to_bits(), "case {case} residual [{i}]");
            }
        }
    }
}
