//! OpenCL C for each kernel a program needs. Shapes are static, so every extent, stride and attribute is a literal
//! in the source: one kernel function per node, all of a model's kernels in one program (built once).
//!
//! - [`loops`]: a `stowage_cpu::jit::Loops` (the CPU backend's description of a fused elementwise chain with its
//!   broadcasting and casts, or of a relayout copy) as one work item per output element;
//! - [`gemm`]: a batched matrix product tiled for local memory (16 × 16 tiles), operands through strides (so
//!   transposed and column-major operands are read in place), with an epilogue (a bias through strides, `alpha`,
//!   `beta`, ReLU);
//! - [`im2col`], [`pool`], [`global_pool`], [`softmax`], [`layer_norm`]: one work item per output element or row.

use std::fmt::Write as _;

use stowage_cpu::jit::{Body, Chain, Elem, Inst, Loops};
use stowage_cpu::kernels::elementwise::{BinaryFn, UnaryFn};

/// The OpenCL C type of an element.
pub fn c_type(e: Elem) -> &'static str {
    match e {
        Elem::F32 => "float",
        Elem::F64 => "double",
        Elem::U8 => "uchar",
        Elem::I8 => "char",
        Elem::U16 => "ushort",
        Elem::I16 => "short",
        Elem::I32 => "int",
        Elem::I64 => "long",
        Elem::Bits(1) => "uchar",
        Elem::Bits(2) => "ushort",
        Elem::Bits(4) => "uint",
        Elem::Bits(_) => "ulong",
    }
}

/// A float literal (`1.5e0f`, `INFINITY`, `NAN`).
pub fn lit(v: f32) -> String {
    if v.is_nan() {
        "NAN".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "INFINITY".into()
        } else {
            "(-INFINITY)".into()
        }
    } else {
        format!("{v:e}f")
    }
}

/// The expression of one chain instruction over earlier values `v{k}` and inputs `x{k}`.
fn inst_expr(inst: &Inst) -> String {
    let v = |k: usize| format!("v{k}");
    match *inst {
        Inst::Input(k) => format!("x{k}"),
        Inst::Const(c) => lit(c),
        Inst::Unary(f, a) => {
            let x = v(a);
            match f {
                UnaryFn::Abs => format!("fabs({x})"),
                UnaryFn::Neg => format!("(-{x})"),
                UnaryFn::Relu => format!("({x} < 0.0f ? 0.0f : {x})"),
                UnaryFn::Sqrt => format!("sqrt({x})"),
                UnaryFn::Floor => format!("floor({x})"),
                UnaryFn::Ceil => format!("ceil({x})"),
                UnaryFn::Reciprocal => format!("(1.0f / {x})"),
                UnaryFn::Exp => format!("exp({x})"),
                UnaryFn::Log => format!("log({x})"),
                UnaryFn::Tanh => format!("tanh({x})"),
                UnaryFn::Sin => format!("sin({x})"),
                UnaryFn::Cos => format!("cos({x})"),
                UnaryFn::Erf => format!("erf({x})"),
                UnaryFn::Sigmoid => format!("(1.0f / (1.0f + exp(-{x})))"),
                UnaryFn::Softplus => format!("({x} > 0.0f ? {x} + log1p(exp(-{x})) : log1p(exp({x})))"),
                UnaryFn::LeakyRelu(a) => format!("({x} >= 0.0f ? {x} : {x} * {})", lit(a)),
                UnaryFn::HardSigmoid(a, b) => format!("clamp({} * {x} + {}, 0.0f, 1.0f)", lit(a), lit(b)),
                UnaryFn::HardSwish => format!("({x} * clamp({x} / 6.0f + 0.5f, 0.0f, 1.0f))"),
                UnaryFn::Gelu(false) => format!("(0.5f * {x} * (1.0f + erf({x} * 0.70710678f)))"),
                UnaryFn::Gelu(true) => {
                    format!("(0.5f * {x} * (1.0f + tanh(0.7978845608f * ({x} + 0.044715f * {x} * {x} * {x}))))")
                }
                UnaryFn::Sign => format!("({x} > 0.0f ? 1.0f : ({x} < 0.0f ? -1.0f : {x}))"),
                UnaryFn::Not => format!("({x} == 0.0f ? 1.0f : 0.0f)"),
            }
        }
        Inst::Binary(f, a, b) => {
            let (x, y) = (v(a), v(b));
            match f {
                BinaryFn::Add => format!("({x} + {y})"),
                BinaryFn::Sub => format!("({x} - {y})"),
                BinaryFn::Mul => format!("({x} * {y})"),
                BinaryFn::Div => format!("({x} / {y})"),
                BinaryFn::Pow => format!("pow({x}, {y})"),
                BinaryFn::Max => format!("((isnan({x}) || isnan({y})) ? NAN : fmax({x}, {y}))"),
                BinaryFn::Min => format!("((isnan({x}) || isnan({y})) ? NAN : fmin({x}, {y}))"),
                BinaryFn::PRelu => format!("({x} < 0.0f ? {x} * {y} : {x})"),
                BinaryFn::And => format!("(({x} != 0.0f && {y} != 0.0f) ? 1.0f : 0.0f)"),
                BinaryFn::Or => format!("(({x} != 0.0f || {y} != 0.0f) ? 1.0f : 0.0f)"),
                BinaryFn::Equal => format!("({x} == {y} ? 1.0f : 0.0f)"),
                BinaryFn::Greater => format!("({x} > {y} ? 1.0f : 0.0f)"),
                BinaryFn::Less => format!("({x} < {y} ? 1.0f : 0.0f)"),
            }
        }
    }
}

/// A float unary function applied to the expression `x`.
pub fn float_unary(f: UnaryFn, x: &str) -> String {
    inst_expr(&Inst::Unary(f, 0)).replace("v0", x)
}

/// The statements computing `chain` into `v0 … vN`; returns the result's name.
fn chain_body(chain: &Chain, out: &mut String) -> String {
    for (k, inst) in chain.insts.iter().enumerate() {
        let _ = writeln!(out, "  const float v{k} = {};", inst_expr(inst));
    }
    format!("v{}", chain.insts.len().saturating_sub(1))
}

/// The OpenCL C type of a datum type, for the types kernels here take (`None`: f16, bf16, strings…).
pub fn dt_type(dt: stowage_runtime::DatumType) -> Option<&'static str> {
    use stowage_runtime::DatumType as D;
    Some(match dt {
        D::Bool | D::U8 => "uchar",
        D::I8 => "char",
        D::U16 => "ushort",
        D::I16 => "short",
        D::U32 => "uint",
        D::I32 => "int",
        D::U64 => "ulong",
        D::I64 => "long",
        D::F32 => "float",
        D::F64 => "double",
        _ => return None,
    })
}

/// How [`typed`] stores a datum type: its C type, and `half` (f16, through `vload_half`/`vstore_half_rte`, which need
/// no extension) and `bf16` (the upper half of an f32's bits, in a `ushort`) read as float.
pub fn dt_storage(dt: stowage_runtime::DatumType) -> Option<&'static str> {
    match dt {
        stowage_runtime::DatumType::F16 => Some("half"),
        stowage_runtime::DatumType::BF16 => Some("bf16"),
        other => dt_type(other),
    }
}

/// An elementwise kernel over any datum types: input `k` (C type `inputs[k].0`) is read at element strides
/// `inputs[k].1` over `dims` (0 on broadcast axes) into `a{k}`, and `expr` (over `a0`, `a1`…) is stored, cast to
/// `out`. One work item per output element.
pub fn typed(name: &str, dims: &[usize], inputs: &[(&str, Vec<usize>)], out: &str, expr: &str) -> String {
    let mut s = String::new();
    let params: Vec<String> = inputs
        .iter()
        .enumerate()
        .map(|(k, (t, _))| format!("__global const {}* restrict in{k}", if *t == "bf16" { "ushort" } else { t }))
        .chain([format!("__global {}* restrict out", if out == "bf16" { "ushort" } else { out })])
        .collect();
    let _ = writeln!(s, "__kernel void {name}({}) {{", params.join(", "));
    let _ = writeln!(s, "  const size_t g = get_global_id(0); size_t r = g;");
    let mut offsets = vec!["0".to_string(); inputs.len()];
    for a in (0..dims.len()).rev() {
        let _ = writeln!(s, "  const size_t i{a} = r % {}; r /= {};", dims[a], dims[a]);
        for (k, (_, st)) in inputs.iter().enumerate() {
            if st[a] != 0 {
                offsets[k] = format!("{} + i{a} * {}", offsets[k], st[a]);
            }
        }
    }
    for (k, ((t, _), off)) in inputs.iter().zip(&offsets).enumerate() {
        let _ = match *t {
            "half" => writeln!(s, "  const float a{k} = vload_half({off}, in{k});"),
            "bf16" => writeln!(s, "  const float a{k} = as_float(((uint)in{k}[{off}]) << 16);"),
            _ => writeln!(s, "  const {t} a{k} = in{k}[{off}];"),
        };
    }
    let _ = match out {
        "half" => writeln!(s, "  vstore_half_rte((float)({expr}), g, out);"),
        // Round to nearest even; NaN stays a (quiet) NaN.
        "bf16" => writeln!(
            s,
            "  {{ const float v = (float)({expr}); const uint u = as_uint(v);\n    out[g] = isnan(v) ? (ushort)0x7FC0 : (ushort)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16); }}"
        ),
        _ => writeln!(s, "  out[g] = ({out})({expr});"),
    };
    s.push_str("}\n");
    s
}

/// A reduction of `x` (C type `t`) over the axes where `reduced` is true, one work item per output element (the kept
/// axes' positions, row-major): `init`, then `step` for each element (`acc`, `x`, `j` its index along the reduced
/// elements), then `finish` (over `acc`, `count`), cast to `out`.
#[allow(clippy::too_many_arguments)]
pub fn reduce(
    name: &str,
    shape: &[usize],
    reduced: &[bool],
    t: &str,
    out: &str,
    acc_t: &str,
    init: &str,
    step: &str,
    finish: &str,
) -> String {
    let strides = {
        let mut st = vec![1usize; shape.len()];
        for a in (0..shape.len().saturating_sub(1)).rev() {
            st[a] = st[a + 1] * shape[a + 1];
        }
        st
    };
    let kept: Vec<usize> = (0..shape.len()).filter(|&a| !reduced[a]).collect();
    let red: Vec<usize> = (0..shape.len()).filter(|&a| reduced[a]).collect();
    let count: usize = red.iter().map(|&a| shape[a]).product();
    let mut s = String::new();
    let _ = writeln!(s, "__kernel void {name}(__global const {t}* restrict X, __global {out}* restrict Y) {{");
    let _ = writeln!(s, "  const size_t g = get_global_id(0); size_t r = g; size_t base = 0;");
    for &a in kept.iter().rev() {
        let _ = writeln!(s, "  base += (r % {}) * {}; r /= {};", shape[a], strides[a], shape[a]);
    }
    let _ = writeln!(s, "  {acc_t} acc = {init}; const size_t count = {count};");
    let _ = writeln!(s, "  for (size_t j = 0; j < count; ++j) {{");
    let _ = writeln!(s, "    size_t q = j, off = base;");
    for &a in red.iter().rev() {
        let _ = writeln!(s, "    off += (q % {}) * {}; q /= {};", shape[a], strides[a], shape[a]);
    }
    let _ = writeln!(s, "    const {t} x = X[off];");
    let _ = writeln!(s, "    {step}");
    let _ = writeln!(s, "  }}");
    let _ = writeln!(s, "  Y[g] = ({out})({finish});");
    s.push_str("}\n");
    s
}

/// How [`index_map`] finds each output element's source.
#[derive(Clone, Debug)]
pub enum IndexMap {
    /// `x[begin + o·step]` per axis (steps may be negative).
    Slice {
        /// First index per axis.
        begin: Vec<i64>,
        /// Step per axis.
        step: Vec<i64>,
    },
    /// `x[o mod d]` per axis.
    Tile,
    /// `x[o − begin]` per axis, the outside filled by `mode`.
    Pad {
        /// Padding before each axis (negative crops).
        begin: Vec<i64>,
        /// `constant`, `reflect`, `edge` or `wrap`.
        mode: &'static str,
    },
    /// `x[…, indices[q…], …]` along `axis`, for indices of `rank` axes (of C type `index_type`).
    Gather {
        /// The gathered axis.
        axis: usize,
        /// Rank of the indices.
        rank: usize,
        /// C type of the indices.
        index_type: &'static str,
    },
}

/// A data movement kernel over elements of `size` bytes: output element `o` (of `out`, row-major) is read from the
/// input `x` (of `input`) where `map` says, or is `fill` (a constant Pad outside the input). Kernel
/// `name(X, [I,] [F,] Y)`: `I` the gather indices, `F` the one-element fill value of a constant Pad; global size:
/// the output's element count.
pub fn index_map(name: &str, out: &[usize], input: &[usize], size: usize, map: &IndexMap) -> String {
    let t = c_type(Elem::Bits(size));
    let st = {
        let mut st = vec![1i64; input.len()];
        for a in (0..input.len().saturating_sub(1)).rev() {
            st[a] = st[a + 1] * input[a + 1] as i64;
        }
        st
    };
    let mut params = vec![format!("__global const {t}* restrict X")];
    if let IndexMap::Gather { index_type, .. } = map {
        params.push(format!("__global const {index_type}* restrict I"));
    }
    if matches!(map, IndexMap::Pad { mode: "constant", .. }) {
        params.push(format!("__global const {t}* restrict F"));
    }
    params.push(format!("__global {t}* restrict Y"));
    let mut s = String::new();
    let _ = writeln!(s, "__kernel void {name}({}) {{", params.join(", "));
    let _ = writeln!(s, "  const size_t g = get_global_id(0); size_t r = g; long src = 0; int ok = 1;");
    for a in (0..out.len()).rev() {
        let _ = writeln!(s, "  const long o{a} = (long)(r % {}); r /= {};", out[a], out[a]);
    }
    match map {
        IndexMap::Slice { begin, step } => {
            for a in 0..input.len() {
                let _ = writeln!(s, "  src += ({} + o{a} * {}) * {};", begin[a], step[a], st[a]);
            }
        }
        IndexMap::Tile => {
            for a in 0..input.len() {
                let _ = writeln!(s, "  src += (o{a} % {}) * {};", input[a].max(1), st[a]);
            }
        }
        IndexMap::Pad { begin, mode } => {
            for a in 0..input.len() {
                let d = input[a] as i64;
                let _ = writeln!(s, "  {{ long i = o{a} - {};", begin[a]);
                match *mode {
                    "reflect" if d > 1 => {
                        let _ = writeln!(
                            s,
                            "    const long p = {}; i = i % p; if (i < 0) i += p; if (i >= {d}) i = p - i;",
                            2 * (d - 1)
                        );
                    }
                    "reflect" | "edge" => {
                        let _ = writeln!(s, "    i = i < 0 ? 0 : (i >= {d} ? {} : i);", d - 1);
                    }
                    "wrap" => {
                        let _ = writeln!(s, "    i = i % {d}; if (i < 0) i += {d};");
                    }
                    _ => {
                        let _ = writeln!(s, "    ok &= (i >= 0 && i < {d});");
                    }
                }
                let _ = writeln!(s, "    src += i * {}; }}", st[a]);
            }
        }
        IndexMap::Gather { axis, rank, .. } => {
            // Output axes: those of x before `axis`, the indices' axes, then those of x after it.
            let q_dims = &out[*axis..*axis + rank];
            let mut q = String::from("0");
            for (k, d) in q_dims.iter().enumerate() {
                q = format!("({q}) * {d} + o{}", axis + k);
            }
            let _ = writeln!(s, "  long idx = (long)I[{q}]; if (idx < 0) idx += {};", input[*axis]);
            let _ = writeln!(s, "  ok &= (idx >= 0 && idx < {});", input[*axis]);
            for (a, stride) in st.iter().enumerate() {
                let o = match a.cmp(axis) {
                    std::cmp::Ordering::Less => format!("o{a}"),
                    std::cmp::Ordering::Equal => "idx".into(),
                    std::cmp::Ordering::Greater => format!("o{}", a + rank - 1),
                };
                let _ = writeln!(s, "  src += {o} * {stride};");
            }
        }
    }
    let fill = if matches!(map, IndexMap::Pad { mode: "constant", .. }) { "F[0]" } else { "0" };
    let _ = writeln!(s, "  Y[g] = ok ? X[src] : {fill};");
    s.push_str("}\n");
    s
}

/// True when a kernel's source needs double precision.
pub fn needs_fp64(l: &Loops) -> bool {
    l.inputs.iter().chain([&l.output]).any(|o| o.elem == Elem::F64)
}

/// `l` as kernel `name(in0, …, out)`, one work item per element of `l.dims` (global size: their product), the
/// output written from element `out_base` on.
pub fn loops(name: &str, l: &Loops, out_base: usize, in_base: &[usize]) -> String {
    let mut s = String::new();
    let params: Vec<String> = l
        .inputs
        .iter()
        .enumerate()
        .map(|(k, o)| format!("__global const {}* restrict in{k}", c_type(o.elem)))
        .chain([format!("__global {}* restrict out", c_type(l.output.elem))])
        .collect();
    let _ = writeln!(s, "__kernel void {name}({}) {{", params.join(", "));
    let _ = writeln!(s, "  size_t r = get_global_id(0);");
    let ops: Vec<_> = l.inputs.iter().chain([&l.output]).collect();
    let mut offsets: Vec<String> =
        (0..ops.len())
            .map(|k| {
                if k < l.inputs.len() {
                    in_base.get(k).copied().unwrap_or(0).to_string()
                } else {
                    out_base.to_string()
                }
            })
            .collect();
    for a in (0..l.dims.len()).rev() {
        let d = l.dims[a];
        let _ = writeln!(s, "  const size_t i{a} = r % {d}; r /= {d};");
        for (k, o) in ops.iter().enumerate() {
            let st = o.strides[a] / o.elem.size();
            if st != 0 {
                offsets[k] = format!("{} + i{a} * {st}", offsets[k]);
            }
        }
    }
    let out_off = offsets.pop().unwrap_or_default();
    match &l.body {
        Body::Copy => {
            let _ = writeln!(s, "  out[{out_off}] = in0[{}];", offsets[0]);
        }
        Body::Chain(chain) => {
            for (k, off) in offsets.iter().enumerate() {
                let _ = writeln!(s, "  const float x{k} = (float)in{k}[{off}];");
            }
            let result = chain_body(chain, &mut s);
            let _ = writeln!(s, "  out[{out_off}] = {result};");
        }
    }
    s.push_str("}\n");
    s
}

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
    /// ReLU on the result.
    pub relu: bool,
    /// Work-groups the device needs to be busy (twice its compute units); larger tiles are used only while the
    /// product still makes this many.
    pub min_groups: usize,
}

/// Tile edge of [`gemm`].
pub const TILE: usize = 16;

fn batch_offset(s: &mut String, var: &str, batch: &[usize], strides: &[usize]) {
    let _ = write!(s, "  size_t {var} = 0; {{ size_t q = bi;");
    for a in (0..batch.len()).rev() {
        let _ = write!(s, " {var} += (q % {}) * {}; q /= {};", batch[a], strides[a], batch[a]);
    }
    s.push_str(" }\n");
}

/// Outputs per work item along each axis of [`gemm`]'s tile: 4 × 4 or 2 × 2 when the product still makes at least
/// `g.min_groups` work-groups that way (enough to fill the device: a batch-1 layer of ResNet's third stage is only
/// 16 groups of 64 × 64), else 1 (a work-group of 16 × 16 items covers `16·R` × `16·R` outputs).
///
/// `STOWAGE_OPENCL_GEMM_BLOCK` (1, 2 or 4) forces one size, for measuring.
pub fn gemm_block(g: &Gemm) -> usize {
    if let Some(r) = std::env::var("STOWAGE_OPENCL_GEMM_BLOCK").ok().and_then(|v| v.parse::<usize>().ok()) {
        if matches!(r, 1 | 2 | 4) {
            return r;
        }
    }
    let batch: usize = g.batch.iter().product();
    let groups = |r: usize| g.m.div_ceil(TILE * r) * g.n.div_ceil(TILE * r) * batch.max(1);
    [4, 2].into_iter().find(|&r| g.k >= TILE && groups(r) >= g.min_groups.max(1)).unwrap_or(1)
}

/// Kernel `name(A, B, C[, bias])` for `g`: work-groups of 16 × 16 items, each item computing `R` × `R` outputs
/// ([`gemm_block`]) from tiles of A and B staged in local memory 16 columns of K at a time; global size
/// `[ceil(n / 16R) · 16, ceil(m / 16R) · 16, Π batch]`, local `[16, 16, 1]`.
pub fn gemm(name: &str, g: &Gemm) -> String {
    let r = gemm_block(g);
    let (bm, bn) = (TILE * r, TILE * r);
    let mut s = String::new();
    let bias = if g.bias.is_some() { ", __global const float* restrict D" } else { "" };
    let _ = writeln!(
        s,
        "__kernel void {name}(__global const float* restrict A, __global const float* restrict B, __global float* restrict C{bias}) {{"
    );
    let _ = writeln!(s, "  const int lc = get_local_id(0), lr = get_local_id(1), tid = lr * {TILE} + lc;");
    let _ = writeln!(
        s,
        "  const int row0 = get_group_id(1) * {bm}, col0 = get_group_id(0) * {bn}; const size_t bi = get_global_id(2);"
    );
    let _ = writeln!(s, "  __local float As[{bm}][{}]; __local float Bs[{TILE}][{}];", TILE + 1, bn + 1);
    batch_offset(&mut s, "ao", &g.batch, &g.a.0);
    batch_offset(&mut s, "bo", &g.batch, &g.b.0);
    batch_offset(&mut s, "co", &g.batch, &g.c.0);
    let _ = writeln!(s, "  float acc[{r}][{r}];");
    let _ = writeln!(s, "  for (int i = 0; i < {r}; ++i) for (int j = 0; j < {r}; ++j) acc[i][j] = 0.0f;");
    let _ = writeln!(s, "  for (int t = 0; t < {}; t += {TILE}) {{", g.k);
    let _ = writeln!(s, "    for (int e = tid; e < {}; e += {}) {{", bm * TILE, TILE * TILE);
    let _ = writeln!(
        s,
        "      const int rr = e / {TILE}, kk = e % {TILE}, gr = row0 + rr, gk = t + kk;\n      As[rr][kk] = (gr < {m} && gk < {k}) ? A[ao + (size_t)gr * {ars} + (size_t)gk * {acs}] : 0.0f;\n    }}",
        m = g.m,
        k = g.k,
        ars = g.a.1,
        acs = g.a.2
    );
    let _ = writeln!(s, "    for (int e = tid; e < {}; e += {}) {{", bn * TILE, TILE * TILE);
    let _ = writeln!(
        s,
        "      const int kk = e / {bn}, cc = e % {bn}, gk = t + kk, gc = col0 + cc;\n      Bs[kk][cc] = (gk < {k} && gc < {n}) ? B[bo + (size_t)gk * {brs} + (size_t)gc * {bcs}] : 0.0f;\n    }}",
        k = g.k,
        n = g.n,
        brs = g.b.1,
        bcs = g.b.2
    );
    let _ = writeln!(s, "    barrier(CLK_LOCAL_MEM_FENCE);");
    let _ = writeln!(s, "    for (int j = 0; j < {TILE}; ++j) {{");
    let _ = writeln!(s, "      float a[{r}], b[{r}];");
    let _ = writeln!(
        s,
        "      for (int i = 0; i < {r}; ++i) {{ a[i] = As[lr + i * {TILE}][j]; b[i] = Bs[j][lc + i * {TILE}]; }}"
    );
    let _ = writeln!(s, "      for (int i = 0; i < {r}; ++i) for (int q = 0; q < {r}; ++q) acc[i][q] += a[i] * b[q];");
    let _ = writeln!(s, "    }}");
    let _ = writeln!(s, "    barrier(CLK_LOCAL_MEM_FENCE);");
    let _ = writeln!(s, "  }}");
    let _ = writeln!(s, "  for (int i = 0; i < {r}; ++i) for (int q = 0; q < {r}; ++q) {{");
    let _ = writeln!(s, "    const int row = row0 + lr + i * {TILE}, col = col0 + lc + q * {TILE};");
    let _ = writeln!(s, "    if (row >= {} || col >= {}) continue;", g.m, g.n);
    let _ = writeln!(s, "    float v = {} * acc[i][q];", lit(g.alpha));
    if let Some(((bs, brs, bcs), beta)) = &g.bias {
        batch_offset(&mut s, "dof", &g.batch, bs);
        let _ = writeln!(s, "    v += {} * D[dof + (size_t)row * {brs} + (size_t)col * {bcs}];", lit(*beta));
    }
    if g.relu {
        let _ = writeln!(s, "    v = v < 0.0f ? 0.0f : v;");
    }
    let _ = writeln!(s, "    C[co + (size_t)row * {} + (size_t)col * {}] = v;", g.c.1, g.c.2);
    let _ = writeln!(s, "  }}");
    s.push_str("}\n");
    s
}

/// Geometry of a convolution or a pool over `s` spatial axes.
#[derive(Clone, Debug)]
pub struct Window {
    /// Input spatial extents.
    pub input: Vec<usize>,
    /// Output spatial extents.
    pub output: Vec<usize>,
    /// Kernel extents.
    pub kernel: Vec<usize>,
    /// Strides.
    pub strides: Vec<usize>,
    /// Dilations.
    pub dilations: Vec<usize>,
    /// Padding at the start of each axis.
    pub pads: Vec<usize>,
}

/// Writes `idx` decomposed over `dims` (last fastest) into variables `{prefix}{a}`.
fn decompose(s: &mut String, idx: &str, dims: &[usize], prefix: &str) {
    let _ = writeln!(s, "  {{ size_t q = {idx};");
    for a in (0..dims.len()).rev() {
        let _ = writeln!(s, "    {prefix}{a} = q % {}; q /= {};", dims[a], dims[a]);
    }
    s.push_str("  }\n");
}

/// im2col for a convolution: `cols[b][(c·K + k), p]` for batch item and group `b` (`n · groups + g`), zero where the
/// tap falls in the padding. Kernel `name(X, cols)`; global size `[P, C/g · K, N · groups]`.
pub fn im2col(name: &str, w: &Window, channels: usize, groups: usize) -> String {
    let s_ = w.input.len();
    let p: usize = w.output.iter().product();
    let kk: usize = w.kernel.iter().product();
    let cg = channels / groups;
    let plane: usize = w.input.iter().product();
    let mut s = String::new();
    let _ = writeln!(s, "__kernel void {name}(__global const float* restrict X, __global float* restrict cols) {{");
    let _ = writeln!(s, "  const size_t p = get_global_id(0), row = get_global_id(1), b = get_global_id(2);");
    let _ = writeln!(s, "  const size_t c = row / {kk}, k = row % {kk};");
    let _ = writeln!(
        s,
        "  size_t {};",
        (0..s_).flat_map(|a| [format!("o{a}"), format!("t{a}")]).collect::<Vec<_>>().join(", ")
    );
    decompose(&mut s, "p", &w.output, "o");
    decompose(&mut s, "k", &w.kernel, "t");
    let _ = writeln!(s, "  long off = 0; int inside = 1;");
    for a in 0..s_ {
        let _ = writeln!(
            s,
            "  {{ long i = (long)(o{a} * {}) + (long)(t{a} * {}) - {}; inside &= (i >= 0 && i < {}); off = off * {} + i; }}",
            w.strides[a], w.dilations[a], w.pads[a], w.input[a], w.input[a]
        );
    }
    let _ = writeln!(s, "  const size_t base = (b / {groups} * {channels} + b % {groups} * {cg} + c) * {plane};");
    let _ = writeln!(s, "  cols[(b * {} + row) * {p} + p] = inside ? X[base + off] : 0.0f;", cg * kk);
    s.push_str("}\n");
    s
}

/// Pooling, one work item per output element of `[N·C, O…]`: kernel `name(X, Y)`, global size `N·C·ΠO`.
pub fn pool(name: &str, w: &Window, max: bool, count_include_pad: bool) -> String {
    let s_ = w.input.len();
    let plane_out: usize = w.output.iter().product();
    let plane_in: usize = w.input.iter().product();
    let mut s = String::new();
    let _ = writeln!(s, "__kernel void {name}(__global const float* restrict X, __global float* restrict Y) {{");
    let _ = writeln!(s, "  const size_t g = get_global_id(0), nc = g / {plane_out}, p = g % {plane_out};");
    let _ = writeln!(s, "  size_t {};", (0..s_).map(|a| format!("o{a}")).collect::<Vec<_>>().join(", "));
    decompose(&mut s, "p", &w.output, "o");
    let _ = writeln!(s, "  float acc = {}; int count = 0;", if max { "-INFINITY" } else { "0.0f" });
    for a in 0..s_ {
        let _ = writeln!(s, "  for (int t{a} = 0; t{a} < {}; ++t{a}) {{", w.kernel[a]);
        let _ = writeln!(
            s,
            "  const long i{a} = (long)(o{a} * {}) + (long)t{a} * {} - {};",
            w.strides[a], w.dilations[a], w.pads[a]
        );
    }
    let inside: Vec<String> = (0..s_).map(|a| format!("i{a} >= 0 && i{a} < {}", w.input[a])).collect();
    let mut off = String::from("0");
    for a in 0..s_ {
        off = format!("({off}) * {} + i{a}", w.input[a]);
    }
    // Taps in the explicit padding count toward the divisor with count_include_pad; taps past the padded input
    // (ceil mode) never do.
    let padded: Vec<String> =
        (0..s_).map(|a| format!("i{a} < {}", w.input[a] + w.pads.get(s_ + a).copied().unwrap_or(0))).collect();
    let _ = writeln!(s, "  if ({}) {{", if inside.is_empty() { "1".into() } else { inside.join(" && ") });
    let _ = writeln!(s, "    const float x = X[nc * {plane_in} + {off}];");
    if max {
        let _ = writeln!(s, "    acc = (x > acc || isnan(x)) ? x : acc; count++;");
    } else {
        let _ = writeln!(s, "    acc += x; count++;");
    }
    if count_include_pad && !max {
        let _ = writeln!(
            s,
            "  }} else if ({}) {{ count++; }}",
            if padded.is_empty() { "0".into() } else { padded.join(" && ") }
        );
    } else {
        s.push_str("  }\n");
    }
    for _ in 0..s_ {
        s.push_str("  }\n");
    }
    if max {
        let _ = writeln!(s, "  Y[g] = count ? acc : 0.0f;");
    } else {
        let _ = writeln!(s, "  Y[g] = count ? acc / (float)count : 0.0f;");
    }
    s.push_str("}\n");
    s
}

/// Global pooling over `plane` elements per `(n, c)`: kernel `name(X, Y)`, global size `N·C`.
pub fn global_pool(name: &str, plane: usize, max: bool) -> String {
    let init = if max { "-INFINITY" } else { "0.0f" };
    let step = if max { "acc = (x > acc || isnan(x)) ? x : acc;" } else { "acc += x;" };
    let fin = if max { "acc".to_string() } else { format!("acc / {}", lit(plane as f32)) };
    format!(
        "__kernel void {name}(__global const float* restrict X, __global float* restrict Y) {{\n  const size_t g = get_global_id(0);\n  float acc = {init};\n  for (size_t i = 0; i < {plane}; ++i) {{ const float x = X[g * {plane} + i]; {step} }}\n  Y[g] = {fin};\n}}\n"
    )
}

/// Softmax (or LogSoftmax) over `len` elements `inner` apart, for `outer · inner` rows: kernel `name(X, Y)`, global
/// size `outer · inner`.
pub fn softmax(name: &str, len: usize, inner: usize, log: bool) -> String {
    let out = if log { "X[at] - m - log(sum)" } else { "exp(X[at] - m) / sum" };
    format!(
        "__kernel void {name}(__global const float* restrict X, __global float* restrict Y) {{\n  const size_t g = get_global_id(0), o = g / {inner}, i = g % {inner};\n  const size_t base = o * {len} * {inner} + i;\n  float m = -INFINITY;\n  for (size_t j = 0; j < {len}; ++j) m = fmax(m, X[base + j * {inner}]);\n  float sum = 0.0f;\n  for (size_t j = 0; j < {len}; ++j) sum += exp(X[base + j * {inner}] - m);\n  for (size_t j = 0; j < {len}; ++j) {{ const size_t at = base + j * {inner}; Y[at] = {out}; }}\n}}\n"
    )
}

/// Local response normalisation across `channels` channels of `plane` elements: kernel `name(X, Y)`, one work item
/// per element.
pub fn lrn(name: &str, channels: usize, plane: usize, size: usize, alpha: f32, beta: f32, bias: f32) -> String {
    let (lo, hi) = ((size - 1) / 2, (size - 1).div_ceil(2));
    format!(
        "__kernel void {name}(__global const float* restrict X, __global float* restrict Y) {{\n  const size_t g = get_global_id(0), p = g % {plane}, c = g / {plane} % {channels}, n = g / ({plane} * {channels});\n  const int c0 = max((int)c - {lo}, 0), c1 = min((int)c + {hi}, {last});\n  float sum = 0.0f;\n  for (int j = c0; j <= c1; ++j) {{ const float x = X[(n * {channels} + j) * {plane} + p]; sum += x * x; }}\n  Y[g] = X[g] / pow({bias} + {scale} * sum, {beta});\n}}\n",
        last = channels as i64 - 1,
        bias = lit(bias),
        scale = lit(alpha / size as f32),
        beta = lit(beta),
    )
}

/// Layer normalisation of rows of `len`: kernel `name(X, scale, [bias,] Y, [mean,] [inv_std_dev])`, global size:
/// the number of rows; the statistics outputs (one value per row) are written when asked for.
pub fn layer_norm(name: &str, len: usize, epsilon: f32, bias: bool, mean: bool, inv: bool) -> String {
    let (param, add) = if bias { (", __global const float* restrict B", " + B[j]") } else { ("", "") };
    let stats = format!(
        "{}{}",
        if mean { ", __global float* restrict M" } else { "" },
        if inv { ", __global float* restrict V" } else { "" }
    );
    let store = format!(
        "{}{}",
        if mean { "  M[get_global_id(0)] = mean;\n" } else { "" },
        if inv { "  V[get_global_id(0)] = inv;\n" } else { "" }
    );
    format!(
        "__kernel void {name}(__global const float* restrict X, __global const float* restrict S{param}, __global float* restrict Y{stats}) {{\n  const size_t base = get_global_id(0) * {len};\n  float mean = 0.0f;\n  for (size_t j = 0; j < {len}; ++j) mean += X[base + j];\n  mean /= {lenf};\n  float var = 0.0f;\n  for (size_t j = 0; j < {len}; ++j) {{ const float d = X[base + j] - mean; var += d * d; }}\n  const float inv = 1.0f / sqrt(var / {lenf} + {eps});\n  for (size_t j = 0; j < {len}; ++j) Y[base + j] = (X[base + j] - mean) * inv * S[j]{add};\n{store}}}\n",
        lenf = lit(len as f32),
        eps = lit(epsilon)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_are_c() {
        assert_eq!(lit(1.5), "1.5e0f");
        assert_eq!(lit(f32::NEG_INFINITY), "(-INFINITY)");
        assert_eq!(lit(f32::NAN), "NAN");
    }

    #[test]
    fn a_broadcast_chain_indexes_each_operand_through_its_strides() {
        let chain = Chain { insts: vec![Inst::Input(0), Inst::Input(1), Inst::Binary(BinaryFn::Add, 0, 1)] };
        let l = Loops::elementwise(&[2, 3], &[(Elem::U8, &[2, 3]), (Elem::F32, &[3])], chain);
        let src = loops("k", &l, 0, &[]);
        assert!(src.contains("__global const uchar* restrict in0"), "{src}");
        assert!(src.contains("(float)in1[0 + i1 * 1]"), "{src}");
        assert!(src.contains("out[0 + i1 * 1 + i0 * 3] = v2;"), "{src}");
    }
}
