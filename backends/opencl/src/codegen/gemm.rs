//! The batched, tiled matrix product.

use std::fmt::Write as _;

use super::lit;

/// Element strides of a batched matrix operand: one per batch axis, then the row and the column stride.
pub type Strides = (Vec<usize>, usize, usize);

/// A batched product `C[b][m, n] = epilogue(alpha · Σₖ A[b][m, k] · B[b][k, n])`.
#[derive(Clone, Debug)]
pub struct Gemm {
    /// Rows, columns, inner dimension.
    pub m: usize,
    /// Columns.
    pub n: usize,
    /// Inner dimension.
    pub k: usize,
    /// Batch extents (broadcast batch axes, outermost first).
    pub batch: Vec<usize>,
    /// Element strides of A: per batch axis, then row and column.
    pub a: Strides,
    /// Element strides of B: per batch axis, then row (k) and column (n).
    pub b: Strides,
    /// Element strides of C: per batch axis, then row and column.
    pub c: Strides,
    /// Product scale.
    pub alpha: f32,
    /// An added term through its strides (batch, row, column; 0 on broadcast axes), scaled by `beta`.
    pub bias: Option<(Strides, f32)>,
    /// A term added after the scaled one (a residual connection: a tensor of C's shape, through its strides),
    /// before the ReLU.
    pub residual: Option<Strides>,
    /// ReLU on the result.
    pub relu: bool,
    /// B is the im2col unfolding of a convolution's input `X` (window, channels, groups), computed as it is loaded
    /// (an implicit product: no im2col buffer or launch); the batch axes are then (batch item, group).
    pub im2col: Option<(super::Window, usize, usize)>,
    /// How A, B, C and the added term are stored ([`super::dt_storage`]: `float`, `half` or `bf16`); products are
    /// summed in float whatever it is (the implicit convolution's input `X` too).
    pub elem: &'static str,
    /// Work-groups the device needs to be busy (twice its compute units): [`division`] splits K until the product
    /// makes this many, and takes a smaller block where a larger one would leave it far short.
    pub min_groups: usize,
    /// Computed on tensor cores ([`super::mma`]): in TF32 for `float` operands (a plan at `--precision tf32`), in
    /// f16 or bf16 for `half` or `bf16` ones (a plan at `fp16` or `bf16`), on a device that has them.
    pub tensor_cores: bool,
    /// An elementwise chain that reads the product and stores in its place (after the terms and ReLU above, which
    /// a product with a chain does not have): `lower/epilogue.rs` decides when.
    pub chain: Option<Epilogue>,
    /// The device takes inline PTX (NVIDIA's): a split product's ranges are added up as they finish, by
    /// `red.global.add.f32`, and its last work-group orders memory with `membar.gl` besides `mem_fence`
    /// ([`split_tail`]).
    pub ptx: bool,
}

/// A fused elementwise chain run in a product's epilogue: its input `product` is the product's value, its other
/// inputs are the kernel's arguments `E{k}` after the terms, read through the chain's strides at the element's
/// index in the packed output (the chain's output has the product's shape, packed).
#[derive(Clone, Debug)]
pub struct Epilogue {
    /// The chain, its dimensions and its operands' strides, as `stowage_compiler::lowering::fuse` planned it.
    pub loops: stowage_kir::Loops,
    /// Which of the chain's inputs is the product.
    pub product: usize,
}

/// Tile edge of [`gemm`].
pub const TILE: usize = 16;

pub(super) fn batch_offset(s: &mut String, var: &str, batch: &[usize], strides: &[usize]) {
    let _ = write!(s, "  size_t {var} = 0; {{ size_t q = bi;");
    for a in (0..batch.len()).rev() {
        let _ = write!(s, " {var} += (q % {}) * {}; q /= {};", batch[a], strides[a], batch[a]);
    }
    s.push_str(" }\n");
}

/// How a product is divided among work-groups: each item computes `block` × `block` outputs of a tile of
/// `16·block` × `16·block`, and the inner dimension is cut into `splits` ranges of `chunk` (a multiple of 16), each
/// summed by its own work-groups into a partial product that the last of them to finish adds up ([`split_tail`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Division {
    /// Outputs per work item along each axis: 1, 2 or 4.
    pub block: usize,
    /// Ranges of the inner dimension summed apart (1: the product is written directly).
    pub splits: usize,
    /// Length of each range.
    pub chunk: usize,
}

impl Division {
    /// The global size of the product's launch (its local size is [`Division::local`]).
    /// A batch of none gives a global size of 0, which is not launched.
    pub fn global(&self, g: &Gemm) -> Vec<usize> {
        if g.tensor_cores {
            return super::mma::mma_global(g, self);
        }
        let batch: usize = g.batch.iter().product();
        let edge = |v: usize| v.div_ceil(TILE * self.block).max(1) * TILE;
        vec![edge(g.n), edge(g.m), batch * self.splits]
    }

    /// The local size of the product's launch: `[16, 16, 1]`, or `[256, 1, 1]` on tensor cores.
    pub fn local(&self, g: &Gemm) -> Vec<usize> {
        if g.tensor_cores {
            vec![super::mma::mma_items(g), 1, 1]
        } else {
            vec![TILE, TILE, 1]
        }
    }

    /// Work-groups per range of K: the tiles of every batch item, each with its counter in a split product
    /// ([`split_tail`]).
    pub fn tiles(&self, g: &Gemm) -> usize {
        let (global, local) = (self.global(g), self.local(g));
        (global[0] / local[0]) * (global[1] / local[1]) * g.batch.iter().product::<usize>().max(1)
    }

    /// Bytes of the partial products in scratch (0 when the product is not split, or adds its ranges up as they
    /// finish in the program's accumulators: [`split_tail`]).
    pub fn scratch_bytes(&self, g: &Gemm) -> usize {
        let batch: usize = g.batch.iter().product();
        if self.splits > 1 && !g.ptx {
            self.splits * batch.max(1) * g.m * g.n * 4
        } else {
            0
        }
    }
}

/// On tensor cores, a product whose K is at most this long and whose output makes at least one
/// [`MMA_UNSPLIT_SHARE`]th of the work-groups sought (33 on a GPU of 132 compute units) is not split
/// ([`division`]). Measured unsplit wins were at K ≤ 768 (36 to 49 tiles); K up to 1,536 is an extrapolation.
const MMA_UNSPLIT_K: usize = 1536;
/// See [`MMA_UNSPLIT_K`].
const MMA_UNSPLIT_SHARE: usize = 8;

/// The shortest range of the inner dimension a split product gives one work-group: below it the partial
/// products' traffic and their sum cost more than the parallelism gains.
const MIN_CHUNK: usize = 128;

fn env_usize(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|v| v.parse::<usize>().ok())
}

/// Divides `g`: a block (4 × 4, 2 × 2 or 1 × 1 outputs per work item) and the inner dimension cut into ranges of
/// at least 128 until the product makes `g.min_groups` work-groups (twice the device's compute units: a batch-1
/// layer of ResNet's last stage is 8 tiles of 64 × 64 on a GPU of 132 compute units, split 32 ways).
///
/// The block is the largest that the output fills (at least `16·R` rows and half as many columns, and K at least
/// 16) and that, split, still makes a quarter of the work-groups sought; where none does (a small product with a
/// short K, which cannot be split), the one that makes the most. On the H200, blocks of 4 split along K took
/// ResNet-50 from 2.1 ms (split, but with the largest block that filled the device unsplit, mostly 2 × 2 and
/// 1 × 1) to 1.7 ms, before loads were overlapped with arithmetic.
///
/// For measuring: `STOWAGE_OPENCL_GEMM_BLOCK` (1, 2 or 4) forces the block, `STOWAGE_OPENCL_GEMM_SPLITS` the
/// number of ranges, and `STOWAGE_OPENCL_GEMM_GROUPS` the count of work-groups sought.
pub fn division(g: &Gemm) -> Division {
    let batch: usize = g.batch.iter().product::<usize>().max(1);
    let target = env_usize("STOWAGE_OPENCL_GEMM_GROUPS").unwrap_or(g.min_groups).max(1);
    let groups = |r: usize| g.m.div_ceil(TILE * r) * g.n.div_ceil(TILE * r) * batch;
    let most_splits = (g.k / MIN_CHUNK).max(1);
    // Ranges of K are whole steps of the kernel that sums them: 16, or the pipelined kernel's 64 bytes a row.
    let step = match g.tensor_cores && super::mma::pipelined(g.elem) {
        true => super::pipe::step_k(if g.elem == "float" { 4 } else { 2 }),
        false => TILE,
    };
    let make = |block: usize, splits: usize| {
        let chunk = g.k.div_ceil(splits.max(1)).next_multiple_of(step).max(step);
        Division { block, splits: g.k.div_ceil(chunk).max(1), chunk }
    };
    let forced_splits = env_usize("STOWAGE_OPENCL_GEMM_SPLITS").map(|s| s.clamp(1, g.k.div_ceil(TILE).max(1)));
    // On tensor cores a product split in two lost to the unsplit one every time it was measured (the H200, batch
    // 1: a 1×1 conv of 256 to 1024 channels at 14 × 14, 17.4 µs with its second launch against 14.2; MatMul 1024³
    // 62.0 against 50.5 µs; 512 × 2048 × 2048 98.1 against 90.3 µs), while 4 to 32 ranges won on long K (a 3×3
    // conv of 64 channels at 56 × 56: 21.8 µs in 4 against 36.8): two ranges are taken as one.
    let sought = |r: usize| target.div_ceil(groups(r)).min(most_splits);
    // And a split's tail (its partial sums added up in L2, then the last work-group's pass over the tile) costs
    // more than a short K saves (the `gemm_speed` example on an H100, TF32 / f16 µs: m 128 × n 3,072 × k 768
    // (48 tiles) 22.5 / 29.1 unsplit against 35.9 / 38.6 in 2 ranges and 39.5 / 43.2 in 3; m 128 × n 2,304 × k
    // 768 (36 tiles) 22.2 / 29.2 against 31.9 / 35.8 in 4; m 64 × n 3,136 × k 576 (49 tiles) 18.3 / 23.5
    // against 25.2 / 30.7 in 4), unless the tiles leave most of the device idle (m 128 × n 768 × k 768, 24
    // tiles, under an eighth of the 264 work-groups sought: 22.1 / 29.1 unsplit, 19.5 / 19.8 in 8) or K is long
    // (k 3,072 on 24 tiles: 69.4 unsplit, 28.0 in 11).
    let short = |r: usize| g.tensor_cores && g.k <= MMA_UNSPLIT_K && groups(r) * MMA_UNSPLIT_SHARE >= target;
    let splits = |r: usize| {
        forced_splits.unwrap_or_else(|| if g.tensor_cores && (sought(r) == 2 || short(r)) { 1 } else { sought(r) })
    };
    let fills = |r: usize| r == 1 || (g.k >= TILE && g.m >= TILE * r && 2 * g.n >= TILE * r);
    // Tensor cores take tiles of 64 × 64, the size of a block of 4.
    let forced = if g.tensor_cores {
        Some(4)
    } else {
        env_usize("STOWAGE_OPENCL_GEMM_BLOCK").filter(|r| matches!(r, 1 | 2 | 4))
    };
    let r = forced.unwrap_or_else(|| {
        let candidates = [4, 2, 1].into_iter().filter(|&r| fills(r));
        let enough = candidates.clone().find(|&r| 4 * groups(r) * splits(r) >= target);
        enough.unwrap_or_else(|| candidates.max_by_key(|&r| (groups(r) * splits(r), r)).unwrap_or(1))
    });
    // The tensor-core kernel's tile of 128 × 128 (a block of 8) only where `STOWAGE_OPENCL_MMA_TILE=128` asks: on
    // an H100, ResNet-50 at batch 8 in TF32 took 3.99–4.03 ms with every product at 64 × 64, 4.35 with 128 × 128
    // where a product made one such tile per compute unit, and 4.98 with it everywhere (batch 1: 1.21, and 2.00
    // everywhere), `scripts/device/tiles.sh`, 2026-12-07: with 4 × 4 fragments a warp the kernel holds one
    // work-group per multiprocessor (its registers), and its one stage of local memory does not hide the loads.
    const BIG: usize = super::mma::MMA_BIG_TILE / TILE;
    if g.tensor_cores && super::mma::big_tile(g) == Some(true) {
        return make(BIG, splits(BIG));
    }
    make(r, splits(r))
}

/// `g`'s dimensions and division in a few words, for a profile.
pub fn describe(g: &Gemm) -> String {
    let implicit = if g.im2col.is_some() { " implicit conv" } else { "" };
    let implicit = if g.tensor_cores {
        format!("{implicit} {} tensor cores", super::mma::word(g.elem))
    } else {
        implicit.to_string()
    };
    let d = division(g);
    let split = if d.splits > 1 { format!(" split{}x{}", d.splits, d.chunk) } else { String::new() };
    format!("gemm m{} n{} k{} batch{:?} block{}{split}{implicit}", g.m, g.n, g.k, g.batch, d.block)
}

/// The parameters of the terms the epilogue reads, after C: `D` (the added term), `R` (the residual).
pub(super) fn terms(g: &Gemm) -> String {
    let t = super::param_type(g.elem);
    let mut s = String::new();
    if g.bias.is_some() {
        let _ = write!(s, ", __global const {t}* restrict D");
    }
    if g.residual.is_some() {
        let _ = write!(s, ", __global const {t}* restrict R");
    }
    if let Some(e) = &g.chain {
        for (k, o) in e.loops.inputs.iter().enumerate().filter(|(k, _)| *k != e.product) {
            let _ = write!(s, ", __global const {}* restrict E{k}", super::param_type(super::elem_storage(o.elem)));
        }
    }
    s
}

/// The epilogue of an output `v` at (`row`, `col`) of batch item `bi`: the scale, the added term, the residual
/// term, ReLU, stored to C.
pub(super) fn epilogue(s: &mut String, g: &Gemm) {
    let _ = writeln!(s, "    v = {} * v;", lit(g.alpha));
    if let Some(((bs, brs, bcs), beta)) = &g.bias {
        batch_offset(s, "dof", &g.batch, bs);
        let d = super::load(g.elem, "D", &format!("dof + (size_t)row * {brs} + (size_t)col * {bcs}"));
        let _ = writeln!(s, "    v += {} * {d};", lit(*beta));
    }
    if let Some((rs, rrs, rcs)) = &g.residual {
        batch_offset(s, "rof", &g.batch, rs);
        let r = super::load(g.elem, "R", &format!("rof + (size_t)row * {rrs} + (size_t)col * {rcs}"));
        let _ = writeln!(s, "    v += {r};");
    }
    if g.relu {
        let _ = writeln!(s, "    v = v < 0.0f ? 0.0f : v;");
    }
    let at = format!("co + (size_t)row * {} + (size_t)col * {}", g.c.1, g.c.2);
    match &g.chain {
        None => {
            let _ = writeln!(s, "    {}", super::store(g.elem, "C", &at, "v"));
        }
        Some(e) => chain_epilogue(s, e, &at, g.elem),
    }
}

/// The chain `e` on the product's value `v`, stored at C's element `at` (C stored as `elem`): C is the packed
/// output, so `at` is the element's index there, decomposed along the chain's dimensions to read its other inputs.
fn chain_epilogue(s: &mut String, e: &Epilogue, at: &str, elem: &str) {
    let l = &e.loops;
    let _ = writeln!(s, "    {{ const size_t at_ = {at}; size_t r_ = at_;");
    let mut offsets = vec![String::from("0"); l.inputs.len()];
    for a in (0..l.dims.len()).rev() {
        let d = l.dims[a];
        let _ = writeln!(s, "    const size_t e{a}_ = r_ % {d}; r_ /= {d};");
        for (k, o) in l.inputs.iter().enumerate() {
            let st = o.strides[a] / o.elem.size();
            if st != 0 {
                offsets[k] = format!("{} + e{a}_ * {st}", offsets[k]);
            }
        }
    }
    for (k, off) in offsets.iter().enumerate() {
        if k == e.product {
            let _ = writeln!(s, "    const float x{k} = v;");
        } else {
            let x = super::load(super::elem_storage(l.inputs[k].elem), &format!("E{k}"), off);
            let _ = writeln!(s, "    const float x{k} = (float){x};");
        }
    }
    if let stowage_kir::Body::Chain(chain) = &l.body {
        let result = super::chain_body(chain, s);
        if elem == "float" {
            let _ = writeln!(s, "    C[at_] = {result}; }}");
        } else {
            let _ = writeln!(s, "    {} }}", super::store(elem, "C", "at_", &result));
        }
    }
}

/// The statements that set `dst` to B's element (`gk`, `gc`), 0 outside K's range `kend` or past N, and close the
/// caller's block: read through B's strides, or computed from the convolution's input `X` (the implicit im2col).
/// `inside`: every tile is whole ([`whole_tiles`]), so B's element is read without a check.
pub(super) fn load_b(s: &mut String, g: &Gemm, dst: &str, inside: bool) {
    match &g.im2col {
        None => {
            let b = super::load(g.elem, "B", &format!("bo + (size_t)gk * {} + (size_t)gc * {}", g.b.1, g.b.2));
            if inside {
                let _ = writeln!(s, "        {dst} = {b}; }}");
            } else {
                let _ = writeln!(s, "        {dst} = (gk < kend && gc < {}) ? {b} : 0.0f; }}", g.n);
            }
        }
        Some((w, channels, groups)) => {
            let _ = writeln!(s, "        float v = 0.0f;\n        if (gk < kend && gc < {}) {{", g.n);
            s.push_str(&super::window::im2col_value(w, *channels, *groups, g.elem, "gk", "gc", "bi", "v"));
            let _ = writeln!(s, "        }}\n        {dst} = v; }}");
        }
    }
}

/// Whether every tile of `g` divided as `d` is whole: the output a whole number of `bm` × `bn` tiles and K of steps
/// of `step` in every range, so that a tile's loads need no bounds check (BERT's products, ResNet's 1 × 1 layers).
pub(super) fn whole_tiles(g: &Gemm, d: &Division, bm: usize, bn: usize, step: usize) -> bool {
    g.m.is_multiple_of(bm) && g.n.is_multiple_of(bn) && g.k.is_multiple_of(step) && d.chunk.is_multiple_of(step)
}

/// Kernel `name(A, B, C[, bias])` for `g` divided as [`division`] says: work-groups of 16 × 16 items, each item
/// computing `R` × `R` outputs from tiles of A and B staged in local memory 16 columns of K at a time; global size
/// [`Division::global`], local `[16, 16, 1]`. A split product is `name(A, B, P, N, C[, bias])`: each range of K
/// writes its partial product to `P` (`[splits][batch][m][n]`), and [`split_tail`] finishes it in the same launch.
///
/// Each item loads `R` elements of A's tile and `R` of B's (the tiles are `16R` × 16 and 16 × `16R`, the group 256
/// items), and loads the next tiles into registers while it computes on the current ones, so that a batch-1 layer,
/// which has few work-groups per compute unit to hide memory latency with, still overlaps loads and arithmetic.
/// Blocks of 2 and 4 read their operands from local memory as vectors: A is staged K-major (`As[k][row]`), and each
/// item's outputs are a contiguous `R` × `R` block. A block of 1 reads scalars from `As[row][k]`.
pub fn gemm(name: &str, g: &Gemm) -> String {
    let d = division(g);
    if g.tensor_cores {
        return super::mma::gemm_mma(name, g, &d);
    }
    let r = d.block;
    let (bm, bn) = (TILE * r, TILE * r);
    let items = TILE * TILE;
    let mut s = String::new();
    let out = outputs(g, &d);
    let b_name = if g.im2col.is_some() { "X" } else { "B" };
    let _ = writeln!(
        s,
        "__kernel void {name}(__global const {t}* restrict A, __global const {t}* restrict {b_name}, {out}) {{",
        t = super::param_type(g.elem)
    );
    let batch: usize = g.batch.iter().product::<usize>().max(1);
    let _ = writeln!(s, "  const int lc = get_local_id(0), lr = get_local_id(1), tid = lr * {TILE} + lc;");
    let _ = writeln!(
        s,
        "  const int row0 = get_group_id(1) * {bm}, col0 = get_group_id(0) * {bn}; const size_t z = get_global_id(2), bi = z % {batch};"
    );
    let _ = writeln!(s, "  const int k0 = (int)(z / {batch}) * {}, kend = min(k0 + {}, {});", d.chunk, d.chunk, g.k);
    let vector = r > 1;
    if vector {
        let _ = writeln!(
            s,
            "  __local float As[{TILE}][{}] __attribute__((aligned(16))); __local float Bs[{TILE}][{}] __attribute__((aligned(16)));",
            bm + 4,
            bn + 4
        );
    } else {
        let _ = writeln!(s, "  __local float As[{bm}][{}]; __local float Bs[{TILE}][{}];", TILE + 1, bn + 1);
    }
    batch_offset(&mut s, "ao", &g.batch, &g.a.0);
    batch_offset(&mut s, "bo", &g.batch, &g.b.0);
    batch_offset(&mut s, "co", &g.batch, &g.c.0);
    let _ = writeln!(s, "  float acc[{r}][{r}], pa[{r}], pb[{r}];");
    let _ = writeln!(s, "  for (int i = 0; i < {r}; ++i) for (int j = 0; j < {r}; ++j) acc[i][j] = 0.0f;");
    // Element u of this item's share of the tiles at K offset `t`: A's (rr, kk) and B's (kk, cc).
    let a_at = |u: usize| format!("const int e = tid + {}, rr = e / {TILE}, kk = e % {TILE}", u * items);
    let b_at = |u: usize| format!("const int e = tid + {}, kk = e / {bn}, cc = e % {bn}", u * items);
    let inside = whole_tiles(g, &d, bm, bn, TILE);
    let load = |s: &mut String, t: &str| {
        for u in 0..r {
            let a = super::load(g.elem, "A", &format!("ao + (size_t)gr * {} + (size_t)gk * {}", g.a.1, g.a.2));
            let a = if inside { a } else { format!("(gr < {} && gk < kend) ? {a} : 0.0f", g.m) };
            let _ = writeln!(s, "      {{ {}, gr = row0 + rr, gk = {t} + kk; pa[{u}] = {a}; }}", a_at(u));
        }
        for u in 0..r {
            let _ = writeln!(s, "      {{ {}, gk = {t} + kk, gc = col0 + cc;", b_at(u));
            load_b(s, g, &format!("pb[{u}]"), inside);
        }
    };
    load(&mut s, "k0");
    let _ = writeln!(s, "  for (int t = k0; t < kend; t += {TILE}) {{");
    for u in 0..r {
        let at = if vector { "kk][rr" } else { "rr][kk" };
        let _ = writeln!(s, "    {{ {}; As[{at}] = pa[{u}]; }}", a_at(u));
        let _ = writeln!(s, "    {{ {}; Bs[kk][cc] = pb[{u}]; }}", b_at(u));
    }
    let _ = writeln!(s, "    barrier(CLK_LOCAL_MEM_FENCE);");
    let _ = writeln!(s, "    if (t + {TILE} < kend) {{");
    load(&mut s, &format!("(t + {TILE})"));
    let _ = writeln!(s, "    }}");
    let _ = writeln!(s, "    for (int j = 0; j < {TILE}; ++j) {{");
    if vector {
        let parts = |v: &str| (0..r).map(|i| format!("{v}.s{i}")).collect::<Vec<_>>().join(", ");
        let _ = writeln!(
            s,
            "      const float{r} av = *(__local const float{r}*)&As[j][lr * {r}], bv = *(__local const float{r}*)&Bs[j][lc * {r}];"
        );
        let _ = writeln!(s, "      const float a[{r}] = {{{}}}, b[{r}] = {{{}}};", parts("av"), parts("bv"));
    } else {
        let _ = writeln!(s, "      float a[{r}], b[{r}];");
        let _ = writeln!(
            s,
            "      for (int i = 0; i < {r}; ++i) {{ a[i] = As[lr + i * {TILE}][j]; b[i] = Bs[j][lc + i * {TILE}]; }}"
        );
    }
    let _ = writeln!(s, "      for (int i = 0; i < {r}; ++i) for (int q = 0; q < {r}; ++q) acc[i][q] += a[i] * b[q];");
    let _ = writeln!(s, "    }}");
    let _ = writeln!(s, "    barrier(CLK_LOCAL_MEM_FENCE);");
    let _ = writeln!(s, "  }}");
    let _ = writeln!(s, "  for (int i = 0; i < {r}; ++i) for (int q = 0; q < {r}; ++q) {{");
    if vector {
        let _ = writeln!(s, "    const int row = row0 + lr * {r} + i, col = col0 + lc * {r} + q;");
    } else {
        let _ = writeln!(s, "    const int row = row0 + lr + i * {TILE}, col = col0 + lc + q * {TILE};");
    }
    let _ = writeln!(s, "    if (row >= {} || col >= {}) continue;", g.m, g.n);
    if d.splits > 1 {
        let _ = writeln!(s, "    {}", partial_store(g, "acc[i][q]"));
    } else {
        let _ = writeln!(s, "    float v = acc[i][q];");
        epilogue(&mut s, g);
    }
    let _ = writeln!(s, "  }}");
    if d.splits > 1 {
        split_tail(&mut s, g, &d, bm, bn, items);
    }
    s.push_str("}\n");
    s
}

/// The output parameters of a product kernel for `g` divided as `d`: `C` and the epilogue's terms, after the
/// partial products `P` and the tiles' counters `N` when it is split.
pub(super) fn outputs(g: &Gemm, d: &Division) -> String {
    let c = format!("__global {}* restrict C{}", super::param_type(g.elem), terms(g));
    if d.splits > 1 {
        format!("__global float* restrict P, __global int* restrict N, {c}")
    } else {
        c
    }
}

/// The statement storing an item's partial output `value` at (`row`, `col`) of batch item `bi`, range `z`, of a
/// split product: into its range's slice of `P` (`[splits][batch][m][n]`), or, on a device that takes PTX, added
/// into `P` (`[batch][m][n]`, the program's zeroed accumulators) by `red.global.add.f32`, which L2 performs as the
/// ranges finish.
pub(super) fn partial_store(g: &Gemm, value: &str) -> String {
    if g.ptx {
        format!(
            "{{ __global float* p_ = P + ((size_t)bi * {} + row) * {} + col; asm volatile(\"red.global.add.f32 [%0], %1;\" :: \"l\"((ulong)p_), \"f\"({value})); }}",
            g.m, g.n
        )
    } else {
        format!("P[(z * {} + row) * {} + col] = {value};", g.m, g.n)
    }
}

/// The end of a split product's kernel, once each item has stored its share of the work-group's partial product
/// ([`partial_store`]): the last work-group to finish a tile (`bm` × `bn` outputs; `items` work items) takes the
/// tile's sum and applies the epilogue, so a split product is one launch, not a product and a sum.
///
/// Rules: (1) every work-group publishes its partial product (a global fence, then a barrier) before it counts
/// itself done on its tile's counter in `N` (`atomic_inc`); (2) the group that counts `splits - 1` is the last
/// one: after a fence it reads `P` as volatile (past any cache), and sets the counter back to 0, so `N` is all
/// zeros again for the next launch (it is zeroed once, when the program is made); (3) the other groups return;
/// (4) on a device that takes PTX the fences are also `membar.gl` (what CUDA's `__threadfence` is), the ranges
/// were added up in `P` as they finished, and the last group reads the tile's one sum and writes zeros back in its
/// place, so the accumulators are zero again for the next launch; elsewhere it adds up the tile's `splits` slices.
///
/// Checked on NVIDIA's OpenCL (the H200: `membar.gl`, the pattern of CUDA's threadfence reduction) and on PoCL's CPU
/// device (x86 orders stores). OpenCL C 1.2's `mem_fence` orders one work-item's accesses only, so another GPU
/// (AMD's, Intel's) needs device-scope release and acquire fences (OpenCL C 2.0's `atomic_work_item_fence`) before
/// it is trusted with this. On NVIDIA the order in which ranges are added is the order they finish: sums may differ
/// in their last bits from run to run. A launch cut short (a lost device) leaves counters set; the program is then
/// as lost as its device.
pub(super) fn split_tail(s: &mut String, g: &Gemm, d: &Division, bm: usize, bn: usize, items: usize) {
    let batch: usize = g.batch.iter().product::<usize>().max(1);
    let fence = if g.ptx {
        "mem_fence(CLK_GLOBAL_MEM_FENCE); asm volatile(\"membar.gl;\");"
    } else {
        "mem_fence(CLK_GLOBAL_MEM_FENCE);"
    };
    let _ = writeln!(s, "  __local int last_;\n  {fence}\n  barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);");
    let _ = writeln!(
        s,
        "  if (tid == 0) {{\n    volatile __global int* n_ = (volatile __global int*)N + (bi * get_num_groups(1) + get_group_id(1)) * get_num_groups(0) + get_group_id(0);"
    );
    let _ = writeln!(s, "    last_ = atomic_inc(n_) == {};\n    if (last_) atomic_xchg(n_, 0);\n  }}", d.splits - 1);
    let _ = writeln!(s, "  barrier(CLK_LOCAL_MEM_FENCE);\n  if (!last_) return;\n  {fence}");
    let _ = writeln!(s, "  for (int e_ = tid; e_ < {}; e_ += {items}) {{", bm * bn);
    let _ = writeln!(s, "    const int row = row0 + e_ / {bn}, col = col0 + e_ % {bn};");
    let _ = writeln!(s, "    if (row >= {} || col >= {}) continue;\n    float v = 0.0f;", g.m, g.n);
    if g.ptx {
        let _ = writeln!(
            s,
            "    {{ volatile __global float* q_ = (volatile __global float*)P + (bi * {} + row) * {} + col; v = *q_; *q_ = 0.0f; }}",
            g.m, g.n
        );
    } else {
        let _ = writeln!(
            s,
            "    for (int sp = 0; sp < {}; ++sp) v += ((volatile __global const float*)P)[((sp * {batch} + bi) * {} + row) * {} + col];",
            d.splits, g.m, g.n
        );
    }
    epilogue(s, g);
    let _ = writeln!(s, "  }}");
}

/// Work items sharing one output of [`gemv`].
pub const GEMV_GROUP: usize = 64;

/// Kernel `name(A, B, C[, bias])` for a product of one row (`g.m == 1`, no implicit convolution): a work-group of
/// [`GEMV_GROUP`] items per output, each summing every 64th term of K, added up through local memory; global size
/// `[n · 64, 1, Π batch]`, local `[64, 1, 1]`. A classifier's last layer at batch 1 is this product, where the
/// tiled kernel computes 16 rows to keep one.
pub fn gemv(name: &str, g: &Gemm) -> String {
    let w = GEMV_GROUP;
    let t = super::param_type(g.elem);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "__kernel void {name}(__global const {t}* restrict A, __global const {t}* restrict B, __global {t}* restrict C{}) {{",
        terms(g)
    );
    let _ = writeln!(
        s,
        "  const int tid = get_local_id(0); const size_t col = get_group_id(0), bi = get_global_id(2), row = 0;"
    );
    batch_offset(&mut s, "ao", &g.batch, &g.a.0);
    batch_offset(&mut s, "bo", &g.batch, &g.b.0);
    batch_offset(&mut s, "co", &g.batch, &g.c.0);
    let a = super::load(g.elem, "A", &format!("ao + (size_t)k * {}", g.a.2));
    let b = super::load(g.elem, "B", &format!("bo + (size_t)k * {} + col * {}", g.b.1, g.b.2));
    let _ = writeln!(s, "  __local float red[{w}];\n  float v = 0.0f;");
    let _ = writeln!(s, "  for (int k = tid; k < {}; k += {w}) v += {a} * {b};", g.k);
    let _ = writeln!(s, "  red[tid] = v; barrier(CLK_LOCAL_MEM_FENCE);");
    let _ = writeln!(
        s,
        "  for (int h = {}; h > 0; h >>= 1) {{ if (tid < h) red[tid] += red[tid + h]; barrier(CLK_LOCAL_MEM_FENCE); }}",
        w / 2
    );
    let _ = writeln!(s, "  if (tid == 0) {{\n    v = red[0];");
    epilogue(&mut s, g);
    let _ = writeln!(s, "  }}");
    s.push_str("}\n");
    s
}
