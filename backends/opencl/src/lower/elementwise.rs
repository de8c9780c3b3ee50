//! Elementwise work: fused f32 chains (`stowage_compiler::lowering::fuse`, generated from their `Loops`), single
//! elementwise nodes of any datum type, and the reductions (Reduce*, ArgMax).

use stowage_compiler::ir::{self, ValueId};
use stowage_compiler::lowering::fuse::Planned;
use stowage_runtime::DatumType;

use super::node::{Lowered, NodeCx};
use super::typed::typed_expr;
use super::Builder;
use crate::codegen;
use crate::error::Result;
use crate::exec::ArgRef;

/// A fused chain: one kernel over its inputs.
pub(super) fn fused(b: &mut Builder<'_>, cx: &NodeCx<'_>, p: &Planned) -> Result<Lowered> {
    b.fp64 |= codegen::needs_fp64(&p.loops);
    let k = b.kernel(|name| codegen::loops(name, &p.loops, 0, &[]));
    let args: Vec<ArgRef> = cx.ins.iter().flatten().map(|&s| ArgRef::Slot(s)).chain([cx.out_arg()]).collect();
    Ok(cx.single("Fused", k, args, vec![p.loops.dims.iter().product()]))
}

/// Unary, binary and variadic ops, Clip, Where and Cast of any datum type: one C expression per element, inputs
/// read through broadcast strides.
pub(super) fn typed(b: &mut Builder<'_>, cx: &NodeCx<'_>) -> Result<Lowered> {
    let (graph, node, out_ty) = (cx.graph, cx.node, &cx.out_ty);
    let present: Vec<(usize, ValueId)> =
        node.inputs.iter().enumerate().filter_map(|(i, v)| v.map(|v| (i, v))).collect();
    let dts: Vec<Option<DatumType>> = node.inputs.iter().map(|v| v.map(|v| graph.ty(v).dt)).collect();
    let mut expr = typed_expr(&node.op, &dts, out_ty.dt).ok_or_else(|| {
        cx.unsupported(format!("{} data", dts.iter().flatten().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")))
    })?;
    // Inputs are named by position among the present ones.
    for (k, (i, _)) in present.iter().enumerate().rev() {
        expr = expr.replace(&format!("@{i}"), &format!("a{k}"));
    }
    let out_t = codegen::dt_storage(out_ty.dt).ok_or_else(|| cx.unsupported(format!("{} data", out_ty.dt)))?;
    let mut operands = Vec::new();
    for (_, v) in &present {
        let ty = graph.ty(*v);
        let t = codegen::dt_storage(ty.dt).ok_or_else(|| cx.unsupported(format!("{} data", ty.dt)))?;
        b.fp64 |= ty.dt == DatumType::F64;
        operands.push((t, stowage_kir::strides_for(&ty.shape, &out_ty.shape)));
    }
    b.fp64 |= out_ty.dt == DatumType::F64 || expr.contains("(double)");
    let dims = out_ty.shape.clone();
    let k = b.kernel(|name| codegen::typed(name, &dims, &operands, out_t, &expr));
    let mut args: Vec<ArgRef> = present
        .iter()
        .map(|(i, _)| cx.ins[*i].map(ArgRef::Slot))
        .collect::<Option<_>>()
        .ok_or_else(|| cx.unsupported("an input"))?;
    args.push(cx.out_arg());
    Ok(cx.single(node.op.name(), k, args, vec![dims.iter().product()]))
}

/// ReduceSum, ReduceMean, ReduceMax and ReduceMin over constant axes: a work item per output element; f32 and f64
/// accumulate in double, f16 and bf16 (read as float) in float.
pub(super) fn reduce(
    b: &mut Builder<'_>,
    cx: &NodeCx<'_>,
    kind: ir::Reduce,
    noop_with_empty_axes: bool,
) -> Result<Lowered> {
    let x = cx.input(0, "input")?;
    let t = cx.storage(x.dt)?;
    let out_t = codegen::dt_storage(cx.out_ty.dt).ok_or_else(|| cx.unsupported(format!("{} data", cx.out_ty.dt)))?;
    let axes = match cx.ins.get(1).copied().flatten() {
        Some(_) => {
            let v = cx.node.inputs[1].ok_or_else(|| cx.unsupported("axes"))?;
            let t = cx.graph.const_value(v).ok_or_else(|| cx.unsupported("run-time axes"))?;
            stowage_compiler::consts::to_i64s(t).map_err(|e| cx.unsupported(e.to_string()))?
        }
        None => vec![],
    };
    let rank = x.shape.len() as i64;
    let mut reduced = vec![axes.is_empty() && !noop_with_empty_axes; x.shape.len()];
    for a in axes {
        reduced[(if a < 0 { a + rank } else { a }) as usize] = true;
    }
    let half = matches!(x.dt, DatumType::F16 | DatumType::BF16);
    let float = half || matches!(x.dt, DatumType::F32 | DatumType::F64);
    let acc_t = if half {
        "float"
    } else if float {
        "double"
    } else if x.dt == DatumType::Bool {
        "uchar"
    } else {
        t
    };
    // f16 and bf16 are read and summed as float: no double precision (a device without fp64 runs them).
    b.fp64 |= float && !half;
    let (init, step, finish) = match kind {
        ir::Reduce::Sum => ("0", "acc += x;", "acc"),
        ir::Reduce::Prod => ("1", "acc *= x;", "acc"),
        ir::Reduce::Mean if half => ("0", "acc += x;", "acc / (float)count"),
        ir::Reduce::Mean => ("0", "acc += x;", "acc / (double)count"),
        ir::Reduce::Max if half => ("-INFINITY", "acc = (isnan(x) || x > acc) ? x : acc;", "acc"),
        ir::Reduce::Min if half => ("INFINITY", "acc = (isnan(x) || x < acc) ? x : acc;", "acc"),
        ir::Reduce::Max if float => ("-INFINITY", "acc = (isnan((double)x) || x > acc) ? x : acc;", "acc"),
        ir::Reduce::Min if float => ("INFINITY", "acc = (isnan((double)x) || x < acc) ? x : acc;", "acc"),
        ir::Reduce::Max => ("0", "acc = (j == 0 || x > acc) ? x : acc;", "acc"),
        ir::Reduce::Min => ("0", "acc = (j == 0 || x < acc) ? x : acc;", "acc"),
    };
    let shape = x.shape.clone();
    let k = b.kernel(|name| codegen::reduce(name, &shape, &reduced, t, out_t, acc_t, init, step, finish));
    cx.unary_launch(cx.node.op.name(), k)
}

/// ArgMax (ArgMin) along `axis`: the first (or last) index of the largest (smallest) element.
pub(super) fn arg_max(
    b: &mut Builder<'_>,
    cx: &NodeCx<'_>,
    axis: i64,
    select_last_index: bool,
    min: bool,
) -> Result<Lowered> {
    let x = cx.input(0, "input")?;
    let t = cx.storage(x.dt)?;
    let best_t = if matches!(t, "half" | "bf16") { "float" } else { t };
    let axis = axis as usize;
    let reduced: Vec<bool> = (0..x.shape.len()).map(|a| a == axis).collect();
    let better = match (min, select_last_index) {
        (false, false) => ">",
        (false, true) => ">=",
        (true, false) => "<",
        (true, true) => "<=",
    };
    let step = format!("if (j == 0 || x {better} best) {{ best = x; acc = (long)j; }}");
    let shape = x.shape.clone();
    let k = b.kernel(|name| {
        codegen::reduce(name, &shape, &reduced, t, "long", "long", "0", &step, "acc").replacen(
            "long acc = 0;",
            &format!("long acc = 0; {best_t} best = 0;"),
            1,
        )
    });
    cx.unary_launch(cx.node.op.name(), k)
}

/// CumSum and CumProd along an axis known at compile time (a constant `axis` input): one work item per output
/// element, summing (multiplying) its prefix along the axis (its suffix with `reverse`, itself left out with
/// `exclusive`) in the order the CPU's kernel does, in double for f32/f64 data, float for f16/bf16.
pub(super) fn cumulative(
    b: &mut Builder<'_>,
    cx: &NodeCx<'_>,
    product: bool,
    exclusive: bool,
    reverse: bool,
) -> Result<Lowered> {
    let x = cx.input(0, "x")?;
    let t = cx.storage(x.dt)?;
    if x.dt == DatumType::Bool {
        return Err(cx.unsupported("bool data"));
    }
    let axis = cx
        .node
        .inputs
        .get(1)
        .copied()
        .flatten()
        .and_then(|v| cx.graph.const_value(v))
        .and_then(|t| stowage_compiler::consts::to_i64s(t).ok())
        .and_then(|v| v.first().copied())
        .ok_or_else(|| cx.unsupported("an axis known only at run time"))?;
    let rank = x.shape.len() as i64;
    if !(-rank..rank).contains(&axis) {
        return Err(cx.unsupported(format!("axis {axis} of {:?}", x.shape)));
    }
    let axis = if axis < 0 { axis + rank } else { axis } as usize;
    let (n, inner) = (x.shape[axis], x.shape[axis + 1..].iter().product::<usize>());
    let half = matches!(x.dt, DatumType::F16 | DatumType::BF16);
    let float = half || matches!(x.dt, DatumType::F32 | DatumType::F64);
    let acc_t = if half {
        "float"
    } else if float {
        "double"
    } else {
        t
    };
    b.fp64 |= float && !half;
    let (init, op) = if product { ("1", "*") } else { ("0", "+") };
    let (lo, hi) = match (reverse, exclusive) {
        (false, false) => ("0", "a + 1"),
        (false, true) => ("0", "a"),
        (true, false) => ("a", "n"),
        (true, true) => ("a + 1", "n"),
    };
    // The CPU runs a reverse scan from the end: the same order here.
    let walk = if reverse {
        format!("for (size_t j = {hi}; j-- > {lo};)")
    } else {
        format!("for (size_t j = {lo}; j < {hi}; ++j)")
    };
    let xt = if half { "float" } else { t };
    let k = b.kernel(|name| {
        let pt = codegen::param_type(t);
        let load = codegen::load(t, "X", "base + j * inner");
        let store = codegen::store(t, "Y", "g", "acc");
        format!(
            "__kernel void {name}(__global const {pt}* restrict X, __global {pt}* restrict Y) {{\n  const size_t \
             g = get_global_id(0), n = {n}, inner = {inner};\n  const size_t a = (g / inner) % n, base = g - a * inner;\n  \
             {acc_t} acc = {init};\n  {walk} {{ const {xt} x = {load}; acc = acc {op} x; }}\n  {store}\n}}\n"
        )
    });
    cx.unary_launch(cx.node.op.name(), k)
}
