//! Fusion: runs of f32 elementwise nodes become one [`Chain`] each, which a backend generates as one loop (the
//! CPU's JIT, OpenCL C); OpenCL also fuses runs of f16 or bf16 nodes in a plan that stores values so
//! ([`plan_in`]: the chain computes in f32, reads and writes the half type).
//!
//! A node joins the chain of an input's producer when that input feeds nothing else, is not a graph output, and
//! has the node's own shape; the chain's result is its last node's output. A chain's inputs may be of any shape
//! that broadcasts to its output (a per-channel scale, a bias, a scalar: strides of 0 in the kernel), and a `Cast`
//! to f32 from an integer or f64 joins as a conversion on load, so a camera frame's `Cast → Sub → Div` is one pass
//! over the bytes. Single-element constants become immediates.

use std::collections::HashMap;

use stowage_kir::{broadcast_strides, fusable_binary, fusable_unary, BinaryFn, Chain, Elem, Inst, Loops, UnaryFn};
use stowage_runtime::DatumType;

use super::{binary_fn, unary_fn};
use crate::consts;
use crate::ir::{self, Graph, NodeId, Op, ValueId};

/// A chain to emit at its root node.
pub struct Planned {
    /// The kernel: the chain over its inputs, broadcast to the output's shape and cast to f32 on load.
    pub loops: Loops,
    /// External inputs, in `Inst::Input` order.
    pub inputs: Vec<ValueId>,
    /// Every node folded into the chain (the root included).
    pub members: Vec<NodeId>,
}

/// True if `shape`, right-aligned, broadcasts to `out`.
fn broadcasts(shape: &[usize], out: &[usize]) -> bool {
    shape.len() <= out.len() && shape.iter().rev().zip(out.iter().rev()).all(|(&d, &o)| d == 1 || d == o)
}

/// The function one node applies in a chain over `float` values, if it can be fused: (instruction builder, its
/// data inputs).
fn node_fn(op: &Op, float: DatumType) -> Option<Vec<Step>> {
    Some(match op {
        Op::Unary(u) if fusable_unary(unary_fn(*u)) => vec![Step::Unary(unary_fn(*u))],
        Op::Binary(b) if fusable_binary(binary_fn(*b)) => vec![Step::Binary(binary_fn(*b))],
        Op::Variadic(v) => match v {
            ir::Variadic::Max => vec![Step::Fold(BinaryFn::Max)],
            ir::Variadic::Min => vec![Step::Fold(BinaryFn::Min)],
            ir::Variadic::Sum => vec![Step::Fold(BinaryFn::Add)],
            ir::Variadic::Mean => vec![Step::Fold(BinaryFn::Add), Step::Mean],
        },
        Op::Clip => vec![Step::Clip],
        // A cast to the chain's type happens as its input is loaded: nothing to compute.
        Op::Cast { to, .. } if *to == float => vec![],
        _ => return None,
    })
}

#[derive(Clone, Copy)]
enum Step {
    Unary(UnaryFn),
    Binary(BinaryFn),
    Fold(BinaryFn),
    Mean,
    Clip,
}

/// True when node `n` can be part of a generated chain: an f32 result of an op the chain generator has, from f32
/// inputs (or, for a Cast, integer ones) that broadcast to it, and constant Clip bounds. Such a node's inputs are
/// read through any strides (what the CPU backend tells the planner, `stowage_cpu::layouts`).
pub fn fusable(graph: &Graph, n: NodeId) -> bool {
    fusable_in(graph, n, DatumType::F32)
}

/// [`fusable`] for a chain over `float` values (f32; f16 or bf16 in a plan that stores them, which OpenCL
/// generates: the chain computes in f32 and stores `float`).
pub fn fusable_in(graph: &Graph, n: NodeId, float: DatumType) -> bool {
    let node = graph.node(n);
    let f32_of = |v: ValueId| graph.ty(v).dt == float;
    let Some(Some(out)) = node.outputs.first().copied() else { return false };
    if node.outputs.len() != 1 || node_fn(&node.op, float).is_none() || !f32_of(out) {
        return false;
    }
    let shape = &graph.ty(out).shape;
    let cast = matches!(node.op, Op::Cast { .. });
    let inputs_ok = node.inputs.iter().flatten().all(|&v| {
        let loadable = f32_of(v) || cast && Elem::of(graph.ty(v).dt, false).is_some();
        loadable && broadcasts(&graph.ty(v).shape, shape)
    });
    let clip_ok =
        !matches!(node.op, Op::Clip) || node.inputs[1..].iter().flatten().all(|&v| graph.const_value(v).is_some());
    inputs_ok && clip_ok
}

/// Plans the chains of `graph`: one per root node. Nodes in `skip` (absorbed elsewhere) are left out. Operands
/// are read packed row-major.
pub fn plan(graph: &Graph, skip: &std::collections::HashSet<NodeId>) -> HashMap<NodeId, Planned> {
    plan_with(graph, skip, &HashMap::new())
}

/// [`plan`], reading the values of `strided` (graph inputs in a caller's layout) through their byte strides.
pub fn plan_with(
    graph: &Graph,
    skip: &std::collections::HashSet<NodeId>,
    strided: &HashMap<ValueId, Vec<usize>>,
) -> HashMap<NodeId, Planned> {
    plan_over(graph, skip, strided, DatumType::F32)
}

/// [`plan`] for chains over `float` values ([`fusable_in`]): f32, or f16 and bf16 (OpenCL's half-precision plans).
pub fn plan_in(graph: &Graph, skip: &std::collections::HashSet<NodeId>, float: DatumType) -> HashMap<NodeId, Planned> {
    plan_over(graph, skip, &HashMap::new(), float)
}

fn plan_over(
    graph: &Graph,
    skip: &std::collections::HashSet<NodeId>,
    strided: &HashMap<ValueId, Vec<usize>>,
    float: DatumType,
) -> HashMap<NodeId, Planned> {
    let uses = graph.use_counts();
    let outputs: Vec<ValueId> = graph.outputs().iter().map(|o| o.value).collect();
    // chain id of each fused node; chains as member lists.
    let mut chain_of: HashMap<NodeId, usize> = HashMap::new();
    let mut chains: Vec<Option<Vec<NodeId>>> = Vec::new();
    for &n in graph.order() {
        if skip.contains(&n) {
            continue;
        }
        if !fusable_in(graph, n, float) {
            continue;
        }
        let node = graph.node(n);
        let Some(Some(out)) = node.outputs.first().copied() else { continue };
        let shape = &graph.ty(out).shape;
        let mut members = vec![n];
        for &v in node.inputs.iter().flatten() {
            let Some(p) = graph.producer(v) else { continue };
            let absorbable = uses[v] == 1 && !outputs.contains(&v) && graph.ty(v).shape == *shape;
            if let (true, Some(&c)) = (absorbable, chain_of.get(&p)) {
                if let Some(m) = chains[c].take() {
                    members.extend(m);
                }
            }
        }
        let id = chains.len();
        for &m in &members {
            chain_of.insert(m, id);
        }
        chains.push(Some(members));
    }
    let mut planned = HashMap::new();
    for members in chains.into_iter().flatten() {
        let root = *members.iter().max_by_key(|m| graph.order().iter().position(|o| o == *m)).expect("a member");
        if let Some(p) = build(graph, root, &members, strided, float) {
            planned.insert(root, p);
        }
    }
    planned
}

/// Builds the instructions of the chain rooted at `root`.
fn build(
    graph: &Graph,
    root: NodeId,
    members: &[NodeId],
    strided: &HashMap<ValueId, Vec<usize>>,
    float: DatumType,
) -> Option<Planned> {
    let mut b = Builder { graph, members, insts: Vec::new(), inputs: Vec::new(), memo: HashMap::new(), float };
    let out = graph.node(root).outputs[0]?;
    b.value(out)?;
    let shape = graph.ty(out).shape.clone();
    let operands: Vec<(Elem, Vec<usize>)> = b
        .inputs
        .iter()
        .map(|&v| {
            let ty = graph.ty(v);
            let elem = if ty.dt == float { Elem::stored(float)? } else { Elem::of(ty.dt, false)? };
            let strides = match strided.get(&v) {
                Some(given) => broadcast_given(&ty.shape, &shape, given),
                None => broadcast_strides(&ty.shape, &shape, elem.size()),
            };
            Some((elem, strides))
        })
        .collect::<Option<_>>()?;
    let loops = Loops::elementwise_into(&shape, &operands, Chain { insts: b.insts }, Elem::stored(float)?);
    Some(Planned { loops, inputs: b.inputs, members: members.to_vec() })
}

struct Builder<'g> {
    graph: &'g Graph,
    members: &'g [NodeId],
    insts: Vec<Inst>,
    inputs: Vec<ValueId>,
    memo: HashMap<ValueId, usize>,
    /// The chain's value type (f32, f16, bf16).
    float: DatumType,
}

impl Builder<'_> {
    fn push(&mut self, inst: Inst) -> usize {
        self.insts.push(inst);
        self.insts.len() - 1
    }

    /// The instruction computing `v`.
    fn value(&mut self, v: ValueId) -> Option<usize> {
        if let Some(&i) = self.memo.get(&v) {
            return Some(i);
        }
        let g = self.graph;
        let i = match g.producer(v).filter(|p| self.members.contains(p)) {
            Some(p) => {
                let node = g.node(p);
                let args: Vec<usize> = node.inputs.iter().flatten().map(|&a| self.value(a)).collect::<Option<_>>()?;
                let mut acc = *args.first()?; // a cast adds no instruction
                for step in node_fn(&node.op, self.float)? {
                    acc = match step {
                        Step::Unary(f) => self.push(Inst::Unary(f, acc)),
                        Step::Binary(f) => self.push(Inst::Binary(f, acc, *args.get(1)?)),
                        Step::Fold(f) => {
                            let mut r = args[0];
                            for &a in &args[1..] {
                                r = self.push(Inst::Binary(f, r, a));
                            }
                            r
                        }
                        Step::Mean => {
                            let n = self.push(Inst::Const(args.len() as f32));
                            self.push(Inst::Binary(BinaryFn::Div, acc, n))
                        }
                        Step::Clip => {
                            let mut r = acc;
                            if let Some(lo) = node.inputs.get(1).copied().flatten() {
                                r = self.push(Inst::Binary(BinaryFn::Max, r, self.memo[&lo]));
                            }
                            if let Some(hi) = node.inputs.get(2).copied().flatten() {
                                r = self.push(Inst::Binary(BinaryFn::Min, r, self.memo[&hi]));
                            }
                            r
                        }
                    };
                }
                acc
            }
            None => match g.const_value(v).filter(|t| t.len() == 1) {
                Some(t) => {
                    let c = consts::to_f64s(t).ok()?[0] as f32;
                    self.push(Inst::Const(c))
                }
                None => {
                    let k = self.inputs.len();
                    self.inputs.push(v);
                    self.push(Inst::Input(k))
                }
            },
        };
        self.memo.insert(v, i);
        Some(i)
    }
}

/// Byte strides over `out` of an operand of `shape` laid out with byte strides `given`: a broadcast axis steps 0.
fn broadcast_given(shape: &[usize], out: &[usize], given: &[usize]) -> Vec<usize> {
    let skip = out.len() - shape.len();
    (0..out.len())
        .map(|j| match j.checked_sub(skip) {
            Some(i) if !(shape[i] == 1 && out[j] != 1) => given[i],
            _ => 0,
        })
        .collect()
}
