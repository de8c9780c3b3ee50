//! f32 convolution of small output planes with the output channels in the vector lanes: what onnxruntime's blocked
//! channel layout (NCHWc) computes, run here on the planner's packed NCHW tensors.
//!
//! `shifted.rs` puts 32 output positions of a row-major "virtual" plane in its registers: its columns include the
//! `W' − Ow` dropped columns of every output row and the last tile's rounding up to 32. On a small plane those are
//! a quarter of its work: SqueezeNet's 3×3 convolutions at 13² compute 224 columns for 169 outputs (0.59 ms where
//! onnxruntime, channels in lanes, takes 0.45). Here the outputs are only the real positions, under these rules:
//!
//! 1. **Channels in lanes.** A tile is [`PIXELS`] output positions × up to 64 output channels (four `zmm` of 16
//!    channels each, 24 sums). Each step of K loads the 64 channels' weights of that step once and multiplies them
//!    by each position's input element, broadcast; the weights are packed ahead of time as `[M/64][K][64]`
//!    ([`LanePack`]), zero-padded to whole blocks of 64, so a step's weights are one 256-byte run.
//! 2. **Inputs in place.** The input is read from `shifted.rs`'s phase planes (its rules 1 and 2): tap `l` of
//!    output `(y, x)` is `buf[offs[l] + y·W' + x]`, always inside the tap's plane, so no dropped column is read or
//!    computed. A last tile of fewer positions sums and stores only its own (a loop unrolled for each height).
//! 3. **The same bits as `shifted.rs`.** Every sum starts at zero and adds its products in the order of K, one fused
//!    multiply-add each, then the bias, then the activation, in `zmm` registers: the operations `shifted.rs`'s
//!    tile performs for each output, so the two kernels give the same bits (test
//!    `lanes_give_the_bits_of_the_shifted_kernel`). A residual term (`residual.rs`) is added after the bias as the
//!    sums are copied out, then the activation in its scalar form, which gives the vector form's bits (`act.rs`
//!    rule 3): the unfused steps' bits (`conv/tests.rs`).
//! 4. **Long K in blocks.** Where one block of 64 channels' weights is over [`K_BLOCK`] steps (512 KiB), K runs in
//!    blocks of it over all of a range's tiles, each tile's sums kept in a scratch between blocks (the exact
//!    values, so rule 3 holds): the block's weights are read from L2 once per range rather than from memory once
//!    per tile.
//! 5. **Threads.** Work items are (block of 64 channels, range of tiles); items write disjoint outputs (their
//!    channels × their positions), so they run on any thread with no copy after. A tile's 64 × 6 sums reach the
//!    output through a small transposing scratch, 3 % of a 576-step tile's work. Items are of about equal work,
//!    [`ITEMS_PER_THREAD`] for every thread, a block of fewer than 64 channels cut in fewer: with two items a
//!    block, 96 channels made items of 64, 64, 32 and 32 rows, two threads took them in halves (128 against 64),
//!    and the ddddocr detector's 96-channel 3 × 3 convolutions were 1.37–1.4 × faster at two threads than at one.
//!
//! [`wanted`] says where this pays, with the measurements.

use super::weights::Floats;
use rayon::prelude::*;

/// Work items for each thread (rule 5): enough that the threads' shares come out about even.
const ITEMS_PER_THREAD: usize = 8;

use super::act::Act;
use super::depthwise::Plane;
use super::residual::Residual;
use super::shifted::{Out, Planes};

/// Output positions per tile (rule 1): 6 × 4 sums, 4 weight vectors and a broadcast fill 29 of 32 `zmm`.
pub const PIXELS: usize = 6;

/// Output channels per block: four `zmm` of 16.
pub const BLOCK: usize = 64;

/// The most steps of K one pass over a range's tiles takes (rule 4): 2,048 × 64 floats, 512 KiB.
const K_BLOCK: usize = 2048;

/// Weights packed for [`conv2d`]: `[M/64][K][64]`, zero-padded to whole blocks of 64 channels.
pub struct LanePack {
    m: usize,
    k: usize,
    data: Vec<f32>,
}

impl LanePack {
    /// Packs `w` (`[m, k]`, row-major).
    ///
    /// # Panics
    /// If `w` is shorter than `m·k`.
    pub fn new<W: Floats>(m: usize, k: usize, w: W) -> LanePack {
        LanePack::strided(m, k, w, (k, 1), 1.0)
    }

    /// Packs `alpha · W`, `W` being `m × k` with element `(i, l)` at `w[i·rs + l·cs]`.
    ///
    /// # Panics
    /// If an element lies past `w`.
    pub fn strided<W: Floats>(m: usize, k: usize, w: W, (rs, cs): (usize, usize), alpha: f32) -> LanePack {
        assert!(m == 0 || k == 0 || (m - 1) * rs + (k - 1) * cs < w.len(), "lanes: {} weights for {m} × {k}", w.len());
        let mut data = vec![0f32; m.div_ceil(BLOCK) * k * BLOCK];
        // In tiles of BLOCK rows by TILE steps, each row's run of the tile read in order: a tile's stores stay in
        // a few cache lines and its loads stream along the rows (an 8,210 × 1,024 classifier, ddddocr's, read
        // along its columns took 37 ms, 24 beyond the fresh pages' 13; in tiles 17).
        const TILE: usize = 64;
        for (b, block) in data.chunks_exact_mut(k * BLOCK).enumerate() {
            let rows = BLOCK.min(m - b * BLOCK);
            for l0 in (0..k).step_by(TILE) {
                let steps = TILE.min(k - l0);
                for i in 0..rows {
                    let row = (b * BLOCK + i) * rs + l0 * cs;
                    for l in 0..steps {
                        let e = w.at(row + l * cs);
                        block[(l0 + l) * BLOCK + i] = if alpha == 1.0 { e } else { alpha * e };
                    }
                }
            }
        }
        LanePack { m, k, data }
    }

    /// Output channels.
    pub fn rows(&self) -> usize {
        self.m
    }

    /// Steps of K.
    pub fn cols(&self) -> usize {
        self.k
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.data.len() * std::mem::size_of::<f32>()
    }
}

/// True when a convolution of this geometry (output plane `p`, `m` output channels per group, `k` steps of K)
/// runs here rather than in `shifted.rs`. Measured with `examples/conv_threads` (one thread, fastest of 200 calls,
/// `LANES=0` for `shifted.rs`, on this project's AVX-512 VM):
/// - a small plane, where `shifted.rs` computes a ninth more columns than there are outputs or worse: 64 → 256
///   3×3 at 13², 0.589 → 0.464 ms (0.354 → 0.244 on two threads); 48 → 192 at 13², 0.336 → 0.266; 256 → 256 at
///   14², 2.30 → 2.05 (1.37 → 1.06); 128 → 128 stride 2 from 28², 0.624 → 0.558;
/// - a long K (512 or more), whatever the plane: 512 → 512 at 7², 2.65 → 2.27; 128 → 128 at 28², 2.24 → 2.05;
///   VGG's 128 → 128 at 112² and 256 → 256 at 56², 34.3 → 33.3 and 34.1 → 33.1; 512 → 512 at 28², 36.0 → 32.5;
/// - not a short K on a large plane: 16 → 64 at 55² (K 144), 0.549 → 0.583; 32 → 128 at 27² (K 288) even.
///
/// A pointwise convolution (1 × 1, stride 1, no padding) is otherwise a plain product, whose tiles waste less:
/// here only with K ≥ 512 over at most 256 positions. ResNet-50's 2048 → 512 and 512 → 2048 at 7², 1.20 → 0.93–0.96
/// ms (0.62 → 0.47 on two threads); 1024 → 256 at 14², 0.965 → 0.899; 256 → 1024 at 14², 512 → 128 at 28² and the
/// 56² layers even; 64 → 256 at 13² (K 64), 0.056 → 0.068.
///
/// The output channels must fill their vectors of 16 to seven eighths or more.
pub fn wanted(p: &Plane, m: usize, k: usize, pointwise: bool) -> bool {
    let width = p.ow + (p.kw - 1) * p.dilation.1 / p.stride.1;
    let virtual_columns = (p.oh * width).next_multiple_of(32);
    let outputs = p.oh * p.ow;
    let lanes_full = m.next_multiple_of(16) * 7 <= m * 8;
    let small_plane = k >= 64 && 10 * outputs < 9 * virtual_columns;
    let takes = if pointwise { k >= 512 && outputs <= 256 } else { k >= 512 || small_plane };
    m >= 32 && lanes_full && outputs >= PIXELS && takes && super::sgemm512::available()
}

/// `y[m, (y, x)] = act(bias[m] + Σ_{c,i,j} W[m, (c, i, j)] · x[c, y·sh + i·dh − pad_top, x·sw + j·dw −
/// pad_left])` for one group, as `shifted::conv2d` computes it: `x` is `[cg, ih, iw]`, `w` its weights packed by
/// [`LanePack::new`], `y` is `[M, Oh·Ow]`. The caller has checked [`wanted`] (which checks AVX-512F).
///
/// # Panics
/// On slice lengths that disagree with the geometry.
#[allow(clippy::too_many_arguments)]
pub fn conv2d(
    x: &[f32],
    cg: usize,
    g: &Plane,
    w: &LanePack,
    bias: Option<&[f32]>,
    act: Act,
    residual: Option<Residual<'_>>,
    y: &mut [f32],
    threads: usize,
) {
    let (m, k) = (w.m, w.k);
    let n = g.oh * g.ow;
    assert!(super::sgemm512::available(), "conv: channel lanes need AVX-512F");
    assert!(x.len() >= cg * g.ih * g.iw, "conv: input of {} floats for {cg} channels of {g:?}", x.len());
    assert_eq!(k, cg * g.kh * g.kw, "conv: packed weights of another inner dimension");
    assert_eq!(y.len(), m * n, "conv: output length");
    assert!(bias.is_none_or(|b| b.len() >= m), "conv: bias shorter than {m} channels");
    if n == 0 || m == 0 {
        return;
    }
    let planes = Planes::new(x, cg, g, threads);
    // Rule 2: every read is inside its plane, so inside the buffer.
    let last = planes.max_off + (g.oh - 1) * planes.width + g.ow;
    assert!(last <= planes.len, "conv: planes of {} floats, reads to {last}", planes.len);
    // Each position's virtual column.
    let virt: Vec<usize> = (0..n).map(|p| p / g.ow * planes.width + p % g.ow).collect();
    let operands = Operands { buf: &planes.buf[..planes.len], offs: &planes.offs, virt: &virt };
    // SAFETY: reads are inside `buf` (asserted: `last`); `y` holds m·n floats (asserted), channel-major.
    unsafe { run_items(w, operands, Epi { bias, act, residual }, Dest::ChannelMajor(y), threads) };
    planes.keep();
}

/// `y[j, i] = bias[i] + Σ_l a[j·a_rs + l·a_cs] · W[i, l]` for the `m` rows `j` of `op(A)` and the `n` outputs `i`
/// of `w` (`W` packed `n × k` by [`LanePack::strided`]), `y` packed `m × n`: a product of few rows against constant
/// weights (`few_rows.rs`), the outputs in the lanes and the rows of `op(A)` broadcast, each read in place through
/// its strides; stored straight into `y`'s rows under masks, no transposing scratch. The caller has checked
/// [`super::sgemm512::available`].
///
/// # Panics
/// On lengths that do not match, or without AVX-512F.
#[allow(clippy::too_many_arguments)]
pub fn product(
    a: &[f32],
    (a_rs, a_cs): (usize, usize),
    m: usize,
    w: &LanePack,
    bias: Option<&[f32]>,
    y: &mut [f32],
    threads: usize,
) {
    let (n, k) = (w.m, w.k);
    assert!(super::sgemm512::available(), "product: channel lanes need AVX-512F");
    assert_eq!(y.len(), m * n, "product: Y length");
    assert!(bias.is_none_or(|b| b.len() >= n), "product: bias shorter than {n} outputs");
    if m == 0 || n == 0 {
        return;
    }
    assert!(k > 0 && (m - 1) * a_rs + (k - 1) * a_cs < a.len(), "product: A too short");
    let offs: Vec<usize> = (0..k).map(|l| l * a_cs).collect();
    let virt: Vec<usize> = (0..m).map(|j| j * a_rs).collect();
    // SAFETY: every read `a[offs[l] + virt[j]]` is at most `(m − 1)·a_rs + (k − 1)·a_cs`, inside `a` (asserted);
    // `y` holds m·n floats (asserted), row-major.
    unsafe {
        let epi = Epi { bias, act: Act::None, residual: None };
        run_items(w, Operands { buf: a, offs: &offs, virt: &virt }, epi, Dest::PositionMajor(y), threads)
    };
}

/// A pointwise convolution (1 × 1, stride 1, no padding) of one group: `y[m, p] = act(bias[m] + Σ_c W[m, c] ·
/// x[c, p] (+ r[m, p]))`, `x` being `[cg, positions]`, `y` `[M, positions]`; the input is read in place (step `c`
/// of position `p` at `x[c·positions + p]`), no planes. The caller has checked [`super::sgemm512::available`].
///
/// # Panics
/// On lengths that do not match, or without AVX-512F.
#[allow(clippy::too_many_arguments)]
pub fn pointwise(
    x: &[f32],
    positions: usize,
    w: &LanePack,
    bias: Option<&[f32]>,
    act: Act,
    residual: Option<Residual<'_>>,
    y: &mut [f32],
    threads: usize,
) {
    let (m, k) = (w.m, w.k);
    assert!(super::sgemm512::available(), "conv: channel lanes need AVX-512F");
    assert!(x.len() >= k * positions, "conv: input of {} floats for {k} channels of {positions}", x.len());
    assert_eq!(y.len(), m * positions, "conv: output length");
    assert!(bias.is_none_or(|b| b.len() >= m), "conv: bias shorter than {m} channels");
    if positions == 0 || m == 0 {
        return;
    }
    let offs: Vec<usize> = (0..k).map(|c| c * positions).collect();
    let virt: Vec<usize> = (0..positions).collect();
    // SAFETY: every read `x[c·positions + p]` is below `k·positions ≤ x.len()` (asserted); `y` holds m·positions
    // floats (asserted), channel-major.
    unsafe {
        let epi = Epi { bias, act, residual };
        run_items(w, Operands { buf: x, offs: &offs, virt: &virt }, epi, Dest::ChannelMajor(y), threads)
    }
}

/// What a tile adds before it is stored: the bias per channel, the activation, and a residual term (only into a
/// channel-major destination, through the transposing scratch: `residual.rs`'s order, term after the bias, then
/// the activation, whose scalar form gives the vector form's bits, `act.rs` rule 3).
#[derive(Clone, Copy)]
pub(super) struct Epi<'a> {
    pub(super) bias: Option<&'a [f32]>,
    pub(super) act: Act,
    pub(super) residual: Option<Residual<'a>>,
}

/// What the tiles read besides the weights: tap or step `l` of position `p` is `buf[offs[l] + virt[p]]`.
#[derive(Clone, Copy)]
pub(super) struct Operands<'a> {
    pub(super) buf: &'a [f32],
    pub(super) offs: &'a [usize],
    pub(super) virt: &'a [usize],
}

/// Where the sums go: `[channels][positions]` (a convolution's NCHW output), `[positions][channels]` (a
/// product's rows) or `[channels / 16][positions][16]` (channel blocks, `blocked.rs`; the channels padded to whole
/// blocks, every lane of a block written).
pub(super) enum Dest<'a> {
    ChannelMajor(&'a mut [f32]),
    PositionMajor(&'a mut [f32]),
    Blocked(&'a mut [f32]),
}

/// Every tile of every block of 64 channels of `w`, over the positions of `ops`, into `dest` (rule 5).
///
/// # Safety
/// Every `ops.offs[l] + ops.virt[p]` is inside `ops.buf`; `dest` holds `w.m` channels × `ops.virt.len()` positions;
/// AVX-512F is there.
pub(super) unsafe fn run_items(w: &LanePack, ops: Operands<'_>, epi: Epi<'_>, dest: Dest<'_>, threads: usize) {
    let Epi { bias, act, residual } = epi;
    let (m, k, n) = (w.m, w.k, ops.virt.len());
    assert_eq!(ops.offs.len(), k, "lanes: an offset per step of K");
    let blocks = m.div_ceil(BLOCK);
    let tiles = n.div_ceil(PIXELS);
    // Biases padded to whole blocks, so a block's 64 load as four vectors.
    let mut biases = vec![0f32; blocks * BLOCK];
    if let Some(b) = bias {
        biases[..m].copy_from_slice(&b[..m]);
    }
    let (out, kind) = match dest {
        Dest::ChannelMajor(y) => (Out(y.as_mut_ptr()), 0),
        Dest::PositionMajor(y) => {
            assert!(residual.is_none(), "lanes: a residual term into a product's rows");
            (Out(y.as_mut_ptr()), 1)
        }
        Dest::Blocked(y) => {
            assert!(y.len() >= m.next_multiple_of(16) * n, "lanes: blocks of {} floats for {m} channels", y.len());
            (Out(y.as_mut_ptr()), 2)
        }
    };
    let run = |b: usize, (t0, t1): (usize, usize)| {
        let rows = BLOCK.min(m - b * BLOCK);
        let item = Item {
            w: &w.data[b * k * BLOCK..][..k * BLOCK],
            buf: ops.buf,
            offs: ops.offs,
            virt: ops.virt,
            bias: &biases[b * BLOCK..][..BLOCK],
            add_bias: bias.is_some(),
        };
        let (y, store) = match kind {
            0 => (out.at(b * BLOCK * n), Store::ChannelMajor { ld: n }),
            1 => (out.at(b * BLOCK), Store::PositionMajor { ld: m }),
            _ => (out.at(b * BLOCK * n), Store::Blocked { positions: n }),
        };
        // SAFETY: the caller's promise for the reads and AVX-512F; the item's outputs, channels b·64 .. b·64 + rows
        // of positions 6·t0 .. min(6·t1, n), are inside the destination, and no other item writes them (rule 5).
        unsafe { item.run(rows, (t0, t1), act, residual, y, store) };
    };
    // Rule 5: items of about equal work (a block's rows × its tiles), 8 for every thread, ranges of whole tiles.
    let work = |b: usize| BLOCK.min(m - b * BLOCK) * tiles;
    let each = if threads > 1 { (m * tiles).div_ceil(ITEMS_PER_THREAD * threads).max(1) } else { usize::MAX };
    let items: Vec<(usize, (usize, usize))> = (0..blocks)
        .flat_map(|b| {
            let per = tiles.div_ceil(work(b).div_ceil(each).clamp(1, tiles.max(1)));
            (0..tiles).step_by(per.max(1)).map(move |t0| (b, (t0, (t0 + per).min(tiles))))
        })
        .collect();
    if threads > 1 && items.len() > 1 {
        items.into_par_iter().for_each(|(b, r)| run(b, r));
    } else {
        items.into_iter().for_each(|(b, r)| run(b, r));
    }
}

/// How an item stores its block's sums from `y` (its first channel at its first position): channel `i` of
/// position `p` at `y + i·ld + p`, at `y + p·ld + i`, or at `y + (i / 16)·16·positions + 16·p + i % 16`.
#[derive(Clone, Copy)]
enum Store {
    ChannelMajor { ld: usize },
    PositionMajor { ld: usize },
    Blocked { positions: usize },
}

/// What one work item reads: its block's packed weights (`[K][64]`), the planes, their offsets, each position's
/// virtual column and its block's 64 biases (`add_bias`: whether to add them).
struct Item<'a> {
    w: &'a [f32],
    buf: &'a [f32],
    offs: &'a [usize],
    virt: &'a [usize],
    bias: &'a [f32],
    add_bias: bool,
}

impl Item<'_> {
    /// Tiles `t0 .. t1` of the block's `rows` channels into `y`: channel `i` of position `p` at `y + i·ld + p`
    /// ([`Store::ChannelMajor`]) or `y + p·ld + i` ([`Store::PositionMajor`]).
    ///
    /// # Safety
    /// AVX-512F is there; channels `i < rows` at positions `6·t0 .. min(6·t1, virt.len())` from `y` are writable by
    /// this thread alone.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn run(
        &self,
        rows: usize,
        (t0, t1): (usize, usize),
        act: Act,
        residual: Option<Residual<'_>>,
        y: *mut f32,
        store: Store,
    ) {
        use std::arch::x86_64::*;
        let k = self.offs.len();
        let n = self.virt.len();
        let vectors = rows.div_ceil(16);
        // Rule 4: sums between blocks of K, six rows of 64 per tile.
        let mut kept = if k > K_BLOCK { vec![0f32; (t1 - t0) * PIXELS * BLOCK] } else { Vec::new() };
        for l0 in (0..k).step_by(K_BLOCK) {
            let l1 = (l0 + K_BLOCK).min(k);
            for t in t0..t1 {
                let p0 = t * PIXELS;
                let here = PIXELS.min(n - p0);
                // Rule 2: a short tile repeats its last position.
                let cols: [usize; PIXELS] = std::array::from_fn(|r| self.virt[p0 + r.min(here - 1)]);
                let mut acc = [[_mm512_setzero_ps(); 4]; PIXELS];
                let slot = &mut kept[if l0 > 0 || l1 < k { (t - t0) * PIXELS * BLOCK } else { 0 }..];
                if l0 > 0 {
                    for (r, a) in acc.iter_mut().enumerate() {
                        for (v, a) in a.iter_mut().enumerate() {
                            // SAFETY: a bounds-checked slice of 16 floats.
                            *a = unsafe { _mm512_loadu_ps(slot[(r * 4 + v) * 16..][..16].as_ptr()) };
                        }
                    }
                }
                // A short last tile sums its own positions only.
                macro_rules! dispatch {
                    ($($r:literal)*) => {
                        match (here, vectors) {
                            $(
                                // SAFETY: `l1 ≤ k`, so the weights `w[l·64 ..][..64]` and offsets are inside their
                                // slices; the caller promised every `offs[l] + cols[r]` inside `buf`.
                                ($r, v) => unsafe {
                                    match v {
                                        1 => self.steps::<$r, 1>(l0..l1, &cols, &mut acc),
                                        2 => self.steps::<$r, 2>(l0..l1, &cols, &mut acc),
                                        3 => self.steps::<$r, 3>(l0..l1, &cols, &mut acc),
                                        _ => self.steps::<$r, 4>(l0..l1, &cols, &mut acc),
                                    }
                                },
                            )*
                            _ => unreachable!("a tile has 1 to {PIXELS} positions"),
                        }
                    };
                }
                dispatch!(1 2 3 4 5 6);
                if l1 < k {
                    for (r, a) in acc.iter().enumerate() {
                        for (v, a) in a.iter().enumerate() {
                            // SAFETY: a bounds-checked slice of 16 floats.
                            unsafe { _mm512_storeu_ps(slot[(r * 4 + v) * 16..][..16].as_mut_ptr(), *a) };
                        }
                    }
                    continue;
                }
                // Rule 3: the bias, then the activation, in registers; then stored along the channels under masks,
                // or through the transposing scratch.
                let mut tile = [[0f32; BLOCK]; PIXELS];
                for (r, a) in acc.iter().enumerate().take(here) {
                    for (v, &a) in a.iter().enumerate().take(vectors) {
                        let mut s = a;
                        if self.add_bias {
                            // SAFETY: a bounds-checked slice of 16 floats.
                            s = _mm512_add_ps(s, unsafe { _mm512_loadu_ps(self.bias[v * 16..][..16].as_ptr()) });
                        }
                        if let Store::Blocked { positions } = store {
                            let at = y.wrapping_add(v * 16 * positions + (p0 + r) * 16);
                            if let Some(res) = residual {
                                // `residual.rs`: the term after the bias, then the activation; whole blocks.
                                // SAFETY: `Residual::tile` checked the 16 terms.
                                s = _mm512_add_ps(s, unsafe { _mm512_loadu_ps(res.tile(at, 1, 16, 16)) });
                            }
                            // SAFETY: AVX-512F is enabled for this function; the block's 16 lanes of position
                            // p0 + r: the caller's promise (the destination holds whole blocks).
                            unsafe { _mm512_storeu_ps(at, act.avx512(s)) };
                            continue;
                        }
                        if residual.is_none() {
                            // SAFETY: AVX-512F is enabled for this function.
                            s = unsafe { act.avx512(s) };
                        }
                        if let Store::PositionMajor { ld } = store {
                            let keep = (u32::MAX >> (32 - (rows - v * 16).min(16))) as __mmask16;
                            // SAFETY: channels v·16 .. of position p0 + r, those below `rows` only (the mask): the
                            // caller's promise.
                            unsafe { _mm512_mask_storeu_ps(y.add((p0 + r) * ld + v * 16), keep, s) };
                            continue;
                        }
                        // SAFETY: a bounds-checked slice of 16 floats.
                        unsafe { _mm512_storeu_ps(tile[r][v * 16..][..16].as_mut_ptr(), s) };
                    }
                }
                let Store::ChannelMajor { ld } = store else { continue };
                if let Some(res) = residual {
                    // `residual.rs`: the term after the bias, then the activation (its scalar form).
                    let terms = res.tile(y.wrapping_add(p0), rows, here, ld);
                    for i in 0..rows {
                        for (r, vals) in tile.iter().enumerate().take(here) {
                            // SAFETY: `Residual::tile` checked `rows` rows of `here` terms at stride `ld`; channel
                            // i < rows at position p0 + r < n is the caller's promise.
                            unsafe { *y.add(i * ld + p0 + r) = act.scalar(vals[i] + *terms.add(i * ld + r)) };
                        }
                    }
                    continue;
                }
                for i in 0..rows {
                    for (r, vals) in tile.iter().enumerate().take(here) {
                        // SAFETY: channel i < rows at position p0 + r < n: the caller's promise.
                        unsafe { *y.add(i * ld + p0 + r) = vals[i] };
                    }
                }
            }
        }
    }

    /// [`Item::run`] where the target is not x86-64 (never called: [`wanted`] is false there).
    #[cfg(not(target_arch = "x86_64"))]
    unsafe fn run(&self, _: usize, _: (usize, usize), _: Act, _: Option<Residual<'_>>, _: *mut f32, _: Store) {
        unreachable!("AVX-512F outside x86-64")
    }

    /// Steps `ls` of K for the first `R` positions of one tile: `acc[r][v] += w[l][16v ..] · buf[offs[l] +
    /// cols[r]]`, in the order of K.
    ///
    /// # Safety
    /// AVX-512F is there; `ls` lies inside K, and `offs[l] + cols[r]` inside `buf` for every step and position.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn steps<const R: usize, const V: usize>(
        &self,
        ls: std::ops::Range<usize>,
        cols: &[usize; PIXELS],
        acc: &mut [[std::arch::x86_64::__m512; 4]; PIXELS],
    ) {
        use std::arch::x86_64::*;
        let (w, b) = (self.w.as_ptr(), self.buf.as_ptr());
        let mut sums: [[__m512; V]; R] = std::array::from_fn(|r| std::array::from_fn(|v| acc[r][v]));
        let at: [*const f32; R] = std::array::from_fn(|r| b.wrapping_add(cols[r]));
        for (l, &o) in self.offs[ls.clone()].iter().enumerate() {
            let step = w.wrapping_add((ls.start + l) * BLOCK);
            // SAFETY: step l < K: its 64 weights are inside `w` (K·64 long, a bounds-checked slice).
            let wv: [__m512; V] = std::array::from_fn(|v| unsafe { _mm512_loadu_ps(step.add(v * 16)) });
            for (r, s) in sums.iter_mut().enumerate() {
                // SAFETY: `o + cols[r]` is inside `buf`: the caller's promise.
                let x = _mm512_set1_ps(unsafe { *at[r].add(o) });
                for (s, &wv) in s.iter_mut().zip(&wv) {
                    *s = _mm512_fmadd_ps(wv, x, *s);
                }
            }
        }
        for (a, s) in acc.iter_mut().zip(&sums) {
            a[..V].copy_from_slice(s);
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::{conv2d, wanted, Act, LanePack, Plane, K_BLOCK};
    use crate::kernels::sgemm512::PackedA;
    use crate::kernels::shifted;

    /// Test data: small values of both signs (also `conv_blocks.rs`'s).
    pub(in crate::kernels) fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n).map(|i| ((i * 7 + seed * 13) % 23) as f32 / 11.0 - 1.0).collect()
    }

    /// The plane of a convolution of `(ih, iw)` by a `(kh, kw)` window (also `conv_blocks.rs`'s).
    pub(in crate::kernels) fn geo(
        (ih, iw): (usize, usize),
        (kh, kw): (usize, usize),
        stride: (usize, usize),
        dilation: (usize, usize),
        pad: (usize, usize, usize, usize),
    ) -> Plane {
        let out = |i: usize, k: usize, s: usize, d: usize, p: usize| (i + p - d * (k - 1) - 1) / s + 1;
        let oh = out(ih, kh, stride.0, dilation.0, pad.0 + pad.2);
        let ow = out(iw, kw, stride.1, dilation.1, pad.1 + pad.3);
        Plane { ih, iw, oh, ow, kh, kw, stride, dilation, pad: (pad.0, pad.1) }
    }

    /// Rule 3: every output, bit for bit, as `shifted.rs` gives it (which its own tests hold to the definition),
    /// with and without a bias, under each activation, on one and two threads.
    #[test]
    fn lanes_give_the_bits_of_the_shifted_kernel() {
        if !crate::kernels::sgemm512::available() {
            return;
        }
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        // (channels in, channels out, geometry): SqueezeNet's 13² (a last tile of one position); 48 and 200
        // outputs (blocks of 3 and of 1 vector, a channel past the vectors' end); stride 2 with asymmetric padding;
        // dilation; 1-D; fewer positions than a tile's; a K past `K_BLOCK` (sums kept between blocks of K).
        let cases = [
            (16, 64, geo((13, 13), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1))),
            (8, 48, geo((9, 11), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1))),
            (5, 200, geo((7, 7), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1))),
            (6, 70, geo((15, 12), (3, 5), (2, 2), (1, 1), (0, 2, 1, 1))),
            (4, 32, geo((12, 12), (3, 3), (1, 1), (2, 2), (2, 2, 2, 2))),
            (4, 40, geo((1, 40), (1, 9), (1, 2), (1, 1), (0, 4, 0, 4))),
            (3, 32, geo((2, 2), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1))),
            (K_BLOCK / 9 + 3, 48, geo((5, 6), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1))),
        ];
        for (case, &(cg, m, g)) in cases.iter().enumerate() {
            let k = cg * g.kh * g.kw;
            let (x, w, bias) = (values(cg * g.ih * g.iw, case), values(m * k, case + 1), values(m, case + 2));
            let (panels, lanes) = (PackedA::by_panels(m, k, &w, (k, 1)), LanePack::new(m, k, &w[..]));
            for threads in [1, 2] {
                for (act, bias) in [(Act::None, None), (Act::Relu, Some(&bias[..])), (Act::HardSwish, Some(&bias))] {
                    let mut want = vec![f32::NAN; m * g.oh * g.ow];
                    let mut got = vec![f32::NAN; m * g.oh * g.ow];
                    pool.install(|| {
                        shifted::conv2d(&x, cg, &g, &panels, bias, act, None, &mut want, threads);
                        conv2d(&x, cg, &g, &lanes, bias, act, None, &mut got, threads);
                    });
                    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                        assert_eq!(
                            a.to_bits(),
                            b.to_bits(),
                            "case {case}, {threads} threads, {act:?}, [{i}]: {a} vs {b}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn small_planes_and_long_k_take_the_lanes() {
        if !crate::kernels::sgemm512::available() {
            return;
        }
        let same = |c: usize, h: usize| (c * 9, geo((h, h), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)));
        // SqueezeNet's last 3×3 convolutions (13², a quarter of shifted.rs's columns dropped), ResNet-50's last
        // (long K): here; a short K over a large plane, too few channels, or channels that fill their vectors
        // badly: not.
        let (k, g) = same(64, 13);
        assert!(wanted(&g, 256, k, false));
        let (k, g) = same(512, 7);
        assert!(wanted(&g, 512, k, false));
        let (k, g) = same(16, 55);
        assert!(!wanted(&g, 64, k, false));
        let (k, g) = same(64, 13);
        assert!(!wanted(&g, 16, k, false) && !wanted(&g, 33, k, false));
    }
}
