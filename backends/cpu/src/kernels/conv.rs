//! ONNX `Conv`: N-dimensional grouped, strided, dilated, padded convolution (cross-correlation, as ONNX defines
//! it) with an optional per-output-channel bias.
//!
//! Layouts are packed row-major: `x` is `[N, C, D₁ … Dₛ]`, `w` is `[M, C / group, K₁ … Kₛ]`, `bias` is `[M]` and
//! `y` is `[N, M, O₁ … Oₛ]`, for any number `s ≥ 0` of spatial axes. Each (batch item, group) pair is one matrix
//! product `Y_g[M/g, O] = W_g[M/g, (C/g)·K] · cols[(C/g)·K, O]` run by [`super::gemm::gemm_strided`], where `cols`
//! is the im2col unfolding of the group's input (row `(c, k)`, column = output position; zero where the tap
//! falls in the padding). The unfolding is built in column tiles of bounded size so that scratch memory stays
//! small for large images. A pointwise convolution (all kernel sizes 1, strides 1, no padding) needs no
//! unfolding: the input channels already are the `[C/g, O]` matrix. One input channel per group over one or two
//! spatial axes (depthwise) runs directly instead, in `depthwise.rs`.

use super::weights::{Floats, Weights};
use rayon::prelude::*;

use super::act::Act;
use super::cols::Cols;
use super::conv_lanes::{self, LanePack};
use super::depthwise::{depthwise, Plane};
use super::gemm::{gemm_packed, gemm_packed_cols, gemm_strided, pack_lhs, Epilogue, Float, PackedA};
use super::residual::Residual;
use super::shifted;

/// A convolution of one input channel per group runs direct ([`depthwise`]) when each input channel has at most
/// this many output channels, or at most [`DIRECT_TAPS`] taps: silero's STFT (258 outputs of 256 taps) took
/// 8.9 ms direct and runs as a product instead.
const DIRECT_OUTPUTS: usize = 8;
/// See [`DIRECT_OUTPUTS`].
const DIRECT_TAPS: usize = 9;
/// The fewest weights per output channel for which a convolution with packed weights reads its input in place
/// (`shifted.rs`) rather than unfolding it: an RGB stem's 27 (3 channels × 3×3) took 0.53–0.96 ms there against
/// 0.76–1.36 by im2col (64 outputs of 224² at stride 2, one thread, this project's AVX-512 VM), a grey image's 9
/// 0.25 against 0.32 ms.
const MIN_K: usize = 9;

/// Convolution attributes, already resolved by the caller (no `auto_pad`): one entry per spatial axis, except
/// `pads`, which holds the begin padding of every spatial axis followed by the end padding of every spatial axis
/// (ONNX order). Empty `strides` / `dilations` / `pads` mean 1 / 1 / 0 everywhere.
#[derive(Clone, Copy, Debug)]
pub struct ConvParams<'a> {
    /// Kernel spatial shape `[K₁ … Kₛ]`; empty means "take it from the weight shape". When given it must match
    /// the weight shape.
    pub kernel: &'a [usize],
    /// Stride per spatial axis.
    pub strides: &'a [usize],
    /// Dilation per spatial axis.
    pub dilations: &'a [usize],
    /// `[begin₁ … beginₛ, end₁ … endₛ]` padding.
    pub pads: &'a [usize],
    /// Number of groups (`C` and `M` must both be divisible by it); 0 is treated as 1.
    pub group: usize,
}

/// Output positions per thread below which a block's product is split by rows instead of by columns.
const SPLIT_MIN_COLUMNS: usize = 64;

/// Upper bound on the elements of one im2col tile (2 MiB of f32: measured best on VGG-19 and ResNet-50 here).
const COL_TILE_ELEMS: usize = 1 << 19;

/// Images with fewer output positions than this are unfolded together, one product for all of them, when there
/// are several (`conv_packed`).
const MERGE_BELOW: usize = 64;

/// Per-axis geometry of a convolution.
struct Geometry {
    in_sp: Vec<usize>,
    out_sp: Vec<usize>,
    kernel: Vec<usize>,
    strides: Vec<usize>,
    dilations: Vec<usize>,
    pads_begin: Vec<usize>,
    /// Row-major strides of the input spatial axes.
    in_strides: Vec<usize>,
}

impl Geometry {
    /// Fills `dst` (length `p1 - p0`) with row `(kidx)` of the im2col matrix of one input channel `src`:
    /// `dst[p - p0] = src[o(p)·stride + k·dilation − pad_begin]`, or 0 where that falls outside the input,
    /// for output positions `p0 ≤ p < p1` (row-major over the output spatial axes).
    fn im2col_row<T: Float>(&self, src: &[T], kidx: &[usize], p0: usize, p1: usize, dst: &mut [T]) {
        let s = self.out_sp.len();
        if s == 0 {
            dst.fill(src[0]);
            return;
        }
        let last = s - 1;
        let out_last = self.out_sp[last];
        // Multi-index of p0 over the output spatial axes: on the stack for up to 8 axes (this runs once per row of
        // an unfolding, thousands of times a call for a small convolution: an allocation each cost more than the
        // copy).
        let mut on_stack = [0usize; 8];
        let mut on_heap = Vec::new();
        let o: &mut [usize] = if s <= on_stack.len() {
            &mut on_stack[..s]
        } else {
            on_heap.resize(s, 0);
            &mut on_heap
        };
        let mut rem = p0;
        for d in (0..s).rev() {
            o[d] = rem % self.out_sp[d];
            rem /= self.out_sp[d];
        }
        // Innermost axis: input coordinate of output j is j·stride + off; valid for j in [jlo, jhi).
        let st = self.strides[last];
        let off = (kidx[last] * self.dilations[last]) as isize - self.pads_begin[last] as isize;
        let len = self.in_sp[last] as isize;
        let jlo = if off >= 0 { 0 } else { ((-off) as usize).div_ceil(st) };
        let jhi = if len - off <= 0 { 0 } else { ((len - 1 - off) as usize) / st + 1 };
        let mut p = p0;
        let mut w = 0;
        while p < p1 {
            let j0 = o[last];
            let j1 = out_last.min(j0 + (p1 - p));
            let seg = &mut dst[w..w + (j1 - j0)];
            // Offset of the outer axes, if the tap lies inside the input on all of them.
            let mut base = Some(0usize);
            for d in 0..last {
                let i = (o[d] * self.strides[d] + kidx[d] * self.dilations[d]) as isize - self.pads_begin[d] as isize;
                if i < 0 || i >= self.in_sp[d] as isize {
                    base = None;
                    break;
                }
                base = base.map(|b| b + i as usize * self.in_strides[d]);
            }
            match base {
                None => seg.fill(T::ZERO),
                Some(base) => {
                    let lo = jlo.clamp(j0, j1);
                    let hi = jhi.clamp(lo, j1);
                    seg[..lo - j0].fill(T::ZERO);
                    seg[hi - j0..].fill(T::ZERO);
                    if hi > lo {
                        let start = (base as isize + lo as isize * st as isize + off) as usize;
                        let out = &mut seg[lo - j0..hi - j0];
                        if st == 1 {
                            out.copy_from_slice(&src[start..start + (hi - lo)]);
                        } else {
                            for (t, v) in out.iter_mut().enumerate() {
                                *v = src[start + t * st];
                            }
                        }
                    }
                }
            }
            w += j1 - j0;
            p += j1 - j0;
            // Advance the multi-index to the start of the next output row.
            o[last] = j1;
            let mut d = last;
            while o[d] == self.out_sp[d] && d > 0 {
                o[d] = 0;
                d -= 1;
                o[d] += 1;
            }
        }
    }
}

/// f32 convolution weights packed ahead of time for the product kernel (one packed operand per group), made
/// once when a model is compiled: the weights are constant, and packing them on every run costs as much as the
/// product when there are few output positions.
pub struct PackedWeights {
    groups: Vec<PackedA>,
    /// Instead of `groups`, for a small output plane: the weights with the output channels in lanes
    /// (`conv_lanes.rs`), one per group.
    lanes: Option<Vec<LanePack>>,
}

impl PackedWeights {
    /// Packs `w` (`[M, C / group, K₁ … Kₛ]`); `None` when packing ahead does not apply (see
    /// [`super::gemm::pack_lhs`]) or the shapes are inconsistent.
    pub fn new(w: &[f32], w_shape: &[usize], group: usize) -> Option<PackedWeights> {
        if !PackedWeights::applies(w_shape, group) {
            return None;
        }
        let g = group.max(1);
        let m = *w_shape.first()?;
        let kdim: usize = w_shape[1..].iter().product();
        if m % g != 0 || w.len() != m * kdim {
            return None;
        }
        let mg = m / g;
        // By panels: the convolutions that read their input in place (`shifted.rs`) run all of K on one panel.
        let groups = (0..g).map(|gi| pack_lhs(mg, kdim, &w[gi * mg * kdim..][..mg * kdim], (kdim, 1), true));
        Some(PackedWeights { groups: groups.collect::<Option<_>>()?, lanes: None })
    }

    /// [`PackedWeights::new`] for one convolution whose output is `y_shape` (`[N, M, …]`) under `p`: a 1-D or 2-D
    /// one that `conv_lanes.rs` computes better (`conv_lanes::wanted`) is packed for that kernel instead (the one
    /// packed copy a program keeps either way).
    ///
    /// Weights in the model file's bytes ([`Weights::Bytes`]) are read in place for `conv_lanes.rs`; for the panels
    /// of [`PackedWeights::new`] they must be a slice (`None` otherwise: the caller reads them aligned).
    pub fn for_output(
        w: Weights<'_>,
        w_shape: &[usize],
        p: &ConvParams<'_>,
        y_shape: &[usize],
    ) -> Option<PackedWeights> {
        if !PackedWeights::in_lanes(w_shape, p, y_shape) {
            return PackedWeights::new(w.slice()?, w_shape, p.group);
        }
        let g = p.group.max(1);
        let (mg, kdim) = (w_shape[0] / g, w_shape[1..].iter().product::<usize>());
        if w.len() != g * mg * kdim {
            return None;
        }
        let lanes = (0..g).map(|gi| LanePack::new(mg, kdim, w.part(gi * mg * kdim, mg * kdim))).collect();
        Some(PackedWeights { groups: Vec::new(), lanes: Some(lanes) })
    }

    /// Bytes [`PackedWeights::for_output`] holds.
    pub fn bytes_for_output(w_shape: &[usize], p: &ConvParams<'_>, y_shape: &[usize]) -> usize {
        if !PackedWeights::in_lanes(w_shape, p, y_shape) {
            return PackedWeights::bytes_for(w_shape, p.group);
        }
        let g = p.group.max(1);
        let (mg, kdim) = (w_shape[0] / g, w_shape[1..].iter().product::<usize>());
        g * mg.next_multiple_of(conv_lanes::BLOCK) * kdim * std::mem::size_of::<f32>()
    }

    /// Whether [`PackedWeights::for_output`] packs for `conv_lanes.rs`: packed weights, a 1-D or 2-D convolution,
    /// and `conv_lanes::wanted`.
    fn in_lanes(w_shape: &[usize], p: &ConvParams<'_>, y_shape: &[usize]) -> bool {
        let s = w_shape.len().saturating_sub(2);
        if !(s == 1 || s == 2) || y_shape.len() != s + 2 || !PackedWeights::applies(w_shape, p.group) {
            return false;
        }
        let attr = |v: &[usize], i: usize| v.get(i).copied().unwrap_or(1).max(1);
        let two = |v: (usize, usize)| if s == 2 { v } else { (1, v.1) };
        let (oh, ow) = two((y_shape[2], y_shape[s + 1]));
        let (kh, kw) = two((w_shape[2], w_shape[s + 1]));
        let stride = two((attr(p.strides, 0), attr(p.strides, s - 1)));
        let dilation = two((attr(p.dilations, 0), attr(p.dilations, s - 1)));
        let pointwise = kh * kw == 1 && stride == (1, 1) && p.pads.iter().all(|&v| v == 0);
        let plane = Plane { ih: 0, iw: 0, oh, ow, kh, kw, stride, dilation, pad: (0, 0) };
        let g = p.group.max(1);
        conv_lanes::wanted(&plane, w_shape[0] / g, w_shape[1..].iter().product(), pointwise)
    }

    /// True when weights of this shape are packed on this CPU: 12 or more output channels per group (fewer take
    /// the product's dot and AXPY paths) and AVX-512F.
    pub fn applies(w_shape: &[usize], group: usize) -> bool {
        let g = group.max(1);
        let (m, kdim) = (w_shape.first().copied().unwrap_or(0), w_shape.iter().skip(1).product::<usize>());
        m % g == 0 && m / g >= super::sgemm512::PANEL_ROWS && kdim > 0 && super::sgemm512::available()
    }

    /// Bytes [`PackedWeights::new`] holds for weights of this shape (rows padded to whole panels).
    pub fn bytes_for(w_shape: &[usize], group: usize) -> usize {
        let g = group.max(1);
        let (m, kdim) = (w_shape.first().copied().unwrap_or(0), w_shape.iter().skip(1).product::<usize>());
        let panel = super::sgemm512::PANEL_ROWS;
        g * (m / g).div_ceil(panel) * panel * kdim * std::mem::size_of::<f32>()
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.groups.iter().map(PackedA::bytes).sum::<usize>()
            + self.lanes.iter().flatten().map(LanePack::bytes).sum::<usize>()
    }
}

/// [`conv_packed`] without packed weights.
#[allow(clippy::too_many_arguments)]
pub fn conv<T: Float>(
    x: &[T],
    x_shape: &[usize],
    w: &[T],
    w_shape: &[usize],
    bias: Option<&[T]>,
    p: &ConvParams<'_>,
    y: &mut [T],
    y_shape: &[usize],
    threads: usize,
) {
    conv_packed(x, x_shape, w, w_shape, bias, p, y, y_shape, threads, Post::default())
}

impl<T> Default for Post<'_, T> {
    fn default() -> Self {
        Post { packed: None, act: Act::None, residual: None }
    }
}

/// What [`conv_packed`] adds to a plain convolution.
#[derive(Clone, Copy)]
pub struct Post<'a, T> {
    /// The weights packed by [`PackedWeights::new`], used when `T` is f32: then the bias and the activation are
    /// applied in the product's registers.
    pub packed: Option<&'a PackedWeights>,
    /// The activation applied to the result (`act.rs`).
    pub act: Act,
    /// A term of the output's shape added before the activation (a residual connection's other input): in the
    /// product's registers where the weights are packed (`residual.rs`), else in a pass after.
    pub residual: Option<&'a [T]>,
}

/// ONNX `Conv` (see the module doc for layouts): `y[n, m, o] = bias[m] + Σ_{c, k} w[m, c, k] · x[n, g·C/G + c,
/// o·stride + k·dilation − pad_begin]`, with taps in the padding reading 0. `y_shape` is the output shape the
/// caller computed (`Oᵢ = ⌊(Dᵢ + beginᵢ + endᵢ − dilationᵢ·(Kᵢ − 1) − 1) / strideᵢ⌋ + 1`). With `threads > 1`,
/// (batch item, group) blocks run in parallel when there are enough of them, otherwise each product is split.
///
/// # Panics
/// On inconsistent shapes, attributes or slice lengths.
/// With `post`: weights packed ahead of time and an activation on the output.
#[allow(clippy::too_many_arguments)]
pub fn conv_packed<T: Float>(
    x: &[T],
    x_shape: &[usize],
    w: &[T],
    w_shape: &[usize],
    bias: Option<&[T]>,
    p: &ConvParams<'_>,
    y: &mut [T],
    y_shape: &[usize],
    threads: usize,
    post: Post<'_, T>,
) {
    let (packed, act) = (post.packed, post.act);
    assert!(x_shape.len() >= 2, "conv: input must have rank ≥ 2, got {x_shape:?}");
    let s = x_shape.len() - 2;
    assert_eq!(w_shape.len(), s + 2, "conv: weight rank");
    assert_eq!(y_shape.len(), s + 2, "conv: output rank");
    // A spatial axis of extent 1 everywhere (input, kernel, output, no padding) changes no offset: without it the
    // unfolding copies whole rows (a [C, 512, 1] sequence convolved as [C, 512]) instead of single elements.
    let attr = |v: &[usize], i: usize, default: usize| v.get(i).copied().unwrap_or(default);
    let unit = |d: usize| {
        x_shape[2 + d] == 1
            && w_shape[2 + d] == 1
            && y_shape[2 + d] == 1
            && attr(p.pads, d, 0) == 0
            && attr(p.pads, s + d, 0) == 0
    };
    assert!(p.kernel.is_empty() || p.kernel == &w_shape[2..], "conv: kernel_shape differs from the weights");
    if (0..s).any(unit) {
        let kept: Vec<usize> = (0..s).filter(|&d| !unit(d)).collect();
        let shape = |v: &[usize]| v[..2].iter().copied().chain(kept.iter().map(|&d| v[2 + d])).collect::<Vec<_>>();
        let each = |v: &[usize], default| kept.iter().map(|&d| attr(v, d, default)).collect::<Vec<_>>();
        let pads: Vec<usize> =
            each(p.pads, 0).into_iter().chain(kept.iter().map(|&d| attr(p.pads, s + d, 0))).collect();
        let (strides, dilations) = (each(p.strides, 1), each(p.dilations, 1));
        let q = ConvParams { kernel: &[], strides: &strides, dilations: &dilations, pads: &pads, group: p.group };
        let (xs, ws, ys) = (shape(x_shape), shape(w_shape), shape(y_shape));
        return conv_packed(x, &xs, w, &ws, bias, &q, y, &ys, threads, post);
    }
    let (nb, c) = (x_shape[0], x_shape[1]);
    let m = w_shape[0];
    let cg = w_shape[1];
    let g = p.group.max(1);
    assert_eq!(cg * g, c, "conv: C = {c} is not group ({g}) × weight channels ({cg})");
    assert_eq!(m % g, 0, "conv: M = {m} not divisible by group {g}");
    assert_eq!(y_shape[0], nb, "conv: output batch");
    assert_eq!(y_shape[1], m, "conv: output channels");
    let mg = m / g;
    let kernel = w_shape[2..].to_vec();
    assert!(p.kernel.is_empty() || p.kernel == kernel.as_slice(), "conv: kernel_shape differs from the weights");
    let in_sp = x_shape[2..].to_vec();
    let out_sp = y_shape[2..].to_vec();
    let mut in_strides = vec![1; s];
    for d in (0..s.saturating_sub(1)).rev() {
        in_strides[d] = in_strides[d + 1] * in_sp[d + 1];
    }
    let geo = Geometry {
        strides: (0..s).map(|i| attr(p.strides, i, 1).max(1)).collect(),
        dilations: (0..s).map(|i| attr(p.dilations, i, 1).max(1)).collect(),
        pads_begin: (0..s).map(|i| attr(p.pads, i, 0)).collect(),
        in_sp,
        out_sp,
        kernel,
        in_strides,
    };
    let pads_end: Vec<usize> = (0..s).map(|i| attr(p.pads, s + i, 0)).collect();
    for (d, &pe) in pads_end.iter().enumerate() {
        let span = geo.dilations[d] * (geo.kernel[d].max(1) - 1) + 1;
        let padded = geo.in_sp[d] + geo.pads_begin[d] + pe;
        let want = if padded >= span { (padded - span) / geo.strides[d] + 1 } else { 0 };
        assert_eq!(geo.out_sp[d], want, "conv: output size of spatial axis {d}");
    }
    let p_in: usize = geo.in_sp.iter().product();
    let p_out: usize = geo.out_sp.iter().product();
    let kk: usize = geo.kernel.iter().product();
    let kdim = cg * kk;
    assert_eq!(x.len(), nb * c * p_in, "conv: X length");
    // With packed weights `w` is not read (a program keeps only the packed copy).
    assert!(packed.is_some() || w.len() == m * kdim, "conv: W length {} for {m} × {kdim}", w.len());
    assert_eq!(y.len(), nb * m * p_out, "conv: Y length");
    if let Some(b) = bias {
        assert_eq!(b.len(), m, "conv: bias length");
    }
    if y.is_empty() {
        return;
    }
    let packed = packed.filter(|_| std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>());
    if let Some(pw) = packed {
        let fits = match &pw.lanes {
            Some(lanes) => lanes.len() == g && lanes.iter().all(|a| a.rows() == mg && a.cols() == kdim),
            None => pw.groups.len() == g && pw.groups.iter().all(|a| a.rows() == mg && a.cols() == kdim),
        };
        assert!(fits, "conv: packed weights of another shape");
    }
    let pointwise = kk == 1 && geo.strides.iter().all(|&v| v == 1) && p.pads.iter().all(|&v| v == 0);
    debug_assert!(!pointwise || p_in == p_out);
    // Several images of few positions each, unfolded side by side into a buffer of their own (below).
    // Weights packed with the channels in lanes go to `conv_lanes.rs` and nowhere else.
    let lanes = packed.and_then(|pw| pw.lanes.as_deref());
    let merged =
        nb > 1 && g == 1 && !pointwise && p_out < MERGE_BELOW && kdim * nb * p_out <= COL_TILE_ELEMS && lanes.is_none();
    // A residual term goes into the product's epilogue where the product writes `y` itself with packed weights
    // (`residual.rs`, rule 1); elsewhere the convolution runs bare and the term and activation follow in a pass.
    let residual = match post.residual {
        None => None,
        Some(r) if packed.is_some() && kdim > 0 && !merged => {
            assert_eq!(r.len(), y.len(), "conv: residual length");
            // SAFETY: `packed` is only kept when `T` is f32 (checked through its TypeId above), so these are the
            // same slices retyped.
            let (y32, r32) = unsafe { (&*(&*y as *const [T] as *const [f32]), &*(r as *const [T] as *const [f32])) };
            Some(Residual::new(y32, r32))
        }
        Some(r) => {
            assert_eq!(r.len(), y.len(), "conv: residual length");
            let bare = Post { act: Act::None, residual: None, ..post };
            conv_packed(x, x_shape, w, w_shape, bias, p, y, y_shape, threads, bare);
            y.iter_mut().zip(r).for_each(|(v, &t)| *v += t);
            act.over(y);
            return;
        }
    };
    // One group's product `y[.., p0..] (+)= W_g · cols`, `cols` being `width` columns with row stride `cols_rs`.
    // With packed weights the bias and the ReLU are the product's epilogue; otherwise the bias is written into `y`
    // first (`read`) and the ReLU is a pass after.
    let product = |gi: usize, cols: &[T], cols_rs: usize, width: usize, y: &mut [T], y_rs, read: bool, threads| {
        match packed {
            Some(pw) => {
                // SAFETY: `packed` is only kept when `T` is f32 (checked through its TypeId above), so these are
                // the same slices retyped.
                let (cols, y, bias) = unsafe {
                    (
                        &*(cols as *const [T] as *const [f32]),
                        &mut *(y as *mut [T] as *mut [f32]),
                        bias.map(|b| &*(&b[gi * mg..(gi + 1) * mg] as *const [T] as *const [f32])),
                    )
                };
                let epilogue = Epilogue { bias, act, residual };
                gemm_packed(&pw.groups[gi], width, y, y_rs, false, cols, cols_rs, 1, threads, epilogue)
            }
            None => {
                let w_g = &w[gi * mg * kdim..][..mg * kdim];
                gemm_strided(mg, width, kdim, y, y_rs, read, T::ONE, w_g, kdim, 1, cols, cols_rs, 1, T::ONE, threads)
            }
        }
    };
    // The geometry of a 1-D or 2-D convolution as one plane (a 1-D one is a single row).
    let plane = (s == 1 || s == 2).then(|| {
        let two = |v: &[usize]| if s == 2 { (v[0], v[1]) } else { (1, v[0]) };
        let ((ih, iw), (oh, ow), (kh, kw)) = (two(&geo.in_sp), two(&geo.out_sp), two(&geo.kernel));
        let (stride, dilation) = (two(&geo.strides), two(&geo.dilations));
        let pad = if s == 2 { (geo.pads_begin[0], geo.pads_begin[1]) } else { (0, geo.pads_begin[0]) };
        Plane { ih, iw, oh, ow, kh, kw, stride, dilation, pad }
    });
    assert!(lanes.is_none() || plane.is_some(), "conv: channel-lane weights for a convolution of {s} axes");
    // One input channel per group, each read by few output channels or through a small window: accumulated
    // directly, no im2col. Many outputs over a long window (an STFT's 258 filters of 256 taps over one signal,
    // where AVX-512 is missing and the weights are not packed) are a product, and take the product below.
    let direct = cg == 1 && kk > 1 && packed.is_none() && (mg <= DIRECT_OUTPUTS || kk <= DIRECT_TAPS);
    if let (true, Some(plane)) = (direct, &plane) {
        depthwise(x, w, bias, c, mg, plane, act, y, threads);
        return;
    }
    // With packed weights a 1-D or 2-D convolution that would unfold its input reads it in place instead, unless
    // its few output positions fill a fraction of the shifted tile's 32 columns: those are unfolded (a few columns)
    // and multiplied by the narrow product (`narrow.rs`; silero's STFT, 258 filters of 256 taps at 4 positions:
    // 0.042 → 0.010 ms).
    let shifted = plane.filter(|_| {
        packed.is_some() && !pointwise && kdim >= MIN_K && p_out > super::narrow::MAX_COLUMNS && shifted::available()
    });

    // Output columns c0..c1 of group gi (input x_g) into `out`, row r at `r·out_rs`: the bias, the product over
    // im2col tiles of those columns (or the input itself, pointwise), and the ReLU when the product did not.
    let columns = |gi: usize, x_g: &[T], (c0, c1): (usize, usize), out: &mut [T], out_rs: usize, threads: usize| {
        let read = bias.is_some() && packed.is_none();
        let rows = |out: &mut [T], f: &mut dyn FnMut(usize, &mut [T])| {
            for r in 0..mg {
                f(r, &mut out[r * out_rs..][..c1 - c0]);
            }
        };
        if let (Some(b), true) = (bias, read) {
            rows(out, &mut |r, row| row.fill(b[gi * mg + r]));
        }
        if pointwise {
            product(gi, &x_g[c0..], p_out, c1 - c0, out, out_rs, read, threads);
        } else {
            let tile = (COL_TILE_ELEMS / kdim).clamp(1, c1 - c0);
            let mut cols = vec![T::ZERO; kdim * tile];
            let mut kidx = vec![0usize; s];
            for p0 in (c0..c1).step_by(tile) {
                let p1 = (p0 + tile).min(c1);
                let width = p1 - p0;
                let cols = &mut cols[..kdim * width];
                let fill = |r: usize, row: &mut [T], kidx: &mut [usize]| {
                    let (ci, mut kr) = (r / kk, r % kk);
                    for d in (0..s).rev() {
                        kidx[d] = kr % geo.kernel[d];
                        kr /= geo.kernel[d];
                    }
                    geo.im2col_row(&x_g[ci * p_in..][..p_in], kidx, p0, p1, row);
                };
                if threads > 1 && kdim >= 2 * threads {
                    cols.par_chunks_mut(width).enumerate().for_each(|(r, row)| fill(r, row, &mut vec![0; s]));
                } else {
                    for (r, row) in cols.chunks_mut(width).enumerate() {
                        fill(r, row, &mut kidx);
                    }
                }
                product(gi, cols, width, width, &mut out[p0 - c0..], out_rs, read, threads);
            }
        }
        if !act.is_none() && packed.is_none() {
            rows(out, &mut |_, row| act.over(row));
        }
    };

    // One (batch item, group) block: y_blk is y[ni, gi·mg .. (gi+1)·mg, :], contiguous. Given several threads
    // and enough output positions, each thread computes its own range of columns (its own unfolding and one
    // product, whatever the number of output channels) into a buffer of its own, copied into place after.
    let block = |bi: usize, y_blk: &mut [T], threads: usize| {
        let (ni, gi) = (bi / g, bi % g);
        let x_g = &x[(ni * c + gi * cg) * p_in..][..cg * p_in];
        if kdim == 0 {
            match bias {
                Some(b) => y_blk.chunks_mut(p_out).enumerate().for_each(|(r, row)| row.fill(b[gi * mg + r])),
                None => y_blk.fill(T::ZERO),
            }
            act.over(y_blk);
            return;
        }
        if let (Some(lanes), Some(g2)) = (lanes, &plane) {
            // SAFETY: `lanes` come from `packed`, only kept when `T` is f32 (checked through its TypeId above), so
            // these are the same slices retyped.
            let (x_g, y_blk, bias) = unsafe {
                (
                    &*(x_g as *const [T] as *const [f32]),
                    &mut *(y_blk as *mut [T] as *mut [f32]),
                    bias.map(|b| &*(&b[gi * mg..(gi + 1) * mg] as *const [T] as *const [f32])),
                )
            };
            if pointwise {
                conv_lanes::pointwise(x_g, p_out, &lanes[gi], bias, act, residual, y_blk, threads);
            } else {
                conv_lanes::conv2d(x_g, cg, g2, &lanes[gi], bias, act, residual, y_blk, threads);
            }
            return;
        }
        if let (Some(pw), Some(g2)) = (packed, &shifted) {
            // SAFETY: `packed` is only kept when `T` is f32 (checked through its TypeId above), so these are the
            // same slices retyped.
            let (x_g, y_blk, bias) = unsafe {
                (
                    &*(x_g as *const [T] as *const [f32]),
                    &mut *(y_blk as *mut [T] as *mut [f32]),
                    bias.map(|b| &*(&b[gi * mg..(gi + 1) * mg] as *const [T] as *const [f32])),
                )
            };
            shifted::conv2d(x_g, cg, g2, &pw.groups[gi], bias, act, residual, y_blk, threads);
            return;
        }
        // A pointwise product with packed weights splits itself (rows or columns, `gemm::column_bands`).
        if threads <= 1 || p_out < SPLIT_MIN_COLUMNS * threads || (packed.is_some() && pointwise) {
            columns(gi, x_g, (0, p_out), y_blk, p_out, threads);
            return;
        }
        if let Some(pw) = packed {
            // SAFETY: `packed` is only kept when `T` is f32 (checked through its TypeId above), so these are the
            // same slices retyped.
            let (x_g, y_blk, bias) = unsafe {
                (
                    &*(x_g as *const [T] as *const [f32]),
                    &mut *(y_blk as *mut [T] as *mut [f32]),
                    bias.map(|b| &*(&b[gi * mg..(gi + 1) * mg] as *const [T] as *const [f32])),
                )
            };
            // Each thread unfolds its own output positions and writes their product in place (`cols.rs`).
            let per = p_out.div_ceil(threads).next_multiple_of(32);
            let bands = Cols::whole(y_blk, mg, p_out, p_out).split(per);
            bands.into_par_iter().for_each(|mut band| {
                let (c0, width) = (band.first_column(), band.width());
                let tile = (COL_TILE_ELEMS / kdim).clamp(1, width);
                let mut cols = vec![0f32; kdim * tile];
                let mut kidx = vec![0usize; s];
                for p0 in (0..width).step_by(tile) {
                    let w = tile.min(width - p0);
                    let cols = &mut cols[..kdim * w];
                    for (r, row) in cols.chunks_mut(w).enumerate() {
                        let (ci, mut kr) = (r / kk, r % kk);
                        for d in (0..s).rev() {
                            kidx[d] = kr % geo.kernel[d];
                            kr /= geo.kernel[d];
                        }
                        geo.im2col_row(&x_g[ci * p_in..][..p_in], &kidx, c0 + p0, c0 + p0 + w, row);
                    }
                    let epilogue = Epilogue { bias, act, residual };
                    gemm_packed_cols(&pw.groups[gi], band.narrow(p0, w), false, cols, w, 1, epilogue);
                }
            });
            return;
        }
        let per = p_out.div_ceil(threads).next_multiple_of(16);
        let ranges: Vec<(usize, usize)> = (0..p_out).step_by(per).map(|c0| (c0, (c0 + per).min(p_out))).collect();
        let parts: Vec<Vec<T>> = ranges
            .par_iter()
            .map(|&(c0, c1)| {
                let mut out = vec![T::ZERO; mg * (c1 - c0)];
                columns(gi, x_g, (c0, c1), &mut out, c1 - c0, 1);
                out
            })
            .collect();
        y_blk.par_chunks_mut(p_out).enumerate().for_each(|(r, row)| {
            for (&(c0, c1), part) in ranges.iter().zip(&parts) {
                row[c0..c1].copy_from_slice(&part[r * (c1 - c0)..][..c1 - c0]);
            }
        });
    };
    // Several images of few output positions each (an STFT over a batch of short signals: 5 positions an image):
    // every image's columns unfolded side by side and multiplied at once, one product wide enough for the vector
    // kernel where one per image would use a few of its lanes, then each image's rows put in place.
    if merged {
        let width = nb * p_out;
        let mut cols = vec![T::ZERO; kdim * width];
        let mut kidx = vec![0usize; s];
        for (r, row) in cols.chunks_mut(width).enumerate() {
            let (ci, mut kr) = (r / kk, r % kk);
            for d in (0..s).rev() {
                kidx[d] = kr % geo.kernel[d];
                kr /= geo.kernel[d];
            }
            for (ni, part) in row.chunks_mut(p_out).enumerate() {
                let src = &x[(ni * c + ci) * p_in..][..p_in];
                if s == 1 {
                    // 1-D (a signal's frames): input position j·stride + tap·dilation − pad, zero outside.
                    let off = (kidx[0] * geo.dilations[0]) as isize - geo.pads_begin[0] as isize;
                    for (j, v) in part.iter_mut().enumerate() {
                        let i = (j * geo.strides[0]) as isize + off;
                        *v = if (0..p_in as isize).contains(&i) { src[i as usize] } else { T::ZERO };
                    }
                } else {
                    geo.im2col_row(src, &kidx, 0, p_out, part);
                }
            }
        }
        let mut out = vec![T::ZERO; m * width];
        let read = bias.is_some() && packed.is_none();
        if let (Some(b), true) = (bias, read) {
            out.chunks_mut(width).zip(b).for_each(|(row, &v)| row.fill(v));
        }
        product(0, &cols, width, width, &mut out, width, read, threads);
        if !act.is_none() && packed.is_none() {
            act.over(&mut out);
        }
        for (ni, image) in y.chunks_mut(m * p_out).enumerate() {
            for (r, row) in image.chunks_mut(p_out).enumerate() {
                row.copy_from_slice(&out[r * width + ni * p_out..][..p_out]);
            }
        }
        return;
    }
    let blocks = nb * g;
    if threads > 1 && blocks >= threads {
        y.par_chunks_mut(mg * p_out).enumerate().for_each(|(bi, blk)| block(bi, blk, 1));
    } else {
        for (bi, blk) in y.chunks_mut(mg * p_out).enumerate() {
            block(bi, blk, threads);
        }
    }
}

#[cfg(test)]
mod tests;
