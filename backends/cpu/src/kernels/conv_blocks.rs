//! f32 2-D convolution (one group) into or out of channel blocks (`blocked.rs`): `conv_lanes.rs`'s tiles of 6
//! positions × 64 output channels, with the input read where it is and the tile stored as it sits in registers.
//!
//! 1. **Input in either layout.** Step `(c, i, j)` of K at output position `(y, x)` reads
//!    `buf[offs[(c, i, j)] + virt[(y, x)]]`. From packed NCHW the buffer is `shifted.rs`'s phase planes (as
//!    `conv_lanes::conv2d`), or the input itself for a pointwise convolution. From channel blocks it is the input
//!    itself where there is no padding, else a copy with a zero border of the padding's width (scratch, not a
//!    relayout: the layout is the same); then `offs = ((c / 16)·H'·W' + i·dh·W' + j·dw)·16 + c % 16` and
//!    `virt = (y·sh·W' + x·sw)·16`: any stride and dilation read in place, no phases.
//! 2. **Output in either layout.** Blocks are stored 16 lanes at a time, padding lanes included (their weights and
//!    bias are zero); packed NCHW through `conv_lanes.rs`'s transposing scratch.
//! 3. **The same values as `conv_lanes.rs`.** The sums run over the same K in the same order with the same
//!    epilogue (bias, the residual term laid out as the output, the activation), so a blocked convolution gives
//!    the plain one's bits whatever the layouts (test `blocked_layouts_give_the_bits_of_the_lanes`).

use super::act::Act;
use super::blocked::{Blocks, BLOCK};
use super::conv_lanes::{run_items, Dest, Epi, LanePack, Operands};
use super::depthwise::Plane;
use super::residual::Residual;
use super::shifted::Planes;

/// A layout of a convolution's input or output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// Packed `[N, C, H, W]`.
    Plain,
    /// Channel blocks of 16 (`blocked.rs`).
    Blocked,
}

/// True when [`conv2d`] runs on this CPU (AVX-512F).
pub fn available() -> bool {
    super::sgemm512::available()
}

/// `y = act(conv(x, w) + bias (+ r))` for batch items `n`, one group: `x` of `c` channels over plane `g` in
/// `from`'s layout, `w` packed by [`LanePack::new`] from `[M, c, kh, kw]`, `y` (and `residual`, laid out as `y`)
/// in `to`'s layout.
///
/// # Panics
/// Without AVX-512F, or on lengths that do not match the geometry.
#[allow(clippy::too_many_arguments)]
pub fn conv2d(
    x: &[f32],
    (n, c): (usize, usize),
    g: &Plane,
    from: Form,
    w: &LanePack,
    bias: Option<&[f32]>,
    act: Act,
    residual: Option<&[f32]>,
    y: &mut [f32],
    to: Form,
    threads: usize,
) {
    assert!(available(), "conv: channel blocks need AVX-512F");
    let m = w.rows();
    assert_eq!(w.cols(), c * g.kh * g.kw, "conv: packed weights of another inner dimension");
    assert!(bias.is_none_or(|b| b.len() >= m), "conv: bias shorter than {m} channels");
    let xb = Blocks { n, c, h: g.ih, w: g.iw };
    let yb = Blocks { n, c: m, h: g.oh, w: g.ow };
    let x_len = if from == Form::Blocked { xb.len() } else { n * c * g.ih * g.iw };
    let y_len = if to == Form::Blocked { yb.len() } else { n * m * g.oh * g.ow };
    assert_eq!(x.len(), x_len, "conv: an input of {} floats for {xb:?} ({from:?})", x.len());
    assert_eq!(y.len(), y_len, "conv: an output of {} floats for {yb:?} ({to:?})", y.len());
    assert!(residual.is_none_or(|r| r.len() == y.len()), "conv: a residual term not laid out as the output");
    let positions = g.oh * g.ow;
    if positions == 0 || m == 0 || n == 0 {
        return;
    }
    let (x_item, y_item) = (x_len / n, y_len / n);
    for b in 0..n {
        let (xs, ys) = (&x[b * x_item..][..x_item], &mut y[b * y_item..][..y_item]);
        let term = residual.map(|r| Residual::new(ys, &r[b * y_item..][..y_item]));
        let epi = Epi { bias, act, residual: term };
        let dest = if to == Form::Blocked { Dest::Blocked(ys) } else { Dest::ChannelMajor(ys) };
        match from {
            Form::Blocked => blocked_input(xs, c, g, w, epi, dest, threads),
            Form::Plain => plain_input(xs, c, g, w, epi, dest, threads),
        }
    }
}

/// Rule 1 from channel blocks: in place, or from a copy with a zero border where the convolution pads.
fn blocked_input(x: &[f32], c: usize, g: &Plane, w: &LanePack, epi: Epi<'_>, dest: Dest<'_>, threads: usize) {
    let (pt, pl) = g.pad;
    // The padded extent every tap of every output lies in.
    let hp = (g.oh - 1) * g.stride.0 + (g.kh - 1) * g.dilation.0 + 1;
    let wp = (g.ow - 1) * g.stride.1 + (g.kw - 1) * g.dilation.1 + 1;
    let groups = c.div_ceil(BLOCK);
    let bordered;
    let (buf, hb, wb): (&[f32], usize, usize) = if pt == 0 && pl == 0 && hp <= g.ih && wp <= g.iw {
        (x, g.ih, g.iw)
    } else {
        let (hb, wb) = (hp.max(pt + g.ih), wp.max(pl + g.iw));
        let mut p = vec![0f32; groups * hb * wb * BLOCK];
        for gi in 0..groups {
            for r in 0..g.ih {
                let src = &x[((gi * g.ih + r) * g.iw) * BLOCK..][..g.iw * BLOCK];
                p[((gi * hb + r + pt) * wb + pl) * BLOCK..][..g.iw * BLOCK].copy_from_slice(src);
            }
        }
        bordered = p;
        (&bordered[..], hb, wb)
    };
    let mut offs = Vec::with_capacity(c * g.kh * g.kw);
    for ch in 0..c {
        for i in 0..g.kh {
            for j in 0..g.kw {
                offs.push(((ch / BLOCK) * hb * wb + i * g.dilation.0 * wb + j * g.dilation.1) * BLOCK + ch % BLOCK);
            }
        }
    }
    let virt: Vec<usize> =
        (0..g.oh * g.ow).map(|p| ((p / g.ow) * g.stride.0 * wb + (p % g.ow) * g.stride.1) * BLOCK).collect();
    let last = offs.iter().max().copied().unwrap_or(0) + virt.last().copied().unwrap_or(0);
    assert!(last < buf.len(), "conv: blocks of {} floats, reads to {last}", buf.len());
    // SAFETY: every read `offs[l] + virt[p]` is at most `last`, inside `buf` (asserted); `dest` holds the
    // output's channels × positions (checked by the caller and `run_items`); AVX-512F (asserted by the caller).
    unsafe { run_items(w, Operands { buf, offs: &offs, virt: &virt }, epi, dest, threads) };
}

/// Rule 1 from packed NCHW: the input itself for a pointwise convolution, else `shifted.rs`'s phase planes.
fn plain_input(x: &[f32], c: usize, g: &Plane, w: &LanePack, epi: Epi<'_>, dest: Dest<'_>, threads: usize) {
    let n = g.oh * g.ow;
    let pointwise = g.kh == 1 && g.kw == 1 && g.stride == (1, 1) && g.pad == (0, 0) && (g.oh, g.ow) == (g.ih, g.iw);
    if pointwise {
        let offs: Vec<usize> = (0..c).map(|ch| ch * n).collect();
        let virt: Vec<usize> = (0..n).collect();
        assert!(x.len() >= c * n, "conv: input of {} floats for {c} channels of {n}", x.len());
        // SAFETY: every read `x[ch·n + p]` is below `c·n ≤ x.len()` (asserted); the rest as in `blocked_input`.
        unsafe { run_items(w, Operands { buf: x, offs: &offs, virt: &virt }, epi, dest, threads) };
        return;
    }
    let planes = Planes::new(x, c, g, threads);
    let last = planes.max_off + (g.oh - 1) * planes.width + g.ow;
    assert!(last <= planes.len, "conv: planes of {} floats, reads to {last}", planes.len);
    let virt: Vec<usize> = (0..n).map(|p| p / g.ow * planes.width + p % g.ow).collect();
    // SAFETY: reads are inside the planes (asserted: `last`, `shifted.rs` rule 2); the rest as in `blocked_input`.
    unsafe {
        run_items(w, Operands { buf: &planes.buf[..planes.len], offs: &planes.offs, virt: &virt }, epi, dest, threads)
    };
    planes.keep();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::blocked::{from_blocks, to_blocks};
    use crate::kernels::conv_lanes::{
        self,
        tests::{geo, values},
    };

    /// Rule 3: every layout pair gives `conv_lanes.rs`'s bits (itself held to `shifted.rs`'s), with a bias, a
    /// residual term and an activation, channels that fill their blocks or not, on one and two threads.
    #[test]
    fn blocked_layouts_give_the_bits_of_the_lanes() {
        if !available() {
            return;
        }
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let cases = [
            (16, 64, geo((13, 13), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1))),
            (3, 40, geo((17, 15), (3, 3), (2, 2), (1, 1), (1, 1, 0, 1))),
            (20, 70, geo((9, 11), (1, 1), (1, 1), (1, 1), (0, 0, 0, 0))),
            (32, 16, geo((12, 12), (3, 3), (1, 1), (2, 2), (2, 2, 2, 2))),
            (17, 33, geo((8, 9), (1, 1), (2, 2), (1, 1), (0, 0, 0, 0))),
        ];
        for (case, &(c, m, g)) in cases.iter().enumerate() {
            let n = 2;
            let k = c * g.kh * g.kw;
            let (x, wt, bias) = (values(n * c * g.ih * g.iw, case), values(m * k, case + 1), values(m, case + 2));
            let lanes = LanePack::new(m, k, &wt[..]);
            let (xb, yb) = (Blocks { n, c, h: g.ih, w: g.iw }, Blocks { n, c: m, h: g.oh, w: g.ow });
            let plain_out = n * m * g.oh * g.ow;
            let r = values(plain_out, case + 3);
            let mut want = vec![f32::NAN; plain_out];
            let item = m * g.oh * g.ow;
            for b in 0..n {
                let xs = &x[b * c * g.ih * g.iw..][..c * g.ih * g.iw];
                let term = Residual::new(&want[b * item..][..item], &r[b * item..][..item]);
                conv_lanes::conv2d(
                    xs,
                    c,
                    &g,
                    &lanes,
                    Some(&bias),
                    Act::Relu,
                    Some(term),
                    &mut want[b * item..][..item],
                    1,
                );
            }
            let mut x_blocked = vec![0.0; xb.len()];
            to_blocks(&x, xb, &mut x_blocked, 1);
            let mut r_blocked = vec![0.0; yb.len()];
            to_blocks(&r, yb, &mut r_blocked, 1);
            for threads in [1, 2] {
                for (from, to) in
                    [(Form::Plain, Form::Blocked), (Form::Blocked, Form::Plain), (Form::Blocked, Form::Blocked)]
                {
                    let xs = if from == Form::Blocked { &x_blocked } else { &x };
                    let rs = if to == Form::Blocked { &r_blocked } else { &r };
                    let mut got = vec![f32::NAN; if to == Form::Blocked { yb.len() } else { plain_out }];
                    pool.install(|| {
                        conv2d(xs, (n, c), &g, from, &lanes, Some(&bias), Act::Relu, Some(rs), &mut got, to, threads)
                    });
                    let got = if to == Form::Blocked {
                        let mut p = vec![0.0; plain_out];
                        from_blocks(&got, yb, &mut p, 1);
                        p
                    } else {
                        got
                    };
                    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                        assert_eq!(
                            a.to_bits(),
                            b.to_bits(),
                            "case {case} {from:?} → {to:?}, {threads} threads [{i}]: {a} vs {b}"
                        );
                    }
                }
            }
        }
    }
}
