//! f32 convolution over shifted planes: a 1-D or 2-D convolution with packed weights, run as a matrix product
//! whose right operand is never unfolded (no im2col).
//!
//! The im2col path writes `C·Kh·Kw` rows of output size and reads them back: for a 3×3 convolution nine times
//! the input, through memory. Here the product reads the input in place, under these rules:
//!
//! 1. **Phase planes.** A group's input is copied once into zero-padded planes, one per channel and per phase of
//!    the strides that some tap uses: phase `(a, b)` of channel `c` holds `x[c, a + sh·r − pad_top, b + sw·s −
//!    pad_left]` at `(r, s)`, 0 outside the input. A stride of 1 has one phase, the padded plane itself. Every
//!    plane is `H' × W'`, `H' = Oh + ⌊(Kh − 1)·dh / sh⌋`, `W' = Ow + ⌊(Kw − 1)·dw / sw⌋` ([`Planes::new`]).
//! 2. **Virtual columns.** Output `(y, x)` is virtual column `p = y·W' + x`. Tap `(c, i, j)` of it reads phase
//!    `(i·dh mod sh, j·dw mod sw)` of channel `c` at `(y + ⌊i·dh / sh⌋, x + ⌊j·dw / sw⌋)`, that is, at
//!    `off(c, i, j) + p`. So row `l = (c, i, j)` of the unfolded matrix is the planes read from `off[l]` on,
//!    contiguous in `p`: the product's right operand with a row offset table instead of a row stride.
//! 3. **Dropped columns.** Virtual columns with `x ≥ Ow` (`W' − Ow` per output row) are computed and never
//!    written; their reads run into the next row or into the `W' + 32` zeros after the last plane, so every read
//!    is inside the buffer ([`Planes::new`] sizes it, [`conv2d`] asserts it).
//! 4. **Whole K in registers.** A tile of 12 output channels × 32 virtual columns accumulates the whole inner
//!    dimension (every block of the packed weights) in 24 `zmm` registers, then is written once: bias added,
//!    ReLU applied, each run of valid columns stored from the registers to its place in the output under a mask
//!    ([`segments`]; a tile with a residual term and several runs goes through a scratch tile instead). No partial
//!    sums go through memory.
//! 5. **Threads split the tiles.** Tiles write disjoint outputs (rule 2 maps virtual columns one to one onto
//!    output positions), so contiguous ranges of tiles run on separate threads with no copy after; with fewer
//!    than two tiles per thread, the threads split the weights' 12-row panels instead; with fewer panels than
//!    threads as well, one thread runs it all.
//! 6. **Blocks of tiles.** Tiles run in blocks whose window of the planes fits in [`WINDOW_BYTES`]; within a
//!    block each 12-row panel of the weights runs over all the block's tiles. The weights are read once per
//!    block (ResNet-50's last 3×3 convolutions hold 9.4 MB of them, more than a core's L2), the planes once per
//!    panel, from the cache.
//! 7. **One buffer per thread.** The planes' buffer of a thread's last convolution (up to [`SPARE_MAX`]) is kept
//!    for its next, grown and never shrunk, and the planes write every element of the part they use, zeros
//!    included: no allocation, no zeroing pass, no fresh pages per call (a zeroing `memset` took 6 % of a 16 → 32
//!    3×3 stride-2 convolution at 160²; shrinking the buffer to each convolution zeroed it again when a larger
//!    followed, 1 % of SqueezeNet's run at two threads).

use super::act::Act;
use super::depthwise::Plane;
use super::residual::Residual;
use super::sgemm512::{PackedA, KC, PANEL_ROWS as MR};
use rayon::prelude::*;

/// Virtual columns per tile (two `zmm` registers).
const NR: usize = 32;

/// The most bytes of the planes a block of tiles reads (rule 6): half of a Zen 5 or Skylake-SP core's L2.
const WINDOW_BYTES: usize = 256 << 10;

/// The largest buffer of planes a thread keeps for its next convolution (rule 7): 4 MiB.
const SPARE_MAX: usize = 1 << 20;

thread_local! {
    /// The planes' buffer of this thread's last convolution, reused by its next (rule 7).
    static SPARE: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// True when [`conv2d`] runs on this CPU (AVX-512F).
pub fn available() -> bool {
    super::sgemm512::available()
}

/// The phase planes of rule 1 and the row offsets of rule 2 (also read by `conv_lanes.rs`).
pub(super) struct Planes {
    /// The planes in `buf[..len]`; the thread's buffer may be longer (rule 7).
    pub(super) buf: Vec<f32>,
    pub(super) len: usize,
    /// `W'`.
    pub(super) width: usize,
    /// `H'`.
    height: usize,
    /// Phases per channel.
    phases: usize,
    /// `off[l]` for `l = (c·Kh + i)·Kw + j`.
    pub(super) offs: Vec<usize>,
    /// The largest of `offs`.
    pub(super) max_off: usize,
}

impl Planes {
    /// The buffer back to the thread for its next convolution (rule 7).
    pub(super) fn keep(self) {
        if self.buf.len() <= SPARE_MAX {
            SPARE.set(self.buf);
        }
    }

    pub(super) fn new(x: &[f32], cg: usize, g: &Plane, threads: usize) -> Planes {
        let (sh, sw) = g.stride;
        let (dh, dw) = g.dilation;
        let height = g.oh + (g.kh - 1) * dh / sh;
        let width = g.ow + (g.kw - 1) * dw / sw;
        // Only the phases some tap reads (a 1×1 kernel of stride 2 reads one of four), in order, and each phase's
        // place among them: tables, not searches (an STFT's 512 taps of stride 160 have 160 phases).
        let phases = |k: usize, d: usize, s: usize| {
            let mut at = vec![usize::MAX; s];
            (0..k).for_each(|i| at[i * d % s] = 0);
            let used: Vec<usize> = (0..s).filter(|&a| at[a] == 0).collect();
            used.iter().enumerate().for_each(|(n, &a)| at[a] = n);
            (used, at)
        };
        let ((rows, row_at), (cols, col_at)) = (phases(g.kh, dh, sh), phases(g.kw, dw, sw));
        let plane = height * width;
        let per_channel = rows.len() * cols.len() * plane;
        // Rule 7: a thread's last buffer again, every element of it written below.
        let len = cg * per_channel + width + NR;
        let mut buf = SPARE.take();
        // Grown, never shrunk: a larger convolution after a smaller one would zero the difference again.
        if buf.len() < len {
            buf.resize(len, 0.0);
        }
        buf[cg * per_channel..len].fill(0.0);
        let fill = |c: usize, dst: &mut [f32]| {
            let src = &x[c * g.ih * g.iw..][..g.ih * g.iw];
            if available() {
                // SAFETY: AVX-512F is there (`available`, just checked).
                unsafe { fill_channel(src, g, (&rows, &cols), (height, width), dst) }
            } else {
                fill_planes(src, g, (&rows, &cols), (height, width), dst);
            }
        };
        let channels = &mut buf[..cg * per_channel];
        if threads > 1 && cg >= 2 * threads {
            // One contiguous range of channels per thread (an indexed split; `par_bridge` took its items one at a
            // time through a lock).
            let per = cg.div_ceil(threads) * per_channel.max(1);
            channels.par_chunks_mut(per).enumerate().for_each(|(t, part)| {
                let first = t * per / per_channel.max(1);
                part.chunks_mut(per_channel.max(1)).enumerate().for_each(|(c, dst)| fill(first + c, dst));
            });
        } else {
            channels.chunks_mut(per_channel.max(1)).enumerate().for_each(|(c, dst)| fill(c, dst));
        }
        let mut offs = Vec::with_capacity(cg * g.kh * g.kw);
        for c in 0..cg {
            for i in 0..g.kh {
                let ai = row_at[i * dh % sh];
                for j in 0..g.kw {
                    let bi = col_at[j * dw % sw];
                    let base = c * per_channel + (ai * cols.len() + bi) * plane;
                    offs.push(base + (i * dh / sh) * width + j * dw / sw);
                }
            }
        }
        let max_off = offs.iter().max().copied().unwrap_or(0);
        Planes { buf, len, width, height, phases: rows.len() * cols.len(), offs, max_off }
    }
}

/// One channel's phase planes (rule 1) into `dst` (zeros where no input falls), compiled for AVX-512F so that
/// the row copies and the stride-2 gathers run in `zmm` registers: as element-by-element copies they took a
/// quarter of a 16 → 32 3×3 stride-2 convolution at 160² (`examples/conv_threads`, `perf record`).
///
/// # Safety
/// The CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn fill_channel(
    src: &[f32],
    g: &Plane,
    (rows, cols): (&[usize], &[usize]),
    (height, width): (usize, usize),
    dst: &mut [f32],
) {
    fill_planes(src, g, (rows, cols), (height, width), dst);
}

/// [`fill_channel`] where the target is not x86-64 (never called: [`available`] is false there).
#[cfg(not(target_arch = "x86_64"))]
unsafe fn fill_channel(_: &[f32], _: &Plane, _: (&[usize], &[usize]), _: (usize, usize), _: &mut [f32]) {
    unreachable!("AVX-512F outside x86-64")
}

/// One channel's phase planes (rule 1): the input where it falls, zeros elsewhere, every element written (rule 7).
#[inline(always)]
fn fill_planes(
    src: &[f32],
    g: &Plane,
    (rows, cols): (&[usize], &[usize]),
    (height, width): (usize, usize),
    dst: &mut [f32],
) {
    let (sh, sw) = g.stride;
    let plane = height * width;
    for (ai, &a) in rows.iter().enumerate() {
        for (bi, &b) in cols.iter().enumerate() {
            let phase = &mut dst[(ai * cols.len() + bi) * plane..][..plane];
            // Columns s whose input column b + sw·s − pad_left lies inside the row.
            let lo = g.pad.1.saturating_sub(b).div_ceil(sw).min(width);
            let hi = (g.iw + g.pad.1).saturating_sub(b).div_ceil(sw).min(width);
            for (r, out) in phase.chunks_exact_mut(width).enumerate() {
                let iy = (a + sh * r).checked_sub(g.pad.0).filter(|&iy| iy < g.ih);
                let (Some(iy), true) = (iy, lo < hi) else {
                    out.fill(0.0);
                    continue;
                };
                out[..lo].fill(0.0);
                out[hi..].fill(0.0);
                strided_copy(&mut out[lo..hi], &src[iy * g.iw..][..g.iw], b + sw * lo - g.pad.1, sw);
            }
        }
    }
}

/// `out[s] = row[start + step·s]` for every `s < out.len()`; strides 1 and 2 as loops that vectorise.
#[inline(always)]
fn strided_copy(out: &mut [f32], row: &[f32], start: usize, step: usize) {
    let n = out.len();
    match step {
        1 => out.copy_from_slice(&row[start..start + n]),
        2 => {
            // Elements start, start + 2, …, start + 2(n − 1): n − 1 pairs and the last element.
            let (pairs, last) = row[start..start + 2 * n - 1].as_chunks::<2>();
            for (o, pair) in out.iter_mut().zip(pairs) {
                *o = pair[0];
            }
            out[n - 1] = last[0];
        }
        _ => {
            for (s, o) in out.iter_mut().enumerate() {
                *o = row[start + step * s];
            }
        }
    }
}

/// The runs of valid columns of the tile starting at virtual column `p0` (rule 3), as (first column in the
/// tile, output position, length), into `out`. Runs adjacent both in the tile and in the output are one run: with
/// no dropped columns (`W' = Ow`: a 1×1 kernel of stride 2, a 1-D convolution) a whole tile is one run across
/// output rows, stored straight from registers.
fn segments(p0: usize, end: usize, width: usize, ow: usize, out: &mut Vec<(usize, usize, usize)>) {
    out.clear();
    let mut t = 0;
    while t < NR && p0 + t < end {
        let p = p0 + t;
        let (y, x) = (p / width, p % width);
        if x >= ow {
            t += width - x;
            continue;
        }
        let len = (ow - x).min(NR - t).min(end - p);
        match out.last_mut() {
            Some((s, at, n)) if *s + *n == t && *at + *n == y * ow + x => *n += len,
            _ => out.push((t, y * ow + x, len)),
        }
        t += len;
    }
}

/// The output, written by several threads at disjoint positions (rule 5; `conv_lanes.rs` rule 5 too).
#[derive(Clone, Copy)]
pub(super) struct Out(pub(super) *mut f32);
// SAFETY: threads write through it only at the disjoint positions of their own tiles (rule 5).
unsafe impl Send for Out {}
// SAFETY: as above.
unsafe impl Sync for Out {}

impl Out {
    /// The address of element `i` (a method, so that closures capture the whole `Out`, which is `Sync`).
    pub(super) fn at(&self, i: usize) -> *mut f32 {
        self.0.wrapping_add(i)
    }
}

/// `y[m, (y, x)] = act(bias[m] + Σ_{c,i,j} W[m, (c, i, j)] · x[c, y·sh + i·dh − pad_top, x·sw + j·dw −
/// pad_left])` for one group: `x` is `[cg, ih, iw]`, `w` its packed `[M, cg·Kh·Kw]` weights, `y` is `[M, Oh·Ow]`.
/// The caller has checked that [`available`] is true.
///
/// # Panics
/// On slice lengths that disagree with the geometry.
#[allow(clippy::too_many_arguments)]
pub fn conv2d(
    x: &[f32],
    cg: usize,
    g: &Plane,
    w: &PackedA,
    bias: Option<&[f32]>,
    act: Act,
    residual: Option<Residual<'_>>,
    y: &mut [f32],
    threads: usize,
) {
    let (m, k) = (w.rows(), w.cols());
    let n = g.oh * g.ow;
    assert!(x.len() >= cg * g.ih * g.iw, "conv: input of {} floats for {cg} channels of {g:?}", x.len());
    assert_eq!(k, cg * g.kh * g.kw, "conv: packed weights of another inner dimension");
    assert_eq!(y.len(), m * n, "conv: output length");
    assert!(bias.is_none_or(|b| b.len() >= m), "conv: bias shorter than {m} channels");
    assert!(g.stride.0 > 0 && g.stride.1 > 0 && g.dilation.0 > 0 && g.dilation.1 > 0, "conv: zero stride");
    if n == 0 || m == 0 {
        return;
    }
    let planes = Planes::new(x, cg, g, threads);
    let end = g.oh * planes.width;
    // Rule 3: the last tile's reads end inside the buffer.
    let last = planes.max_off + end.next_multiple_of(NR);
    assert!(last <= planes.len, "conv: planes of {} floats, reads to {last}", planes.len);
    let tiles = end.div_ceil(NR);
    let out = Out(y.as_mut_ptr());
    // Rule 6: tiles per block, so that the block's window of the planes stays in the cache.
    // A block's virtual columns plus the largest tap offset within a plane, at most the plane, per channel phase.
    let window = |tiles: usize| {
        let reach = (planes.height - g.oh) * planes.width + (planes.width - g.ow);
        let span = (tiles * NR + reach).min(planes.height * planes.width);
        cg * planes.phases * span * std::mem::size_of::<f32>()
    };
    let mut block = 1;
    while block < tiles && window(block * 2) <= WINDOW_BYTES {
        block *= 2;
    }
    let panels = m.div_ceil(MR);
    let run = |(t0, t1): (usize, usize), (q0, q1): (usize, usize)| {
        // The block's tiles with their runs of valid columns, found once per block (not once per panel).
        let mut segs: Vec<(usize, usize, usize)> = Vec::with_capacity(block * 4);
        let mut tiles_here: Vec<(usize, std::ops::Range<usize>)> = Vec::with_capacity(block);
        let mut one = Vec::with_capacity(NR);
        let mut tile = [[0f32; NR]; MR];
        for b0 in (t0..t1).step_by(block) {
            segs.clear();
            tiles_here.clear();
            for t in b0..(b0 + block).min(t1) {
                segments(t * NR, end, planes.width, g.ow, &mut one);
                if !one.is_empty() {
                    tiles_here.push((t * NR, segs.len()..segs.len() + one.len()));
                    segs.extend_from_slice(&one);
                }
            }
            for q in q0..q1 {
                let rows = MR.min(m - q * MR);
                let epi = Epi { bias: bias.map(|b| &b[q * MR..q * MR + rows]), act, residual };
                // A tile through the scratch takes its term and activation as its runs are copied out.
                let bare = Epi { act: Act::None, residual: None, ..epi };
                for (p0, range) in &tiles_here {
                    let runs = &segs[range.clone()];
                    // A tile whose 32 columns are one run of one output row is stored straight from registers.
                    if let [(0, at, NR)] = runs[..] {
                        let at = out.at(q * MR * n + at);
                        // SAFETY: rows q·12 .. q·12 + rows < m of the run's 32 positions `at .. at + 32 ≤ n` are
                        // inside `y` (length m·n, asserted); tiles are disjoint (rule 5), so no other thread
                        // writes them.
                        unsafe { product(rows, w, q, &planes, *p0, epi, Dest::Out { at, ld: n }) };
                        continue;
                    }
                    // Other tiles store their runs under masks; only a residual term goes through the scratch,
                    // added as the runs are copied out.
                    let Some(r) = residual else {
                        let dest = Dest::Runs { out: out.at(q * MR * n), ld: n, runs };
                        // SAFETY: rows q·12 + i < m, and each run's positions `at .. at + len ≤ n` (segments lie
                        // inside the output plane), so every store is inside `y`; tiles are disjoint (rule 5).
                        unsafe { product(rows, w, q, &planes, *p0, epi, dest) };
                        continue;
                    };
                    // SAFETY: a tile is always a valid destination.
                    unsafe { product(rows, w, q, &planes, *p0, bare, Dest::Tile(&mut tile)) };
                    for (i, vals) in tile.iter().enumerate().take(rows) {
                        for &(s, at, len) in runs {
                            // SAFETY: `q·12 + i < m` and `at + len ≤ n` (runs lie inside the output plane), so
                            // the range is inside `y`; tiles are disjoint (rule 5), so no other thread writes it.
                            let dst = unsafe { std::slice::from_raw_parts_mut(out.at((q * MR + i) * n + at), len) };
                            let terms = r.slice(dst.as_ptr(), len);
                            for ((d, &v), &t) in dst.iter_mut().zip(&vals[s..s + len]).zip(terms) {
                                *d = v + t;
                            }
                            act.over(dst);
                        }
                    }
                }
            }
        }
    };
    if threads > 1 && tiles >= 2 * threads {
        let per = tiles.div_ceil(threads);
        (0..threads).into_par_iter().for_each(|i| run((i * per, ((i + 1) * per).min(tiles)), (0, panels)));
    } else if threads > 1 && panels >= threads {
        // Few tiles (a 7×7 output is two): the threads take the weights' panels instead.
        let per = panels.div_ceil(threads);
        (0..threads).into_par_iter().for_each(|i| run((0, tiles), (i * per, ((i + 1) * per).min(panels))));
    } else {
        run((0, tiles), (0, panels));
    }
    planes.keep();
}

/// What a tile adds before it is stored: the bias of its rows, a residual term (`residual.rs`; only for a tile
/// stored to the output), and the activation.
#[derive(Clone, Copy)]
struct Epi<'a> {
    bias: Option<&'a [f32]>,
    act: Act,
    residual: Option<Residual<'a>>,
}

/// Where a tile goes: the scratch tile, or the output itself (row `i` at `at + i·ld`, 32 columns each).
enum Dest<'a> {
    Tile(&'a mut [[f32; NR]; MR]),
    Out {
        at: *mut f32,
        ld: usize,
    },
    /// Runs of the tile's columns (`segments`: first column in the tile, output position, length), row `i` of
    /// the tile at `out + i·ld`: each run stored from registers under a mask, no scratch. No residual term.
    Runs {
        out: *mut f32,
        ld: usize,
        runs: &'a [(usize, usize, usize)],
    },
}

/// One tile: `act(bias[i] + Σₗ W[q·12 + i, l] · buf[offs[l] + p0 + t])` for `i < rows`, `t < 32`, over the
/// whole inner dimension, stored to `dest`.
///
/// # Safety
/// With [`Dest::Out`], the 32 floats at `at + i·ld` must be writable for every `i < rows`, by this thread alone;
/// with [`Dest::Runs`], the `len` floats at `out + i·ld + at` of every run.
unsafe fn product(rows: usize, w: &PackedA, q: usize, planes: &Planes, p0: usize, epi: Epi<'_>, mut dest: Dest<'_>) {
    let (b, offs) = (&planes.buf[p0..planes.len], planes.offs.as_slice());
    assert!(offs.len() == w.cols() && planes.max_off + NR <= b.len(), "conv: tile reads past the planes");
    assert!(epi.bias.is_none_or(|b| b.len() == rows), "conv: a bias per row of the tile");
    #[cfg(target_arch = "x86_64")]
    if available() {
        macro_rules! dispatch {
            ($($r:literal)*) => {
                match rows {
                    $(
                        // SAFETY: AVX-512F is there (`available`); every read `b[offs[l] .. + 32]` is inside `b`
                        // (`offs[l] ≤ max_off`, asserted above); the panels are bounds-checked slices; the
                        // destination is the caller's promise.
                        $r => unsafe { tile_avx512::<$r>(w, q, b.as_ptr(), offs, epi, dest) },
                    )*
                    _ => unreachable!("a tile has 1 to 12 rows"),
                }
            };
        }
        return dispatch!(1 2 3 4 5 6 7 8 9 10 11 12);
    }
    // Elsewhere the same sums in plain loops (convolutions take this path only where AVX-512F runs; the loops
    // keep the module's tests meaningful on every CPU).
    let k = w.cols();
    let mut sums = [[0f32; NR]; MR];
    for pc in (0..k).step_by(KC) {
        let kc = KC.min(k - pc);
        let panel = w.panel(pc, kc, q);
        for (l, &o) in offs[pc..pc + kc].iter().enumerate() {
            for (i, row) in sums.iter_mut().enumerate().take(rows) {
                for (t, v) in row.iter_mut().enumerate() {
                    *v += panel[l * MR + i] * b[o + t];
                }
            }
        }
    }
    for (i, row) in sums.iter().enumerate().take(rows) {
        let bias = epi.bias.map_or(0.0, |b| b[i]);
        let terms = match (&dest, epi.residual) {
            (Dest::Out { at, ld }, Some(r)) => r.slice(at.wrapping_add(i * ld), NR),
            (_, Some(_)) => panic!("conv: a residual term for a tile not stored whole"),
            _ => &[0.0; NR],
        };
        let mut j = 0;
        let vals = row.map(|v| {
            let t = terms[j];
            j += 1;
            epi.act.scalar(if epi.residual.is_some() { v + bias + t } else { v + bias })
        });
        match &dest {
            Dest::Tile(_) => {}
            // SAFETY: the caller's promise: each run's `len` floats at `out + i·ld + at` are writable.
            Dest::Runs { out, ld, runs } => unsafe {
                for &(s, at, len) in runs.iter() {
                    std::ptr::copy_nonoverlapping(vals[s..s + len].as_ptr(), out.add(i * ld + at), len);
                }
            },
            // SAFETY: the caller's promise: 32 writable floats at `at + i·ld`.
            Dest::Out { at, ld } => unsafe { std::ptr::copy_nonoverlapping(vals.as_ptr(), at.add(i * ld), NR) },
        }
        if let Dest::Tile(t) = &mut dest {
            t[i] = vals;
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tile_avx512<const R: usize>(
    w: &PackedA,
    q: usize,
    b: *const f32,
    offs: &[usize],
    epi: Epi<'_>,
    dest: Dest<'_>,
) {
    use std::arch::x86_64::{__m512, _mm512_add_ps, _mm512_fmadd_ps, _mm512_loadu_ps};
    use std::arch::x86_64::{_mm512_mask_storeu_ps, _mm512_set1_ps, _mm512_setzero_ps, _mm512_storeu_ps};
    let k = w.cols();
    let mut acc: [[__m512; 2]; R] = [[_mm512_setzero_ps(); 2]; R];
    for pc in (0..k).step_by(KC) {
        let kc = KC.min(k - pc);
        let panel = w.panel(pc, kc, q);
        for (l, &o) in offs[pc..pc + kc].iter().enumerate() {
            let a = &panel[l * MR..][..MR];
            // The weights ahead (`sgemm512::PREFETCH_STEPS`): a hint, never a read, so past the panel is harmless.
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                panel.as_ptr().wrapping_add((l + super::sgemm512::PREFETCH_STEPS) * MR).cast::<i8>(),
            );
            // SAFETY: `product` checked `o + 32 ≤ max_off + 32 ≤ b.len()`.
            let (b0, b1) = unsafe { (_mm512_loadu_ps(b.add(o)), _mm512_loadu_ps(b.add(o + 16))) };
            for (i, row) in acc.iter_mut().enumerate() {
                let ai = _mm512_set1_ps(a[i]);
                row[0] = _mm512_fmadd_ps(ai, b0, row[0]);
                row[1] = _mm512_fmadd_ps(ai, b1, row[1]);
            }
        }
    }
    // The term of the tile's first element, checked for its R rows of 32 (`Residual::tile`).
    let term = match (&dest, epi.residual) {
        (Dest::Out { at, ld }, Some(r)) => Some((r.tile(*at, R, NR, *ld), *ld)),
        (_, Some(_)) => panic!("conv: a residual term for a tile not stored whole"),
        _ => None,
    };
    let mut tile = dest;
    for (i, row) in acc.iter().enumerate() {
        let (mut v0, mut v1) = (row[0], row[1]);
        if let Some(bias) = epi.bias {
            let bi = _mm512_set1_ps(bias[i]);
            v0 = _mm512_add_ps(v0, bi);
            v1 = _mm512_add_ps(v1, bi);
        }
        if let Some((t, ld)) = term {
            // SAFETY: `Residual::tile` checked R rows of 32 floats at stride `ld` from `t`.
            unsafe {
                v0 = _mm512_add_ps(v0, _mm512_loadu_ps(t.add(i * ld)));
                v1 = _mm512_add_ps(v1, _mm512_loadu_ps(t.add(i * ld + 16)));
            }
        }
        // SAFETY: AVX-512F is enabled for this function.
        (v0, v1) = unsafe { (epi.act.avx512(v0), epi.act.avx512(v1)) };
        let p = match &mut tile {
            Dest::Tile(t) => t[i].as_mut_ptr(),
            Dest::Out { at, ld } => at.wrapping_add(i * *ld),
            Dest::Runs { out, ld, runs } => {
                for &(s, at, len) in runs.iter() {
                    // Columns s .. s + len of the tile to `at ..`: the registers stored as if column 0 were at
                    // `at − s`, every other lane masked off.
                    let keep = (((1u64 << len) - 1) << s) as u32;
                    let base = out.wrapping_add(i * *ld + at).wrapping_sub(s);
                    // SAFETY: only the lanes of columns s .. s + len are stored, to `out + i·ld + at ..` for `len`
                    // floats: the caller's promise (`product`); masked-off lanes touch no memory.
                    unsafe {
                        _mm512_mask_storeu_ps(base, keep as u16, v0);
                        _mm512_mask_storeu_ps(base.wrapping_add(16), (keep >> 16) as u16, v1);
                    }
                }
                continue;
            }
        };
        // SAFETY: a tile row holds 32 floats; an output row's 32 are the caller's promise (`product`).
        unsafe {
            _mm512_storeu_ps(p, v0);
            _mm512_storeu_ps(p.add(16), v1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{conv2d, segments, Act, Plane};
    use crate::kernels::sgemm512::PackedA;

    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n).map(|i| ((i * 7 + seed * 13) % 23) as f32 / 11.0 - 1.0).collect()
    }

    /// The definition, in f64: `y[m, oy, ox] = bias[m] + Σ w[m, c, i, j] · x[c, oy·sh + i·dh − pt, ox·sw + j·dw −
    /// pl]`, taps outside the input reading 0.
    fn naive(x: &[f32], cg: usize, g: &Plane, w: &[f32], m: usize, bias: &[f32]) -> Vec<f32> {
        let mut y = vec![0f32; m * g.oh * g.ow];
        for mi in 0..m {
            for oy in 0..g.oh {
                for ox in 0..g.ow {
                    let mut s = f64::from(bias[mi]);
                    for c in 0..cg {
                        for i in 0..g.kh {
                            for j in 0..g.kw {
                                let iy = (oy * g.stride.0 + i * g.dilation.0) as isize - g.pad.0 as isize;
                                let ix = (ox * g.stride.1 + j * g.dilation.1) as isize - g.pad.1 as isize;
                                if iy < 0 || ix < 0 || iy >= g.ih as isize || ix >= g.iw as isize {
                                    continue;
                                }
                                let xv = x[(c * g.ih + iy as usize) * g.iw + ix as usize];
                                let wv = w[((mi * cg + c) * g.kh + i) * g.kw + j];
                                s += f64::from(xv) * f64::from(wv);
                            }
                        }
                    }
                    y[(mi * g.oh + oy) * g.ow + ox] = s as f32;
                }
            }
        }
        y
    }

    #[test]
    fn matches_the_definition_on_every_geometry() {
        let geo = |(ih, iw),
                   (kh, kw),
                   stride: (usize, usize),
                   dilation: (usize, usize),
                   pad: (usize, usize, usize, usize)| {
            let out = |i: usize, k: usize, s: usize, d: usize, p: usize| (i + p - d * (k - 1) - 1) / s + 1;
            let oh = out(ih, kh, stride.0, dilation.0, pad.0 + pad.2);
            let ow = out(iw, kw, stride.1, dilation.1, pad.1 + pad.3);
            Plane { ih, iw, oh, ow, kh, kw, stride, dilation, pad: (pad.0, pad.1) }
        };
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        // (channels in, channels out, geometry): 3×3 same; strides (2, 3) with asymmetric padding; dilation;
        // a 1-D convolution; a 7×7 output (two tiles: two threads split the panels); many channels (several
        // blocks of tiles); 13 output channels (a one-row last panel); an output narrower than a tile.
        let cases = [
            (16, 24, geo((11, 13), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1))),
            (8, 20, geo((17, 19), (3, 5), (2, 3), (1, 1), (0, 2, 1, 1))),
            (6, 12, geo((15, 15), (3, 3), (1, 1), (2, 2), (2, 2, 2, 2))),
            (4, 12, geo((1, 40), (1, 9), (1, 2), (1, 1), (0, 4, 0, 4))),
            (32, 36, geo((7, 7), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1))),
            (600, 12, geo((20, 30), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1))),
            (8, 13, geo((9, 9), (2, 2), (2, 2), (1, 1), (0, 0, 1, 1))),
            (4, 12, geo((6, 3), (5, 3), (1, 1), (1, 1), (2, 1, 2, 1))),
            // 1×1 of stride 2: no dropped columns, tiles span output rows as one run.
            (40, 24, geo((14, 18), (1, 1), (2, 2), (1, 1), (0, 0, 0, 0))),
        ];
        for (case, &(cg, m, g)) in cases.iter().enumerate() {
            let x = values(cg * g.ih * g.iw, case);
            let w = values(m * cg * g.kh * g.kw, case + 1);
            let bias = values(m, case + 2);
            let want = naive(&x, cg, &g, &w, m, &bias);
            let k = cg * g.kh * g.kw;
            let packed = PackedA::by_panels(m, k, &w, (k, 1));
            for threads in [1, 2] {
                for act in [Act::None, Act::Relu, Act::HardSwish, Act::Clip { lo: -0.5, hi: 0.5 }] {
                    let mut y = vec![f32::NAN; m * g.oh * g.ow];
                    pool.install(|| conv2d(&x, cg, &g, &packed, Some(&bias), act, None, &mut y, threads));
                    for (i, (&got, &v)) in y.iter().zip(&want).enumerate() {
                        let v = act.scalar(v);
                        assert!(
                            (got - v).abs() <= 1e-4 * (1.0 + v.abs()),
                            "case {case}, {threads} threads, [{i}]: {got} vs {v}"
                        );
                    }
                }
            }
        }
        // NaN passes the ReLU, as ONNX's Relu keeps it.
        let g = geo((4, 4), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1));
        let mut x = values(4 * 16, 9);
        x[5] = f32::NAN;
        let w = values(12 * 36, 3);
        let packed = PackedA::by_panels(12, 36, &w, (36, 1));
        let mut y = vec![0f32; 12 * 16];
        conv2d(&x, 4, &g, &packed, None, Act::Relu, None, &mut y, 1);
        assert!(y[0].is_nan() && y[15].is_finite(), "the taps reading x[5] give NaN, the others not");
    }

    #[test]
    fn runs_join_where_the_output_is_contiguous() {
        let mut runs = Vec::new();
        // W' = Ow = 7: the tile at 28 covers rows 4 (from its column 0) and 5 (to its column 13), one run.
        segments(28, 49, 7, 7, &mut runs);
        assert_eq!(runs, [(0, 28, 21)]);
        segments(0, 49, 7, 7, &mut runs);
        assert_eq!(runs, [(0, 0, 32)]);
        // W' = 9 over Ow = 7: each row's two dropped columns split the runs.
        segments(0, 63, 9, 7, &mut runs);
        assert_eq!(runs, [(0, 0, 7), (9, 7, 7), (18, 14, 7), (27, 21, 5)]);
    }
}
