//! Lowering of the optimised IR to a [`ClProgram`]: one generated kernel per node, or more (a convolution's im2col
//! on a CPU device, the launch adding up a product split along K), all in one OpenCL program; reshape-like nodes
//! become aliases of their input's buffer.
//!
//! Elementwise chains are fused exactly as on the CPU (`stowage_compiler::lowering::fuse`: the same `Loops`, generated here
//! as OpenCL C), a ReLU that is a convolution's only reader runs in its product's epilogue, and Transpose and Concat
//! are generated relayout copies. Ops without a kernel here are refused at lowering, naming the node.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use stowage_compiler::ir::{self, Graph, Op, PoolKind, ValueDef, ValueId};
use stowage_compiler::lowering::fuse::Planned;
use stowage_compiler::plan::{Granted, Precision};
use stowage_runtime::{DatumType, Ledger};

mod elementwise;
mod epilogue;
mod movement;
mod nn;
mod node;
mod products;
mod prologue;
mod typed;

use node::{Lowered, NodeCx};

use crate::buffer::ClBuffer;
use crate::codegen::{self, Gemm};
use crate::device::{DeviceInfo, Target};
use crate::error::{ClError, Result};
use crate::exec::{ArgRef, Binding, ClProgram, Launch, Step, StepKind};

/// The name a kernel's source is first written with, to compare sources whatever their names.
const PLACEHOLDER: &str = "stowage_kernel_name_";

struct Builder<'g> {
    graph: &'g Graph,
    source: String,
    fp64: bool,
    kernels: Vec<String>,
    /// Each kernel's source written with [`PLACEHOLDER`] for its name, to its index: a kernel written twice (the
    /// steps of an unrolled recurrent layer, the repeated blocks of a ResNet) is compiled once and launched by both.
    written: HashMap<String, usize>,
    /// Per kernel, what it computes where that helps reading a profile (a product's dimensions and blocking).
    notes: Vec<String>,
    /// Work-groups that keep the device busy (twice its compute units).
    min_groups: usize,
    /// The device takes inline PTX (an NVIDIA device).
    ptx: bool,
    /// Tile counters the split products need (`codegen::gemm::split_tail`): the most any one launch takes.
    counters: usize,
    /// Accumulators (floats) the split products add their ranges up in, where the device takes PTX: the most any
    /// one launch takes.
    accumulators: usize,
    /// Convolutions compute their im2col unfolding inside the product (on GPUs; a CPU device does better with
    /// the unfolding written once). `STOWAGE_OPENCL_IMPLICIT_CONV=1` or `0` overrides, for tests and measuring.
    implicit_conv: bool,
    /// Products of one row take a work-group per output (`codegen::gemv`), on GPUs; a CPU device does better with
    /// the tiled kernel. `STOWAGE_OPENCL_GEMV=1` or `0` overrides, for tests and measuring.
    gemv: bool,
    /// Long LayerNorm rows take a work-group each (`codegen::layer_norm`), on GPUs; a CPU device does better with
    /// an item per row. `STOWAGE_OPENCL_GROUPED_ROWS=1` or `0` overrides, for tests and measuring.
    grouped_rows: bool,
    /// Products run on tensor cores (`codegen::mma`): the plan asked tf32, fp16 or bf16 of this target and the
    /// device has them.
    tensor_cores: bool,
    /// The plan asked tf32: f32 products may run on tensor cores (in an fp16 or bf16 plan only half ones do).
    tf32: bool,
    slot_of: HashMap<ValueId, usize>,
    types: Vec<(DatumType, Vec<usize>)>,
    /// Bytes of program-scope `__constant` tables so far (Resize's).
    constant_bytes: usize,
    /// Constants the kernels read (and outputs that are constants), uploaded at build: (slot, value).
    consts: Vec<(usize, ValueId)>,
    /// The steps so far, and the slots each reads.
    steps: Vec<Step>,
    reads: Vec<Vec<usize>>,
}

impl<'g> Builder<'g> {
    fn new(graph: &'g Graph, info: &DeviceInfo, precision: Precision) -> Builder<'g> {
        let choice = |var: &str| match std::env::var(var).as_deref() {
            Ok("1") => true,
            Ok("0") => false,
            _ => info.gpu,
        };
        Builder {
            graph,
            source: String::new(),
            fp64: false,
            kernels: Vec::new(),
            written: HashMap::new(),
            notes: Vec::new(),
            min_groups: 2 * info.compute_units as usize,
            ptx: info.compute_capability.is_some(),
            counters: 0,
            accumulators: 0,
            implicit_conv: choice("STOWAGE_OPENCL_IMPLICIT_CONV"),
            gemv: choice("STOWAGE_OPENCL_GEMV"),
            grouped_rows: choice("STOWAGE_OPENCL_GROUPED_ROWS"),
            tensor_cores: precision != Precision::Fp32 && info.tensor_cores(),
            tf32: precision == Precision::Tf32,
            slot_of: HashMap::new(),
            types: Vec::new(),
            constant_bytes: 0,
            consts: Vec::new(),
            steps: Vec::new(),
            reads: Vec::new(),
        }
    }

    /// The binding of value `v` under `name` (a graph input or output).
    fn binding(&mut self, name: String, v: ValueId) -> Binding {
        let ty = self.graph.ty(v);
        let (dt, shape) = (ty.dt, ty.shape.clone());
        Binding { name, slot: self.slot(v), dt, shape }
    }

    /// Records `v` as a constant to upload, if it is one and not recorded yet.
    fn constant(&mut self, v: ValueId) {
        if matches!(self.graph.value(v).def, ValueDef::Const(_)) && !self.consts.iter().any(|(_, c)| *c == v) {
            let s = self.slot(v);
            self.consts.push((s, v));
        }
    }

    /// Appends a step that reads `read`.
    fn push_step(&mut self, step: Step, read: Vec<usize>) {
        self.steps.push(step);
        self.reads.push(read);
    }

    fn slot(&mut self, v: ValueId) -> usize {
        if let Some(&s) = self.slot_of.get(&v) {
            return s;
        }
        let ty = self.graph.ty(v);
        self.types.push((ty.dt, ty.shape.clone()));
        self.slot_of.insert(v, self.types.len() - 1);
        self.types.len() - 1
    }

    /// Adds a kernel whose source `make(name)` writes; returns its index, that of the same source written before
    /// when there is one.
    fn kernel(&mut self, make: impl FnOnce(&str) -> String) -> usize {
        let text = make(PLACEHOLDER);
        if let Some(&k) = self.written.get(&text) {
            return k;
        }
        let name = format!("k{}", self.kernels.len());
        self.source.push_str(&text.replace(PLACEHOLDER, &name));
        self.source.push('\n');
        self.written.insert(text, self.kernels.len());
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

/// Lowers `graph` for `target`: generates and builds the program (or loads it from the disk cache); constants are
/// used in place where the device can (unified memory, at its alignment), else uploaded (recorded in `ledger`).
pub fn lower(graph: &Graph, target: &Target, ledger: &Ledger) -> Result<ClProgram> {
    lower_planned(graph, target, ledger, &|_: &str| false, Precision::Fp32)
}

/// [`lower`] for a plan: the constants `uploaded` names (by value name) are uploaded, as the plan says; the others
/// are used in place, or, where the device cannot, uploaded with the reason recorded. Products are computed at
/// `precision` where the device can (tf32 on tensor cores), else in fp32 (what [`precision_on`] grants).
pub fn lower_planned(
    graph: &Graph,
    target: &Target,
    ledger: &Ledger,
    uploaded: &dyn Fn(&str) -> bool,
    precision: Precision,
) -> Result<ClProgram> {
    let t = translate(graph, target.info(), None, precision)?;
    build(graph, target, ledger, t, uploaded)
}

/// What a device like `info` computes when a plan asks `asked` of it (`stowage_compiler::plan::precision`, rule
/// 3): fp32 as asked; tf32 on tensor cores where the device has them, else fp32 (a fallback the plan shows, as
/// PyTorch's `allow_tf32` is on a GPU without them); fp16 and bf16 as asked on every device: values stored in
/// the type, read and written by every kernel through `codegen::load`/`store`, arithmetic in fp32.
pub fn precision_on(info: &DeviceInfo, asked: Precision) -> std::result::Result<Granted, String> {
    match asked {
        Precision::Fp32 => Ok(Granted::as_asked(asked, "fp32 arithmetic")),
        Precision::Tf32 if info.tensor_cores() => {
            Ok(Granted::as_asked(asked, "tensor cores: mma.sync m16n8k8, operands rounded to TF32, sums in fp32"))
        }
        Precision::Tf32 => Ok(Granted {
            asked,
            computed: Precision::Fp32,
            how: format!("{} has no tensor cores: products in fp32", info.name),
        }),
        Precision::Fp16 | Precision::Bf16 => {
            let (ty, stored) = match asked {
                Precision::Fp16 => ("f16", "vload_half, vstore_half_rte: core OpenCL C"),
                _ => ("bf16", "the upper half of an fp32, rounded to nearest even"),
            };
            Ok(Granted::as_asked(
                asked,
                if info.tensor_cores() {
                    format!(
                        "values stored in {asked}, products on tensor cores (mma.sync m16n8k16 {ty}), sums and other \
                         arithmetic in fp32"
                    )
                } else {
                    format!("values stored in {asked} ({stored}), arithmetic and sums in fp32")
                },
            ))
        }
    }
}

/// The nodes of `graph` this backend has no kernel for on a device like `info`, each with the reason, found by
/// generating the program's source without building it (what the planner asks; see `crate::PlanTarget`).
pub fn unsupported_nodes(graph: &Graph, info: &DeviceInfo) -> Result<Vec<(ir::NodeId, String)>> {
    let mut found = Vec::new();
    translate(graph, info, Some(&mut found), Precision::Fp32)?;
    Ok(found)
}

/// The steps [`lower`] will run for `graph` on a device like `info`, as the planner's memory pass plans over them:
/// a fused chain is one step at its root reading the chain's inputs, a convolution with its ReLU writes the ReLU's
/// value (with a residual addition: the addition's or its ReLU's, reading the added term), a product with a chain
/// in its epilogue writes the chain's output and reads its other inputs, a MatMul reads a transposed operand's
/// source (the Transpose has no step), a reshape-like node is a view of its input, and a Dropout's mask is a step
/// of its own.
pub fn memory_steps(graph: &Graph, info: &DeviceInfo) -> Result<Vec<stowage_compiler::plan::KernelStep>> {
    let t = translate(graph, info, None, Precision::Fp32)?;
    let names = slot_names(graph, &t.b);
    let steps = t.b.steps.iter().zip(&t.b.reads).map(|(step, read)| {
        let (reads, writes, view): (Vec<usize>, Vec<usize>, bool) = match &step.kind {
            // The memory pass takes a view's source as its first read.
            StepKind::Alias { from, to } => {
                (std::iter::once(*from).chain(read.iter().copied().filter(|s| s != from)).collect(), vec![*to], true)
            }
            StepKind::Launches { outs, .. } => (read.clone(), outs.clone(), false),
        };
        stowage_compiler::plan::KernelStep {
            node: step.name.clone(),
            reads: reads.iter().map(|&s| names[s].clone()).collect(),
            writes: writes.iter().map(|&s| names[s].clone()).collect(),
            view,
            in_place: false,
            joins: false,
        }
    });
    Ok(steps.collect())
}

/// Per slot, the name of its value as the plan writes it (`%N` for an unnamed one).
fn slot_names(graph: &Graph, b: &Builder<'_>) -> Vec<String> {
    let mut names = vec![String::new(); b.types.len()];
    for (&v, &s) in &b.slot_of {
        names[s] = stowage_compiler::plan::segments::value_name(graph, v);
    }
    names
}

/// A graph translated to OpenCL C and steps, not built yet.
struct Translation<'g> {
    b: Builder<'g>,
    inputs: Vec<Binding>,
    outputs: Vec<Binding>,
    last_use: Vec<usize>,
}

/// What fusion decided for the whole graph before any node is lowered.
struct Fusion {
    /// ReLUs run in the epilogue of the convolution they read (convolution → ReLU).
    relu_after: HashMap<ir::NodeId, ir::NodeId>,
    /// Residual additions (and their ReLUs) run in the epilogue of the convolution they read (`stowage_compiler::lowering::residual`).
    residual: HashMap<ir::NodeId, stowage_compiler::lowering::residual::Residual>,
    /// Those ReLUs, additions and additions' ReLUs.
    absorbed: HashSet<ir::NodeId>,
    /// Chains, by root node.
    planned: HashMap<ir::NodeId, Planned>,
    /// MatMul operands read through a transpose, by MatMul (`prologue.rs`); the transposes are in `absorbed`.
    transposed: HashMap<ir::NodeId, [Option<prologue::Transposed>; 2]>,
    /// Chains run in a product's epilogue, by product (`epilogue.rs`); their members are in `absorbed`.
    epilogues: HashMap<ir::NodeId, epilogue::Absorbed>,
    /// Every node in a chain.
    members: HashSet<ir::NodeId>,
}

/// Translates every node; with `refused`, a node without a kernel is listed there instead of failing (and a fused
/// chain that fails lists each of its members).
fn translate<'g>(
    graph: &'g Graph,
    info: &DeviceInfo,
    mut refused: Option<&mut Vec<(ir::NodeId, String)>>,
    precision: Precision,
) -> Result<Translation<'g>> {
    // Convolutions in f32, f16 and bf16 apply a ReLU in their epilogue alike.
    let floats = [DatumType::F32, DatumType::F16, DatumType::BF16];
    let relu_after = stowage_compiler::lowering::conv_epilogue_pairs(graph, &floats, |node| {
        matches!(node.op, Op::Unary(ir::Unary::Relu))
    });
    let mut absorbed: HashSet<ir::NodeId> = relu_after.values().copied().collect();
    let residual = stowage_compiler::lowering::residual::residual_adds(graph, &absorbed, &floats);
    absorbed.extend(residual.values().flat_map(|r| std::iter::once(r.add).chain(r.relu)));
    let transposed = prologue::transposed_operands(graph, &absorbed);
    absorbed.extend(transposed.values().flatten().flatten().map(|t| t.node));
    // Chains over f32, and over f16 and bf16 in a plan that stores values so (disjoint: a chain has one type).
    let mut planned = stowage_compiler::lowering::fuse::plan(graph, &absorbed);
    for half in [DatumType::F16, DatumType::BF16] {
        planned.extend(stowage_compiler::lowering::fuse::plan_in(graph, &absorbed, half));
    }
    let members = planned.values().flat_map(|p| p.members.iter().copied()).collect();
    let has_epilogue: HashSet<ir::NodeId> = relu_after.keys().chain(residual.keys()).copied().collect();
    let epilogues = epilogue::chain_epilogues(graph, &planned, &has_epilogue);
    absorbed.extend(epilogues.values().flat_map(|e| planned[&e.root].members.iter().copied()));
    let fusion = Fusion { relu_after, residual, absorbed, planned, transposed, epilogues, members };
    let mut b = Builder::new(graph, info, precision);
    let inputs: Vec<Binding> = graph.inputs().iter().map(|&v| b.binding(graph.value(v).name.clone(), v)).collect();
    for &n in graph.order() {
        match (lower_node(&mut b, &fusion, n), refused.as_deref_mut()) {
            (Ok(()), _) => {}
            (Err(ClError::Unsupported { reason, .. }), Some(found)) => found.push((n, reason)),
            (Err(e), _) => return Err(e),
        }
    }
    // Outputs that are constants (folded graphs) are uploaded like the constants kernels read.
    for o in graph.outputs() {
        b.constant(o.value);
    }
    let outputs: Vec<Binding> = graph.outputs().iter().map(|o| b.binding(o.name.clone(), o.value)).collect();
    let last_use = last_uses(&b, &inputs, &outputs);
    if let Some(found) = refused {
        // A chain is one kernel: when it fails, each member has no kernel either.
        let heads: Vec<(ir::NodeId, String)> = found.clone();
        for (head, reason) in heads {
            if let Some(p) = fusion.planned.get(&head) {
                found.extend(p.members.iter().filter(|&&m| m != head).map(|&m| (m, reason.clone())));
            }
            // A product's transposed operands and chain run in it or not at all.
            if let Some(pair) = fusion.transposed.get(&head) {
                found.extend(pair.iter().flatten().map(|t| (t.node, reason.clone())));
            }
            if let Some(e) = fusion.epilogues.get(&head) {
                found.extend(fusion.planned[&e.root].members.iter().map(|&m| (m, reason.clone())));
            }
        }
    }
    Ok(Translation { b, inputs, outputs, last_use })
}

/// Lowers node `n` into `b`'s steps (nothing for a chain's inner members and absorbed ReLUs).
fn lower_node(b: &mut Builder<'_>, fusion: &Fusion, n: ir::NodeId) -> Result<()> {
    let graph = b.graph;
    let node = graph.node(n);
    if (fusion.members.contains(&n) && !fusion.planned.contains_key(&n)) || fusion.absorbed.contains(&n) {
        return Ok(());
    }
    let planned = fusion.planned.get(&n);
    let residual = fusion.residual.get(&n);
    let mut node_inputs: Vec<Option<ValueId>> = match planned {
        Some(p) => p.inputs.iter().map(|&v| Some(v)).collect(),
        None => node.inputs.clone(),
    };
    // A residual addition's other term is the convolution's input 3 (after X, W and the optional bias).
    if let Some(r) = residual {
        node_inputs.resize(3, None);
        node_inputs.push(Some(r.other));
    }
    // A transposed operand is read where the transpose would have read it.
    let transposed = fusion.transposed.get(&n);
    let mut views: [Option<Vec<usize>>; 2] = [None, None];
    for (i, t) in transposed.iter().flat_map(|pair| pair.iter().enumerate()) {
        if let Some(t) = t {
            node_inputs[i] = Some(t.source);
            views[i] = Some(prologue::view_strides(&graph.ty(t.source).shape, &t.perm));
        }
    }
    // A chain in the epilogue reads its other inputs from input 4 on.
    let chain = fusion.epilogues.get(&n);
    if let Some(e) = chain {
        b.fp64 |= codegen::needs_fp64(&e.epilogue.loops);
        node_inputs.resize(4, None);
        node_inputs.extend(e.others.iter().map(|&v| Some(v)));
    }
    for v in node_inputs.iter().flatten() {
        b.constant(*v);
    }
    let ins: Vec<Option<usize>> = node_inputs.iter().map(|v| v.map(|v| b.slot(v))).collect();
    let out_value = match (fusion.relu_after.get(&n), residual, chain) {
        (Some(&r), _, _) => graph.node(r).outputs[0],
        (None, Some(r), _) => graph.node(r.last()).outputs[0],
        (None, None, Some(e)) => graph.node(e.root).outputs[0],
        (None, None, None) => node.outputs.first().copied().flatten(),
    };
    let unsupported =
        |reason: &str| ClError::Unsupported { node: node.name.clone(), op: node.op.name(), reason: reason.into() };
    // Strings are handles into the host process's string table: every op on them runs on the CPU.
    if node.inputs.iter().chain(&node.outputs).flatten().any(|&v| graph.ty(v).dt == DatumType::Str) {
        return Err(unsupported("strings stay on the host (the CPU runs every op that touches them)"));
    }
    if matches!(node.op, Op::Lstm(_)) {
        // Kept whole only where a target list holds a kind that runs it whole (the CPU); the OpenCL kernels take
        // the unrolled form, which `--target opencl` alone imports.
        return Err(unsupported("LSTM runs whole on the CPU only; without the CPU in the list it is unrolled"));
    }
    let out_value = out_value.ok_or_else(|| unsupported("a node without its first output"))?;
    let cx = NodeCx {
        graph,
        node,
        ins,
        out: b.slot(out_value),
        out_ty: graph.ty(out_value).clone(),
        relu: fusion.relu_after.contains_key(&n) || residual.is_some_and(|r| r.relu.is_some()),
        residual: residual.is_some(),
        chain: chain.map(|e| e.epilogue.clone()),
        views,
    };
    let (op, kind) = match (planned, &node.op) {
        (_, Op::Split { axis, .. }) => movement::split(b, &cx, *axis as usize)?,
        (Some(p), _) => elementwise::fused(b, &cx, p)?,
        (None, _) => {
            let stats_ok = matches!(node.op, Op::Dropout { .. } | Op::LayerNorm { .. } | Op::BatchNorm { .. })
                || matches!(&node.op, Op::Pool(p) if p.kind == PoolKind::Max);
            if node.outputs.iter().skip(1).any(Option::is_some) && !stats_ok {
                return Err(unsupported("a second output"));
            }
            by_family(b, &cx)?
        }
    };
    let mut read: Vec<usize> = cx.ins.iter().flatten().copied().collect();
    if let StepKind::Alias { from, .. } = kind {
        read.push(from);
    }
    b.push_step(Step { name: node.name.clone(), op, kind }, read);
    Ok(())
}

/// The lowering of one node by its op's family.
fn by_family(b: &mut Builder<'_>, cx: &NodeCx<'_>) -> Result<Lowered> {
    match &cx.node.op {
        Op::Identity | Op::Reshape { .. } | Op::Flatten { .. } | Op::Squeeze | Op::Unsqueeze | Op::Dropout { .. } => {
            movement::alias(b, cx)
        }
        Op::Transpose { perm } => movement::transpose(b, cx, perm),
        Op::Concat { axis } => movement::concat(b, cx, *axis as usize),
        Op::Expand => movement::expand(b, cx),
        Op::Slice | Op::Tile | Op::Pad { .. } | Op::Gather { .. } | Op::GatherElements { .. } => {
            movement::index_map(b, cx)
        }
        Op::Resize(r) => movement::resize(b, cx, r),
        Op::MatMul | Op::Gemm(_) => products::matmul(b, cx),
        Op::Conv(c) => products::convolution(b, cx, c),
        Op::BatchNorm { epsilon, momentum, training } => nn::batch_norm(b, cx, *epsilon, *momentum, *training),
        Op::Pool(p) if p.kind == PoolKind::Max => nn::max_pool(b, cx, p),
        Op::Pool(p) => nn::average_pool(b, cx, p),
        Op::GlobalPool(kind) => nn::global_pool(b, cx, *kind),
        Op::Softmax { kind, axis, flatten } => nn::softmax(b, cx, *kind, *axis, *flatten),
        Op::LayerNorm { axis, epsilon, .. } => nn::layer_norm(b, cx, *axis, *epsilon),
        Op::Lrn { size, alpha, beta, bias } => nn::lrn(b, cx, *size, *alpha, *beta, *bias),
        Op::Unary(_) | Op::Binary(_) | Op::Variadic(_) | Op::Clip | Op::Where | Op::Cast { .. } => {
            elementwise::typed(b, cx)
        }
        Op::Reduce { kind, noop_with_empty_axes, .. } => elementwise::reduce(b, cx, *kind, *noop_with_empty_axes),
        Op::ArgMax { axis, select_last_index, min, .. } => elementwise::arg_max(b, cx, *axis, *select_last_index, *min),
        Op::Cumulative { product, exclusive, reverse } => {
            elementwise::cumulative(b, cx, *product, *exclusive, *reverse)
        }
        other => Err(cx.unsupported(format!("{} has no kernel on this target yet", other.name()))),
    }
}

/// Per slot, the last step that reads it (`usize::MAX`: kept to the end). Aliases keep their source alive as long
/// as themselves: a value's last use is the last read of it or of any alias of it; constants, inputs and outputs
/// are kept.
fn last_uses(b: &Builder<'_>, inputs: &[Binding], outputs: &[Binding]) -> Vec<usize> {
    let slots = b.types.len();
    let mut last_use = vec![usize::MAX; slots];
    let mut alias_root: Vec<usize> = (0..slots).collect();
    for step in &b.steps {
        if let StepKind::Alias { from, to } = step.kind {
            alias_root[to] = alias_root[from];
        }
    }
    let mut last = vec![None; slots];
    for (i, read) in b.reads.iter().enumerate() {
        for &s in read {
            last[alias_root[s]] = Some(i);
        }
    }
    let kept: HashSet<usize> = b
        .consts
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
    last_use
}

/// Builds a translation's program and uploads its constants.
fn build(
    graph: &Graph,
    target: &Target,
    ledger: &Ledger,
    t: Translation<'_>,
    uploaded: &dyn Fn(&str) -> bool,
) -> Result<ClProgram> {
    let slot_names = slot_names(graph, &t.b);
    let Translation { b, inputs, outputs, last_use } = t;
    let (program, kernels) = if b.kernels.is_empty() {
        (None, Vec::new())
    } else {
        let mut source = String::new();
        if b.fp64 {
            source.push_str("#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n");
        }
        if b.tensor_cores {
            source.push_str(codegen::MMA_HELPERS);
        }
        source.push_str(&b.source);
        let program = target.program(&source, &format!("graph '{}'", graph.name))?;
        let kernels =
            b.kernels.iter().map(|k| Ok(Mutex::new(target.kernel(&program, k)?))).collect::<Result<Vec<_>>>()?;
        (Some(program), kernels)
    };
    let mut buffers = Vec::new();
    let mut const_bytes = 0;
    for (s, v) in b.consts {
        let t = graph.const_value(v).ok_or_else(|| ClError::Transfer {
            value: graph.value(v).name.clone(),
            message: "not a constant".into(),
        })?;
        let name = graph.value(v).name.clone();
        // Owned: a weight left in the model file's bytes is copied out once, here; the program, which may import
        // it in place on a unified device, does not hold the file's mapping (`Tensor::owned`).
        let t = t.owned().map_err(|e| ClError::Transfer { value: name.clone(), message: e.to_string() })?;
        let t = t.with_name(name.clone());
        const_bytes += t.len() * t.dt().size_of();
        let in_place = if uploaded(&name) { None } else { ClBuffer::import_constant(target, &t)?.ok() };
        let buffer = match in_place {
            Some(b) => b,
            None => ClBuffer::from_tensor(&t, target, ledger)
                .map_err(|e| ClError::Transfer { value: name, message: e.to_string() })?,
        };
        buffers.push((s, buffer));
    }
    // The split products' tile counters and accumulators, zero before each launch (each launch's last work-groups
    // set theirs back).
    let zeroed = |n: usize, dt: DatumType| match n {
        0 => Ok(None),
        n => ClBuffer::in_device_memory(target, dt, &vec![0; 4 * n]).map(Some),
    };
    let (counters, accumulators) = (zeroed(b.counters, DatumType::I32)?, zeroed(b.accumulators, DatumType::F32)?);
    Ok(ClProgram {
        counters,
        accumulators,
        target: target.clone(),
        _program: program,
        kernels,
        steps: b.steps,
        types: b.types,
        inputs,
        outputs,
        consts: buffers,
        last_use,
        const_bytes,
        slot_names,
        memory: None,
        running: Default::default(),
        peak: Default::default(),
        pool: Default::default(),
        replay: Default::default(),
        replayed: Default::default(),
        handed_out: Default::default(),
        owned: Default::default(),
        times: Default::default(),
        notes: b.notes,
    })
}
