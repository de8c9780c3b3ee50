//! The tensor-core product with its operands copied asynchronously (`STOWAGE_OPENCL_MMA_KERNEL=pipe`): the same
//! [`Gemm`] and division as [`super::mma`]'s kernel, the same `mma.sync` instructions and epilogue, but the
//! operands reach local memory by `cp.async` (global to shared without registers, several steps of K in flight)
//! and the fragments are read by `ldmatrix`.
//!
//! Rules (each tied to the code below and checked on an NVIDIA GPU by `tests/tests/tensor_cores.rs` and
//! `examples/gemm_speed.rs`, which compare every output with the definition):
//! 1. **Tiles.** A work-group of 128 items (4 warps, 2 × 2) computes 64 × 64 outputs, each warp 32 × 32 as 2 × 4
//!    `m16n8` fragments. A step of K is 64 bytes of each row: 16 floats (two `m16n8k8`) or 32 halves (two
//!    `m16n8k16`), [`step_k`].
//! 2. **Layouts in local memory.** A is staged `[row][k]`; B `[k][col]` when its columns are contiguous (or
//!    gathered: an implicit convolution, other strides), `[col][k]` when its K is ([`BLayout`]). Rows are padded
//!    (16 bytes past 64 for `[·][k]`, 32 past 256 for floats `[k][col]`, 16 past 128 for halves) so that each
//!    fragment read of a warp falls on 32 banks once.
//! 3. **Copies** ([`Transfer`]). Where an operand's rows are contiguous and every row starts at 16 bytes (strides and
//!    batch strides multiples of 4 floats or 8 halves; buffers start at the device's base alignment, at least 64
//!    bytes), a copy moves 16 bytes (`cp.async.cg`), and reads fewer bytes, filling the rest with zeros, where the
//!    chunk passes K's range or the output's edge. Otherwise each element is copied alone, through a register
//!    loaded before the step's products and stored to local memory after them (halves no `cp.async` takes alone;
//!    floats by a 4-byte `cp.async.ca` were slower, [`element`]). Addresses outside the operand are never formed
//!    into a copy: their element is zero.
//! 4. **Pipeline.** `STAGES` buffers ([`stages`], 4 unless asked): steps 0 to `STAGES − 2` are issued before the
//!    loop; step `i` waits for its own group (`cp.async.wait_group STAGES − 2`), then a barrier makes every item's
//!    copies visible and tells that every warp is done with step `i − 1`, whose buffer step `i + STAGES − 1` is
//!    copied into next; one barrier a step. Every iteration commits a group, empty or not, so that the count the
//!    wait names stays right.
//! 5. **Fragments.** A's by `ldmatrix.x4` (one per fragment: four 8 × 8 matrices of 16-bit pairs, which for floats
//!    are four 8 × 4 blocks of 32-bit words, the TF32 layout); B's by `ldmatrix.x4` for `[col][k]` (two fragments
//!    each), `ldmatrix.x4.trans` for halves `[k][col]`, and two 32-bit reads per fragment for floats `[k][col]`.
//!    Floats are rounded to TF32 (`cvt.rna`) as they are read.
//! 6. **An implicit convolution** gathers B's elements: each item copies one column of the tile (the output
//!    position, decomposed once per launch, not per element) and every second K.

use std::fmt::Write as _;

use super::gemm::{batch_offset, outputs, Division, Gemm};
use super::mma::{word, MMA_TILE};

/// Work items of the kernel's work-group.
pub const PIPE_ITEMS: usize = 128;

/// Bytes of each staged row per step of K (rule 1).
const STEP_BYTES: usize = 64;

/// Elements of K per step for operands of `esize` bytes.
pub fn step_k(esize: usize) -> usize {
    STEP_BYTES / esize
}

/// Local memory buffers (rule 4): 4, or `STOWAGE_OPENCL_MMA_STAGES=2|3` for measuring.
pub fn stages() -> usize {
    match std::env::var("STOWAGE_OPENCL_MMA_STAGES").as_deref() {
        Ok("2") => 2,
        Ok("3") => 3,
        _ => 4,
    }
}

/// How an operand reaches local memory (rule 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transfer {
    /// 16-byte chunks of contiguous rows.
    Chunks,
    /// Element by element: `cp.async` of 4 bytes for floats, through a register for halves.
    Elements,
}

/// Where B's tile lies in local memory (rule 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BLayout {
    /// `[k][col]`.
    KCol,
    /// `[col][k]`.
    ColK,
}

fn esize(g: &Gemm) -> usize {
    if g.elem == "float" {
        4
    } else {
        2
    }
}

/// How A and B are copied, and B's layout.
pub fn plan(g: &Gemm) -> (Transfer, Transfer, BLayout) {
    let vec = 16 / esize(g);
    let aligned =
        |batch: &[usize], rows: usize| rows.is_multiple_of(vec) && batch.iter().all(|b| b.is_multiple_of(vec));
    let a = if g.a.2 == 1 && aligned(&g.a.0, g.a.1) { Transfer::Chunks } else { Transfer::Elements };
    let (b, layout) = if g.im2col.is_some() {
        (Transfer::Elements, BLayout::KCol)
    } else if g.b.2 == 1 && aligned(&g.b.0, g.b.1) {
        (Transfer::Chunks, BLayout::KCol)
    } else if g.b.1 == 1 && aligned(&g.b.0, g.b.2) {
        (Transfer::Chunks, BLayout::ColK)
    } else if g.b.1 == 1 && g.b.2 != 1 {
        (Transfer::Elements, BLayout::ColK)
    } else {
        (Transfer::Elements, BLayout::KCol)
    };
    (a, b, layout)
}

/// Row pitches in bytes: A's (and B's `[col][k]`), and B's `[k][col]` (rule 2).
fn pitches(g: &Gemm) -> (usize, usize) {
    let kcol = if esize(g) == 4 { MMA_TILE * 4 + 32 } else { MMA_TILE * 2 + 16 };
    (STEP_BYTES + 16, kcol)
}

/// Bytes of one stage of A's and of B's tile.
pub fn stage_bytes(g: &Gemm) -> (usize, usize) {
    let (rk, kcol) = pitches(g);
    let b = match plan(g).2 {
        BLayout::KCol => step_k(esize(g)) * kcol,
        BLayout::ColK => MMA_TILE * rk,
    };
    (MMA_TILE * rk, b)
}

/// For measuring only (`STOWAGE_OPENCL_MMA_PROBE`, as [`super::mma`]'s): `noload` issues no copy, `nomma` no `mma`.
fn probe() -> String {
    std::env::var("STOWAGE_OPENCL_MMA_PROBE").unwrap_or_default()
}

/// Kernel `name(A, B, C[, terms])` (or `name(A, B, P, N, C[, terms])` split) for `g` divided as `d`: the
/// pipelined tensor-core product (module docs).
pub fn gemm_pipe(name: &str, g: &Gemm, d: &Division) -> String {
    let ty = word(g.elem);
    let es = esize(g);
    let bk = step_k(es);
    let vec = 16 / es;
    let (a_copy, b_copy, layout) = plan(g);
    let (rk, kcol) = pitches(g);
    let (a_stage, b_stage) = stage_bytes(g);
    let nst = stages();
    let probe = probe();
    let t = super::param_type(g.elem);
    let b_name = if g.im2col.is_some() { "X" } else { "B" };
    let batch: usize = g.batch.iter().product::<usize>().max(1);
    let items = PIPE_ITEMS;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "__kernel void {name}(__global const {t}* restrict A, __global const {t}* restrict {b_name}, {}) {{",
        outputs(g, d)
    );
    s.push_str("  const int tid = get_local_id(0), lane = tid & 31, warp = tid >> 5, gq = lane >> 2, tq = lane & 3;\n");
    s.push_str("  const int wm = (warp >> 1) * 32, wn = (warp & 1) * 32;\n");
    let _ = writeln!(
        s,
        "  const int row0 = get_group_id(1) * {MMA_TILE}, col0 = get_group_id(0) * {MMA_TILE}; const size_t z = get_global_id(2), bi = z % {batch};"
    );
    let _ = writeln!(s, "  const int k0 = (int)(z / {batch}) * {}, kend = min(k0 + {}, {});", d.chunk, d.chunk, g.k);
    let _ = writeln!(
        s,
        "  __local uint As[{}] __attribute__((aligned(16)));\n  __local uint Bs[{}] __attribute__((aligned(16)));",
        nst * a_stage / 4,
        nst * b_stage / 4
    );
    s.push_str("  const uint sa = (uint)(size_t)As, sb = (uint)(size_t)Bs;\n");
    batch_offset(&mut s, "ao", &g.batch, &g.a.0);
    batch_offset(&mut s, "bo", &g.batch, &g.b.0);
    batch_offset(&mut s, "co", &g.batch, &g.c.0);
    let _ = writeln!(s, "  __global const uchar* const Ab = (__global const uchar*)A;");
    let _ = writeln!(s, "  __global const uchar* const Bb = (__global const uchar*)({b_name});");
    let frags: Vec<(usize, usize)> = (0..2).flat_map(|mi| (0..4).map(move |ni| (mi, ni))).collect();
    let sums: Vec<String> =
        frags.iter().flat_map(|(mi, ni)| (0..4).map(move |i| format!("c{mi}{ni}_{i} = 0.0f"))).collect();
    let _ = writeln!(s, "  float {};", sums.join(", "));

    // Per-item constants of the copies (rule 3): what does not change from step to step.
    let mut issue = String::new();
    let mut late = String::new();
    let mut regs = Vec::new();
    copy_a(&mut s, &mut issue, &mut late, &mut regs, g, a_copy, bk, vec, rk, a_stage);
    copy_b(&mut s, &mut issue, &mut late, &mut regs, g, (b_copy, layout), bk, vec, (rk, kcol), b_stage);
    if !regs.is_empty() {
        let _ = writeln!(s, "  {} {};", word_type(es), regs.join(", "));
    }
    let issue = if probe == "noload" { String::new() } else { issue };
    let late = if probe == "noload" { String::new() } else { late };
    // `issue(t, ws)`: copies for the step at K offset `t` into stage `ws` (and the registers' loads); `late`: the
    // registers stored into stage `ws` after the step's products.
    let _ = writeln!(s, "  const int steps = (kend - k0 + {}) / {bk};", bk - 1);
    let _ = writeln!(s, "  for (int p = 0; p < {}; ++p) {{", nst - 1);
    let _ = writeln!(s, "    if (p < steps) {{ const int t = k0 + p * {bk}, ws = p;\n{issue}{late}    }}");
    s.push_str("    asm volatile(\"cp.async.commit_group;\");\n  }\n");
    let _ = writeln!(s, "  for (int i = 0, rs = 0, ws = {}; i < steps; ++i) {{", nst - 1);
    let _ = writeln!(s, "    asm volatile(\"cp.async.wait_group {};\");", nst - 2);
    s.push_str("    barrier(CLK_LOCAL_MEM_FENCE);\n");
    let _ = writeln!(s, "    const int nx = i + {}, t = k0 + nx * {bk};", nst - 1);
    let _ = writeln!(s, "    if (nx < steps) {{\n{issue}    }}");
    s.push_str("    asm volatile(\"cp.async.commit_group;\");\n");
    fragments(&mut s, g, ty, layout, (rk, kcol), (a_stage, b_stage), probe == "nomma");
    if !late.is_empty() {
        let _ = writeln!(s, "    if (nx < steps) {{\n{late}    }}");
    }
    let _ = writeln!(s, "    rs = rs == {} ? 0 : rs + 1; ws = ws == {} ? 0 : ws + 1;", nst - 1, nst - 1);
    s.push_str("  }\n");
    s.push_str("  asm volatile(\"cp.async.wait_group 0;\");\n");
    super::mma::finish(&mut s, g, d, &frags, items);
    s
}

/// A 16-byte copy of `bytes` (an int expression, 0 to 16) from byte `src` of `base` to shared address `dst`.
fn chunk(dst: &str, base: &str, src: &str, bytes: &str) -> String {
    format!(
        "      {{ const int n_ = {bytes}; asm volatile(\"cp.async.cg.shared.global [%0], [%1], 16, %2;\" :: \"r\"({dst}), \"l\"((ulong)({base} + (n_ > 0 ? {src} : 0))), \"r\"(n_)); }}\n"
    )
}

/// A 4-byte copy of the float at byte `src` of `base` to shared address `dst`, or zeros where `ok` is false.
fn word_copy(dst: &str, base: &str, src: &str, ok: &str) -> String {
    format!(
        "      {{ const int ok_ = {ok}; asm volatile(\"cp.async.ca.shared.global [%0], [%1], 4, %2;\" :: \"r\"({dst}), \"l\"((ulong)({base} + (ok_ ? {src} : 0))), \"r\"(ok_ ? 4 : 0)); }}\n"
    )
}

/// A's copies: `[row][k]`, rows of `rk` bytes, stages of `stage` bytes.
#[allow(clippy::too_many_arguments)]
fn copy_a(
    pre: &mut String,
    issue: &mut String,
    late: &mut String,
    regs: &mut Vec<String>,
    g: &Gemm,
    copy: Transfer,
    bk: usize,
    vec: usize,
    rk: usize,
    stage: usize,
) {
    let es = esize(g);
    match copy {
        Transfer::Chunks => {
            let rows =
                RowsOfK { p: 'a', first: "row0", extent: g.m, stride: g.a.1, offset: "ao", local: "sa", base: "Ab" };
            rows.chunks(pre, issue, es, vec, rk, stage);
        }
        Transfer::Elements => {
            // 64 rows of `bk`: element e is (e / bk, e % bk), consecutive items along K.
            for u in 0..MMA_TILE * bk / PIPE_ITEMS {
                let e = format!("(tid + {})", u * PIPE_ITEMS);
                let (r, k) = (format!("({e} / {bk})"), format!("({e} % {bk})"));
                let ok = format!("row0 + {r} < {} && t + {k} < kend", g.m);
                let src = format!("(ao + (size_t)(row0 + {r}) * {} + (size_t)(t + {k}) * {}) * {es}", g.a.1, g.a.2);
                let off = format!("ws * {stage} + {r} * {rk} + {k} * {es}");
                element(issue, late, regs, "Ab", &format!("a{u}"), &src, &ok, ("As", "sa", &off), es);
            }
        }
    }
}

/// A tile staged `[row][k]` from rows contiguous along K (A's rows, or B's columns when its K is contiguous):
/// 64 rows from `first` (of `extent`), each `stride` elements after the last, from element `offset` of `base`,
/// into the local array at shared address `local`.
struct RowsOfK {
    p: char,
    first: &'static str,
    extent: usize,
    stride: usize,
    offset: &'static str,
    local: &'static str,
    base: &'static str,
}

impl RowsOfK {
    /// 16-byte copies (rule 3): 64 rows of 4 chunks, 2 per item; each chunk's row, where it starts and whether it
    /// is inside, once per launch.
    fn chunks(&self, pre: &mut String, issue: &mut String, es: usize, vec: usize, rk: usize, stage: usize) {
        let RowsOfK { p, first, extent, stride, offset, local, base } = self;
        for u in 0..(MMA_TILE * STEP_BYTES / 16).div_ceil(PIPE_ITEMS) {
            let _ = writeln!(
                pre,
                "  const int {p}c{u} = tid + {}, {p}r{u} = {first} + ({p}c{u} >> 2), {p}k{u} = ({p}c{u} & 3) * {vec};",
                u * PIPE_ITEMS
            );
            let _ = writeln!(
                pre,
                "  const size_t {p}off{u} = ({offset} + (size_t)min({p}r{u}, {}) * {stride} + {p}k{u}) * {es};",
                extent - 1
            );
            let _ = writeln!(pre, "  const uint {p}d{u} = {local} + ({p}c{u} >> 2) * {rk} + ({p}c{u} & 3) * 16;");
            let bytes = format!("{p}r{u} < {extent} ? clamp((kend - t - {p}k{u}) * {es}, 0, 16) : 0");
            issue.push_str(&chunk(
                &format!("{p}d{u} + ws * {stage}"),
                base,
                &format!("{p}off{u} + (size_t)t * {es}"),
                &bytes,
            ));
        }
    }
}

/// One element's copy into byte `off` of local array `arr` (shared address `sbase`): a load into register `r`
/// stored there after the step's products, or for floats with `STOWAGE_OPENCL_MMA_GATHER=async` a 4-byte
/// `cp.async` (measured on an H100: SqueezeNet at TF32 0.52–0.67 ms that way against 0.50 for the default kernel,
/// where halves through registers were faster than the default kernel).
#[allow(clippy::too_many_arguments)]
fn element(
    issue: &mut String,
    late: &mut String,
    regs: &mut Vec<String>,
    base: &str,
    r: &str,
    src: &str,
    ok: &str,
    (arr, sbase, off): (&str, &str, &str),
    es: usize,
) {
    if es == 4 && std::env::var("STOWAGE_OPENCL_MMA_GATHER").as_deref() == Ok("async") {
        issue.push_str(&word_copy(&format!("{sbase} + {off}"), base, src, ok));
        return;
    }
    let ty = word_type(es);
    regs.push(format!("r{r} = 0"));
    let _ = writeln!(issue, "      r{r} = ({ok}) ? *(__global const {ty}*)({base} + {src}) : ({ty})0;");
    let _ = writeln!(late, "      *(__local {ty}*)((__local uchar*){arr} + {off}) = r{r};");
}

/// The unsigned integer type of an element of `es` bytes, as an element copied through a register is held.
fn word_type(es: usize) -> &'static str {
    if es == 4 {
        "uint"
    } else {
        "ushort"
    }
}

/// B's copies (rule 3, 6), into `[k][col]` rows of `kcol` bytes or `[col][k]` rows of `rk`.
#[allow(clippy::too_many_arguments)]
fn copy_b(
    pre: &mut String,
    issue: &mut String,
    late: &mut String,
    regs: &mut Vec<String>,
    g: &Gemm,
    (copy, layout): (Transfer, BLayout),
    bk: usize,
    vec: usize,
    (rk, kcol): (usize, usize),
    stage: usize,
) {
    let es = esize(g);
    match (copy, layout) {
        (Transfer::Chunks, BLayout::KCol) => {
            // `bk` rows of 64 columns: 16-byte chunks, `per` a row.
            let per = MMA_TILE * es / 16;
            for u in 0..(bk * per).div_ceil(PIPE_ITEMS) {
                let _ = writeln!(
                    pre,
                    "  const int bc{u} = tid + {}, bkr{u} = bc{u} / {per}, bn{u} = col0 + (bc{u} % {per}) * {vec};",
                    u * PIPE_ITEMS
                );
                let _ = writeln!(pre, "  const size_t boff{u} = (bo + (size_t)bkr{u} * {} + bn{u}) * {es};", g.b.1);
                let _ = writeln!(pre, "  const uint bd{u} = sb + bkr{u} * {kcol} + (bc{u} % {per}) * 16;");
                let bytes = format!("t + bkr{u} < kend ? clamp(({} - bn{u}) * {es}, 0, 16) : 0", g.n);
                issue.push_str(&chunk(
                    &format!("bd{u} + ws * {stage}"),
                    "Bb",
                    &format!("boff{u} + (size_t)t * {}", g.b.1 * es),
                    &bytes,
                ));
            }
        }
        (Transfer::Chunks, BLayout::ColK) => {
            let rows =
                RowsOfK { p: 'b', first: "col0", extent: g.n, stride: g.b.2, offset: "bo", local: "sb", base: "Bb" };
            rows.chunks(pre, issue, es, vec, rk, stage);
        }
        (Transfer::Elements, BLayout::ColK) => {
            for u in 0..MMA_TILE * bk / PIPE_ITEMS {
                let e = format!("(tid + {})", u * PIPE_ITEMS);
                let (n, k) = (format!("({e} / {bk})"), format!("({e} % {bk})"));
                let ok = format!("col0 + {n} < {} && t + {k} < kend", g.n);
                let src = format!("(bo + (size_t)(t + {k}) * {} + (size_t)(col0 + {n}) * {}) * {es}", g.b.1, g.b.2);
                let off = format!("ws * {stage} + {n} * {rk} + {k} * {es}");
                element(issue, late, regs, "Bb", &format!("b{u}"), &src, &ok, ("Bs", "sb", &off), es);
            }
        }
        (Transfer::Elements, BLayout::KCol) => {
            // Each item one column (tid & 63) and every second K from tid >> 6.
            let _ = writeln!(pre, "  const int bcol = col0 + (tid & 63), bcol_ok = bcol < {};", g.n);
            let gather = g.im2col.as_ref().map(|(w, channels, groups)| gather_setup(pre, g, w, *channels, *groups));
            for u in 0..bk / 2 {
                let k = format!("((tid >> 6) + {})", 2 * u);
                let off = format!("ws * {stage} + {k} * {kcol} + (tid & 63) * {es}");
                let (src, ok) = match &gather {
                    None => (
                        format!("(bo + (size_t)(t + {k}) * {} + (size_t)bcol * {}) * {es}", g.b.1, g.b.2),
                        format!("bcol_ok && t + {k} < kend"),
                    ),
                    Some(at) => {
                        let _ = writeln!(issue, "      {{ const int gk = t + {k};");
                        issue.push_str(at);
                        ("goff * ".to_string() + &es.to_string(), "bcol_ok && gk < kend && inside".to_string())
                    }
                };
                element(issue, late, regs, "Bb", &format!("b{u}"), &src, &ok, ("Bs", "sb", &off), es);
                if gather.is_some() {
                    issue.push_str("      }\n");
                }
            }
        }
    }
}

/// The per-launch part of an implicit convolution's gather (the item's output position, rule 6), written into
/// `pre`; returns the per-element statements that set `goff` (the element's index in `X`) and `inside` from `gk`.
fn gather_setup(pre: &mut String, g: &Gemm, w: &super::Window, channels: usize, groups: usize) -> String {
    let axes = w.input.len();
    let kk: usize = w.kernel.iter().product();
    let cg = channels / groups;
    let plane: usize = w.input.iter().product();
    let starts: Vec<String> = (0..axes).map(|a| format!("gi{a}")).collect();
    let _ = writeln!(pre, "  int {};", starts.join(", "));
    let _ = writeln!(pre, "  {{ int q = min(bcol, {}), o;", g.n - 1);
    for a in (0..axes).rev() {
        let _ = writeln!(
            pre,
            "    o = q % {}; q /= {}; gi{a} = o * {} - {};",
            w.output[a], w.output[a], w.strides[a], w.pads[a]
        );
    }
    pre.push_str("  }\n");
    let _ = writeln!(
        pre,
        "  const size_t gbase = ((size_t)(bi / {groups}) * {channels} + (bi % {groups}) * {cg}) * {plane};"
    );
    let mut at = String::new();
    let _ = writeln!(
        at,
        "      const int c_ = gk / {kk}; int q_ = gk % {kk}, inside = 1; size_t goff = gbase + (size_t)c_ * {plane};"
    );
    for a in (0..axes).rev() {
        let stride: usize = w.input[a + 1..].iter().product();
        let _ = writeln!(
            at,
            "      {{ const int i_ = gi{a} + (q_ % {}) * {}; q_ /= {}; inside &= i_ >= 0 && i_ < {}; goff += (size_t)i_ * {stride}; }}",
            w.kernel[a], w.dilations[a], w.kernel[a], w.input[a]
        );
    }
    at
}

/// The fragment reads and `mma`s of one step (rule 5), from stage `rs`.
fn fragments(
    s: &mut String,
    g: &Gemm,
    ty: &str,
    layout: BLayout,
    (rk, kcol): (usize, usize),
    (a_stage, b_stage): (usize, usize),
    nomma: bool,
) {
    let es = esize(g);
    let (step, shape) = if ty == "tf32" { (8, "m16n8k8") } else { (16, "m16n8k16") };
    let ldm = |s: &mut String, var: &str, addr: &str, trans: bool| {
        let tr = if trans { ".trans" } else { "" };
        let _ = writeln!(
            s,
            "      uint {var}0, {var}1, {var}2, {var}3; asm volatile(\"ldmatrix.sync.aligned.m8n8.x4{tr}.shared.b16 {{%0,%1,%2,%3}}, [%4];\" : \"=r\"({var}0), \"=r\"({var}1), \"=r\"({var}2), \"=r\"({var}3) : \"r\"({addr}));"
        );
    };
    let round = |s: &mut String, var: &str| {
        if ty == "tf32" {
            let _ = writeln!(
                s,
                "      {var}0 = tf32(as_float({var}0)); {var}1 = tf32(as_float({var}1)); {var}2 = tf32(as_float({var}2)); {var}3 = tf32(as_float({var}3));"
            );
        }
    };
    let _ = writeln!(s, "    const uint ra = sa + rs * {a_stage}, rb = sb + rs * {b_stage};");
    for ks in 0..STEP_BYTES / (step * es) {
        s.push_str("    {\n");
        for mi in 0..2 {
            let addr = format!("ra + (wm + {} + (lane & 15)) * {rk} + {} + (lane >> 4) * 16", mi * 16, ks * 32);
            ldm(s, &format!("a{mi}"), &addr, false);
            round(s, &format!("a{mi}"));
        }
        // b{ni}_0, b{ni}_1 of each fragment of 8 columns.
        for np in 0..2 {
            let v = format!("bp{np}");
            match (layout, ty) {
                (BLayout::ColK, _) => {
                    let addr = format!(
                        "rb + (wn + {} + (lane & 7) + ((lane >> 4) << 3)) * {rk} + {} + ((lane >> 3) & 1) * 16",
                        np * 16,
                        ks * 32
                    );
                    ldm(s, &v, &addr, false);
                    round(s, &v);
                }
                (BLayout::KCol, "tf32") => {
                    let w = kcol / 4;
                    let _ = writeln!(s, "      uint {v}0, {v}1, {v}2, {v}3;");
                    for (h, r) in [(0, "0"), (1, "2")] {
                        let col = format!("wn + {} + gq", np * 16 + h * 8);
                        let _ = writeln!(
                            s,
                            "      {{ __local const uint* q_ = Bs + rs * {} + ({} + tq) * {w} + {col}; {v}{r} = tf32(as_float(q_[0])); {v}{} = tf32(as_float(q_[{}])); }}",
                            b_stage / 4,
                            ks * 8,
                            if r == "0" { "1" } else { "3" },
                            4 * w
                        );
                    }
                }
                (BLayout::KCol, _) => {
                    let addr = format!(
                        "rb + ({} + (lane & 7) + ((lane >> 3) & 1) * 8) * {kcol} + (wn + {} + (lane >> 4) * 8) * 2",
                        ks * 16,
                        np * 16
                    );
                    ldm(s, &v, &addr, true);
                }
            }
        }
        if !nomma {
            for mi in 0..2 {
                for ni in 0..4 {
                    let (p, h) = (ni / 2, (ni % 2) * 2);
                    let c = |i: usize| format!("\"+f\"(c{mi}{ni}_{i})");
                    let _ = writeln!(
                        s,
                        "      asm(\"mma.sync.aligned.{shape}.row.col.f32.{ty}.{ty}.f32 {{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, {{%8,%9}}, {{%0,%1,%2,%3}};\" : {}, {}, {}, {} : \"r\"(a{mi}0), \"r\"(a{mi}1), \"r\"(a{mi}2), \"r\"(a{mi}3), \"r\"(bp{p}{h}), \"r\"(bp{p}{}));",
                        c(0),
                        c(1),
                        c(2),
                        c(3),
                        h + 1
                    );
                }
            }
        }
        s.push_str("    }\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn product(elem: &'static str, m: usize, n: usize, k: usize) -> Gemm {
        let (a, b, c) = ((vec![], k, 1), (vec![], n, 1), (vec![], n, 1));
        Gemm { m, n, k, a, b, c, ..super::super::mma::tests::product(elem) }
    }

    fn conv(elem: &'static str) -> Gemm {
        let w = super::super::Window {
            input: vec![8, 8],
            output: vec![8, 8],
            kernel: vec![3, 3],
            strides: vec![1, 1],
            dilations: vec![1, 1],
            pads: vec![1, 1],
        };
        Gemm {
            im2col: Some((w, 16, 1)),
            batch: vec![1, 1],
            a: (vec![0, 0], 144, 1),
            b: (vec![0, 0], 64, 1),
            c: (vec![0, 0], 64, 1),
            ..product(elem, 64, 64, 144)
        }
    }

    /// Rule 3: rows that start at 16 bytes are copied in chunks; others, gathered or strided operands element by
    /// element; B whose K is contiguous is staged `[col][k]`.
    #[test]
    fn each_operand_takes_the_widest_copy_its_strides_allow() {
        use BLayout::*;
        use Transfer::*;
        assert_eq!(plan(&product("float", 128, 96, 40)), (Chunks, Chunks, KCol));
        // Halves: 40 is five 16-byte chunks, 36 is not a whole number of them.
        assert_eq!(plan(&product("half", 128, 96, 40)), (Chunks, Chunks, KCol));
        let odd = Gemm { a: (vec![], 36, 1), b: (vec![], 49, 1), ..product("half", 128, 49, 36) };
        assert_eq!(plan(&odd), (Elements, Elements, KCol));
        // B transposed (K contiguous): `[col][k]`, chunks where its columns start at 16 bytes.
        let t = Gemm { b: (vec![], 1, 40), ..product("float", 128, 96, 40) };
        assert_eq!(plan(&t), (Chunks, Chunks, ColK));
        let t = Gemm { b: (vec![], 1, 42), ..product("float", 128, 96, 42) };
        assert_eq!(plan(&t).1, Elements);
        assert_eq!(plan(&t).2, ColK);
        // A batch stride off 16 bytes rules chunks out.
        let b = Gemm { batch: vec![2], a: (vec![128 * 40 + 2], 40, 1), ..product("float", 128, 96, 40) };
        assert_eq!(plan(&b).0, Elements);
        assert_eq!(plan(&conv("half")), (Chunks, Elements, KCol));
    }

    /// Rules 1 and 4: every stage count, type and layout fits the 48 KiB of local memory a work-group may take.
    #[test]
    fn stages_fit_local_memory() {
        for g in [
            product("float", 128, 96, 40),
            product("half", 128, 96, 40),
            Gemm { b: (vec![], 1, 40), ..product("float", 128, 96, 40) },
            Gemm { b: (vec![], 1, 40), ..product("bf16", 128, 96, 40) },
            conv("float"),
        ] {
            let (a, b) = stage_bytes(&g);
            assert!(4 * (a + b) <= 48 * 1024, "{g:?}: {a} + {b}");
            // 16-byte rows and stages, as `ldmatrix` and `cp.async.cg` need.
            let (rk, kcol) = pitches(&g);
            assert!([a, b, rk, kcol].iter().all(|v| v.is_multiple_of(16)));
        }
    }

    /// Rule 5: each layout reads its fragments as the PTX ISA lays them out (checked on the GPU by
    /// `tests/tests/tensor_cores.rs`): halves `[k][col]` through `ldmatrix.trans`, floats there by two 32-bit reads
    /// rounded to TF32, `[col][k]` through `ldmatrix`; each step of 64 bytes is two `mma` steps of 2 × 4 fragments.
    #[test]
    fn each_layout_reads_its_fragments() {
        let d = |g: &Gemm| super::super::division(g);
        let f = product("float", 128, 96, 40);
        let src = gemm_pipe("k", &f, &d(&f));
        assert!(src.contains("m16n8k8.row.col.f32.tf32.tf32.f32") && src.contains("tf32(as_float(q_[0]))"));
        assert!(!src.contains(".trans") && src.contains("cp.async.cg.shared.global"), "{src}");
        assert_eq!(src.matches("asm(\"mma.sync").count(), 2 * 8);
        let h = product("half", 128, 96, 40);
        let src = gemm_pipe("k", &h, &d(&h));
        assert!(src.contains("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16") && !src.contains("tf32("), "{src}");
        assert_eq!(src.matches("asm(\"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32").count(), 2 * 8);
        let t = Gemm { b: (vec![], 1, 40), ..product("bf16", 128, 96, 40) };
        let src = gemm_pipe("k", &t, &d(&t));
        assert!(!src.contains(".trans") && src.contains("f32.bf16.bf16.f32"), "{src}");
        // Four stages: three issued before the loop, a wait for all but the two latest groups.
        assert!(src.contains("p < 3") && src.contains("cp.async.wait_group 2;"), "{src}");
    }

    /// Rule 6: an implicit convolution decomposes its output position once per launch, and each element's tap
    /// from its K; its elements go through registers stored after the products (rule 3).
    #[test]
    fn an_implicit_convolution_gathers_each_element() {
        let g = conv("float");
        let src = gemm_pipe("k", &g, &super::super::division(&g));
        assert_eq!(src.matches("o = q % 8").count(), 2, "{src}");
        assert!(src.contains("uint rb0 = 0") && src.contains("= rb7;") && !src.contains(", 4, %2"), "{src}");
        let g = conv("half");
        let src = gemm_pipe("k", &g, &super::super::division(&g));
        assert!(src.contains("ushort rb0 = 0") && src.contains("= rb15;") && !src.contains(", 4, %2"), "{src}");
    }
}
