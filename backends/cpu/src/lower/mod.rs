//! Lowering of a compiled IR graph to a CPU [`Program`]: one step per live node, its kernel chosen and its
//! attributes resolved here (slice bounds, pad amounts, reduction axes), so that running does no planning.

use std::collections::HashMap;

use stowage_compiler::consts;
use stowage_compiler::infer::slice_bounds;
use stowage_compiler::ir::{self, Graph, Op, ValueDef, ValueId};
use stowage_compiler::lowering::residual::{residual_adds, Residual};
use stowage_runtime::{DatumType, Tensor};

use crate::error::{CpuError, Result};
use crate::jit::{Jit, JitCode, Loops};
use crate::kernels::act::Act;
use crate::kernels::elementwise::{self, BinaryFn};
use crate::kernels::{cast, cumulative, movement, scatter};
use crate::program::{Binding, Kernel, Program, Step};

mod blocks;
mod nn;
mod recurrent;
mod subgraphs;
mod text;

pub use stowage_compiler::lowering::{
    binary_fn, conv_epilogue_pairs, conv_relu_pairs, conv_silu, fuse, resize_spec, silu_operands, unary_fn,
};
pub use subgraphs::Taken;

/// How to lower.
#[derive(Clone, Debug)]
pub struct LowerOptions {
    /// Kernel threads.
    pub threads: usize,
    /// Fuse f32 elementwise chains into Cranelift-compiled kernels (else each node runs its interpreter kernel).
    pub fuse: bool,
    /// Graph inputs the caller holds in another layout than packed row-major, by name: their element strides.
    /// The generated kernels that read them are compiled for these strides and read the caller's memory in place
    /// (the planner passes only inputs every reading kernel takes so); a run must then give them in this layout.
    pub input_strides: HashMap<String, Vec<usize>>,
    /// In built code: the kernels linked in, which lowering takes instead of compiling its generated kernels.
    pub linked: Option<&'static [crate::jit::Precompiled]>,
    /// Values the plan holds in channel blocks, by name: their block's width (`plan::blocked`, `lower/blocks.rs`).
    /// Never graph inputs or outputs.
    pub blocked: HashMap<String, usize>,
    /// Every convolution and pool the CPU takes in channel blocks runs in blocks, converting its packed values
    /// around it (the `cpu:blocks` target: the blocked kernels on every case of a suite).
    pub force_blocks: bool,
}

impl Default for LowerOptions {
    fn default() -> Self {
        LowerOptions {
            threads: 1,
            fuse: true,
            input_strides: HashMap::new(),
            linked: None,
            blocked: HashMap::new(),
            force_blocks: false,
        }
    }
}

/// Lowers `graph` to a program that uses `threads` threads, with fusion.
pub fn lower(graph: &Graph, threads: usize) -> Result<Program> {
    lower_with(graph, &LowerOptions { threads, ..LowerOptions::default() })
}

/// Lowers `graph` to a program.
pub fn lower_with(graph: &Graph, options: &LowerOptions) -> Result<Program> {
    let threads = options.threads;
    let gen = generated(graph, options)?;
    let mut kernel_index: HashMap<ir::NodeId, usize> = HashMap::new();
    let code = if gen.kernels.is_empty() {
        None
    } else {
        let mut jit = Jit::new(options.linked)?;
        for (n, loops) in &gen.kernels {
            kernel_index.insert(*n, jit.add(loops)?);
        }
        Some(jit.finish()?)
    };
    let mut slot_of: HashMap<ValueId, usize> = HashMap::new();
    let mut slot = |v: ValueId| -> usize {
        let next = slot_of.len();
        *slot_of.entry(v).or_insert(next)
    };
    let mut consts = Vec::new();
    let inputs: Vec<Binding> = graph
        .inputs()
        .iter()
        .map(|&v| {
            let ty = graph.ty(v);
            Binding { name: graph.value(v).name.clone(), slot: slot(v), dt: ty.dt, shape: ty.shape.clone() }
        })
        .collect();
    let mut steps = Vec::new();
    let mut packed_bytes = 0;
    let mut branches = Vec::new();
    for shape in shapes(graph, &gen) {
        let n = shape.node;
        let node = graph.node(n);
        let chain = gen.planned.get(&n);
        let node_inputs = &shape.reads;
        if let (true, Op::Conv(c), Some(w)) = (shape.packed_weights, &node.op, node.inputs.get(1).copied().flatten()) {
            let window = &c.window;
            let p = crate::kernels::conv::ConvParams {
                kernel: &window.kernel,
                strides: &window.strides,
                dilations: &window.dilations,
                pads: &window.pads,
                group: c.group,
            };
            let out = out_shape(graph, &node.outputs, 0);
            packed_bytes += crate::kernels::conv::PackedWeights::bytes_for_output(&graph.ty(w).shape, &p, &out);
        }
        if chain.is_none() && crate::kernels::sgemm512::available() {
            let out = out_shape(graph, &node.outputs, 0);
            if let Some(plan) = nn::few_rows_plan(graph, &node.op, &node.inputs, &out) {
                packed_bytes += nn::few_rows_bytes(&plan);
            }
        }
        let mut ins = Vec::with_capacity(node_inputs.len());
        for input in node_inputs.iter() {
            let Some(v) = *input else {
                ins.push(None);
                continue;
            };
            let s = slot(v);
            if let ValueDef::Const(t) = &graph.value(v).def {
                if !consts.iter().any(|(c, _): &(usize, Tensor<'static>)| *c == s) {
                    // Owned: a weight left in the model file's bytes is copied out of them once, here, not read
                    // from the file's mapping by a run (`Tensor::owned`).
                    consts.push((s, t.owned()?));
                }
            }
            ins.push(Some(s));
        }
        let out_values = &shape.writes;
        let outs: Vec<Option<usize>> = out_values.iter().map(|o| o.map(&mut slot)).collect();
        let (op_name, kernel) = match (kernel_index.get(&n), &code) {
            (Some(&index), Some(code)) => {
                let out = node.outputs[0]
                    .map(|v| graph.ty(v).clone())
                    .ok_or_else(|| CpuError::NotImplemented(format!("node '{}' has no first output", node.name)))?;
                let expected = node_inputs
                    .iter()
                    .map(|v| {
                        v.and_then(|v| {
                            options
                                .input_strides
                                .get(&graph.value(v).name)
                                .filter(|_| gen.strided.contains_key(&v))
                                .cloned()
                        })
                    })
                    .collect();
                let k = generated_kernel(code.clone(), index, out.dt, out.shape.clone(), expected);
                (if chain.is_some() { "Fused" } else { node.op.name() }, k)
            }
            _ => {
                let step_err = |e| CpuError::Step { node: node.name.clone(), op: node.op.name(), source: Box::new(e) };
                // A Conv's epilogue: its activation, and whether it adds a residual term (input 3).
                let (act, residual) = match (&node.op, gen.relu_after.get(&n)) {
                    (Op::Conv(_), None) => match gen.residual.get(&n) {
                        Some(r) => (if r.relu.is_some() { Act::Relu } else { Act::None }, true),
                        None => (Act::None, false),
                    },
                    (Op::Conv(_), Some(&r)) => (activation(graph, graph.node(r)).unwrap_or_default(), false),
                    _ => (Act::None, false),
                };
                let written = shape.writes.first().copied().flatten();
                let in_blocks =
                    blocks::kernel(graph, n, written, &options.blocked, (act, residual), options.force_blocks);
                match (&node.op, gen.relu_after.get(&n)) {
                    _ if in_blocks.is_some() => {
                        let k = in_blocks.expect("just checked").map_err(step_err)?;
                        let name = match (&node.op, residual) {
                            (Op::Conv(_), true) if act == Act::Relu => "Conv+Add+Relu",
                            (Op::Conv(_), true) => "Conv+Add",
                            (Op::Conv(_), false) => conv_step_name(act),
                            _ => node.op.name(),
                        };
                        (name, k)
                    }
                    (Op::Conv(c), None) if gen.residual.contains_key(&n) => {
                        // The residual term is the step's input 3 (`shapes`), its ReLU the epilogue's activation.
                        let relu = gen.residual[&n].relu.is_some();
                        let act = if relu { Act::Relu } else { Act::None };
                        let out = out_shape(graph, &node.outputs, 0);
                        let k = nn::conv_kernel(graph, c, &node.inputs, out, DatumType::F32, act, true)
                            .map_err(step_err)?;
                        (if relu { "Conv+Add+Relu" } else { "Conv+Add" }, k)
                    }
                    (Op::Conv(c), Some(&r)) => {
                        let out = out_shape(graph, &node.outputs, 0);
                        let act = activation(graph, graph.node(r)).unwrap_or_default();
                        let k = nn::conv_kernel(graph, c, &node.inputs, out, DatumType::F32, act, false)
                            .map_err(step_err)?;
                        (conv_step_name(act), k)
                    }
                    (Op::If(b), _) => {
                        let (k, taken, consts) = subgraphs::branches(&node.name, b, options).map_err(step_err)?;
                        branches.extend(taken);
                        packed_bytes += consts;
                        ("If", k)
                    }
                    (Op::Scan(sc), _) => {
                        let (k, taken, consts) = subgraphs::scan(sc, options).map_err(step_err)?;
                        branches.extend(taken);
                        packed_bytes += consts;
                        ("Scan", k)
                    }
                    (Op::Loop(l), _) => {
                        let (k, taken, consts) = subgraphs::body(l, options).map_err(step_err)?;
                        branches.extend(taken);
                        packed_bytes += consts;
                        ("Loop", k)
                    }
                    _ => (node.op.name(), kernel(graph, &node.op, &node.inputs, &node.outputs).map_err(step_err)?),
                }
            }
        };
        steps.push(Step { name: node.name.clone(), op: op_name, inputs: ins, outputs: outs, kernel });
    }
    let mut outputs: Vec<Binding> = Vec::with_capacity(graph.outputs().len());
    for o in graph.outputs() {
        let ty = graph.ty(o.value);
        let s = slot(o.value);
        if let ValueDef::Const(t) = &graph.value(o.value).def {
            if !consts.iter().any(|(c, _)| *c == s) {
                consts.push((s, t.owned()?));
            }
        }
        outputs.push(Binding { name: o.name.clone(), slot: s, dt: ty.dt, shape: ty.shape.clone() });
    }
    let slots = slot_of.len();
    let mut last_use = vec![0usize; slots];
    for (i, step) in steps.iter().enumerate() {
        for s in step.inputs.iter().flatten() {
            last_use[*s] = i;
        }
    }
    for s in consts.iter().map(|(s, _)| *s).chain(inputs.iter().map(|b| b.slot)).chain(outputs.iter().map(|b| b.slot)) {
        last_use[s] = usize::MAX;
    }
    let mut const_slots = vec![None; slots];
    for (s, t) in &consts {
        const_slots[*s] = Some(t.clone());
    }
    let mut slot_names = vec![String::new(); slots];
    for (v, s) in &slot_of {
        slot_names[*s] = graph.value(*v).name.clone();
    }
    let mut outside = vec![false; slots];
    for b in &outputs {
        outside[b.slot] = true;
    }
    Ok(Program {
        slots,
        slot_names,
        outside,
        memory: None,
        consts,
        const_slots,
        packed_bytes,
        inputs,
        outputs,
        steps,
        last_use,
        threads,
        profile: false,
        pool: Default::default(),
        warm: Default::default(),
        way: Default::default(),
        branches,
    })
}

/// One step as lowering makes it, before its kernel.
struct Shape {
    /// The node it is written at (a chain's root).
    node: ir::NodeId,
    /// What it reads: a chain's inputs for a chain, the node's inputs otherwise, but the weights of a Conv that
    /// packs them when lowered (`None` there: the program does not keep the constant).
    reads: Vec<Option<ValueId>>,
    /// What it writes: the ReLU's value for a Conv that runs its ReLU.
    writes: Vec<Option<ValueId>>,
    /// True for a Conv that packs its weights.
    packed_weights: bool,
}

/// The inputs of `node` whose constant weights its kernel packs when lowered and never reads after: a product of
/// few rows' weights (input 1: `nn::few_rows_kernel`, which takes every plan on a CPU with AVX-512F) and an LSTM's
/// `W`, `R`, `B` and `P` when all of them given are constants (`recurrent::lstm`).
fn packed_inputs(graph: &Graph, node: &ir::NodeData) -> Vec<usize> {
    use stowage_compiler::ir::recurrent::lstm_input as at;
    match &node.op {
        Op::Gemm(_) | Op::MatMul if crate::kernels::sgemm512::available() => {
            let out = out_shape(graph, &node.outputs, 0);
            let packs = nn::few_rows_plan(graph, &node.op, &node.inputs, &out).is_some_and(|p| p.packs());
            if packs {
                vec![1]
            } else {
                vec![]
            }
        }
        Op::Lstm(_) => {
            let given = |k: usize| node.inputs.get(k).copied().flatten();
            let constant = |k: usize| given(k).is_none_or(|v| graph.const_value(v).is_some());
            let weights = [at::W, at::R, at::B, at::P];
            if given(at::W).is_some() && given(at::R).is_some() && weights.iter().all(|&k| constant(k)) {
                weights.into_iter().filter(|&k| given(k).is_some()).collect()
            } else {
                vec![]
            }
        }
        _ => vec![],
    }
}

/// The steps [`lower_with`] makes of `graph`, in order.
fn shapes(graph: &Graph, gen: &Generated) -> Vec<Shape> {
    let fused_members: std::collections::HashSet<ir::NodeId> =
        gen.planned.values().flat_map(|p| p.members.iter().copied()).collect();
    let mut shapes = Vec::new();
    for &n in graph.order() {
        let node = graph.node(n);
        if fused_members.contains(&n) && !gen.planned.contains_key(&n) || gen.absorbed.contains(&n) {
            continue; // computed inside its chain's root step, or inside its Conv's step
        }
        let chain = gen.planned.get(&n);
        let packed_weights = match &node.op {
            Op::Conv(c) if chain.is_none() => nn::packs_weights(graph, c, &node.inputs, out_dt_of(graph, node)),
            _ => false,
        };
        let mut reads: Vec<Option<ValueId>> = match chain {
            Some(p) => p.inputs.iter().map(|&v| Some(v)).collect(),
            None => node.inputs.clone(),
        };
        if packed_weights {
            reads[1] = None;
        }
        // Likewise the constant weights a product of few rows or an LSTM packs when lowered (`nn::few_rows_kernel`,
        // `recurrent::lstm`): the program does not keep them.
        if chain.is_none() {
            for k in packed_inputs(graph, node) {
                reads[k] = None;
            }
        }
        let mut writes = match gen.relu_after.get(&n) {
            Some(&r) => graph.node(r).outputs.clone(),
            None => node.outputs.clone(),
        };
        // A residual addition in the convolution's epilogue: its term is input 3 (after the bias, or its empty
        // place), and the step writes the addition's value or its ReLU's.
        if let Some(r) = gen.residual.get(&n) {
            reads.resize(3, None);
            reads.push(Some(r.other));
            writes = graph.node(r.last()).outputs.clone();
        }
        shapes.push(Shape { node: n, reads, writes, packed_weights });
    }
    shapes
}

/// The steps [`lower_with`] will run for `graph`, as the planner's memory pass plans over them: a chain is one
/// step at its root reading the chain's inputs; a Conv with its ReLU writes the ReLU's value; a Reshape-like
/// node is a view of its input, but of a graph input in a caller's strides, which it copies.
pub fn memory_steps(graph: &Graph, options: &LowerOptions) -> Vec<stowage_compiler::plan::KernelStep> {
    let gen = steps_of(graph, options);
    let name = |v: ValueId| graph.value(v).name.clone();
    shapes(graph, &gen)
        .into_iter()
        .map(|s| {
            let node = graph.node(s.node);
            let first = s.reads.first().copied().flatten();
            let view = !gen.planned.contains_key(&s.node)
                && stowage_compiler::plan::cost::is_view(graph, s.node)
                && first.is_none_or(|v| !gen.strided.contains_key(&v));
            // A Concat with only axes of extent 1 before its axis is its inputs end to end (`movement::concat`
            // copies those not already there).
            let joins = match &node.op {
                Op::Concat { axis } if !gen.planned.contains_key(&s.node) => {
                    node.outputs[0].is_some_and(|v| graph.ty(v).shape.iter().take(*axis as usize).all(|&d| d == 1))
                }
                _ => false,
            };
            stowage_compiler::plan::KernelStep {
                node: node.name.clone(),
                reads: s.reads.iter().flatten().map(|&v| name(v)).collect(),
                writes: s.writes.iter().flatten().map(|&v| name(v)).collect(),
                view,
                in_place: false,
                joins,
            }
        })
        .collect()
}

/// What lowering generates code for, before generating it.
struct Generated {
    /// Conv nodes with the activation that runs inside their step ([`activation`]).
    relu_after: HashMap<ir::NodeId, ir::NodeId>,
    /// Those activations, and the additions (with their ReLUs) of [`Generated::residual`].
    absorbed: std::collections::HashSet<ir::NodeId>,
    /// f32 Conv nodes with the residual addition that runs in their step's epilogue
    /// (`stowage_compiler::lowering::residual`, `kernels/residual.rs`).
    residual: HashMap<ir::NodeId, Residual>,
    /// Byte strides of the graph inputs held in a caller's layout.
    strided: HashMap<ValueId, Vec<usize>>,
    /// Fused chains by root node.
    planned: HashMap<ir::NodeId, fuse::Planned>,
    /// Generated kernels in node order: each chain at its root node, and each Transpose as a relayout copy.
    kernels: Vec<(ir::NodeId, Loops)>,
}

/// [`steps_of`], with the loops of chains whose results are in channel blocks over the blocks
/// ([`blocks::chain`]).
fn generated(graph: &Graph, options: &LowerOptions) -> Result<Generated> {
    let mut gen = steps_of(graph, options);
    for (root, loops) in gen.kernels.iter_mut() {
        let Some(p) = gen.planned.get_mut(root) else { continue };
        if let Some(blocked) = blocks::chain(graph, *root, p, &options.blocked, &gen.strided) {
            p.loops = blocked?;
            *loops = p.loops.clone();
        }
    }
    Ok(gen)
}

/// What lowering generates code for: chains, epilogues, the kernels to compile (their loops over packed values).
fn steps_of(graph: &Graph, options: &LowerOptions) -> Generated {
    // An activation that is the only reader of an f32 Conv's output runs inside the Conv's step, on each tile while
    // it is in registers; the Conv's step writes the activation's value.
    let mut relu_after: HashMap<ir::NodeId, ir::NodeId> = if options.fuse {
        conv_epilogue_pairs(graph, &[stowage_runtime::DatumType::F32], |node| activation(graph, node).is_some())
    } else {
        HashMap::new()
    };
    let mut absorbed: std::collections::HashSet<ir::NodeId> = relu_after.values().copied().collect();
    // A SiLU (`Mul(x, Sigmoid(x))`) after an f32 Conv runs inside the Conv's step too: both nodes are absorbed, and
    // the step writes the Mul's value.
    if options.fuse {
        for (conv, (sigmoid, mul)) in conv_silu(graph, &[stowage_runtime::DatumType::F32]) {
            relu_after.insert(conv, mul);
            absorbed.extend([sigmoid, mul]);
        }
    }
    // A residual addition (and its ReLU) that reads an f32 Conv's output alone runs in the Conv's epilogue.
    let residual =
        if options.fuse { residual_adds(graph, &absorbed, &[stowage_runtime::DatumType::F32]) } else { HashMap::new() };
    absorbed.extend(residual.values().flat_map(|r| std::iter::once(r.add).chain(r.relu)));
    let strided: HashMap<ValueId, Vec<usize>> = graph
        .inputs()
        .iter()
        .filter_map(|&v| {
            let given = options.input_strides.get(&graph.value(v).name)?;
            Some((v, given.iter().map(|s| s * graph.ty(v).dt.size_of()).collect()))
        })
        .collect();
    let planned = if options.fuse { fuse::plan_with(graph, &absorbed, &strided) } else { HashMap::new() };
    let mut kernels: Vec<(ir::NodeId, Loops)> = planned.iter().map(|(&n, p)| (n, p.loops.clone())).collect();
    if options.fuse {
        kernels.extend(graph.order().iter().filter_map(|&n| Some((n, transpose_loops(graph, n, &strided)?))));
    }
    kernels.sort_by_key(|(n, _)| *n);
    Generated { relu_after, absorbed, residual, strided, planned, kernels }
}

/// The generated kernels [`lower_with`] would compile for `graph`, in its order, with the node each belongs to:
/// what `stowage build` compiles ahead of time into an object file ([`crate::jit::compile_object`]).
pub fn kernel_specs(graph: &Graph, options: &LowerOptions) -> Result<Vec<(String, Loops)>> {
    Ok(generated(graph, options)?.kernels.into_iter().map(|(n, l)| (graph.node(n).name.clone(), l)).collect())
}

/// The activation a convolution's epilogue applies for `node` (`kernels/act.rs`), when it is one: Relu,
/// HardSwish, HardSigmoid, LeakyRelu, Sigmoid, a Clip whose bounds are constant scalars (or absent), or the Mul of
/// a SiLU ([`silu_operands`]).
fn activation(graph: &Graph, node: &ir::NodeData) -> Option<Act> {
    let bound = |i: usize, none: f32| -> Option<f32> {
        let Some(v) = node.inputs.get(i).copied().flatten() else { return Some(none) };
        match &graph.value(v).def {
            ValueDef::Const(t) => t.as_slice::<f32>().ok().filter(|s| s.len() == 1).map(|s| s[0]),
            _ => None,
        }
    };
    Some(match &node.op {
        Op::Unary(ir::Unary::Relu) => Act::Relu,
        Op::Unary(ir::Unary::HardSwish) => Act::HardSwish,
        Op::Unary(ir::Unary::HardSigmoid { alpha, beta }) => Act::HardSigmoid { alpha: *alpha, beta: *beta },
        Op::Unary(ir::Unary::LeakyRelu { alpha }) => Act::LeakyRelu { alpha: *alpha },
        Op::Clip => Act::Clip { lo: bound(1, f32::NEG_INFINITY)?, hi: bound(2, f32::INFINITY)? },
        Op::Unary(ir::Unary::Sigmoid) => Act::Sigmoid,
        Op::Binary(ir::Binary::Mul) if silu_operands(graph, node).is_some() => Act::Silu,
        _ => return None,
    })
}

/// The name a Conv step with its activation shows in the profile.
fn conv_step_name(act: Act) -> &'static str {
    match act {
        Act::None => "Conv",
        Act::Relu => "Conv+Relu",
        Act::Clip { .. } => "Conv+Clip",
        Act::HardSigmoid { .. } => "Conv+HardSigmoid",
        Act::HardSwish => "Conv+HardSwish",
        Act::LeakyRelu { .. } => "Conv+LeakyRelu",
        Act::Sigmoid => "Conv+Sigmoid",
        Act::Silu => "Conv+SiLU",
    }
}

/// The datum type of a node's first output (f32 if it has none).
fn out_dt_of(graph: &Graph, node: &ir::NodeData) -> DatumType {
    node.outputs.first().copied().flatten().map_or(DatumType::F32, |v| graph.ty(v).dt)
}

/// The relayout copy a Transpose node is, when its element size allows one (every type but bool).
fn transpose_loops(graph: &Graph, n: ir::NodeId, strided: &HashMap<ValueId, Vec<usize>>) -> Option<Loops> {
    let node = graph.node(n);
    let Op::Transpose { perm } = &node.op else { return None };
    let x = node.inputs.first().copied().flatten()?;
    let ty = graph.ty(x);
    let rank = ty.shape.len();
    let perm = perm.clone().unwrap_or_else(|| (0..rank).rev().collect());
    let elem = crate::jit::Elem::of(ty.dt, true).filter(|_| ty.dt != DatumType::Bool)?;
    Some(match strided.get(&x) {
        Some(src) => {
            let out: Vec<usize> = perm.iter().map(|&p| ty.shape[p]).collect();
            let dst = crate::jit::packed_strides(&out, elem.size());
            Loops::relayout(&out, elem.size(), perm.iter().map(|&p| src[p]).collect(), dst)
        }
        None => Loops::transpose(&ty.shape, &perm, elem.size()),
    })
}

/// A step running generated kernel `index` into a new `dt` tensor of `shape`. Inputs are packed row-major, except
/// those with `expected` element strides: the kernel was compiled for those and reads the caller's memory in place.
fn generated_kernel(
    code: std::sync::Arc<JitCode>,
    index: usize,
    dt: DatumType,
    shape: Vec<usize>,
    expected: Vec<Option<Vec<usize>>>,
) -> Kernel {
    Box::new(move |a, cx| {
        let inputs: smallvec::SmallVec<[std::borrow::Cow<'_, [u8]>; 8]> = a
            .iter()
            .zip(&expected)
            .map(|(t, expected)| {
                let t = t.ok_or_else(|| CpuError::NotImplemented("a generated kernel's input is missing".into()))?;
                if let Some(expected) = expected {
                    let mut stepped = t.shape().iter().zip(t.layout().strides().iter().zip(expected));
                    if t.layout().strides().len() != expected.len() || stepped.any(|(&d, (s, e))| d > 1 && s != e) {
                        return Err(CpuError::Input {
                            input: t.name_or_unnamed().to_string(),
                            message: format!(
                                "compiled for element strides {expected:?} (the caller's layout), given {:?}",
                                t.layout().strides()
                            ),
                        });
                    }
                    let bytes = t.storage().host_bytes().ok_or_else(|| {
                        CpuError::NotImplemented(format!("input '{}' is not in host memory", t.name_or_unnamed()))
                    })?;
                    return Ok(std::borrow::Cow::Borrowed(bytes.get(t.layout().offset()..).unwrap_or(&[])));
                }
                Ok(if t.is_row_major() {
                    std::borrow::Cow::Borrowed(t.as_bytes()?)
                } else {
                    std::borrow::Cow::Owned(t.to_row_major()?.as_bytes()?.to_vec())
                })
            })
            .collect::<Result<_>>()?;
        let views: smallvec::SmallVec<[&[u8]; 8]> = inputs.iter().map(|c| c.as_ref()).collect();
        // A generated kernel writes every element of its output.
        let mut y = crate::storage::output_for_overwrite(dt, &shape)?;
        code.call(index, &views, y.as_bytes_mut()?, cx.threads)?;
        Ok(vec![y])
    })
}

fn const_ints(graph: &Graph, v: Option<ValueId>) -> Result<Option<Vec<i64>>> {
    match v {
        None => Ok(None),
        Some(v) => match graph.const_value(v) {
            Some(t) => Ok(Some(consts::to_i64s(t)?)),
            None => Err(CpuError::NotImplemented(format!("input {} must be a constant", graph.describe(v)))),
        },
    }
}

fn out_shape(graph: &Graph, outputs: &[Option<ValueId>], i: usize) -> Vec<usize> {
    outputs.get(i).copied().flatten().map(|v| graph.ty(v).shape.clone()).unwrap_or_default()
}

fn arg<'a>(args: &[Option<&'a Tensor<'static>>], i: usize) -> Result<&'a Tensor<'static>> {
    args.get(i).copied().flatten().ok_or_else(|| CpuError::NotImplemented(format!("input {i} is missing")))
}

fn one(t: Tensor<'static>) -> Result<Vec<Tensor<'static>>> {
    Ok(vec![t])
}

/// The kernel for one node.
fn kernel(graph: &Graph, op: &Op, inputs: &[Option<ValueId>], outputs: &[Option<ValueId>]) -> Result<Kernel> {
    let out = out_shape(graph, outputs, 0);
    let out_dt = outputs.first().copied().flatten().map(|v| graph.ty(v).dt);
    let in_dt = inputs.first().copied().flatten().map(|v| graph.ty(v).dt);
    if in_dt == Some(DatumType::Str) || out_dt == Some(DatumType::Str) || matches!(op, Op::Text(_)) {
        if let Some(k) = text::kernel(graph, op, inputs, &out)? {
            return Ok(k);
        }
    }
    Ok(match op {
        Op::Unary(u) => {
            let f = unary_fn(*u);
            Box::new(move |a, _| one(elementwise::unary(f, arg(a, 0)?)?))
        }
        Op::Binary(b) => {
            let f = binary_fn(*b);
            Box::new(move |a, _| one(elementwise::binary(f, arg(a, 0)?, arg(a, 1)?, &out)?))
        }
        Op::Variadic(v) => {
            let (f, mean) = match v {
                ir::Variadic::Max => (BinaryFn::Max, false),
                ir::Variadic::Min => (BinaryFn::Min, false),
                ir::Variadic::Sum => (BinaryFn::Add, false),
                ir::Variadic::Mean => (BinaryFn::Add, true),
            };
            Box::new(move |a, _| {
                let xs: Vec<&Tensor<'static>> = a.iter().flatten().copied().collect();
                one(elementwise::variadic(f, mean, &xs, &out)?)
            })
        }
        Op::Clip => Box::new(|a, _| {
            one(elementwise::clip(arg(a, 0)?, a.get(1).copied().flatten(), a.get(2).copied().flatten())?)
        }),
        Op::Where => Box::new(move |a, _| one(elementwise::select(arg(a, 0)?, arg(a, 1)?, arg(a, 2)?, &out)?)),
        Op::Cast { to, mode } => {
            let (to, mode) = (*to, *mode);
            Box::new(move |a, _| one(cast::cast_with(arg(a, 0)?, to, mode.saturate, mode.rounding)?))
        }
        // The same bytes, packed, read as `to` (of the same width: checked at import).
        Op::BitCast { to } => {
            let to = *to;
            Box::new(move |a, _| {
                let x = arg(a, 0)?;
                let mut bytes = vec![0u8; x.len() * x.dt().size_of()];
                x.write_row_major(&mut bytes)?;
                one(Tensor::from_bytes(to, x.shape(), &bytes)?)
            })
        }
        Op::Identity | Op::Reshape { .. } | Op::Flatten { .. } | Op::Squeeze | Op::Unsqueeze | Op::Dropout { .. } => {
            if let Op::Dropout { .. } = op {
                let training = const_ints(graph, inputs.get(2).copied().flatten())?.is_some_and(|t| t != [0]);
                let ratio = inputs
                    .get(1)
                    .copied()
                    .flatten()
                    .and_then(|v| graph.const_value(v))
                    .map(consts::to_f64s)
                    .transpose()?;
                // With ratio 0 training-mode Dropout keeps everything: the identity, with an all-true mask.
                if training && ratio.is_none_or(|r| r.iter().any(|&r| r != 0.0)) {
                    return Err(CpuError::NotImplemented(
                        "training-mode Dropout (a random mask) is not supported".into(),
                    ));
                }
            }
            let mask = outputs.get(1).copied().flatten().map(|v| graph.ty(v).shape.clone());
            Box::new(move |a, _| {
                let x = arg(a, 0)?;
                let y = if x.is_row_major() { x.reshape(&out)? } else { x.to_row_major()?.reshape(&out)? };
                let mut r = vec![y];
                if let Some(shape) = &mask {
                    r.push(crate::storage::tensor_from_vec(shape, vec![true; shape.iter().product()])?);
                }
                Ok(r)
            })
        }
        Op::Shape { .. } | Op::ConstantOfShape { .. } | Op::Range => {
            // Folded during import whenever their inputs are known, which static shapes guarantee.
            return Err(CpuError::NotImplemented(format!("{} with run-time inputs", op.name())));
        }
        Op::Transpose { perm } => {
            let perm = perm.clone().unwrap_or_default();
            Box::new(move |a, _| one(movement::transpose(arg(a, 0)?, &perm)?))
        }
        Op::Concat { axis } => {
            let axis = *axis as usize;
            Box::new(move |a, cx| {
                let xs: Vec<&Tensor<'static>> = a.iter().flatten().copied().collect();
                one(movement::concat(&xs, axis, &out, cx.threads)?)
            })
        }
        Op::Split { axis, .. } => {
            let axis = *axis as usize;
            let sizes: Vec<usize> =
                (0..outputs.len()).map(|i| out_shape(graph, outputs, i).get(axis).copied().unwrap_or(0)).collect();
            Box::new(move |a, _| movement::split(arg(a, 0)?, axis, &sizes))
        }
        Op::Slice => {
            let x = inputs[0].map(|v| graph.ty(v).shape.clone()).unwrap_or_default();
            let starts = const_ints(graph, inputs.get(1).copied().flatten())?.unwrap_or_default();
            let ends = const_ints(graph, inputs.get(2).copied().flatten())?.unwrap_or_default();
            let axes = const_ints(graph, inputs.get(3).copied().flatten())?
                .unwrap_or_else(|| (0..starts.len() as i64).collect());
            let steps = const_ints(graph, inputs.get(4).copied().flatten())?.unwrap_or_else(|| vec![1; starts.len()]);
            let (mut begin, mut step) = (vec![0i64; x.len()], vec![1i64; x.len()]);
            for i in 0..starts.len() {
                let a = if axes[i] < 0 { axes[i] + x.len() as i64 } else { axes[i] } as usize;
                let (s, _, st) = slice_bounds(x[a], starts[i], ends[i], steps[i])
                    .map_err(|e| CpuError::NotImplemented(e.to_string()))?;
                begin[a] = s as i64;
                step[a] = st as i64;
            }
            Box::new(move |a, _| one(movement::slice(arg(a, 0)?, &begin, &step, &out)?))
        }
        Op::Gather { axis } => {
            let axis = *axis as usize;
            Box::new(move |a, _| one(movement::gather(arg(a, 0)?, axis, arg(a, 1)?, &out)?))
        }
        Op::GatherElements { axis } => {
            let axis = *axis as usize;
            Box::new(move |a, _| one(movement::gather_elements(arg(a, 0)?, axis, arg(a, 1)?)?))
        }
        Op::Scatter { axis, reduction } => {
            let how = match reduction {
                ir::ScatterReduction::None => scatter::Combine::Replace,
                ir::ScatterReduction::Add => scatter::Combine::Add,
                ir::ScatterReduction::Mul => scatter::Combine::Mul,
                ir::ScatterReduction::Max => scatter::Combine::Max,
                ir::ScatterReduction::Min => scatter::Combine::Min,
            };
            let (axis, shape) = (axis.map(|a| a as usize), out.clone());
            Box::new(move |a, _| {
                let (data, updates) = (arg(a, 0)?, arg(a, 2)?);
                let idx_t = arg(a, 1)?;
                let idx = consts::to_i64s(idx_t)?;
                let targets = match axis {
                    Some(ax) => scatter::element_targets(&shape, ax, &idx, idx_t.shape())?,
                    None => {
                        let (offsets, slice) = scatter::tuple_offsets(&shape, 0, &idx, idx_t.shape())?;
                        offsets.iter().flat_map(|&o| o..o + slice).collect()
                    }
                };
                let dt = data.dt();
                if how == scatter::Combine::Replace || !matches!(dt, DatumType::F16 | DatumType::BF16) {
                    if how == scatter::Combine::Replace {
                        // Any datum type: the updates' bytes.
                        let size = dt.size_of();
                        let mut y = data.to_row_major()?.as_bytes()?.to_vec();
                        let u = updates.to_row_major()?;
                        for (k, &t) in targets.iter().enumerate() {
                            y[t * size..(t + 1) * size].copy_from_slice(&u.as_bytes()?[k * size..(k + 1) * size]);
                        }
                        return one(crate::storage::tensor_from_bytes(dt, &shape, &y)?);
                    }
                    return one(crate::numeric!(dt, T => {
                        let y = scatter::scatter(&data.to_vec::<T>()?, &updates.to_vec::<T>()?, &targets, how);
                        crate::storage::tensor_from_vec(&shape, y)?
                    }, else return Err(CpuError::Unsupported { op: "a scatter reduction", dt })));
                }
                let (d, u) = (cast::cast(data, DatumType::F32)?, cast::cast(updates, DatumType::F32)?);
                let y = scatter::scatter(&d.to_vec::<f32>()?, &u.to_vec::<f32>()?, &targets, how);
                one(cast::cast(&crate::storage::tensor_from_vec(&shape, y)?, dt)?)
            })
        }
        Op::GatherNd { batch_dims } => {
            let (b, xs) = (
                *batch_dims,
                graph.ty(inputs[0].ok_or(CpuError::NotImplemented("GatherND without data".into()))?).shape.clone(),
            );
            Box::new(move |a, _| {
                let (data, idx_t) = (arg(a, 0)?, arg(a, 1)?);
                let idx = consts::to_i64s(idx_t)?;
                let (offsets, slice) = scatter::tuple_offsets(&xs, b, &idx, idx_t.shape())?;
                let size = data.dt().size_of();
                let src = data.to_row_major()?;
                let src = src.as_bytes()?;
                let mut y = Vec::with_capacity(offsets.len() * slice * size);
                for o in offsets {
                    y.extend_from_slice(&src[o * size..(o + slice) * size]);
                }
                one(crate::storage::tensor_from_bytes(data.dt(), &out, &y)?)
            })
        }
        Op::Cumulative { product, exclusive, reverse } => {
            let how = cumulative::Cumulation { product: *product, exclusive: *exclusive, reverse: *reverse };
            let shape = out.clone();
            Box::new(move |a, _| {
                let x = arg(a, 0)?;
                let axis = consts::to_i64s(arg(a, 1)?)?.first().copied().unwrap_or(0);
                let rank = shape.len() as i64;
                if !(-rank..rank).contains(&axis) {
                    return Err(CpuError::NotImplemented(format!("axis {axis} is not an axis of {shape:?}")));
                }
                let axis = if axis < 0 { axis + rank } else { axis } as usize;
                let dt = x.dt();
                let wide = if matches!(dt, DatumType::F16 | DatumType::BF16) {
                    cast::cast(x, DatumType::F32)?
                } else {
                    x.clone()
                };
                let y = crate::numeric!(wide.dt(), T => {
                    let v = wide.to_vec::<T>()?;
                    crate::storage::tensor_from_vec(&shape, cumulative::cumulate(&v, &shape, axis, how))?
                }, else return Err(CpuError::Unsupported { op: "CumSum", dt }));
                one(if y.dt() == dt { y } else { cast::cast(&y, dt)? })
            })
        }
        Op::Lstm(l) => recurrent::lstm(graph, l, inputs)?,
        Op::TfIdf(t) => {
            let width = inputs.first().copied().flatten().map_or(0, |v| *graph.ty(v).shape.last().unwrap_or(&0));
            let (t, grams) = (t.clone(), crate::kernels::tfidf::index(t));
            Box::new(move |a, _| {
                let x = stowage_compiler::consts::to_i64s(arg(a, 0)?)?;
                let rows = if out.len() == 2 { out[0] } else { 1 };
                one(crate::storage::tensor_from_vec(
                    &out,
                    crate::kernels::tfidf::vectorize(&t, &grams, &x, rows, width),
                )?)
            })
        }
        Op::TreeEnsemble(t) => {
            let features =
                inputs.first().copied().flatten().map_or(0, |v| graph.ty(v).shape.get(1).copied().unwrap_or(0));
            let (trees, dt) = (t.clone(), out_dt.unwrap_or(DatumType::F32));
            Box::new(move |a, _| {
                let x = stowage_compiler::consts::to_f64s(arg(a, 0)?)?;
                let y = crate::kernels::trees::predict(&trees, &x, out.first().copied().unwrap_or(0), features);
                // The output allocated once, in its own type: the buffer the arena offers (arena.rs, rule 2).
                one(match dt {
                    DatumType::F64 => crate::storage::tensor_from_vec(&out, y)?,
                    _ => crate::storage::tensor_from_vec(&out, y.into_iter().map(|v| v as f32).collect::<Vec<_>>())?,
                })
            })
        }
        Op::Expand => Box::new(move |a, _| one(movement::expand(arg(a, 0)?, &out)?)),
        Op::Tile => Box::new(move |a, _| one(movement::tile(arg(a, 0)?, &out)?)),
        Op::Pad { mode } => {
            let rank = out.len();
            let pads = const_ints(graph, inputs.get(1).copied().flatten())?.unwrap_or_default();
            let axes: Vec<usize> = match const_ints(graph, inputs.get(3).copied().flatten())? {
                Some(axes) => {
                    axes.iter().map(|&a| if a < 0 { (a + rank as i64) as usize } else { a as usize }).collect()
                }
                None => (0..rank).collect(),
            };
            let mut begins = vec![0i64; rank];
            for (i, &a) in axes.iter().enumerate() {
                begins[a] = pads[i];
            }
            let kind = match mode {
                ir::PadMode::Constant => movement::PadKind::Constant,
                ir::PadMode::Reflect => movement::PadKind::Reflect,
                ir::PadMode::Edge => movement::PadKind::Edge,
                ir::PadMode::Wrap => movement::PadKind::Wrap,
            };
            Box::new(move |a, _| one(movement::pad(arg(a, 0)?, &begins, kind, a.get(2).copied().flatten(), &out)?))
        }
        _ => return nn::kernel(graph, op, inputs, outputs, out, out_dt.unwrap_or(DatumType::F32)),
    })
}

#[cfg(test)]
mod epilogue_tests;
#[cfg(test)]
mod in_place_tests;

#[cfg(test)]
mod tests {
    use stowage_compiler::ir::{Binary, Graph, Op, ValueType};
    use stowage_runtime::{DatumType, Layout, PlainStorage, Tensor};

    fn out(g: &Graph, n: stowage_compiler::ir::NodeId) -> stowage_compiler::ir::ValueId {
        g.node(n).outputs[0].expect("an output")
    }

    /// `y = a · b`, `a` of `m × k` and `b` of `k × n`, both graph inputs.
    fn matmul(m: usize, k: usize, n: usize) -> Graph {
        let mut g = Graph::new("mm");
        let a = g.add_input("a", ValueType::new(DatumType::F32, vec![m, k]));
        let b = g.add_input("b", ValueType::new(DatumType::F32, vec![k, n]));
        let mm = g.add_node(
            "mm",
            Op::MatMul,
            vec![Some(a), Some(b)],
            vec![Some(("y".into(), ValueType::new(DatumType::F32, vec![m, n])))],
        );
        let y = out(&g, mm);
        g.add_output("y", y);
        g
    }

    /// A tensor of `values` (given in row-major index order) stored in `layout`.
    fn laid_out(shape: [usize; 2], values: &[f32], layout: Layout) -> Tensor<'static> {
        let span = layout.span_bytes(DatumType::F32, &shape).expect("span");
        let mut bytes = vec![0u8; span];
        for r in 0..shape[0] {
            for c in 0..shape[1] {
                let at = (r * layout.strides()[0] + c * layout.strides()[1]) * 4;
                bytes[at..at + 4].copy_from_slice(&values[r * shape[1] + c].to_ne_bytes());
            }
        }
        let storage = PlainStorage::copy_from(&bytes).expect("storage");
        Tensor::from_storage(DatumType::F32, &shape, layout, storage).expect("tensor")
    }

    #[test]
    fn a_matmul_reads_padded_and_column_major_operands_in_place() {
        let (m, k, n) = (13, 7, 5);
        let g = matmul(m, k, n);
        let program = super::lower(&g, 1).expect("lowers");
        let av: Vec<f32> = (0..m * k).map(|i| (i % 11) as f32 - 5.0).collect();
        let bv: Vec<f32> = (0..k * n).map(|i| (i % 7) as f32 * 0.5).collect();
        let packed = program
            .run(vec![Tensor::from_slice(&[m, k], &av).unwrap(), Tensor::from_slice(&[k, n], &bv).unwrap()])
            .expect("runs");
        let want = packed.outputs[0].to_vec::<f32>().unwrap();
        let a_cm = laid_out([m, k], &av, Layout::column_major(DatumType::F32, &[m, k]).unwrap());
        let b_pad = laid_out([k, n], &bv, Layout::padded(DatumType::F32, &[k, n], 0, 64).unwrap());
        let got = program.run(vec![a_cm, b_pad]).expect("runs on strided operands");
        assert_eq!(got.outputs[0].to_vec::<f32>().unwrap(), want);
        assert!(super::super::layouts::accepts(&Op::MatMul, &[2, 2]).layouts.len() == 3);
    }

    /// `inline.rs` rule 4: a program on two threads gives the bytes of the same program on one thread, whether a
    /// run takes its pool or the caller's thread: its six trials (three each way, rule 2), a second look at the pool
    /// where the caller's thread looked faster, and the runs after.
    #[test]
    fn runs_give_the_same_bytes_in_the_pool_and_on_the_callers_thread() {
        let (m, k, n) = (200, 300, 150);
        let g = matmul(m, k, n);
        let av: Vec<f32> = (0..m * k).map(|i| ((i * 7 % 13) as f32 - 6.0) / 7.0).collect();
        let bv: Vec<f32> = (0..k * n).map(|i| ((i * 5 % 11) as f32 - 5.0) / 5.0).collect();
        let inputs = || vec![Tensor::from_slice(&[m, k], &av).unwrap(), Tensor::from_slice(&[k, n], &bv).unwrap()];
        let one = super::lower(&g, 1).expect("lowers").run(inputs()).expect("runs");
        let want = one.outputs[0].to_vec::<f32>().unwrap();
        let two = super::lower(&g, 2).expect("lowers");
        for run in 0..super::super::inline::TRIALS + super::super::inline::SECOND_LOOK + 2 {
            let got = two.run(inputs()).expect("runs").outputs[0].to_vec::<f32>().unwrap();
            assert!(got.iter().zip(&want).all(|(g, w)| g.to_bits() == w.to_bits()), "run {run}: other bytes");
        }
        assert!(two.way.kept().is_some(), "the trials are over and a way is kept");
    }

    #[test]
    fn a_camera_frame_is_cast_and_normalised_in_one_generated_step() {
        // u8 [1, 4, 6, 3] → Cast f32 → Sub 127.5 → Div 255 per channel → Transpose to NCHW.
        let shape = vec![1, 4, 6, 3];
        let f32ty = |s: Vec<usize>| ValueType::new(DatumType::F32, s);
        let mut g = Graph::new("camera");
        let x = g.add_input("frame", ValueType::new(DatumType::U8, shape.clone()));
        let cast =
            g.add_node("cast", Op::cast(DatumType::F32), vec![Some(x)], vec![Some(("c".into(), f32ty(shape.clone())))]);
        let mean = g.add_const("mean", Tensor::from_slice(&[], &[127.5f32]).unwrap());
        let c = out(&g, cast);
        let sub = g.add_node(
            "sub",
            Op::Binary(Binary::Sub),
            vec![Some(c), Some(mean)],
            vec![Some(("s".into(), f32ty(shape.clone())))],
        );
        let scale = g.add_const("scale", Tensor::from_slice(&[3], &[255.0f32, 128.0, 64.0]).unwrap());
        let s = out(&g, sub);
        let div = g.add_node(
            "div",
            Op::Binary(Binary::Div),
            vec![Some(s), Some(scale)],
            vec![Some(("d".into(), f32ty(shape.clone())))],
        );
        let d = out(&g, div);
        let tr = g.add_node(
            "nchw",
            Op::Transpose { perm: Some(vec![0, 3, 1, 2]) },
            vec![Some(d)],
            vec![Some(("y".into(), f32ty(vec![1, 3, 4, 6])))],
        );
        let y = out(&g, tr);
        g.add_output("y", y);
        let program = super::lower(&g, 1).expect("lowers");
        let ops: Vec<&str> = program.steps().iter().map(|s| s.op).collect();
        assert_eq!(ops, ["Fused", "Transpose"], "cast, sub and div are one generated kernel");
        let px: Vec<u8> = (0..72).map(|i| (i * 29 % 256) as u8).collect();
        let got = program.run(vec![Tensor::from_slice(&shape, &px).unwrap()]).expect("runs").outputs[0]
            .to_vec::<f32>()
            .unwrap();
        for ch in 0..3 {
            for p in 0..24 {
                let want = (f32::from(px[p * 3 + ch]) - 127.5) / [255.0, 128.0, 64.0][ch];
                assert_eq!(got[ch * 24 + p], want, "channel {ch}, pixel {p}");
            }
        }
    }
}
