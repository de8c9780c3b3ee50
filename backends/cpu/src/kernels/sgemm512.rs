//! An f32 matrix product with an AVX-512 micro-kernel, used on one thread when the CPU has AVX-512F.
//!
//! The `gemm` crate's AVX-512 kernels need nightly Rust, so on stable it runs its AVX2/FMA kernels (about 123
//! GFLOP/s on one core here, against onnxruntime's 227). This is the classic blocked scheme: B is packed in
//! panels of `NR` = 32 columns (two zmm registers) and `KC` rows, A in panels of `MR` = 12 rows scaled by the
//! product's coefficient, and a 12×32 register tile accumulates `KC` rank-1 updates with fused multiply-adds.
//! Operands are read through arbitrary strides while packing, so transposes cost nothing extra.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::{
    __m512, _mm512_add_ps, _mm512_fmadd_ps, _mm512_loadu_ps, _mm512_set1_ps, _mm512_setzero_ps, _mm512_storeu_ps,
};

use super::act::Act;
use super::cols::Cols;
use super::residual::Residual;

const MR: usize = 12;
const NR: usize = 32;
/// Columns of A (rows of B) per block: a [`PackedA`] is stored in blocks of this many columns.
pub(crate) const KC: usize = 256;
const MC: usize = 96;
const NC: usize = 2048;
/// Bytes of the right operand up to which packed weights stream in row blocks over all of K (`blocked`).
const B_IN_L2: usize = 512 << 10;

/// True when this CPU can run [`sgemm`].
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `dst[i·dst_rs + j] = (read_dst ? dst_coef·dst : 0) + alpha · Σₗ a[i·a_rs + l·a_cs] · b[l·b_rs + j·b_cs]`.
/// The caller has checked every extent (see `gemm_strided`) and that [`available`] is true.
#[allow(clippy::too_many_arguments)]
pub fn sgemm(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [f32],
    dst_rs: usize,
    read_dst: bool,
    dst_coef: f32,
    a: &[f32],
    (a_rs, a_cs): (usize, usize),
    b: &[f32],
    (b_rs, b_cs): (usize, usize),
    alpha: f32,
) {
    if b_rs == 1 && a_cs == 1 && m < MR {
        // A few rows against a B whose columns are contiguous (a dense layer's weights, transposed): dot products
        // read each column once, where packing would copy all of B.
        // Four columns at a time, `x` loaded once for the four: four streams of B in flight, five loads for four
        // multiply-adds (VGG-19's classifier, 25,088 × 4,096 at one row, 13.7 GB/s a column at a time).
        for i in 0..m {
            let x = &a[i * a_rs..i * a_rs + k];
            let mut j = 0;
            while j < n {
                let cols = (n - j).min(4);
                let mut d = [0f32; 4];
                if cols == 4 {
                    d = dot4(x, b, j * b_cs, b_cs);
                } else {
                    for (c, dc) in d.iter_mut().enumerate().take(cols) {
                        *dc = dot(x, &b[(j + c) * b_cs..(j + c) * b_cs + k]);
                    }
                }
                for (c, &dc) in d.iter().enumerate().take(cols) {
                    let o = &mut dst[i * dst_rs + j + c];
                    *o = if read_dst { dst_coef * *o } else { 0.0 } + alpha * dc;
                }
                j += cols;
            }
        }
        return;
    }
    if b_cs == 1 && m < MR {
        // A few rows against a row-major B (a dense layer's weights as stored): each destination row is a sum of
        // B's rows scaled by that row of A, streaming B once per row.
        for i in 0..m {
            let row = &mut dst[i * dst_rs..i * dst_rs + n];
            if !read_dst {
                row.fill(0.0);
            } else if dst_coef != 1.0 {
                row.iter_mut().for_each(|v| *v *= dst_coef);
            }
            for l in 0..k {
                let coef = alpha * a[i * a_rs + l * a_cs];
                axpy(coef, &b[l * b_rs..l * b_rs + n], row);
            }
        }
        return;
    }
    blocked(
        m,
        n,
        k,
        Cols::whole(dst, m, dst_rs, n),
        read_dst,
        dst_coef,
        Lhs::Strided { a, strides: (a_rs, a_cs), alpha },
        b,
        (b_rs, b_cs),
        Epilogue::default(),
    );
}

/// A left operand packed ahead of time into the kernel's panels (`MR` rows by at most `KC` columns, rows past
/// `m` zero), for a constant operand such as convolution weights: packing it on every product costs as much as
/// the product itself when the right operand has few columns (ResNet's last stage: 512 × 4608 weights, 49
/// output positions).
pub struct PackedA {
    m: usize,
    k: usize,
    /// Each panel contiguous over all of K ([`PackedA::by_panels`]), rather than each block of `KC` columns
    /// contiguous over all panels ([`PackedA::new`]).
    by_panels: bool,
    data: Vec<f32>,
}

impl PackedA {
    /// Packs `a[i·a_rs + l·a_cs]` for `i < m`, `l < k`, a block of `KC` columns at a time: the blocked product
    /// reads one block of K over many panels, in the order stored (a classifier's 8210 × 1024 weights streamed
    /// in 4.3 ms, against 7.1 ms by panels).
    ///
    /// # Panics
    /// If the strides reach past `a`.
    pub fn new(m: usize, k: usize, a: &[f32], strides: (usize, usize)) -> PackedA {
        PackedA::pack(m, k, a, strides, false)
    }

    /// [`PackedA::new`] with each panel contiguous over all of K, for kernels that run all of K on one panel
    /// (`shifted.rs`): ResNet-50's last 3×3 convolutions went from 2.9–3.5 to 1.7–1.8 ms.
    ///
    /// # Panics
    /// If the strides reach past `a`.
    pub fn by_panels(m: usize, k: usize, a: &[f32], strides: (usize, usize)) -> PackedA {
        PackedA::pack(m, k, a, strides, true)
    }

    fn pack(m: usize, k: usize, a: &[f32], (a_rs, a_cs): (usize, usize), by_panels: bool) -> PackedA {
        let panels = m.div_ceil(MR);
        let mut packed = PackedA { m, k, by_panels, data: vec![0f32; panels * MR * k] };
        for pc in (0..k).step_by(KC) {
            let kc = KC.min(k - pc);
            for q in 0..panels {
                let at = packed.offset(pc, kc, q);
                let panel = &mut packed.data[at..][..kc * MR];
                let rows = MR.min(m - q * MR);
                // Column by column, so that the panel is written in order (row by row, each write fell on another
                // line of the panel: ResNet-50's 25 M weights took 40 ms to pack that way).
                for (l, column) in panel.chunks_exact_mut(MR).enumerate() {
                    let at = q * MR * a_rs + (pc + l) * a_cs;
                    for (i, v) in column[..rows].iter_mut().enumerate() {
                        *v = a[at + i * a_rs];
                    }
                }
            }
        }
        packed
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.m
    }

    /// Columns (the product's inner dimension).
    pub fn cols(&self) -> usize {
        self.k
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.data.len() * std::mem::size_of::<f32>()
    }

    /// Where the panel of rows `q·MR ..` over columns `pc .. pc + kc` starts.
    fn offset(&self, pc: usize, kc: usize, q: usize) -> usize {
        if self.by_panels {
            q * self.k * MR + pc * MR
        } else {
            pc * self.m.div_ceil(MR) * MR + q * kc * MR
        }
    }

    /// The panel of rows `q·MR ..` over columns `pc .. pc + kc` (`pc` a multiple of `KC`).
    pub(crate) fn panel(&self, pc: usize, kc: usize, q: usize) -> &[f32] {
        &self.data[self.offset(pc, kc, q)..][..kc * MR]
    }
}

/// How many steps of K ahead the product kernels prefetch their packed weights: 64 steps of 12 floats, 3 KB, several
/// memory latencies of multiply-adds ahead. ResNet-50's last convolutions, whose 4 to 9.4 MB of weights come from
/// memory each run, ran 1.4–1.8× slower in the model than alone with their weights cached; with the prefetch the
/// model took 73 ms a run at one thread against 78–79, and 46–48 against 57–58 at two (16 and 32 steps did less,
/// 128 no better).
pub(crate) const PREFETCH_STEPS: usize = 64;

/// Rows that a band of a packed product must start at a multiple of.
pub const PANEL_ROWS: usize = MR;

/// `dst[i·dst_rs + j] = epilogue((read_dst ? dst : 0) + Σₗ a[row0 + i, l] · b[l·b_rs + j·b_cs])` for the `m` rows
/// of `a` from `row0` (a multiple of [`PANEL_ROWS`]); the epilogue's bias is indexed from row `row0` (its first
/// value is row `row0`'s). The caller has checked the extents of `dst` and `b` and that
/// [`available`] is true.
#[allow(clippy::too_many_arguments)]
pub fn sgemm_packed(
    a: &PackedA,
    row0: usize,
    m: usize,
    n: usize,
    dst: &mut [f32],
    dst_rs: usize,
    read_dst: bool,
    b: &[f32],
    (b_rs, b_cs): (usize, usize),
    epilogue: Epilogue<'_>,
) {
    check_rows(a, row0, m, &epilogue);
    if m == 0 || n == 0 {
        return;
    }
    if a.k == 0 {
        // An empty sum: the destination (when read) or the bias, then the term and the activation, as a tile's
        // epilogue.
        return empty_sum(Cols::whole(dst, m, dst_rs, n), m, n, read_dst, epilogue);
    }
    if n <= super::narrow::MAX_COLUMNS {
        // A few columns: each panel of `a` streamed once, not a 32-column tile per column.
        return super::narrow::narrow(a, row0, m, n, dst, dst_rs, read_dst, b, (b_rs, b_cs), epilogue);
    }
    let dst = Cols::whole(dst, m, dst_rs, n);
    blocked(m, n, a.k, dst, read_dst, 1.0, Lhs::Packed { a, panel0: row0 / MR }, b, (b_rs, b_cs), epilogue);
}

/// The rows `row0 .. row0 + m` of `a` a packed product takes: whole panels from `row0`, inside `a`, a bias for each.
fn check_rows(a: &PackedA, row0: usize, m: usize, epilogue: &Epilogue<'_>) {
    assert!(epilogue.bias.is_none_or(|bias| bias.len() >= m), "sgemm: a bias shorter than the {m} rows");
    assert!(
        row0.is_multiple_of(MR) && row0 + m <= a.m,
        "sgemm: rows {row0}..{} of a packed {}-row operand",
        row0 + m,
        a.m
    );
}

/// [`sgemm_packed`] into a band of columns (its width is the product's `n`), written in place by the thread that
/// owns the band (`cols.rs`). The caller has checked that [`available`] is true and the extent of `b`.
#[allow(clippy::too_many_arguments)]
pub fn sgemm_packed_cols(
    a: &PackedA,
    row0: usize,
    m: usize,
    dst: Cols<'_, f32>,
    read_dst: bool,
    b: &[f32],
    (b_rs, b_cs): (usize, usize),
    epilogue: Epilogue<'_>,
) {
    check_rows(a, row0, m, &epilogue);
    let n = dst.width();
    if m == 0 || n == 0 {
        return;
    }
    blocked(m, n, a.k, dst, read_dst, 1.0, Lhs::Packed { a, panel0: row0 / MR }, b, (b_rs, b_cs), epilogue);
}

/// What the tiles do besides the sum: a per-row bias added once (the first block of K, when the destination is
/// not read), then after the last block a residual term and an activation, while the tile is still in registers.
/// A convolution's bias, the residual addition after it and the activation after that cost no pass over the
/// output.
#[derive(Clone, Copy, Debug, Default)]
pub struct Epilogue<'a> {
    /// One value per row of the product, added to every element of the row.
    pub bias: Option<&'a [f32]>,
    /// The activation applied to the result (`act.rs`).
    pub act: Act,
    /// A term added to each element before the activation (`residual.rs`).
    pub residual: Option<Residual<'a>>,
}

/// The rows of an empty sum (K = 0): the destination (when read) or the bias, then the term and the activation,
/// as a tile's epilogue.
fn empty_sum(mut dst: Cols<'_, f32>, m: usize, n: usize, read_dst: bool, epilogue: Epilogue<'_>) {
    for i in 0..m {
        let bias = epilogue.bias.map_or(0.0, |b| b[i]);
        let row = &mut dst.row(i)[..n];
        let term = epilogue.residual.map(|r| r.slice(row.as_ptr(), n));
        for (j, v) in row.iter_mut().enumerate() {
            let v0 = if read_dst { *v } else { bias };
            *v = epilogue.act.scalar(term.map_or(v0, |t| v0 + t[j]));
        }
    }
}

/// The left operand of the blocked product.
enum Lhs<'a> {
    /// Read through strides and packed per block, scaled by `alpha`.
    Strided { a: &'a [f32], strides: (usize, usize), alpha: f32 },
    /// Packed ahead of time; the product's rows start at panel `panel0`.
    Packed { a: &'a PackedA, panel0: usize },
}

/// The blocked product over `NC`/`KC`/`MC` blocks and `MR`×`NR` tiles.
#[allow(clippy::too_many_arguments)]
fn blocked(
    m: usize,
    n: usize,
    k: usize,
    mut dst: Cols<'_, f32>,
    read_dst: bool,
    dst_coef: f32,
    lhs: Lhs<'_>,
    b: &[f32],
    (b_rs, b_cs): (usize, usize),
    epilogue: Epilogue<'_>,
) {
    assert!(dst.rows() >= m && dst.width() >= n, "sgemm: a {m}x{n} product into {}x{}", dst.rows(), dst.width());
    // The first block of K overwrites the destination unless it is read; later blocks accumulate.
    if read_dst && dst_coef != 1.0 {
        for i in 0..m {
            dst.row(i)[..n].iter_mut().for_each(|v| *v *= dst_coef);
        }
    }
    if k == 0 {
        return empty_sum(dst, m, n, read_dst, epilogue);
    }
    // Scratch sized to this product (small products are common: attention heads, dense layers).
    let kc_max = KC.min(k);
    // With unit column stride B is read in place, edge panels through masked loads: no packing pass over B.
    let direct = b_cs == 1;
    let strided = matches!(lhs, Lhs::Strided { .. });
    let mut apack = if strided { vec![0f32; MC.min(m.div_ceil(MR) * MR) * kc_max] } else { Vec::new() };
    // With packed weights larger than a right operand that fits in L2 (few columns: a classifier, a recurrent
    // layer's input weights), each block of rows runs all of K before the next, so the weights stream once, in
    // the order they are stored; otherwise each block of K is packed once and runs over every block of rows.
    let rows_outer = matches!(lhs, Lhs::Packed { .. }) && m > n && k * n * std::mem::size_of::<f32>() <= B_IN_L2;
    // A packed B holds one block of K, or, with rows outer, every block (packed once, not once per block of rows:
    // a classifier's transposed input was gathered again for each of its 86 blocks of rows).
    let blocks_held = if rows_outer { k.div_ceil(KC) } else { 1 };
    let block_len = kc_max * NC.min(n.div_ceil(NR) * NR);
    let mut bpack = if direct { Vec::new() } else { vec![0f32; blocks_held * block_len] };
    for jc in (0..n).step_by(NC) {
        let nc = NC.min(n - jc);
        let panels_n = nc.div_ceil(NR);
        let (pcs, ics) = ((0..k).step_by(KC), (0..m).step_by(MC));
        let order: Vec<(usize, usize)> = if rows_outer {
            ics.flat_map(|ic| pcs.clone().map(move |pc| (pc, ic))).collect()
        } else {
            pcs.flat_map(|pc| ics.clone().map(move |ic| (pc, ic))).collect()
        };
        // Which block of K each held block of B holds.
        let mut packed_pc = vec![None; blocks_held];
        for (pc, ic) in order {
            let kc = KC.min(k - pc);
            let accumulate = read_dst || pc > 0;
            let last = pc + kc == k;
            let tile_epilogue = |row: usize| TileEpilogue {
                bias: epilogue.bias.filter(|_| !accumulate).map(|b| b[row..].as_ptr()),
                act: if last { epilogue.act } else { Act::None },
                term: None,
            };
            let residual = epilogue.residual.filter(|_| last);
            let held = if rows_outer { pc / KC } else { 0 };
            if !direct && packed_pc[held] != Some(pc) {
                packed_pc[held] = Some(pc);
                let bblock = &mut bpack[held * block_len..(held + 1) * block_len];
                for p in 0..panels_n {
                    let panel = &mut bblock[p * kc * NR..(p + 1) * kc * NR];
                    let c0 = jc + p * NR;
                    let cols = NR.min(n - c0);
                    for (l, dst) in panel.chunks_exact_mut(NR).enumerate() {
                        let src = (pc + l) * b_rs;
                        for (j, d) in dst[..cols].iter_mut().enumerate() {
                            *d = b[src + (c0 + j) * b_cs];
                        }
                    }
                }
            }
            let mc = MC.min(m - ic);
            let panels_m = mc.div_ceil(MR);
            if let Lhs::Strided { a, strides: (a_rs, a_cs), alpha } = lhs {
                for q in 0..panels_m {
                    let panel = &mut apack[q * kc * MR..(q + 1) * kc * MR];
                    for l in 0..kc {
                        for i in 0..MR {
                            let row = ic + q * MR + i;
                            panel[l * MR + i] = if row < m { alpha * a[row * a_rs + (pc + l) * a_cs] } else { 0.0 };
                        }
                    }
                }
            }
            for p in 0..panels_n {
                let cols = NR.min(nc - p * NR);
                let (bp, ldb) = if direct {
                    let start = pc * b_rs + jc + p * NR;
                    (&b[start..start + (kc - 1) * b_rs + cols], b_rs)
                } else {
                    (&bpack[held * block_len + p * kc * NR..][..kc * NR], NR)
                };
                for q in 0..panels_m {
                    let ap = match lhs {
                        Lhs::Strided { .. } => &apack[q * kc * MR..(q + 1) * kc * MR],
                        Lhs::Packed { a, panel0 } => a.panel(pc, kc, panel0 + (ic / MR) + q),
                    };
                    let rows = MR.min(mc - q * MR);
                    let (r0, c0) = (ic + q * MR, jc + p * NR);
                    let epi = tile_epilogue(r0);
                    micro(rows, cols, kc, ap, bp, ldb, &mut dst, (r0, c0), accumulate, epi, residual);
                }
            }
        }
    }
}

/// `y += a·x`.
fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    assert_eq!(x.len(), y.len(), "sgemm: axpy lengths");
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sgemm` runs only after `available()` found AVX-512F on this CPU.
    unsafe {
        axpy_avx512(a, x, y)
    }
}

/// The plain loop, compiled with AVX-512 enabled so that it is vectorised 16 lanes wide.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn axpy_avx512(a: f32, x: &[f32], y: &mut [f32]) {
    for (o, &v) in y.iter_mut().zip(x) {
        *o += a * v;
    }
}

/// `Σ x[l]·y[l]`.
fn dot(x: &[f32], y: &[f32]) -> f32 {
    assert_eq!(x.len(), y.len(), "sgemm: dot lengths");
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sgemm` runs only after `available()` found AVX-512F; both slices hold `x.len()` floats.
    unsafe {
        dot_avx512(x.as_ptr(), y.as_ptr(), x.len())
    }
}

/// `dot(x, b[at + c·stride ..][..x.len()])` for the four columns `c`: each sum in [`dot`]'s order, so the same bits.
fn dot4(x: &[f32], b: &[f32], at: usize, stride: usize) -> [f32; 4] {
    let n = x.len();
    assert!(at + 3 * stride + n <= b.len(), "sgemm: four columns past B");
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sgemm` runs only after `available()` found AVX-512F; `x` holds `n` floats, and each column's `n`
    // floats from `at + c·stride` lie in `b` (asserted above).
    unsafe {
        let y = b.as_ptr().add(at);
        dot4_avx512(x.as_ptr(), [y, y.add(stride), y.add(2 * stride), y.add(3 * stride)], n)
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn dot4_avx512(x: *const f32, ys: [*const f32; 4], n: usize) -> [f32; 4] {
    use std::arch::x86_64::_mm512_reduce_add_ps;
    // acc[u][c]: column c's sums of lanes 16u .. 16u + 16 of each 64.
    let mut acc = [[_mm512_setzero_ps(); 4]; 4];
    let mut l = 0;
    while l + 64 <= n {
        for (u, sums) in acc.iter_mut().enumerate() {
            // SAFETY: l + 64 <= n, so lanes l + 16u .. l + 16u + 16 are inside `x` and every column.
            unsafe {
                let xv = _mm512_loadu_ps(x.add(l + 16 * u));
                for (sum, y) in sums.iter_mut().zip(&ys) {
                    *sum = _mm512_fmadd_ps(xv, _mm512_loadu_ps(y.add(l + 16 * u)), *sum);
                }
            }
        }
        l += 64;
    }
    let mut sums = [0f32; 4];
    for (c, sum) in sums.iter_mut().enumerate() {
        let a = [acc[0][c], acc[1][c], acc[2][c], acc[3][c]];
        *sum = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3])));
        for t in l..n {
            // SAFETY: t < n.
            unsafe {
                *sum += *x.add(t) * *ys[c].add(t);
            }
        }
    }
    sums
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn dot_avx512(x: *const f32, y: *const f32, n: usize) -> f32 {
    use std::arch::x86_64::_mm512_reduce_add_ps;
    let mut acc = [_mm512_setzero_ps(); 4];
    let mut l = 0;
    while l + 64 <= n {
        for (u, a) in acc.iter_mut().enumerate() {
            // SAFETY: l + 64 <= n, so lanes l + 16u .. l + 16u + 16 are inside both arrays.
            unsafe {
                *a = _mm512_fmadd_ps(_mm512_loadu_ps(x.add(l + 16 * u)), _mm512_loadu_ps(y.add(l + 16 * u)), *a);
            }
        }
        l += 64;
    }
    let mut sum = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
    while l < n {
        // SAFETY: l < n.
        unsafe {
            sum += *x.add(l) * *y.add(l);
        }
        l += 1;
    }
    sum
}

/// `c[i·ldc + j] (+)= Σₗ a[l·MR + i] · b[l·ldb + j]` for the first `rows` rows and `cols` columns of the 12×32
/// tile: added to `c` when `accumulate`, else stored over it. Columns past `cols` are neither read from `b` nor
/// written to `c` (masked), so edge tiles need no packing and no scratch tile.
#[allow(clippy::too_many_arguments)]
fn micro(
    rows: usize,
    cols: usize,
    kc: usize,
    a: &[f32],
    b: &[f32],
    ldb: usize,
    dst: &mut Cols<'_, f32>,
    at: (usize, usize),
    accumulate: bool,
    mut epilogue: TileEpilogue,
    residual: Option<Residual<'_>>,
) {
    assert!((1..=MR).contains(&rows) && (1..=NR).contains(&cols), "sgemm: tile {rows}x{cols}");
    let b_needed = if kc == 0 { 0 } else { (kc - 1) * ldb + cols };
    assert!(a.len() >= kc * MR && b.len() >= b_needed, "sgemm: tile out of bounds");
    // Checked against the band: `rows` rows of `cols` columns from `c` at stride `ldc` are the band's.
    let (c, ldc) = (dst.tile(at, rows, cols), dst.stride());
    // The tile's terms, checked against the term (`residual.rs`, rule 2).
    epilogue.term = residual.map(|r| r.tile(c, rows, cols, ldc));
    #[cfg(target_arch = "x86_64")]
    {
        let mask = if cols == NR { u32::MAX } else { (1u32 << cols) - 1 };
        let args = (kc, a.as_ptr(), b.as_ptr(), ldb, c, ldc, accumulate, mask, epilogue);
        // A tile of at most 16 columns (a product's last panel: 40 = 32 + 8 columns, 196 = 6·32 + 4) takes one
        // vector of columns: half the multiply-adds of two vectors of which one is masked off.
        macro_rules! dispatch {
            ($($r:literal)*) => {
                match rows {
                    $(
                        // SAFETY: `sgemm` runs only after `available()` found AVX-512F on this CPU; the asserts above
                        // check every offset the kernel reads, and `Cols::tile` the rows and columns it writes
                        // (masked lanes are not accessed), which only this band reaches (`cols.rs`, rule 2).
                        $r if cols > 16 => unsafe { micro_avx512::<$r>(args) },
                        // SAFETY: as above, the tile's columns in one vector.
                        $r => unsafe { narrow_avx512::<$r>(args) },
                    )*
                    _ => unreachable!("rows checked above"),
                }
            };
        }
        dispatch!(1 2 3 4 5 6 7 8 9 10 11 12)
    }
}

/// A tile's part of the [`Epilogue`]: the bias of its first row (the caller checked that `rows` values follow),
/// and the residual term of its first element (checked for the tile by [`Residual::tile`]).
#[derive(Clone, Copy)]
struct TileEpilogue {
    bias: Option<*const f32>,
    act: Act,
    term: Option<*const f32>,
}

type MicroArgs = (usize, *const f32, *const f32, usize, *mut f32, usize, bool, u32, TileEpilogue);

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn micro_avx512<const R: usize>((kc, a, b, ldb, c, ldc, accumulate, mask, epi): MicroArgs) {
    use std::arch::x86_64::{__mmask16, _mm512_mask_storeu_ps, _mm512_maskz_loadu_ps};
    let (m0, m1) = (mask as __mmask16, (mask >> 16) as __mmask16);
    let mut acc: [[__m512; 2]; R] = [[_mm512_setzero_ps(); 2]; R];
    for l in 0..kc {
        // SAFETY: the caller guarantees `a` holds kc·MR floats, `b` (kc-1)·ldb + the masked columns, and `c`
        // ·ldc + the masked columns; masked-out lanes are not accessed.
        unsafe {
            let (b0, b1) = if mask == u32::MAX {
                (_mm512_loadu_ps(b.add(l * ldb)), _mm512_loadu_ps(b.add(l * ldb + 16)))
            } else {
                (_mm512_maskz_loadu_ps(m0, b.add(l * ldb)), _mm512_maskz_loadu_ps(m1, b.add(l * ldb + 16)))
            };
            let ap = a.add(l * MR);
            // The packed weights ahead, into L1: a layer's weights come from memory once per run, and the
            // hardware's prefetch fell behind on them (rule in `PREFETCH_STEPS`).
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                ap.wrapping_add(PREFETCH_STEPS * MR).cast::<i8>(),
            );
            for (i, row) in acc.iter_mut().enumerate() {
                let ai = _mm512_set1_ps(*ap.add(i));
                row[0] = _mm512_fmadd_ps(ai, b0, row[0]);
                row[1] = _mm512_fmadd_ps(ai, b1, row[1]);
            }
        }
    }
    for (i, row) in acc.iter().enumerate() {
        // SAFETY: as above: row i of the tile spans the masked lanes of c[i·ldc .. i·ldc + 32], and a bias pointer
        // has R values after it (`sgemm_packed` checked the bias against the product's rows); a term pointer has
        // the tile's R rows of masked lanes at stride ldc after it (`Residual::tile` checked them).
        unsafe {
            let p = c.add(i * ldc);
            let (mut v0, mut v1) = (row[0], row[1]);
            if accumulate {
                v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, p), v0);
                v1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, p.wrapping_add(16)), v1);
            }
            if let Some(bias) = epi.bias {
                let bi = _mm512_set1_ps(*bias.add(i));
                v0 = _mm512_add_ps(v0, bi);
                v1 = _mm512_add_ps(v1, bi);
            }
            // The term's tile has the destination's shape and stride (`micro` checked it), lanes masked alike.
            if let Some(t) = epi.term {
                // `wrapping_add`: in an edge tile's last row the second half may begin past the term, its lanes
                // all masked off.
                v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, t.wrapping_add(i * ldc)));
                v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, t.wrapping_add(i * ldc + 16)));
            }
            v0 = epi.act.avx512(v0);
            v1 = epi.act.avx512(v1);
            if mask == u32::MAX {
                _mm512_storeu_ps(p, v0);
                _mm512_storeu_ps(p.add(16), v1);
            } else {
                _mm512_mask_storeu_ps(p, m0, v0);
                _mm512_mask_storeu_ps(p.wrapping_add(16), m1, v1);
            }
        }
    }
}

/// [`micro_avx512`] for a tile of at most 16 columns (the low half of `mask`): one vector a row.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn narrow_avx512<const R: usize>((kc, a, b, ldb, c, ldc, accumulate, mask, epi): MicroArgs) {
    use std::arch::x86_64::{__mmask16, _mm512_mask_storeu_ps, _mm512_maskz_loadu_ps};
    let m = mask as __mmask16;
    let mut acc: [__m512; R] = [_mm512_setzero_ps(); R];
    for l in 0..kc {
        // SAFETY: as in `micro_avx512`: `a` holds kc·MR floats, `b` (kc-1)·ldb + the masked columns; masked-out
        // lanes are not read.
        unsafe {
            let b0 = _mm512_maskz_loadu_ps(m, b.add(l * ldb));
            let ap = a.add(l * MR);
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                ap.wrapping_add(PREFETCH_STEPS * MR).cast::<i8>(),
            );
            for (i, v) in acc.iter_mut().enumerate() {
                *v = _mm512_fmadd_ps(_mm512_set1_ps(*ap.add(i)), b0, *v);
            }
        }
    }
    for (i, &sum) in acc.iter().enumerate() {
        // SAFETY: as in `micro_avx512`, for the first vector of each row: the masked lanes of c[i·ldc ..], a bias's
        // R values, the term's masked lanes at stride ldc.
        unsafe {
            let p = c.add(i * ldc);
            let mut v = sum;
            if accumulate {
                v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, p), v);
            }
            if let Some(bias) = epi.bias {
                v = _mm512_add_ps(v, _mm512_set1_ps(*bias.add(i)));
            }
            if let Some(t) = epi.term {
                v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, t.wrapping_add(i * ldc)));
            }
            _mm512_mask_storeu_ps(p, m, epi.act.avx512(v));
        }
    }
}

#[cfg(test)]
mod tests;
