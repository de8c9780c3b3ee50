//! Data movement: aliases (Reshape and its kin), generated relayout copies (Transpose, Concat, Split, Expand, all
//! `stowage_kir::Loops` with a copy body), index maps (Slice, Tile, Pad, Gather) and Resize, one launch per axis.

use stowage_compiler::ir::{self, Op};
use stowage_kir::resize::plan_axis;
use stowage_kir::{packed_strides, Loops};
use stowage_runtime::DatumType;

use super::node::{Lowered, NodeCx};
use super::{launch, Builder};
use crate::codegen;
use crate::error::Result;
use crate::exec::{ArgRef, Step, StepKind};

/// Split: one copy per output, each from its range along `axis`.
pub(super) fn split(b: &mut Builder<'_>, cx: &NodeCx<'_>, axis: usize) -> Result<Lowered> {
    let x = cx.input(0, "input")?;
    let size = x.dt.size_of();
    cx.copyable(size)?;
    let src = packed_strides(&x.shape, size);
    let (mut launches, mut outs, mut at) = (Vec::new(), Vec::new(), 0);
    for o in cx.node.outputs.iter().flatten() {
        let shape = cx.graph.ty(*o).shape.clone();
        let slot = b.slot(*o);
        outs.push(slot);
        let base = at * src[axis] / size;
        at += shape[axis];
        let total: usize = shape.iter().product();
        if total == 0 {
            continue;
        }
        let l = Loops::relayout(&shape, size, src.clone(), packed_strides(&shape, size));
        let k = b.kernel(|name| codegen::loops(name, &l, 0, &[base]));
        launches.push(launch(k, vec![cx.arg(0)?, ArgRef::Slot(slot)], vec![total], None, vec![ArgRef::Slot(slot)]));
    }
    Ok(("Split", StepKind::Launches { outs, scratch: vec![], launches }))
}

/// Identity, Reshape, Flatten, Squeeze, Unsqueeze and inference-mode Dropout: the output is the input's buffer.
/// A Dropout's mask, when asked for, is a step of its own before (all true).
pub(super) fn alias(b: &mut Builder<'_>, cx: &NodeCx<'_>) -> Result<Lowered> {
    let (graph, node) = (cx.graph, cx.node);
    let training = node.inputs.get(2).copied().flatten().and_then(|v| graph.const_value(v));
    let training =
        training.map(stowage_compiler::consts::to_i64s).transpose().map_err(|e| cx.unsupported(e.to_string()))?;
    let ratio = node.inputs.get(1).copied().flatten().and_then(|v| graph.const_value(v));
    let ratio = ratio.map(stowage_compiler::consts::to_f64s).transpose().map_err(|e| cx.unsupported(e.to_string()))?;
    // Training-mode Dropout with a non-zero ratio draws a random mask; with ratio 0 it is the identity.
    if training.is_some_and(|t| t != [0]) && ratio.is_none_or(|r| r.iter().any(|&r| r != 0.0)) {
        return Err(cx.unsupported("training-mode Dropout (a random mask)"));
    }
    if let Some(mask) = node.outputs.get(1).copied().flatten() {
        let (slot, dims) = (b.slot(mask), graph.ty(mask).shape.clone());
        let k = b.kernel(|name| codegen::typed(name, &dims, &[], "uchar", "1"));
        let l = launch(k, vec![ArgRef::Slot(slot)], vec![dims.iter().product()], None, vec![ArgRef::Slot(slot)]);
        let kind = StepKind::Launches { outs: vec![slot], scratch: vec![], launches: vec![l] };
        b.push_step(Step { name: format!("{} (mask)", node.name), op: "Dropout", kind }, vec![]);
    }
    let from = cx.ins[0].ok_or_else(|| cx.unsupported("no input"))?;
    Ok((node.op.name(), StepKind::Alias { from, to: cx.out }))
}

/// Transpose: a copy through permuted strides.
pub(super) fn transpose(b: &mut Builder<'_>, cx: &NodeCx<'_>, perm: &Option<Vec<usize>>) -> Result<Lowered> {
    let x = cx.input(0, "input")?;
    let perm = perm.clone().unwrap_or_else(|| (0..x.shape.len()).rev().collect());
    let size = x.dt.size_of();
    if !matches!(size, 1 | 2 | 4 | 8) || x.dt == DatumType::Bool && size != 1 {
        return Err(cx.unsupported(format!("{size}-byte elements")));
    }
    let l = Loops::transpose(&x.shape, &perm, size);
    let k = b.kernel(|name| codegen::loops(name, &l, 0, &[]));
    cx.unary_launch("Transpose", k)
}

/// Concat: one copy per input into its range of the output.
pub(super) fn concat(b: &mut Builder<'_>, cx: &NodeCx<'_>, axis: usize) -> Result<Lowered> {
    let size = cx.out_ty.dt.size_of();
    cx.copyable(size)?;
    let dst = packed_strides(&cx.out_ty.shape, size);
    let (mut launches, mut at) = (Vec::new(), 0);
    for (i, v) in cx.node.inputs.iter().enumerate() {
        let Some(v) = v else { continue };
        let shape = cx.graph.ty(*v).shape.clone();
        let l = Loops::relayout(&shape, size, packed_strides(&shape, size), dst.clone());
        let base = at * dst.get(axis).copied().unwrap_or(size) / size;
        at += shape.get(axis).copied().unwrap_or(1);
        let total: usize = shape.iter().product();
        if total == 0 {
            continue;
        }
        let k = b.kernel(|name| codegen::loops(name, &l, base, &[]));
        launches.push(launch(k, vec![cx.arg(i)?, cx.out_arg()], vec![total], None, vec![cx.out_arg()]));
    }
    Ok(("Concat", StepKind::Launches { outs: vec![cx.out], scratch: vec![], launches }))
}

/// Expand: a copy that reads broadcast axes with a stride of 0.
pub(super) fn expand(b: &mut Builder<'_>, cx: &NodeCx<'_>) -> Result<Lowered> {
    let x = cx.input(0, "input")?;
    let size = x.dt.size_of();
    cx.copyable(size)?;
    let out = &cx.out_ty.shape;
    let l = Loops::relayout(out, size, stowage_kir::broadcast_strides(&x.shape, out, size), packed_strides(out, size));
    let k = b.kernel(|name| codegen::loops(name, &l, 0, &[]));
    cx.unary_launch("Expand", k)
}

/// Slice, Tile, Pad and Gather: each output element reads the input element its index maps to.
pub(super) fn index_map(b: &mut Builder<'_>, cx: &NodeCx<'_>) -> Result<Lowered> {
    let x = cx.input(0, "input")?;
    let size = x.dt.size_of();
    cx.copyable(size)?;
    let rank = x.shape.len();
    let norm = |a: i64| if a < 0 { (a + rank as i64) as usize } else { a as usize };
    let mut args = vec![cx.arg(0)?];
    let map = match &cx.node.op {
        Op::Slice => {
            let starts = cx.const_ints(1)?.unwrap_or_default();
            let ends = cx.const_ints(2)?.unwrap_or_default();
            let axes = cx.const_ints(3)?.unwrap_or_else(|| (0..starts.len() as i64).collect());
            let steps = cx.const_ints(4)?.unwrap_or_else(|| vec![1; starts.len()]);
            let (mut begin, mut step) = (vec![0i64; rank], vec![1i64; rank]);
            for i in 0..starts.len() {
                let a = norm(axes[i]);
                let (s0, _, st) = stowage_compiler::infer::slice_bounds(x.shape[a], starts[i], ends[i], steps[i])
                    .map_err(|e| cx.unsupported(e.to_string()))?;
                (begin[a], step[a]) = (s0 as i64, st as i64);
            }
            codegen::IndexMap::Slice { begin, step }
        }
        Op::Tile => codegen::IndexMap::Tile,
        Op::Pad { mode } => {
            let pads = cx.const_ints(1)?.unwrap_or_default();
            let axes: Vec<usize> = match cx.const_ints(3)? {
                Some(axes) => axes.into_iter().map(norm).collect(),
                None => (0..rank).collect(),
            };
            let mut begin = vec![0i64; rank];
            for (i, &a) in axes.iter().enumerate() {
                begin[a] = pads[i];
            }
            let mode = match mode {
                ir::PadMode::Constant if cx.ins.get(2).copied().flatten().is_some() => {
                    args.push(cx.arg(2)?);
                    "constant"
                }
                ir::PadMode::Constant => "zeros",
                ir::PadMode::Reflect => "reflect",
                ir::PadMode::Edge => "edge",
                ir::PadMode::Wrap => "wrap",
            };
            codegen::IndexMap::Pad { begin, mode }
        }
        Op::Gather { axis } => {
            let (rank, index_type) = indices(cx)?;
            args.push(cx.arg(1)?);
            codegen::IndexMap::Gather { axis: *axis as usize, rank, index_type }
        }
        Op::GatherElements { axis } => {
            let (_, index_type) = indices(cx)?;
            args.push(cx.arg(1)?);
            codegen::IndexMap::GatherElements { axis: *axis as usize, index_type }
        }
        other => return Err(cx.unsupported(format!("{} is not an index map", other.name()))),
    };
    args.push(cx.out_arg());
    let (shape, out_shape) = (x.shape.clone(), cx.out_ty.shape.clone());
    let k = b.kernel(|name| codegen::index_map(name, &out_shape, &shape, size, &map));
    Ok(cx.single(cx.node.op.name(), k, args, vec![out_shape.iter().product()]))
}

/// The rank and C type of a gather's indices (input 1): i32 or i64.
fn indices(cx: &NodeCx<'_>) -> Result<(usize, &'static str)> {
    let idx = cx.input(1, "indices")?;
    match idx.dt {
        DatumType::I64 => Ok((idx.shape.len(), "long")),
        DatumType::I32 => Ok((idx.shape.len(), "int")),
        other => Err(cx.unsupported(format!("{other} indices"))),
    }
}

/// Resize, one launch per resized axis as the CPU does: the first reads X, each writes a scratch buffer the next
/// reads, the last writes the output; the identity is a copy.
pub(super) fn resize(b: &mut Builder<'_>, cx: &NodeCx<'_>, r: &ir::Resize) -> Result<Lowered> {
    let t = cx.float_storage(cx.out_ty.dt)?;
    let x = cx.input(0, "input")?;
    if x.dt != cx.out_ty.dt {
        return Err(cx.unsupported(format!("{} input to {} output", x.dt, cx.out_ty.dt)));
    }
    let size = x.dt.size_of();
    let rank = x.shape.len();
    let spec = stowage_compiler::lowering::resize_spec(cx.graph, r, &cx.node.inputs, rank)
        .map_err(|e| cx.unsupported(e.to_string()))?;
    let p = spec.params();
    if p.roi.is_some_and(|roi| roi.len() != 2 * rank) {
        return Err(cx.unsupported(format!("a region of interest not of 2 × {rank} values")));
    }
    let out_shape = &cx.out_ty.shape;
    let axes: Vec<_> =
        (0..rank).filter_map(|a| plan_axis(&p, a, rank, x.shape[a], out_shape[a]).map(|plan| (a, plan))).collect();
    if axes.is_empty() {
        let l = Loops::relayout(&x.shape, size, packed_strides(&x.shape, size), packed_strides(&x.shape, size));
        let k = b.kernel(|name| codegen::loops(name, &l, 0, &[]));
        let total = x.shape.iter().product();
        return Ok(cx.single("Resize", k, vec![cx.arg(0)?, cx.out_arg()], vec![total]));
    }
    let (mut launches, mut scratch) = (Vec::new(), Vec::new());
    let (mut shape, mut src) = (x.shape.clone(), cx.arg(0)?);
    for (k, (a, plan)) in axes.iter().enumerate() {
        // The tables are program-scope constants: a program keeps under 48 KiB of them (devices guarantee 64 KiB
        // of constant memory), else the node is refused here, where the planner sees it, rather than failing the
        // whole program's build.
        b.constant_bytes += 8 * plan.idx.len();
        if b.constant_bytes > 48 << 10 {
            let taps = plan.idx.len();
            return Err(cx.unsupported(format!("axis {a}: interpolation tables of {taps} taps (constant memory)")));
        }
        let inner: usize = shape[a + 1..].iter().product();
        let in_len = shape[*a];
        let kern = b.kernel(|name| codegen::resize_axis(name, plan, in_len, inner, p.extrapolation_value, t));
        shape[*a] = out_shape[*a];
        let total: usize = shape.iter().product();
        let dst = if k + 1 == axes.len() {
            cx.out_arg()
        } else {
            scratch.push(total * size);
            ArgRef::Scratch(scratch.len() - 1)
        };
        launches.push(launch(kern, vec![src, dst], vec![total], None, vec![dst]));
        src = dst;
    }
    Ok(("Resize", StepKind::Launches { outs: vec![cx.out], scratch, launches }))
}
