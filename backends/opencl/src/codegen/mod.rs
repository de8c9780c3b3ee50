//! OpenCL C for each kernel a program needs. Shapes are static, so every extent, stride and attribute is a literal
//! in the source: one kernel function per node, all of a model's kernels in one program (built once).
//!
//! - [`loops`]: a `stowage_kir::Loops` (the kernel-level IR's description of a fused elementwise chain with its
//!   broadcasting and casts, or of a relayout copy) as one work item per output element;
//! - [`gemm`]: a batched matrix product tiled for local memory (work-groups of 16 × 16 items, each computing a
//!   block of outputs), operands through strides (so transposed and column-major operands are read in place), with
//!   an epilogue (a bias through strides, `alpha`, `beta`, ReLU); [`division`] picks the block and how K is split,
//!   a split product's last work-group adds up its ranges (`gemm::split_tail`), [`gemv`] takes products of one row on GPUs; `mma.rs`: the
//!   same product on NVIDIA's tensor cores in TF32 (inline PTX), for plans at `--precision tf32`;
//! - [`im2col`], [`pool`], [`global_pool`] (`window.rs`), [`lrn`], [`layer_norm`], [`reduce`] (`rows.rs`): one work
//!   item per output element or row; [`softmax`]: a work-group per long row;
//! - [`typed`]: elementwise nodes of any datum type; [`index_map`] (`index.rs`): Slice, Tile, Pad, Gather.

mod gemm;
mod index;
mod mma;
pub(crate) mod offsets;
mod pipe;
mod resize;
mod rows;
mod window;

use std::fmt::Write as _;

use stowage_kir::{BinaryFn, Body, Chain, Elem, Inst, Loops, UnaryFn};

pub use gemm::{describe, division, gemm, gemv, Division, Epilogue, Gemm, Strides, GEMV_GROUP, TILE};
pub use index::{index_map, IndexMap};
pub use mma::{MMA_HELPERS, MMA_TILE};
pub use resize::resize_axis;
pub use rows::{batch_norm, layer_norm, layer_norm_grouped, lrn, reduce, softmax, softmax_grouped, ROW_GROUP};
pub use window::{average_pool, global_pool, im2col, max_pool, Window};

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
        Elem::F16 => "half",
        Elem::BF16 => "ushort",
    }
}

/// How an element is stored, as [`load`] and [`store`] take it: `half` and `bf16` for the half-width floats, else
/// its C type.
pub fn elem_storage(e: Elem) -> &'static str {
    match e {
        Elem::BF16 => "bf16",
        other => c_type(other),
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
                // rint rounds in the default mode: to nearest, halves to even.
                UnaryFn::Round => format!("rint({x})"),
                UnaryFn::Acos => format!("acos({x})"),
                UnaryFn::Asin => format!("asin({x})"),
                UnaryFn::Atan => format!("atan({x})"),
                UnaryFn::Acosh => format!("acosh({x})"),
                UnaryFn::Asinh => format!("asinh({x})"),
                UnaryFn::Atanh => format!("atanh({x})"),
                UnaryFn::Sinh => format!("sinh({x})"),
                UnaryFn::Cosh => format!("cosh({x})"),

                // Never in a float chain (`fusable_unary`); integer kernels have their own expression.
                UnaryFn::BitNot => "NAN".into(),
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
                BinaryFn::Fmod => format!("fmod({x}, {y})"),
                // Never in a float chain (`fusable_binary`; ONNX takes Mod of floats only with fmod=1); integer
                // kernels have their own expressions.
                BinaryFn::Mod
                | BinaryFn::ShiftLeft
                | BinaryFn::ShiftRight
                | BinaryFn::BitAnd
                | BinaryFn::BitOr
                | BinaryFn::BitXor => "NAN".into(),
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

/// The C type a buffer of storage `t` ([`dt_storage`]) is declared with.
pub fn param_type(t: &str) -> &str {
    if t == "bf16" {
        "ushort"
    } else {
        t
    }
}

/// An expression reading element `idx` of buffer `ptr` of storage `t`: `half` and `bf16` read as float.
pub fn load(t: &str, ptr: &str, idx: &str) -> String {
    match t {
        "half" => format!("vload_half({idx}, {ptr})"),
        "bf16" => format!("as_float(((uint){ptr}[{idx}]) << 16)"),
        _ => format!("{ptr}[{idx}]"),
    }
}

/// A statement storing `v` (a float for `half` and `bf16`) to element `idx` of buffer `ptr` of storage `t`.
pub fn store(t: &str, ptr: &str, idx: &str, v: &str) -> String {
    match t {
        "half" => format!("vstore_half_rte((float)({v}), {idx}, {ptr});"),
        // Round to nearest even; NaN stays a (quiet) NaN.
        "bf16" => format!(
            "{{ const float v_ = (float)({v}); const uint u_ = as_uint(v_);\n    {ptr}[{idx}] = isnan(v_) ? (ushort)0x7FC0 : (ushort)((u_ + 0x7FFFu + ((u_ >> 16) & 1u)) >> 16); }}"
        ),
        _ => format!("{ptr}[{idx}] = ({t})({v});"),
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
        .map(|(k, (t, _))| format!("__global const {}* restrict in{k}", param_type(t)))
        .chain([format!("__global {}* restrict out", param_type(out))])
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
        let value = if matches!(*t, "half" | "bf16") { "float" } else { t };
        let _ = writeln!(s, "  const {value} a{k} = {};", load(t, &format!("in{k}"), off));
    }
    let _ = writeln!(s, "  {}", store(out, "out", "g", expr));
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
        .map(|(k, o)| format!("__global const {}* restrict in{k}", param_type(elem_storage(o.elem))))
        .chain([format!("__global {}* restrict out", param_type(elem_storage(l.output.elem)))])
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
            for (k, (off, o)) in offsets.iter().zip(&l.inputs).enumerate() {
                let x = load(elem_storage(o.elem), &format!("in{k}"), off);
                let _ = writeln!(s, "  const float x{k} = (float){x};");
            }
            let result = chain_body(chain, &mut s);
            if l.output.elem.is_half() {
                let _ = writeln!(s, "  {}", store(elem_storage(l.output.elem), "out", &out_off, &result));
            } else {
                let _ = writeln!(s, "  out[{out_off}] = {result};");
            }
        }
    }
    s.push_str("}\n");
    s
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
