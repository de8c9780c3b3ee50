//! Lowering of the optimised IR to a [`ClProgram`]: one generated kernel per node, or more (a convolution's im2col
//! on a CPU device, the launch adding up a product split along K), all in one OpenCL program; reshape-like nodes
//! become aliases of their input's buffer.
//!
//! Elementwise chains are fused exactly as on the CPU (`stowage_cpu::lower::fuse`: the same `Loops`, generated here
//! as OpenCL C), a ReLU that is a convolution's only reader runs in its product's epilogue, and Transpose and Concat
//! are generated relayout copies. Ops without a kernel here are refused at lowering, naming the node.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use stowage_compiler::ir::{self, Graph, Op, PoolKind, SoftmaxKind, ValueDef, ValueId};
use stowage_cpu::jit::{packed_strides, Loops};
use stowage_cpu::kernels::resize::plan_axis;
use stowage_runtime::{DatumType, Ledger};

mod products;
mod typed;

use products::{conv, gemm_of, matmul_of, window};
use typed::typed_expr;

use crate::buffer::ClBuffer;
use crate::codegen::{self, Gemm};
use crate::device::{DeviceInfo, Target};
use crate::error::{ClError, Result};
use crate::exec::{ArgRef, Binding, ClProgram, Launch, Step, StepKind};

struct Builder<'g> {
    graph: &'g Graph,
    source: String,
    fp64: bool,
    kernels: Vec<String>,
    /// Per kernel, what it computes where that helps reading a profile (a product's dimensions and blocking).
    notes: Vec<String>,
    /// Work-groups that keep the device busy (twice its compute units).
    min_groups: usize,
    /// Convolutions compute their im2col unfolding inside the product (on GPUs; a CPU device does better with
    /// the unfolding written once). `STOWAGE_OPENCL_IMPLICIT_CONV=1` or `0` overrides, for tests and measuring.
    implicit_conv: bool,
    /// Products of one row take a work-group per output (`codegen::gemv`), on GPUs; a CPU device does better with
    /// the tiled kernel. `STOWAGE_OPENCL_GEMV=1` or `0` overrides, for tests and measuring.
    gemv: bool,
    slot_of: HashMap<ValueId, usize>,
    types: Vec<(DatumType, Vec<usize>)>,
    /// Bytes of program-scope `__constant` tables so far (Resize's).
    constant_bytes: usize,
}

impl Builder<'_> {
    fn slot(&mut self, v: ValueId) -> usize {
        if let Some(&s) = self.slot_of.get(&v) {
            return s;
        }
        let ty = self.graph.ty(v);
        self.types.push((ty.dt, ty.shape.clone()));
        self.slot_of.insert(v, self.types.len() - 1);
        self.types.len() - 1
    }

    /// Adds a kernel whose source `make(name)` writes; returns its index.
    fn kernel(&mut self, make: impl FnOnce(&str) -> String) -> usize {
        let name = format!("k{}", self.kernels.len());
        self.source.push_str(&make(&name));
        self.source.push('\n');
        self.kernels.push(name);
        self.notes.push(String::new());
        self.kernels.len() - 1
    }

    /// Adds the product kernel of `g`.
    fn gemm_kernel(&mut self, g: &Gemm) -> usize {
        let k = self.kernel(|name| codegen::gemm(name, g));
        self.notes[k] = codegen::describe(g);
        k
    }
}

fn launch(
    kernel: usize,
    args: Vec<ArgRef>,
    global: Vec<usize>,
    local: Option<Vec<usize>>,
    writes: Vec<ArgRef>,
) -> Launch {
    Launch { kernel, args, global, local, writes }
}

/// Lowers `graph` for `target`: generates and builds the program (or loads it from the disk cache) and uploads the
/// constants (recorded in `ledger`).
pub fn lower(graph: &Graph, target: &Target, ledger: &Ledger) -> Result<ClProgram> {
    let t = translate(graph, target.info(), None)?;
    build(graph, target, ledger, t)
}

/// The nodes of `graph` this backend has no kernel for on a device like `info`, each with the reason, found by
/// generating the program's source without building it (what the planner asks; see `crate::PlanTarget`).
pub fn unsupported_nodes(graph: &Graph, info: &DeviceInfo) -> Result<Vec<(ir::NodeId, String)>> {
    let mut found = Vec::new();
    translate(graph, info, Some(&mut found))?;
    Ok(found)
}

/// A graph translated to OpenCL C and steps, not built yet.
struct Translation<'g> {
    b: Builder<'g>,
    inputs: Vec<Binding>,
    outputs: Vec<Binding>,
    consts: Vec<(usize, ValueId)>,
    steps: Vec<Step>,
    last_use: Vec<usize>,
}

/// Translates every node; with `unsupported`, a node without a kernel is listed there instead of failing (and a
/// fused chain that fails lists each of its members).
fn translate<'g>(
    graph: &'g Graph,
    info: &DeviceInfo,
    mut refused: Option<&mut Vec<(ir::NodeId, String)>>,
) -> Result<Translation<'g>> {
    let relu_after = stowage_cpu::lower::conv_relu_pairs(graph);
    let absorbed: HashSet<ir::NodeId> = relu_after.values().copied().collect();
    let planned = stowage_cpu::lower::fuse::plan(graph, &absorbed);
    let members: HashSet<ir::NodeId> = planned.values().flat_map(|p| p.members.iter().copied()).collect();
    let mut b = Builder {
        graph,
        source: String::new(),
        fp64: false,
        kernels: Vec::new(),
        notes: Vec::new(),
        min_groups: 2 * info.compute_units as usize,
        implicit_conv: match std::env::var("STOWAGE_OPENCL_IMPLICIT_CONV").as_deref() {
            Ok("1") => true,
            Ok("0") => false,
            _ => info.gpu,
        },
        gemv: match std::env::var("STOWAGE_OPENCL_GEMV").as_deref() {
            Ok("1") => true,
            Ok("0") => false,
            _ => info.gpu,
        },
        slot_of: HashMap::new(),
        types: Vec::new(),
        constant_bytes: 0,
    };
    let inputs: Vec<Binding> = graph
        .inputs()
        .iter()
        .map(|&v| {
            let ty = graph.ty(v);
            Binding { name: graph.value(v).name.clone(), slot: b.slot(v), dt: ty.dt, shape: ty.shape.clone() }
        })
        .collect();
    let mut consts: Vec<(usize, ValueId)> = Vec::new();
    let mut steps = Vec::new();
    let mut reads: Vec<Vec<usize>> = Vec::new();
    for &n in graph.order() {
        let result = (|| -> Result<()> {
            let node = graph.node(n);
            if (members.contains(&n) && !planned.contains_key(&n)) || absorbed.contains(&n) {
                return Ok(());
            }
            let unsupported =
                |reason: String| ClError::Unsupported { node: node.name.clone(), op: node.op.name(), reason };
            let node_inputs: Vec<Option<ValueId>> = match planned.get(&n) {
                Some(p) => p.inputs.iter().map(|&v| Some(v)).collect(),
                None => node.inputs.clone(),
            };
            for v in node_inputs.iter().flatten() {
                if matches!(graph.value(*v).def, ValueDef::Const(_)) && !consts.iter().any(|(_, c)| c == v) {
                    let s = b.slot(*v);
                    consts.push((s, *v));
                }
            }
            let ins: Vec<Option<usize>> = node_inputs.iter().map(|v| v.map(|v| b.slot(v))).collect();
            let out_value = match relu_after.get(&n) {
                Some(&r) => graph.node(r).outputs[0],
                None => node.outputs.first().copied().flatten(),
            };
            let out_value = out_value.ok_or_else(|| unsupported("a node without its first output".into()))?;
            let out = b.slot(out_value);
            let out_ty = graph.ty(out_value).clone();
            let in_ty = |i: usize| node.inputs.get(i).copied().flatten().map(|v| graph.ty(v).clone());
            let arg = |i: usize| -> Result<ArgRef> {
                ins.get(i)
                    .copied()
                    .flatten()
                    .map(ArgRef::Slot)
                    .ok_or_else(|| unsupported(format!("input {i} is missing")))
            };
            if let Op::Split { axis, .. } = &node.op {
                let x = in_ty(0).ok_or_else(|| unsupported("no input".into()))?;
                let size = x.dt.size_of();
                if !matches!(size, 1 | 2 | 4 | 8) {
                    return Err(unsupported(format!("{size}-byte elements")));
                }
                let axis = *axis as usize;
                let src = packed_strides(&x.shape, size);
                let (mut launches, mut outs, mut at) = (Vec::new(), Vec::new(), 0);
                for o in &node.outputs {
                    let Some(o) = o else { continue };
                    let shape = graph.ty(*o).shape.clone();
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
                    launches.push(launch(
                        k,
                        vec![arg(0)?, ArgRef::Slot(slot)],
                        vec![total],
                        None,
                        vec![ArgRef::Slot(slot)],
                    ));
                }
                reads.push(ins.iter().flatten().copied().collect());
                steps.push(Step {
                    name: node.name.clone(),
                    op: "Split",
                    kind: StepKind::Launches { outs, scratch: vec![], launches },
                });
                return Ok(());
            }
            let stats_ok = matches!(node.op, Op::Dropout { .. } | Op::LayerNorm { .. } | Op::BatchNorm { .. })
                || matches!(&node.op, Op::Pool(p) if p.kind == PoolKind::Max);
            if node.outputs.iter().skip(1).any(Option::is_some) && !stats_ok {
                return Err(unsupported("a second output".into()));
            }
            let f32_only = |dt: DatumType| {
                if dt == DatumType::F32 {
                    Ok(())
                } else {
                    Err(unsupported(format!("{dt} data (f32 only here)")))
                }
            };
            // Products and softmax read f16 and bf16 as float and sum in float; f64 would need its own kernels.
            let float_storage = |dt: DatumType| match dt {
                DatumType::F32 | DatumType::F16 | DatumType::BF16 => Ok(codegen::dt_storage(dt).unwrap_or("float")),
                _ => Err(unsupported(format!("{dt} data (f32, f16 and bf16 only here)"))),
            };
            let (op, kind) = if let Some(p) = planned.get(&n) {
                b.fp64 |= codegen::needs_fp64(&p.loops);
                let k = b.kernel(|name| codegen::loops(name, &p.loops, 0, &[]));
                let args: Vec<ArgRef> =
                    ins.iter().flatten().map(|&s| ArgRef::Slot(s)).chain([ArgRef::Slot(out)]).collect();
                let total: usize = p.loops.dims.iter().product();
                let l = launch(k, args, vec![total], None, vec![ArgRef::Slot(out)]);
                ("Fused", StepKind::Launches { outs: vec![out], scratch: vec![], launches: vec![l] })
            } else {
                match &node.op {
                    Op::Identity
                    | Op::Reshape { .. }
                    | Op::Flatten { .. }
                    | Op::Squeeze
                    | Op::Unsqueeze
                    | Op::Dropout { .. } => {
                        let training = node.inputs.get(2).copied().flatten().and_then(|v| graph.const_value(v));
                        let training = training
                            .map(stowage_compiler::consts::to_i64s)
                            .transpose()
                            .map_err(|e| unsupported(e.to_string()))?;
                        let ratio = node.inputs.get(1).copied().flatten().and_then(|v| graph.const_value(v));
                        let ratio = ratio
                            .map(stowage_compiler::consts::to_f64s)
                            .transpose()
                            .map_err(|e| unsupported(e.to_string()))?;
                        // Training-mode Dropout with a non-zero ratio draws a random mask; with ratio 0 it is the identity.
                        if training.is_some_and(|t| t != [0]) && ratio.is_none_or(|r| r.iter().any(|&r| r != 0.0)) {
                            return Err(unsupported("training-mode Dropout (a random mask)".into()));
                        }
                        // Dropout that keeps everything: its mask, when asked for, is all true.
                        if let Some(mask) = node.outputs.get(1).copied().flatten() {
                            let (slot, dims) = (b.slot(mask), graph.ty(mask).shape.clone());
                            let k = b.kernel(|name| codegen::typed(name, &dims, &[], "uchar", "1"));
                            let l = launch(
                                k,
                                vec![ArgRef::Slot(slot)],
                                vec![dims.iter().product()],
                                None,
                                vec![ArgRef::Slot(slot)],
                            );
                            reads.push(vec![]);
                            let kind = StepKind::Launches { outs: vec![slot], scratch: vec![], launches: vec![l] };
                            steps.push(Step { name: format!("{} (mask)", node.name), op: "Dropout", kind });
                        }
                        (
                            node.op.name(),
                            StepKind::Alias { from: ins[0].ok_or_else(|| unsupported("no input".into()))?, to: out },
                        )
                    }
                    Op::Transpose { perm } => {
                        let x = in_ty(0).ok_or_else(|| unsupported("no input".into()))?;
                        let perm = perm.clone().unwrap_or_else(|| (0..x.shape.len()).rev().collect());
                        let size = x.dt.size_of();
                        if !matches!(size, 1 | 2 | 4 | 8) || x.dt == DatumType::Bool && size != 1 {
                            return Err(unsupported(format!("{}-byte elements", size)));
                        }
                        let l = Loops::transpose(&x.shape, &perm, size);
                        let k = b.kernel(|name| codegen::loops(name, &l, 0, &[]));
                        let total: usize = out_ty.shape.iter().product();
                        let l = launch(k, vec![arg(0)?, ArgRef::Slot(out)], vec![total], None, vec![ArgRef::Slot(out)]);
                        ("Transpose", StepKind::Launches { outs: vec![out], scratch: vec![], launches: vec![l] })
                    }
                    Op::Concat { axis } => {
                        let axis = *axis as usize;
                        let size = out_ty.dt.size_of();
                        if !matches!(size, 1 | 2 | 4 | 8) {
                            return Err(unsupported(format!("{size}-byte elements")));
                        }
                        let dst = packed_strides(&out_ty.shape, size);
                        let mut launches = Vec::new();
                        let mut at = 0;
                        for (i, v) in node.inputs.iter().enumerate() {
                            let Some(v) = v else { continue };
                            let shape = graph.ty(*v).shape.clone();
                            let l = Loops::relayout(&shape, size, packed_strides(&shape, size), dst.clone());
                            let base = at * dst.get(axis).copied().unwrap_or(size) / size;
                            at += shape.get(axis).copied().unwrap_or(1);
                            let total: usize = shape.iter().product();
                            if total == 0 {
                                continue;
                            }
                            let k = b.kernel(|name| codegen::loops(name, &l, base, &[]));
                            launches.push(launch(
                                k,
                                vec![arg(i)?, ArgRef::Slot(out)],
                                vec![total],
                                None,
                                vec![ArgRef::Slot(out)],
                            ));
                        }
                        ("Concat", StepKind::Launches { outs: vec![out], scratch: vec![], launches })
                    }
                    Op::MatMul | Op::Gemm(_) => {
                        let elem = float_storage(out_ty.dt)?;
                        let (a, bt) =
                            (in_ty(0).unwrap_or_else(|| out_ty.clone()), in_ty(1).unwrap_or_else(|| out_ty.clone()));
                        let g = match &node.op {
                            Op::Gemm(g) => gemm_of(g, &a.shape, &bt.shape, in_ty(2).map(|c| c.shape), &out_ty.shape),
                            _ => matmul_of(&a.shape, &bt.shape, &out_ty.shape),
                        }
                        .ok_or_else(|| unsupported("operand shapes this kernel does not take".into()))?;
                        let g = Gemm { min_groups: b.min_groups, elem, ..g };
                        let bias = if g.bias.is_some() { Some(arg(2)?) } else { None };
                        let mut scratch = Vec::new();
                        let launches = products::product(&mut b, &g, arg(0)?, arg(1)?, out, bias, &mut scratch);
                        (node.op.name(), StepKind::Launches { outs: vec![out], scratch, launches })
                    }
                    Op::Conv(c) => {
                        f32_only(out_ty.dt)?;
                        let (x, w) = (
                            in_ty(0).ok_or_else(|| unsupported("no input".into()))?,
                            in_ty(1).ok_or_else(|| unsupported("no weights".into()))?,
                        );
                        let relu = relu_after.contains_key(&n);
                        let (launches, scratch) = conv(&mut b, c, &x.shape, &w.shape, &out_ty.shape, &ins, out, relu)
                            .ok_or_else(|| unsupported("this convolution's shape".into()))?;
                        let op = if relu { "Conv+Relu" } else { "Conv" };
                        (op, StepKind::Launches { outs: vec![out], scratch, launches })
                    }
                    Op::BatchNorm { epsilon, momentum, training } => {
                        f32_only(out_ty.dt)?;
                        let x = in_ty(0).ok_or_else(|| unsupported("no input".into()))?;
                        for i in 1..5 {
                            let p = in_ty(i).ok_or_else(|| unsupported(format!("input {i} is missing")))?;
                            f32_only(p.dt)?;
                        }
                        if x.shape.len() < 2 {
                            return Err(unsupported("an input of rank below 2".into()));
                        }
                        let (n, c, plane) = (x.shape[0], x.shape[1], x.shape[2..].iter().product::<usize>());
                        let stats: Vec<Option<usize>> =
                            (1..3).map(|i| node.outputs.get(i).copied().flatten().map(|v| b.slot(v))).collect();
                        let mode = training.then_some((*momentum, stats[0].is_some(), stats[1].is_some()));
                        let k = b.kernel(|name| codegen::batch_norm(name, n, c, plane, *epsilon, mode));
                        let mut args = vec![arg(0)?, arg(1)?, arg(2)?, arg(3)?, arg(4)?, ArgRef::Slot(out)];
                        let mut outs = vec![out];
                        if *training {
                            args.extend(stats.iter().flatten().map(|&s| ArgRef::Slot(s)));
                            outs.extend(stats.iter().flatten());
                        }
                        let writes: Vec<ArgRef> = outs.iter().map(|&s| ArgRef::Slot(s)).collect();
                        let global = if *training { c } else { x.shape.iter().product() };
                        let l = launch(k, args, vec![global], None, writes);
                        ("BatchNormalization", StepKind::Launches { outs, scratch: vec![], launches: vec![l] })
                    }
                    Op::Pool(p) if p.kind == PoolKind::Max => {
                        let x = in_ty(0).ok_or_else(|| unsupported("no input".into()))?;
                        let float = matches!(x.dt, DatumType::F32 | DatumType::F64);
                        let ty = codegen::dt_type(x.dt)
                            .filter(|_| x.dt != DatumType::Bool)
                            .ok_or_else(|| unsupported(format!("{} data", x.dt)))?;
                        b.fp64 |= x.dt == DatumType::F64;
                        let w = window(&p.window, &x.shape, &out_ty.shape);
                        let indices = node.outputs.get(1).copied().flatten().map(|v| b.slot(v));
                        let order = indices.map(|_| p.column_major_indices);
                        let k = b.kernel(|name| codegen::max_pool(name, &w, ty, float, order));
                        let total: usize = out_ty.shape.iter().product();
                        let mut args = vec![arg(0)?, ArgRef::Slot(out)];
                        let mut outs = vec![out];
                        args.extend(indices.map(ArgRef::Slot));
                        outs.extend(indices);
                        let writes: Vec<ArgRef> = outs.iter().map(|&s| ArgRef::Slot(s)).collect();
                        let l = launch(k, args, vec![total], None, writes);
                        (node.op.name(), StepKind::Launches { outs, scratch: vec![], launches: vec![l] })
                    }
                    Op::Pool(p) => {
                        f32_only(out_ty.dt)?;
                        let x = in_ty(0).ok_or_else(|| unsupported("no input".into()))?;
                        let w = window(&p.window, &x.shape, &out_ty.shape);
                        let PoolKind::Average { count_include_pad } = p.kind else {
                            return Err(unsupported("a max pool here".into())); // the arm above takes them
                        };
                        let k = b.kernel(|name| codegen::average_pool(name, &w, count_include_pad));
                        let total: usize = out_ty.shape.iter().product();
                        let l = launch(k, vec![arg(0)?, ArgRef::Slot(out)], vec![total], None, vec![ArgRef::Slot(out)]);
                        (node.op.name(), StepKind::Launches { outs: vec![out], scratch: vec![], launches: vec![l] })
                    }
                    Op::GlobalPool(kind) => {
                        f32_only(out_ty.dt)?;
                        let x = in_ty(0).ok_or_else(|| unsupported("no input".into()))?;
                        let plane: usize = x.shape.iter().skip(2).product();
                        let k = b.kernel(|name| codegen::global_pool(name, plane, *kind == PoolKind::Max));
                        let rows = x.shape.iter().take(2).product();
                        let l = launch(k, vec![arg(0)?, ArgRef::Slot(out)], vec![rows], None, vec![ArgRef::Slot(out)]);
                        (node.op.name(), StepKind::Launches { outs: vec![out], scratch: vec![], launches: vec![l] })
                    }
                    Op::Softmax { kind, axis, flatten } => {
                        let elem = float_storage(out_ty.dt)?;
                        let sh = &out_ty.shape;
                        let axis = (*axis as usize).min(sh.len().saturating_sub(1));
                        let outer: usize = sh[..axis].iter().product();
                        let (len, inner) = if *flatten {
                            (sh[axis..].iter().product(), 1)
                        } else {
                            (sh[axis], sh[axis + 1..].iter().product())
                        };
                        let k =
                            b.kernel(|name| codegen::softmax(name, elem, len, inner, *kind == SoftmaxKind::LogSoftmax));
                        let (global, local) = if codegen::softmax_grouped(len) {
                            (vec![outer * inner * codegen::ROW_GROUP], Some(vec![codegen::ROW_GROUP]))
                        } else {
                            (vec![outer * inner], None)
                        };
                        let l = launch(k, vec![arg(0)?, ArgRef::Slot(out)], global, local, vec![ArgRef::Slot(out)]);
                        (node.op.name(), StepKind::Launches { outs: vec![out], scratch: vec![], launches: vec![l] })
                    }
                    Op::LayerNorm { axis, epsilon, .. } => {
                        f32_only(out_ty.dt)?;
                        let sh = &out_ty.shape;
                        let axis = (*axis as usize).min(sh.len());
                        let (rows, len): (usize, usize) = (sh[..axis].iter().product(), sh[axis..].iter().product());
                        let same = |i: usize| in_ty(i).is_none_or(|t| t.shape.iter().product::<usize>() == len);
                        if !same(1) || !same(2) {
                            return Err(unsupported("a scale or bias that is broadcast".into()));
                        }
                        let bias = ins.get(2).copied().flatten().is_some();
                        let stat = |i: usize| node.outputs.get(i).copied().flatten();
                        let (mean, inv) = (stat(1), stat(2));
                        if [mean, inv].iter().flatten().any(|v| graph.ty(*v).dt != DatumType::F32) {
                            return Err(unsupported("statistics in a type other than f32".into()));
                        }
                        let k = b.kernel(|name| {
                            codegen::layer_norm(name, len, *epsilon, bias, mean.is_some(), inv.is_some())
                        });
                        let mut args = vec![arg(0)?, arg(1)?];
                        if bias {
                            args.push(arg(2)?);
                        }
                        let mut outs = vec![out];
                        for v in [mean, inv].into_iter().flatten() {
                            outs.push(b.slot(v));
                        }
                        args.extend(outs.iter().map(|&o| ArgRef::Slot(o)));
                        let writes = outs.iter().map(|&o| ArgRef::Slot(o)).collect();
                        let l = launch(k, args, vec![rows], None, writes);
                        (node.op.name(), StepKind::Launches { outs, scratch: vec![], launches: vec![l] })
                    }
                    Op::Lrn { size, alpha, beta, bias } => {
                        f32_only(out_ty.dt)?;
                        let sh = &out_ty.shape;
                        if sh.len() < 2 || *size == 0 {
                            return Err(unsupported("an input of rank below 2".into()));
                        }
                        let plane: usize = sh[2..].iter().product();
                        let k = b.kernel(|name| codegen::lrn(name, sh[1], plane, *size, *alpha, *beta, *bias));
                        let total: usize = sh.iter().product();
                        let l = launch(k, vec![arg(0)?, ArgRef::Slot(out)], vec![total], None, vec![ArgRef::Slot(out)]);
                        ("LRN", StepKind::Launches { outs: vec![out], scratch: vec![], launches: vec![l] })
                    }
                    Op::Unary(_) | Op::Binary(_) | Op::Variadic(_) | Op::Clip | Op::Where | Op::Cast { .. } => {
                        let present: Vec<(usize, ValueId)> =
                            node.inputs.iter().enumerate().filter_map(|(i, v)| v.map(|v| (i, v))).collect();
                        let dts: Vec<Option<DatumType>> =
                            node.inputs.iter().map(|v| v.map(|v| graph.ty(v).dt)).collect();
                        let expr = typed_expr(&node.op, &dts, out_ty.dt).ok_or_else(|| {
                            unsupported(format!(
                                "{} data",
                                dts.iter().flatten().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")
                            ))
                        })?;
                        // Inputs are named by position among the present ones.
                        let mut expr = expr;
                        for (k, (i, _)) in present.iter().enumerate().rev() {
                            expr = expr.replace(&format!("@{i}"), &format!("a{k}"));
                        }
                        let out_t =
                            codegen::dt_storage(out_ty.dt).ok_or_else(|| unsupported(format!("{} data", out_ty.dt)))?;
                        let mut operands = Vec::new();
                        for (_, v) in &present {
                            let ty = graph.ty(*v);
                            let t = codegen::dt_storage(ty.dt).ok_or_else(|| unsupported(format!("{} data", ty.dt)))?;
                            b.fp64 |= ty.dt == DatumType::F64;
                            operands.push((t, stowage_cpu::kernels::broadcast::strides_for(&ty.shape, &out_ty.shape)));
                        }
                        b.fp64 |= out_ty.dt == DatumType::F64 || expr.contains("(double)");
                        let dims = out_ty.shape.clone();
                        let k = b.kernel(|name| codegen::typed(name, &dims, &operands, out_t, &expr));
                        let mut args: Vec<ArgRef> = present
                            .iter()
                            .map(|(i, _)| ins[*i].map(ArgRef::Slot))
                            .collect::<Option<_>>()
                            .ok_or_else(|| unsupported("an input".into()))?;
                        args.push(ArgRef::Slot(out));
                        let total: usize = dims.iter().product();
                        let l = launch(k, args, vec![total], None, vec![ArgRef::Slot(out)]);
                        (node.op.name(), StepKind::Launches { outs: vec![out], scratch: vec![], launches: vec![l] })
                    }
                    Op::Reduce { kind, noop_with_empty_axes, .. } => {
                        let x = in_ty(0).ok_or_else(|| unsupported("no input".into()))?;
                        let t = codegen::dt_type(x.dt).ok_or_else(|| unsupported(format!("{} data", x.dt)))?;
                        let out_t =
                            codegen::dt_type(out_ty.dt).ok_or_else(|| unsupported(format!("{} data", out_ty.dt)))?;
                        let axes = match ins.get(1).copied().flatten() {
                            Some(_) => {
                                let v = node.inputs[1].ok_or_else(|| unsupported("axes".into()))?;
                                let t = graph.const_value(v).ok_or_else(|| unsupported("run-time axes".into()))?;
                                stowage_compiler::consts::to_i64s(t).map_err(|e| unsupported(e.to_string()))?
                            }
                            None => vec![],
                        };
                        let rank = x.shape.len() as i64;
                        let mut reduced = vec![axes.is_empty() && !noop_with_empty_axes; x.shape.len()];
                        for a in axes {
                            reduced[(if a < 0 { a + rank } else { a }) as usize] = true;
                        }
                        let float = matches!(x.dt, DatumType::F32 | DatumType::F64);
                        let acc_t = if float {
                            "double"
                        } else if x.dt == DatumType::Bool {
                            "uchar"
                        } else {
                            t
                        };
                        b.fp64 |= float;
                        let (init, step, finish) = match kind {
                            ir::Reduce::Sum => ("0", "acc += x;", "acc"),
                            ir::Reduce::Mean => ("0", "acc += x;", "acc / (double)count"),
                            ir::Reduce::Max if float => {
                                ("-INFINITY", "acc = (isnan((double)x) || x > acc) ? x : acc;", "acc")
                            }
                            ir::Reduce::Min if float => {
                                ("INFINITY", "acc = (isnan((double)x) || x < acc) ? x : acc;", "acc")
                            }
                            ir::Reduce::Max => ("0", "acc = (j == 0 || x > acc) ? x : acc;", "acc"),
                            ir::Reduce::Min => ("0", "acc = (j == 0 || x < acc) ? x : acc;", "acc"),
                        };
                        let shape = x.shape.clone();
                        let k = b.kernel(|name| {
                            codegen::reduce(name, &shape, &reduced, t, out_t, acc_t, init, step, finish)
                        });
                        let total: usize = out_ty.shape.iter().product();
                        let l = launch(k, vec![arg(0)?, ArgRef::Slot(out)], vec![total], None, vec![ArgRef::Slot(out)]);
                        (node.op.name(), StepKind::Launches { outs: vec![out], scratch: vec![], launches: vec![l] })
                    }
                    Op::ArgMax { axis, select_last_index, .. } => {
                        let x = in_ty(0).ok_or_else(|| unsupported("no input".into()))?;
                        let t = codegen::dt_type(x.dt).ok_or_else(|| unsupported(format!("{} data", x.dt)))?;
                        let axis = *axis as usize;
                        let reduced: Vec<bool> = (0..x.shape.len()).map(|a| a == axis).collect();
                        let better = if *select_last_index { ">=" } else { ">" };
                        let step = format!("if (j == 0 || x {better} best) {{ best = x; acc = (long)j; }}");
                        let shape = x.shape.clone();
                        let k = b.kernel(|name| {
                            codegen::reduce(name, &shape, &reduced, t, "long", "long", "0", &step, "acc").replacen(
                                "long acc = 0;",
                                &format!("long acc = 0; {t} best = 0;"),
                                1,
                            )
                        });
                        let total: usize = out_ty.shape.iter().product();
                        let l = launch(k, vec![arg(0)?, ArgRef::Slot(out)], vec![total], None, vec![ArgRef::Slot(out)]);
                        ("ArgMax", StepKind::Launches { outs: vec![out], scratch: vec![], launches: vec![l] })
                    }
                    Op::Expand => {
                        let x = in_ty(0).ok_or_else(|| unsupported("no input".into()))?;
                        let size = x.dt.size_of();
                        if !matches!(size, 1 | 2 | 4 | 8) {
                            return Err(unsupported(format!("{size}-byte elements")));
                        }
                        let src = stowage_cpu::jit::broadcast_strides(&x.shape, &out_ty.shape, size);
                        let l = Loops::relayout(&out_ty.shape, size, src, packed_strides(&out_ty.shape, size));
                        let k = b.kernel(|name| codegen::loops(name, &l, 0, &[]));
                        let total: usize = out_ty.shape.iter().product();
                        let l = launch(k, vec![arg(0)?, ArgRef::Slot(out)], vec![total], None, vec![ArgRef::Slot(out)]);
                        ("Expand", StepKind::Launches { outs: vec![out], scratch: vec![], launches: vec![l] })
                    }
                    Op::Slice | Op::Tile | Op::Pad { .. } | Op::Gather { .. } => {
                        let x = in_ty(0).ok_or_else(|| unsupported("no input".into()))?;
                        let size = x.dt.size_of();
                        if !matches!(size, 1 | 2 | 4 | 8) {
                            return Err(unsupported(format!("{size}-byte elements")));
                        }
                        let ints = |i: usize| -> Result<Option<Vec<i64>>> {
                            match node.inputs.get(i).copied().flatten() {
                                None => Ok(None),
                                Some(v) => {
                                    let t = graph
                                        .const_value(v)
                                        .ok_or_else(|| unsupported(format!("run-time input {i}")))?;
                                    stowage_compiler::consts::to_i64s(t)
                                        .map(Some)
                                        .map_err(|e| unsupported(e.to_string()))
                                }
                            }
                        };
                        let rank = x.shape.len();
                        let norm = |a: i64| if a < 0 { (a + rank as i64) as usize } else { a as usize };
                        let mut args = vec![arg(0)?];
                        let map = match &node.op {
                            Op::Slice => {
                                let starts = ints(1)?.unwrap_or_default();
                                let ends = ints(2)?.unwrap_or_default();
                                let axes = ints(3)?.unwrap_or_else(|| (0..starts.len() as i64).collect());
                                let steps = ints(4)?.unwrap_or_else(|| vec![1; starts.len()]);
                                let (mut begin, mut step) = (vec![0i64; rank], vec![1i64; rank]);
                                for i in 0..starts.len() {
                                    let a = norm(axes[i]);
                                    let (s0, _, st) =
                                        stowage_compiler::infer::slice_bounds(x.shape[a], starts[i], ends[i], steps[i])
                                            .map_err(|e| unsupported(e.to_string()))?;
                                    (begin[a], step[a]) = (s0 as i64, st as i64);
                                }
                                codegen::IndexMap::Slice { begin, step }
                            }
                            Op::Tile => codegen::IndexMap::Tile,
                            Op::Pad { mode } => {
                                let pads = ints(1)?.unwrap_or_default();
                                let axes: Vec<usize> = match ints(3)? {
                                    Some(axes) => axes.into_iter().map(norm).collect(),
                                    None => (0..rank).collect(),
                                };
                                let mut begin = vec![0i64; rank];
                                for (i, &a) in axes.iter().enumerate() {
                                    begin[a] = pads[i];
                                }
                                let mode = match mode {
                                    ir::PadMode::Constant if ins.get(2).copied().flatten().is_some() => {
                                        args.push(arg(2)?);
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
                                let idx = in_ty(1).ok_or_else(|| unsupported("no indices".into()))?;
                                let index_type = match idx.dt {
                                    DatumType::I64 => "long",
                                    DatumType::I32 => "int",
                                    other => return Err(unsupported(format!("{other} indices"))),
                                };
                                args.push(arg(1)?);
                                codegen::IndexMap::Gather { axis: *axis as usize, rank: idx.shape.len(), index_type }
                            }
                            _ => unreachable!("matched above"),
                        };
                        args.push(ArgRef::Slot(out));
                        let (shape, out_shape) = (x.shape.clone(), out_ty.shape.clone());
                        let k = b.kernel(|name| codegen::index_map(name, &out_shape, &shape, size, &map));
                        let total: usize = out_shape.iter().product();
                        let l = launch(k, args, vec![total], None, vec![ArgRef::Slot(out)]);
                        (node.op.name(), StepKind::Launches { outs: vec![out], scratch: vec![], launches: vec![l] })
                    }
                    Op::Resize(r) => {
                        f32_only(out_ty.dt)?;
                        let x = in_ty(0).ok_or_else(|| unsupported("no input".into()))?;
                        f32_only(x.dt)?;
                        let rank = x.shape.len();
                        let spec = stowage_cpu::lower::resize_spec(graph, r, &node.inputs, rank)
                            .map_err(|e| unsupported(e.to_string()))?;
                        let p = spec.params();
                        if p.roi.is_some_and(|roi| roi.len() != 2 * rank) {
                            return Err(unsupported(format!("a region of interest not of 2 × {rank} values")));
                        }
                        // One launch per resized axis, as the CPU does: the first reads X, each writes a scratch
                        // buffer the next reads, the last writes the output.
                        let mut shape = x.shape.clone();
                        let mut axes = Vec::new();
                        for a in 0..rank {
                            if let Some(plan) = plan_axis(&p, a, rank, x.shape[a], out_ty.shape[a]) {
                                axes.push((a, plan));
                            }
                        }
                        let (mut launches, mut scratch) = (Vec::new(), Vec::new());
                        let mut src = arg(0)?;
                        for (k, (a, plan)) in axes.iter().enumerate() {
                            // The tables are program-scope constants: a program keeps under 48 KiB of them (devices
                            // guarantee 64 KiB of constant memory), else the node is refused here, where the planner
                            // sees it, rather than failing the whole program's build.
                            b.constant_bytes += 8 * plan.idx.len();
                            if b.constant_bytes > 48 << 10 {
                                return Err(unsupported(format!(
                                    "axis {a}: interpolation tables of {} taps (constant memory)",
                                    plan.idx.len()
                                )));
                            }
                            let inner: usize = shape[a + 1..].iter().product();
                            let in_len = shape[*a];
                            let kern =
                                b.kernel(|name| codegen::resize_axis(name, plan, in_len, inner, p.extrapolation_value));
                            shape[*a] = out_ty.shape[*a];
                            let total: usize = shape.iter().product();
                            let dst = if k + 1 == axes.len() {
                                ArgRef::Slot(out)
                            } else {
                                scratch.push(total * 4);
                                ArgRef::Scratch(scratch.len() - 1)
                            };
                            launches.push(launch(kern, vec![src, dst], vec![total], None, vec![dst]));
                            src = dst;
                        }
                        if axes.is_empty() {
                            // The identity: a copy.
                            let size = 4;
                            let l = Loops::relayout(
                                &x.shape,
                                size,
                                packed_strides(&x.shape, size),
                                packed_strides(&x.shape, size),
                            );
                            let kern = b.kernel(|name| codegen::loops(name, &l, 0, &[]));
                            let total: usize = x.shape.iter().product();
                            launches.push(launch(
                                kern,
                                vec![arg(0)?, ArgRef::Slot(out)],
                                vec![total],
                                None,
                                vec![ArgRef::Slot(out)],
                            ));
                        }
                        ("Resize", StepKind::Launches { outs: vec![out], scratch, launches })
                    }
                    other => return Err(unsupported(format!("{} has no kernel on this target yet", other.name()))),
                }
            };
            let mut read: Vec<usize> = ins.iter().flatten().copied().collect();
            if let StepKind::Alias { from, .. } = kind {
                read.push(from);
            }
            reads.push(read);
            steps.push(Step { name: node.name.clone(), op, kind });
            Ok(())
        })();
        match (result, refused.as_deref_mut()) {
            (Ok(()), _) => {}
            (Err(ClError::Unsupported { reason, .. }), Some(found)) => found.push((n, reason)),
            (Err(e), _) => return Err(e),
        }
    }
    // Outputs that are constants (folded graphs) are uploaded like the constants kernels read.
    for o in graph.outputs() {
        if matches!(graph.value(o.value).def, ValueDef::Const(_)) && !consts.iter().any(|(_, c)| *c == o.value) {
            let s = b.slot(o.value);
            consts.push((s, o.value));
        }
    }
    let outputs: Vec<Binding> = graph
        .outputs()
        .iter()
        .map(|o| {
            let ty = graph.ty(o.value);
            Binding { name: o.name.clone(), slot: b.slot(o.value), dt: ty.dt, shape: ty.shape.clone() }
        })
        .collect();
    // Aliases keep their source alive as long as themselves: a value's last use is the last read of it or of any
    // alias of it.
    let slots = b.types.len();
    let mut last_use = vec![usize::MAX; slots];
    let mut alias_root: Vec<usize> = (0..slots).collect();
    for step in &steps {
        if let StepKind::Alias { from, to } = step.kind {
            alias_root[to] = alias_root[from];
        }
    }
    let mut last = vec![None; slots];
    for (i, read) in reads.iter().enumerate() {
        for &s in read {
            last[alias_root[s]] = Some(i);
        }
    }
    let kept: HashSet<usize> = consts
        .iter()
        .map(|(s, _)| *s)
        .chain(inputs.iter().map(|b| b.slot))
        .chain(outputs.iter().map(|b| alias_root[b.slot]))
        .collect();
    for s in 0..slots {
        if let (Some(i), false) = (last[alias_root[s]], kept.contains(&alias_root[s])) {
            last_use[s] = i;
        }
    }
    if let Some(found) = refused {
        // A chain is one kernel: when it fails, each member has no kernel either.
        let heads: Vec<(ir::NodeId, String)> = found.clone();
        for (head, reason) in heads {
            if let Some(p) = planned.get(&head) {
                found.extend(p.members.iter().filter(|&&m| m != head).map(|&m| (m, reason.clone())));
            }
        }
    }
    Ok(Translation { b, inputs, outputs, consts, steps, last_use })
}

/// Builds a translation's program and uploads its constants.
fn build(graph: &Graph, target: &Target, ledger: &Ledger, t: Translation<'_>) -> Result<ClProgram> {
    let Translation { b, inputs, outputs, consts, steps, last_use } = t;
    let (program, kernels) = if b.kernels.is_empty() {
        (None, Vec::new())
    } else {
        let mut source = String::new();
        if b.fp64 {
            source.push_str("#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n");
        }
        source.push_str(&b.source);
        let program = target.program(&source, &format!("graph '{}'", graph.name))?;
        let kernels =
            b.kernels.iter().map(|k| Ok(Mutex::new(target.kernel(&program, k)?))).collect::<Result<Vec<_>>>()?;
        (Some(program), kernels)
    };
    let mut uploaded = Vec::new();
    let mut const_bytes = 0;
    for (s, v) in consts {
        let t = graph.const_value(v).ok_or_else(|| ClError::Transfer {
            value: graph.value(v).name.clone(),
            message: "not a constant".into(),
        })?;
        let t = t.clone().with_name(graph.value(v).name.clone());
        const_bytes += t.len() * t.dt().size_of();
        let buffer = ClBuffer::from_tensor(&t, target, ledger)
            .map_err(|e| ClError::Transfer { value: graph.value(v).name.clone(), message: e.to_string() })?;
        uploaded.push((s, buffer));
    }
    Ok(ClProgram {
        target: target.clone(),
        _program: program,
        kernels,
        steps,
        types: b.types,
        inputs,
        outputs,
        consts: uploaded,
        last_use,
        const_bytes,
        peak: Default::default(),
        pool: Default::default(),
        times: Default::default(),
        notes: b.notes,
    })
}
