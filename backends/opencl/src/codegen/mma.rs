//! The batched product on NVIDIA's tensor cores: OpenCL C whose inner step is inline PTX, in TF32
//! (`mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32`) for `float` operands in plans at `--precision tf32`, and
//! in f16 or bf16 (`mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32`, `….bf16.bf16.f32`) for `half` or `bf16`
//! operands in plans at `fp16` or `bf16`, on devices with tensor cores ([`crate::DeviceInfo::tensor_cores`]). What NVIDIA's OpenCL compiler takes of PTX, and the fragment
//! layouts, were checked element by element on the H200 (`examples/tensor_core_probe.rs`, docs/opencl.md).
//!
//! The kernel computes what [`super::gemm`] computes for the same [`Gemm`] (operands through strides, the
//! implicit convolution, the epilogue, a split K finished by its last work-group, [`super::gemm::split_tail`]), with
//! the sums in fp32 and the operands rounded to TF32 as they are staged (`cvt.rna`: to nearest, ties away), or,
//! for `half` and `bf16` operands (read as float, so exact), staged as floats and packed in pairs into the
//! fragments' registers as they are read (`cvt.rn.f16x2.f32`, `cvt.rn.bf16x2.f32`: exact for values of the type):
//! - a work-group of 256 items (8 warps, [`mma_warps`]) computes a tile of 64 × 64 outputs, each warp 32 × 16 of
//!   it as 2 × 2 `m16n8` fragments whose 16 sums stay in registers;
//! - K advances `BK` (32, [`bk`]) at a time, 8 per `mma` in TF32 and 16 in f16 and bf16: each item loads its share of A's 64 × BK tile and of B's BK × 64
//!   (8 elements each with 256 items) into registers for the next step while the warps multiply the current one
//!   out of local memory;
//! - local memory rows are padded (A's to BK + 4 words, 36; B's to 72) so that every fragment read of a warp falls
//!   on 32 distinct banks.

use std::fmt::Write as _;

use super::gemm::{batch_offset, epilogue, load_b, outputs, partial_store, split_tail, Division, Gemm};

/// Output rows and columns of one work-group's tile.
pub const MMA_TILE: usize = 64;
/// Warps of one work-group, 2 along M and `WARPS / 2` along N: 8 (`STOWAGE_OPENCL_MMA_WARPS=4` takes 4, for
/// measuring).
pub fn mma_warps() -> usize {
    match std::env::var("STOWAGE_OPENCL_MMA_WARPS").as_deref() {
        Ok("4") => 4,
        _ => 8,
    }
}

/// Whether a product of operands stored as `elem` takes the pipelined kernel of `pipe.rs`: halves and bf16 do,
/// floats (TF32) keep this module's kernel. Measured on an H100 (`scripts/device/pipe.sh`, µs, this kernel →
/// the pipelined one): f16 products 2–3.4× faster (128 × 3,072 × 768: 29.2 → 14.1; 4096³: 3,011 → 879), ResNet-50
/// at fp16 1.60 → 1.25 ms; TF32 products 1.05–1.1× faster alone (22.5 → 20.8; 2,214 → 2,052), but whole models
/// no faster (ResNet-50 1.29 → 1.35 ms, SqueezeNet 0.50 → 0.52–0.67), where its element-by-element gathers of an
/// implicit convolution's floats, one 4-byte `cp.async` each, cost more than they overlap.
/// `STOWAGE_OPENCL_MMA_KERNEL=pipe` takes it for floats too, `=tiles` this module's kernel for every type.
pub fn pipelined(elem: &str) -> bool {
    match std::env::var("STOWAGE_OPENCL_MMA_KERNEL").as_deref() {
        Ok("pipe") => true,
        Ok("tiles") => false,
        _ => elem != "float",
    }
}

/// Work items of one work-group of `g`'s product.
pub fn mma_items(g: &Gemm) -> usize {
    if pipelined(g.elem) {
        super::pipe::PIPE_ITEMS
    } else {
        32 * mma_warps()
    }
}
/// Inner dimension staged per step: 32 (`STOWAGE_OPENCL_MMA_BK=16` or `64` takes that, for measuring). A's tile is
/// staged with rows of `BK + 4` words (16 + 4 or 32 + 4), so that a warp's fragment reads fall on 32 banks.
fn bk() -> usize {
    match std::env::var("STOWAGE_OPENCL_MMA_BK").as_deref() {
        Ok("16") => 16,
        Ok("64") => 64,
        _ => 32,
    }
}
/// For measuring only, a stage of the kernel left out (`STOWAGE_OPENCL_MMA_PROBE`): `noload` (operands made up in
/// registers, no global load in the loop), `nomma` (no `mma`: the fragments are dead, so neither are they read),
/// `nosync` (no barriers: races). Each computes wrong results; timing it against the whole kernel places the time.
fn probe() -> &'static str {
    let probe = match std::env::var("STOWAGE_OPENCL_MMA_PROBE").as_deref() {
        Ok("noload") => "noload",
        Ok("nomma") => "nomma",
        Ok("nosync") => "nosync",
        _ => "",
    };
    static WARNED: std::sync::Once = std::sync::Once::new();
    if !probe.is_empty() {
        WARNED.call_once(|| {
            eprintln!(
                "warning: STOWAGE_OPENCL_MMA_PROBE={probe}: tensor-core products leave a stage out (wrong results)"
            );
        });
    }
    probe
}

/// Buffers of local memory the operands are staged in: 1, or 2 with `STOWAGE_OPENCL_MMA_STAGES=2` (for measuring):
/// the next step's operands stored into the other while this step's are multiplied, one barrier a step.
fn stages() -> usize {
    match std::env::var("STOWAGE_OPENCL_MMA_STAGES").as_deref() {
        Ok("2") => 2,
        _ => 1,
    }
}

/// The larger tile of this module's kernel, for measuring: 128 × 128 outputs a work-group, each of its 8 warps
/// 64 × 32 (4 × 4 fragments: 24 fragment reads from local memory for 16 `mma`s a step, where 64 × 64 takes 12 for
/// 4). Measured slower on an H100 ([`super::gemm::division`] says by how much), so taken only where asked.
pub const MMA_BIG_TILE: usize = 128;

/// Whether a product on tensor cores takes [`MMA_BIG_TILE`]: `Some(true)` where `STOWAGE_OPENCL_MMA_TILE=128` asks
/// and the kernel is this module's (the pipelined one has tiles of [`MMA_TILE`]), `Some(false)` where it cannot or
/// `=64` says so, `None` (tiles of 64) otherwise.
pub fn big_tile(g: &Gemm) -> Option<bool> {
    // Its two-stage form, or steps of 64, would need 68–72 KB of local memory, past the 48 KB a kernel may declare.
    if pipelined(g.elem) || mma_warps() != 8 || stages() == 2 || bk() > 32 {
        return Some(false);
    }
    match std::env::var("STOWAGE_OPENCL_MMA_TILE").as_deref() {
        Ok("64") => Some(false),
        Ok("128") => Some(true),
        _ => None,
    }
}

/// The tile edge of a product on tensor cores divided as `d`: 16 outputs per block ([`Division::block`]: 4, or 8 for
/// [`MMA_BIG_TILE`]).
pub fn tile_of(d: &Division) -> usize {
    super::gemm::TILE * d.block
}

/// The global size of `g`'s launch divided as `d` (local size `[mma_items(g), 1, 1]`).
pub fn mma_global(g: &Gemm, d: &Division) -> Vec<usize> {
    let batch: usize = g.batch.iter().product();
    let tile = tile_of(d);
    vec![g.n.div_ceil(tile).max(1) * mma_items(g), g.m.div_ceil(tile).max(1), batch * d.splits]
}

/// What the tensor cores compute in for operands stored as `elem`: `tf32` for `float`, else `f16` or `bf16`.
pub fn word(elem: &str) -> &'static str {
    match elem {
        "half" => "f16",
        "bf16" => "bf16",
        _ => "tf32",
    }
}

/// Kernel `name(A, B, C[, bias])` (or `name(A, B, P, N, C[, bias])` for a split product) for `g` divided as `d`,
/// on tensor cores: TF32 for `float` operands, f16 or bf16 for `half` or `bf16` ones ([`word`]).
pub fn gemm_mma(name: &str, g: &Gemm, d: &Division) -> String {
    if pipelined(g.elem) {
        super::pipe::gemm_pipe(name, g, d)
    } else {
        gemm_tiles(name, g, d)
    }
}

/// [`gemm_mma`]'s kernel where the pipelined one is not taken ([`pipelined`]): the module's kernel.
fn gemm_tiles(name: &str, g: &Gemm, d: &Division) -> String {
    let ty = word(g.elem);
    let t = super::param_type(g.elem);
    let mut s = String::new();
    let out = outputs(g, d);
    let b_name = if g.im2col.is_some() { "X" } else { "B" };
    let batch: usize = g.batch.iter().product::<usize>().max(1);
    let _ = writeln!(
        s,
        "__kernel void {name}(__global const {t}* restrict A, __global const {t}* restrict {b_name}, {out}) {{"
    );
    s.push_str("  const int tid = get_local_id(0), lane = tid & 31, warp = tid >> 5, gq = lane >> 2, tq = lane & 3;\n");
    let (items, warps_n, bk) = (mma_items(g), mma_warps() / 2, bk());
    let tile = tile_of(d);
    let (a_pitch, b_pitch) = (bk + 4, tile + 8);
    // Each warp: half the tile's rows (fragments of 16) by tile / warps_n columns (fragments of 8).
    let (frags_m, frags_n) = (tile / 2 / 16, tile / warps_n / 8);
    let _ = writeln!(
        s,
        "  const int wm = (warp / {warps_n}) * {}, wn = (warp % {warps_n}) * {};",
        tile / 2,
        tile / warps_n
    );
    let _ = writeln!(
        s,
        "  const int row0 = get_group_id(1) * {tile}, col0 = get_group_id(0) * {tile}; const size_t z = get_global_id(2), bi = z % {batch};"
    );
    let _ = writeln!(s, "  const int k0 = (int)(z / {batch}) * {}, kend = min(k0 + {}, {});", d.chunk, d.chunk, g.k);
    let two = stages() == 2;
    if two {
        let _ = writeln!(
            s,
            "  __local uint Asb[2][{tile}][{a_pitch}] __attribute__((aligned(16))); __local uint Bsb[2][{bk}][{b_pitch}] __attribute__((aligned(16)));"
        );
    } else {
        let _ = writeln!(
            s,
            "  __local uint As[{tile}][{a_pitch}] __attribute__((aligned(16))); __local uint Bs[{bk}][{b_pitch}] __attribute__((aligned(16)));"
        );
    }
    batch_offset(&mut s, "ao", &g.batch, &g.a.0);
    batch_offset(&mut s, "bo", &g.batch, &g.b.0);
    batch_offset(&mut s, "co", &g.batch, &g.c.0);
    // The fragments' sums, 4 per fragment and item.
    let frags: Vec<(usize, usize)> = (0..frags_m).flat_map(|mi| (0..frags_n).map(move |ni| (mi, ni))).collect();
    let sums: Vec<String> =
        frags.iter().flat_map(|(mi, ni)| (0..4).map(move |i| format!("c{mi}{ni}_{i} = 0.0f"))).collect();
    let _ = writeln!(s, "  float {};", sums.join(", "));
    let per_item = tile * bk / items;
    let _ = writeln!(s, "  float pa[{per_item}], pb[{per_item}];");
    // Whole tiles (every tile inside the output, every step inside its range of K) load without checks.
    let inside = super::gemm::whole_tiles(g, d, tile, tile, bk);
    let probe = probe();
    let load = |s: &mut String, t: &str| {
        if probe == "noload" {
            for u in 0..per_item {
                let _ = writeln!(
                    s,
                    "    {{ const int e = tid + {}; pa[{u}] = (float)((e ^ ({t})) & 7) * 0.125f; pb[{u}] = (float)((e + ({t})) & 7) * 0.125f; }}",
                    u * items
                );
            }
            return;
        }
        for u in 0..per_item {
            let a = super::load(g.elem, "A", &format!("ao + (size_t)gr * {} + (size_t)gk * {}", g.a.1, g.a.2));
            let a = if inside { a } else { format!("(gr < {} && gk < kend) ? {a} : 0.0f", g.m) };
            let _ = writeln!(
                s,
                "    {{ const int e = tid + {}, gr = row0 + e / {bk}, gk = {t} + e % {bk}; pa[{u}] = {a}; }}",
                u * items
            );
        }
        for u in 0..per_item {
            let _ =
                writeln!(s, "    {{ const int e = tid + {}, gk = {t} + e / {tile}, gc = col0 + e % {tile};", u * items);
            load_b(s, g, &format!("pb[{u}]"), inside);
        }
    };
    load(&mut s, "k0");
    // TF32 words, or the floats' own bits (packed into pairs as the fragments are read).
    let stage = if ty == "tf32" { "tf32" } else { "as_uint" };
    let store = |s: &mut String, a: &str, b: &str| {
        for u in 0..per_item {
            let _ = writeln!(
                s,
                "    {{ const int e = tid + {}; {a}[e / {bk}][e % {bk}] = {stage}(pa[{u}]); {b}[e / {tile}][e % {tile}] = {stage}(pb[{u}]); }}",
                u * items
            );
        }
    };
    let barrier = if probe == "nosync" { "" } else { "    barrier(CLK_LOCAL_MEM_FENCE);\n" };
    if two {
        // Two stages: the next step's operands go into the other buffer after this step's products, one barrier
        // a step.
        store(&mut s, "Asb[0]", "Bsb[0]");
        s.push_str(barrier);
        let _ = writeln!(s, "  for (int t = k0, buf = 0; t < kend; t += {bk}, buf ^= 1) {{");
        let _ = writeln!(s, "    __local uint (*As)[{a_pitch}] = Asb[buf]; __local uint (*Bs)[{b_pitch}] = Bsb[buf];");
    } else {
        let _ = writeln!(s, "  for (int t = k0; t < kend; t += {bk}) {{");
        store(&mut s, "As", "Bs");
        s.push_str(barrier);
    }
    let _ = writeln!(s, "    if (t + {bk} < kend) {{");
    load(&mut s, &format!("(t + {bk})"));
    s.push_str("    }\n");
    let (step, shape) = if ty == "tf32" { (8, "m16n8k8") } else { (16, "m16n8k16") };
    for ks in (0..bk).step_by(step) {
        s.push_str("    {\n");
        for mi in 0..frags_m {
            let r = format!("wm + {} + gq", mi * 16);
            if ty == "tf32" {
                let _ = writeln!(
                    s,
                    "      const uint a{mi}0 = As[{r}][{ks} + tq], a{mi}1 = As[{r} + 8][{ks} + tq], a{mi}2 = As[{r}][{ks} + tq + 4], a{mi}3 = As[{r} + 8][{ks} + tq + 4];"
                );
            } else {
                // Registers of two halves, the lower K first: rows gq and gq + 8, K 2tq and 2tq + 8.
                let pair = |row: &str, k: usize| {
                    format!("{ty}x2(As[{row}][{} + tq * 2], As[{row}][{} + tq * 2])", ks + k, ks + k + 1)
                };
                let _ = writeln!(
                    s,
                    "      const uint a{mi}0 = {}, a{mi}1 = {}, a{mi}2 = {}, a{mi}3 = {};",
                    pair(&r, 0),
                    pair(&format!("{r} + 8"), 0),
                    pair(&r, 8),
                    pair(&format!("{r} + 8"), 8)
                );
            }
        }
        for ni in 0..frags_n {
            let c = format!("wn + {} + gq", ni * 8);
            if ty == "tf32" {
                let _ = writeln!(s, "      const uint b{ni}0 = Bs[{ks} + tq][{c}], b{ni}1 = Bs[{ks} + tq + 4][{c}];");
            } else {
                let pair = |k: usize| format!("{ty}x2(Bs[{} + tq * 2][{c}], Bs[{} + tq * 2][{c}])", ks + k, ks + k + 1);
                let _ = writeln!(s, "      const uint b{ni}0 = {}, b{ni}1 = {};", pair(0), pair(8));
            }
        }
        for (mi, ni) in frags.iter().filter(|_| probe != "nomma") {
            let c = |i: usize| format!("\"+f\"(c{mi}{ni}_{i})");
            let _ = writeln!(
                s,
                "      asm(\"mma.sync.aligned.{shape}.row.col.f32.{ty}.{ty}.f32 {{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, {{%8,%9}}, {{%0,%1,%2,%3}};\" : {}, {}, {}, {} : \"r\"(a{mi}0), \"r\"(a{mi}1), \"r\"(a{mi}2), \"r\"(a{mi}3), \"r\"(b{ni}0), \"r\"(b{ni}1));",
                c(0),
                c(1),
                c(2),
                c(3)
            );
        }
        s.push_str("    }\n");
    }
    if two {
        let _ = writeln!(s, "    if (t + {bk} < kend) {{");
        store(&mut s, "Asb[buf ^ 1]", "Bsb[buf ^ 1]");
        s.push_str("    }\n");
    }
    s.push_str(barrier);
    s.push_str("  }\n");
    finish(&mut s, g, d, &frags, items);
    s
}

/// The end of a tensor-core kernel: each fragment's four sums (`c{mi}{ni}_{i}`: rows `gq` and `gq + 8`, columns
/// `2·tq` and the next, of the warp's fragment `(mi, ni)` at `(wm, wn)`) through the epilogue into C, or into the
/// partial products of a split product, whose last work-group then finishes the tile ([`split_tail`]).
pub(super) fn finish(s: &mut String, g: &Gemm, d: &Division, frags: &[(usize, usize)], items: usize) {
    for (mi, ni) in frags {
        for i in 0..4 {
            let _ = writeln!(
                s,
                "  {{ const int row = row0 + wm + {} + gq, col = col0 + wn + {} + tq * 2;",
                mi * 16 + (i / 2) * 8,
                ni * 8 + i % 2
            );
            let _ = writeln!(s, "  if (row < {} && col < {}) {{", g.m, g.n);
            if d.splits > 1 {
                let _ = writeln!(s, "    {}", partial_store(g, &format!("c{mi}{ni}_{i}")));
            } else {
                let _ = writeln!(s, "    float v = c{mi}{ni}_{i};");
                epilogue(s, g);
            }
            s.push_str("  } }\n");
        }
    }
    if d.splits > 1 {
        split_tail(s, g, d, tile_of(d), tile_of(d), items);
    }
    s.push_str("}\n");
}

/// The helpers [`gemm_mma`]'s kernels call, written once at the top of a program that has such kernels: `tf32(x)`,
/// `x` rounded to TF32 (`cvt.rna.tf32.f32`), as the 32-bit word an `mma.sync` operand register takes; `f16x2(lo,
/// hi)` and `bf16x2(lo, hi)`, two floats' bits (as staged) packed into one register of two halves, `lo` in the
/// lower (`cvt.rn.f16x2.f32 d, a, b` puts `a` in the upper half).
pub const MMA_HELPERS: &str = "uint tf32(float x) { uint u; asm(\"cvt.rna.tf32.f32 %0, %1;\" : \"=r\"(u) : \"f\"(x)); return u; }\n\
uint f16x2(uint lo, uint hi) { uint u; asm(\"cvt.rn.f16x2.f32 %0, %1, %2;\" : \"=r\"(u) : \"f\"(as_float(hi)), \"f\"(as_float(lo))); return u; }\n\
uint bf16x2(uint lo, uint hi) { uint u; asm(\"cvt.rn.bf16x2.f32 %0, %1, %2;\" : \"=r\"(u) : \"f\"(as_float(hi)), \"f\"(as_float(lo))); return u; }\n";

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A 128 × 96 × 40 product of row-major operands stored as `elem`, with ReLU, on tensor cores.
    pub(in super::super) fn product(elem: &'static str) -> Gemm {
        Gemm {
            m: 128,
            n: 96,
            k: 40,
            batch: vec![],
            a: (vec![], 40, 1),
            b: (vec![], 96, 1),
            c: (vec![], 96, 1),
            alpha: 1.0,
            bias: None,
            residual: None,
            relu: true,
            im2col: None,
            elem,
            min_groups: 1,
            tensor_cores: true,
            chain: None,
            ptx: true,
        }
    }

    /// On tensor cores a short K over enough tiles is not split; few tiles or a long K still are, and the tiled
    /// kernel's division is as before.
    #[test]
    fn tensor_cores_split_only_a_long_k_or_few_tiles() {
        let shape = |m: usize, n: usize, k: usize| Gemm {
            m,
            n,
            k,
            a: (vec![], k, 1),
            b: (vec![], n, 1),
            c: (vec![], n, 1),
            min_groups: 264,
            ..product("float")
        };
        let splits = |g: &Gemm| super::super::division(g).splits;
        assert_eq!(splits(&shape(128, 3072, 768)), 1);
        assert_eq!(splits(&shape(64, 3136, 576)), 1);
        assert!(splits(&shape(128, 768, 768)) > 1, "24 tiles");
        assert!(splits(&shape(128, 768, 3072)) > 1, "a long K");
        assert!(splits(&Gemm { tensor_cores: false, ..shape(128, 3072, 768) }) > 1, "the tiled kernel");
    }

    /// The tile of 128 × 128 (4 × 4 fragments a warp: 16 `mma`s per step of 8) as `division` makes it when asked
    /// (`STOWAGE_OPENCL_MMA_TILE=128`, which tests do not set): its launch and kernel; products take 64 × 64
    /// otherwise, and halves (the pipelined kernel) always do.
    #[test]
    fn the_big_tile_divides_and_reads_its_fragments() {
        let shape = |elem: &'static str, m: usize, n: usize, k: usize| Gemm {
            m,
            n,
            k,
            a: (vec![], k, 1),
            b: (vec![], n, 1),
            c: (vec![], n, 1),
            min_groups: 264,
            ..product(elem)
        };
        let division = |g: &Gemm| super::super::division(g);
        let big = shape("float", 1536, 1536, 256);
        assert_eq!(tile_of(&division(&big)), MMA_TILE, "not asked for");
        // As `division` makes it when asked: a block of 8, unsplit (144 tiles).
        let d = super::super::gemm::Division { block: MMA_BIG_TILE / super::super::gemm::TILE, ..division(&big) };
        assert_eq!((tile_of(&d), d.splits), (MMA_BIG_TILE, 1));
        assert_eq!(mma_global(&big, &d), vec![12 * 256, 12, 1]);
        let src = gemm_mma("k", &big, &d);
        assert_eq!(src.matches("mma.sync").count(), 16 * bk() / 8, "{src}");
        assert!(src.contains("__local uint As[128][36]") && src.contains("Bs[32][136]"), "{src}");
        assert!(src.contains("c33_3") && !src.contains("c44_0"), "{src}");
        assert_eq!(tile_of(&division(&shape("half", 1536, 1536, 256))), MMA_TILE);
        assert_eq!(big_tile(&shape("half", 1536, 1536, 256)), Some(false), "the pipelined kernel");
        // The 64 × 64 kernel: 2 × 2 fragments a warp.
        let small = shape("float", 1024, 1024, 256);
        let src = gemm_mma("k", &small, &division(&small));
        assert_eq!(src.matches("mma.sync").count(), 4 * bk() / 8, "{src}");
    }

    /// Halves and bf16 take the pipelined kernel, floats this module's ([`pipelined`]), unless
    /// `STOWAGE_OPENCL_MMA_KERNEL` says otherwise (not set in tests).
    #[test]
    fn halves_take_the_pipelined_kernel() {
        for (elem, pipe) in [("float", false), ("half", true), ("bf16", true)] {
            let g = product(elem);
            let src = gemm_mma("k", &g, &super::super::division(&g));
            assert_eq!(src.contains("cp.async"), pipe, "{elem}");
            assert_eq!(mma_items(&g), if pipe { 128 } else { 32 * mma_warps() }, "{elem}");
        }
    }

    /// Each operand type takes its instruction, and halves are packed in pairs along K, the lower K first, as the
    /// fragment layout checked on the H200 (`examples/tensor_core_probe.rs`) has them.
    #[test]
    fn each_type_takes_its_instruction_and_fragments() {
        let g = product("float");
        let src = gemm_mma("k", &g, &super::super::division(&g));
        assert!(src.contains("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32") && src.contains("= tf32(pa[0])"));
        for (elem, ty) in [("half", "f16"), ("bf16", "bf16")] {
            let g = product(elem);
            let src = gemm_tiles("k", &g, &super::super::division(&g));
            let t = super::super::param_type(elem);
            assert!(src.contains(&format!("mma.sync.aligned.m16n8k16.row.col.f32.{ty}.{ty}.f32")), "{src}");
            assert!(src.contains(&format!("__global const {t}* restrict A")), "{src}");
            assert!(src.contains("= as_uint(pa[0])") && !src.contains("tf32("), "{src}");
            // A's registers: rows gq and gq + 8, K 2tq (+1) and 2tq + 8 (+9); B's: K 2tq and 2tq + 8.
            assert!(
                src.contains(&format!("a00 = {ty}x2(As[wm + 0 + gq][0 + tq * 2], As[wm + 0 + gq][1 + tq * 2])")),
                "{src}"
            );
            assert!(
                src.contains(&format!(
                    "a03 = {ty}x2(As[wm + 0 + gq + 8][8 + tq * 2], As[wm + 0 + gq + 8][9 + tq * 2])"
                )),
                "{src}"
            );
            assert!(
                src.contains(&format!("b01 = {ty}x2(Bs[8 + tq * 2][wn + 0 + gq], Bs[9 + tq * 2][wn + 0 + gq])")),
                "{src}"
            );
            // Two steps of 16 per 32 columns of K staged.
            assert_eq!(src.matches("m16n8k16").count(), 2 * 2 * MMA_TILE / (mma_warps() / 2) / 8, "{src}");
        }
    }
}
