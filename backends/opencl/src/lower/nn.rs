//! The neural-network ops that are not products: BatchNormalization, pooling, Softmax, LayerNormalization, LRN.

use stowage_compiler::ir::{self, PoolKind, SoftmaxKind};
use stowage_runtime::DatumType;

use super::node::{Lowered, NodeCx};
use super::products::window;
use super::{launch, Builder};
use crate::codegen;
use crate::error::Result;
use crate::exec::{ArgRef, StepKind};

/// BatchNormalization, in inference mode or (with its running statistics written) in training mode.
pub(super) fn batch_norm(
    b: &mut Builder<'_>,
    cx: &NodeCx<'_>,
    epsilon: f32,
    momentum: f32,
    training: bool,
) -> Result<Lowered> {
    let t = cx.float_storage(cx.out_ty.dt)?;
    if training && t != "float" {
        return Err(cx.unsupported(format!("training mode on {t} data (f32 only)")));
    }
    let x = cx.input(0, "input")?;
    for i in 1..5 {
        let p = cx.in_ty(i).ok_or_else(|| cx.unsupported(format!("input {i} is missing")))?;
        if p.dt != cx.out_ty.dt {
            return Err(cx.unsupported(format!("input {i} is {} where the data is {}", p.dt, cx.out_ty.dt)));
        }
    }
    if x.shape.len() < 2 {
        return Err(cx.unsupported("an input of rank below 2"));
    }
    let (n, c, plane) = (x.shape[0], x.shape[1], x.shape[2..].iter().product::<usize>());
    let stats: Vec<Option<usize>> =
        (1..3).map(|i| cx.node.outputs.get(i).copied().flatten().map(|v| b.slot(v))).collect();
    let mode = training.then_some((momentum, stats[0].is_some(), stats[1].is_some()));
    let k = b.kernel(|name| codegen::batch_norm(name, n, c, plane, epsilon, mode, t));
    let mut args = vec![cx.arg(0)?, cx.arg(1)?, cx.arg(2)?, cx.arg(3)?, cx.arg(4)?, cx.out_arg()];
    let mut outs = vec![cx.out];
    if training {
        args.extend(stats.iter().flatten().map(|&s| ArgRef::Slot(s)));
        outs.extend(stats.iter().flatten());
    }
    let writes: Vec<ArgRef> = outs.iter().map(|&s| ArgRef::Slot(s)).collect();
    let global = if training { c } else { x.shape.iter().product() };
    let l = launch(k, args, vec![global], None, writes);
    Ok(("BatchNormalization", StepKind::Launches { outs, scratch: vec![], launches: vec![l] }))
}

/// MaxPool of any numeric type, with its indices when asked for.
pub(super) fn max_pool(b: &mut Builder<'_>, cx: &NodeCx<'_>, p: &ir::Pool) -> Result<Lowered> {
    let x = cx.input(0, "input")?;
    let float = matches!(x.dt, DatumType::F32 | DatumType::F64 | DatumType::F16 | DatumType::BF16);
    let ty = codegen::dt_storage(x.dt)
        .filter(|_| x.dt != DatumType::Bool)
        .ok_or_else(|| cx.unsupported(format!("{} data", x.dt)))?;
    b.fp64 |= x.dt == DatumType::F64;
    let w = window(&p.window, &x.shape, &cx.out_ty.shape);
    let indices = cx.node.outputs.get(1).copied().flatten().map(|v| b.slot(v));
    let order = indices.map(|_| p.column_major_indices);
    let k = b.kernel(|name| codegen::max_pool(name, &w, ty, float, order));
    let total: usize = cx.out_ty.shape.iter().product();
    let mut args = vec![cx.arg(0)?, cx.out_arg()];
    let mut outs = vec![cx.out];
    args.extend(indices.map(ArgRef::Slot));
    outs.extend(indices);
    let writes: Vec<ArgRef> = outs.iter().map(|&s| ArgRef::Slot(s)).collect();
    let l = launch(k, args, vec![total], None, writes);
    Ok((cx.node.op.name(), StepKind::Launches { outs, scratch: vec![], launches: vec![l] }))
}

/// AveragePool (f32, f16, bf16; summed in float).
pub(super) fn average_pool(b: &mut Builder<'_>, cx: &NodeCx<'_>, p: &ir::Pool) -> Result<Lowered> {
    let t = cx.float_storage(cx.out_ty.dt)?;
    let x = cx.input(0, "input")?;
    let w = window(&p.window, &x.shape, &cx.out_ty.shape);
    let PoolKind::Average { count_include_pad } = p.kind else {
        return Err(cx.unsupported("a max pool here")); // `max_pool` takes them
    };
    let k = b.kernel(|name| codegen::average_pool(name, &w, count_include_pad, t));
    cx.unary_launch(cx.node.op.name(), k)
}

/// GlobalAveragePool and GlobalMaxPool (f32, f16, bf16; summed in float): one work item per plane.
pub(super) fn global_pool(b: &mut Builder<'_>, cx: &NodeCx<'_>, kind: PoolKind) -> Result<Lowered> {
    let t = cx.float_storage(cx.out_ty.dt)?;
    let x = cx.input(0, "input")?;
    let plane: usize = x.shape.iter().skip(2).product();
    let k = b.kernel(|name| codegen::global_pool(name, plane, kind == PoolKind::Max, t));
    let rows = x.shape.iter().take(2).product();
    Ok(cx.single(cx.node.op.name(), k, vec![cx.arg(0)?, cx.out_arg()], vec![rows]))
}

/// Softmax and LogSoftmax (f32, f16, bf16): a work item per row, or a work-group per long row.
pub(super) fn softmax(
    b: &mut Builder<'_>,
    cx: &NodeCx<'_>,
    kind: SoftmaxKind,
    axis: i64,
    flatten: bool,
) -> Result<Lowered> {
    let elem = cx.float_storage(cx.out_ty.dt)?;
    let sh = &cx.out_ty.shape;
    let axis = (axis as usize).min(sh.len().saturating_sub(1));
    let outer: usize = sh[..axis].iter().product();
    let (len, inner) =
        if flatten { (sh[axis..].iter().product(), 1) } else { (sh[axis], sh[axis + 1..].iter().product()) };
    let k = b.kernel(|name| codegen::softmax(name, elem, len, inner, kind == SoftmaxKind::LogSoftmax));
    let (global, local) = if codegen::softmax_grouped(len) {
        (vec![outer * inner * codegen::ROW_GROUP], Some(vec![codegen::ROW_GROUP]))
    } else {
        (vec![outer * inner], None)
    };
    let l = launch(k, vec![cx.arg(0)?, cx.out_arg()], global, local, vec![cx.out_arg()]);
    Ok((cx.node.op.name(), StepKind::Launches { outs: vec![cx.out], scratch: vec![], launches: vec![l] }))
}

/// LayerNormalization (f32, f16, bf16; summed in float) over the trailing axes from `axis`, with its mean and
/// inverse deviation (f32) when asked for.
pub(super) fn layer_norm(b: &mut Builder<'_>, cx: &NodeCx<'_>, axis: i64, epsilon: f32) -> Result<Lowered> {
    let t = cx.float_storage(cx.out_ty.dt)?;
    if (1..3).any(|i| cx.in_ty(i).is_some_and(|s| s.dt != cx.out_ty.dt)) {
        return Err(cx.unsupported("a scale or bias of another type than the data"));
    }
    let sh = &cx.out_ty.shape;
    let axis = (axis as usize).min(sh.len());
    let (rows, len): (usize, usize) = (sh[..axis].iter().product(), sh[axis..].iter().product());
    let same = |i: usize| cx.in_ty(i).is_none_or(|t| t.shape.iter().product::<usize>() == len);
    if !same(1) || !same(2) {
        return Err(cx.unsupported("a scale or bias that is broadcast"));
    }
    let bias = cx.ins.get(2).copied().flatten().is_some();
    let stat = |i: usize| cx.node.outputs.get(i).copied().flatten();
    let (mean, inv) = (stat(1), stat(2));
    if [mean, inv].iter().flatten().any(|v| cx.graph.ty(*v).dt != DatumType::F32) {
        return Err(cx.unsupported("statistics in a type other than f32"));
    }
    let grouped = codegen::layer_norm_grouped(len, b.grouped_rows);
    let k = b.kernel(|name| codegen::layer_norm(name, len, epsilon, bias, mean.is_some(), inv.is_some(), grouped, t));
    let mut args = vec![cx.arg(0)?, cx.arg(1)?];
    if bias {
        args.push(cx.arg(2)?);
    }
    let mut outs = vec![cx.out];
    for v in [mean, inv].into_iter().flatten() {
        outs.push(b.slot(v));
    }
    args.extend(outs.iter().map(|&o| ArgRef::Slot(o)));
    let writes = outs.iter().map(|&o| ArgRef::Slot(o)).collect();
    let (global, local) =
        if grouped { (vec![rows * codegen::ROW_GROUP], Some(vec![codegen::ROW_GROUP])) } else { (vec![rows], None) };
    let l = launch(k, args, global, local, writes);
    Ok((cx.node.op.name(), StepKind::Launches { outs, scratch: vec![], launches: vec![l] }))
}

/// LRN (f32, f16, bf16; computed in float) across channels.
pub(super) fn lrn(
    b: &mut Builder<'_>,
    cx: &NodeCx<'_>,
    size: usize,
    alpha: f32,
    beta: f32,
    bias: f32,
) -> Result<Lowered> {
    let t = cx.float_storage(cx.out_ty.dt)?;
    let sh = &cx.out_ty.shape;
    if sh.len() < 2 || size == 0 {
        return Err(cx.unsupported("an input of rank below 2"));
    }
    let plane: usize = sh[2..].iter().product();
    let k = b.kernel(|name| codegen::lrn(name, sh[1], plane, size, alpha, beta, bias, t));
    cx.unary_launch("LRN", k)
}
