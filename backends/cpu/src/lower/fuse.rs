//! Fusion: runs of f32 elementwise nodes become one [`Chain`] each, compiled by the JIT into one loop.
//!
//! A node joins the chain of an input's producer when that input feeds nothing else, is not a graph output, and
//! has the node's own shape; the chain's result is its last node's output. Inputs of a chain are either of that
//! shape, single elements (constant scalars become immediates), periodic (a suffix of the output's shape of at
//! least 16 elements, such as a bias `[D]` against `[N, S, D]`: the chain runs once per period, reading it whole),
//! or row-broadcast: constant along rows of at least 16 elements, such as a per-channel scale `[C, 1, 1]` against
//! `[N, C, H, W]`; then the chain runs once per row, each row getting its element of those inputs. Other
//! broadcasting stays with the interpreter kernels.

use std::collections::HashMap;

use stowage_compiler::consts;
use stowage_compiler::ir::{self, Graph, NodeId, Op, ValueId};
use stowage_runtime::DatumType;

use super::{binary_fn, unary_fn};
use crate::jit::{fusable_binary, fusable_unary, Chain, Inst};
use crate::kernels::elementwise::{BinaryFn, UnaryFn};

/// A chain to emit at its root node.
pub(super) struct Planned {
    /// The chain's program.
    pub chain: Chain,
    /// External inputs, in `Inst::Input` order.
    pub inputs: Vec<ValueId>,
    /// Every node folded into the chain (the root included).
    pub members: Vec<NodeId>,
    /// Elements per row: the chain runs once per row when some input is constant along rows.
    pub inner: usize,
    /// Per input: for a row-broadcast input, the element it supplies to each row; `None` for the others.
    pub rows: Vec<Option<Vec<usize>>>,
    /// Per input: true if it repeats with period `inner` (read whole for every row).
    pub periodic: Vec<bool>,
}

/// The last axis (of `out`) along which `shape`, right-aligned to `out`, is not 1; `None` if it is all 1s.
fn last_varying_axis(shape: &[usize], out: &[usize]) -> Option<usize> {
    let pad = out.len() - shape.len();
    (0..shape.len()).rev().find(|&a| shape[a] != 1).map(|a| a + pad)
}

/// Smallest row worth a call into the chain.
const MIN_ROW: usize = 16;

/// True if `shape` broadcasts to `out` and is constant along rows of at least [`MIN_ROW`] elements.
fn row_broadcast(shape: &[usize], out: &[usize]) -> bool {
    if shape.len() > out.len() {
        return false;
    }
    let pad = out.len() - shape.len();
    let fits = shape.iter().enumerate().all(|(a, &d)| d == 1 || d == out[a + pad]);
    let inner: usize = match last_varying_axis(shape, out) {
        Some(k) => out[k + 1..].iter().product(),
        None => return fits,
    };
    fits && inner >= MIN_ROW
}

/// If `shape` (leading 1s aside) is a proper suffix of `out` of at least [`MIN_ROW`] elements, that many: the
/// input repeats with that period along the output (a bias over the last axis, say).
fn periodic(shape: &[usize], out: &[usize]) -> Option<usize> {
    let first = shape.iter().position(|&d| d != 1).unwrap_or(shape.len());
    let core = &shape[first..];
    let period: usize = core.iter().product();
    (core.len() < out.len() && out.ends_with(core) && core != out && period >= MIN_ROW).then_some(period)
}

/// The function one node applies, if it can be fused: (instruction builder, its data inputs).
fn node_fn(op: &Op) -> Option<Vec<Step>> {
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

/// Plans the chains of `graph`: one per root node. Nodes in `skip` (absorbed elsewhere) are left out.
pub(super) fn plan(graph: &Graph, skip: &std::collections::HashSet<NodeId>) -> HashMap<NodeId, Planned> {
    let uses = graph.use_counts();
    let outputs: Vec<ValueId> = graph.outputs().iter().map(|o| o.value).collect();
    let f32_of = |v: ValueId| graph.ty(v).dt == DatumType::F32;
    // chain id of each fused node; chains as member lists.
    let mut chain_of: HashMap<NodeId, usize> = HashMap::new();
    let mut chains: Vec<Option<Vec<NodeId>>> = Vec::new();
    for &n in graph.order() {
        if skip.contains(&n) {
            continue;
        }
        let node = graph.node(n);
        let Some(Some(out)) = node.outputs.first().copied() else { continue };
        if node.outputs.len() != 1 || node_fn(&node.op).is_none() || !f32_of(out) {
            continue;
        }
        let shape = &graph.ty(out).shape;
        let inputs_ok = node.inputs.iter().flatten().all(|&v| {
            let s = &graph.ty(v).shape;
            f32_of(v)
                && (s == shape
                    || graph.ty(v).element_count() == Some(1)
                    || periodic(s, shape).is_some()
                    || row_broadcast(s, shape))
        });
        let clip_ok =
            !matches!(node.op, Op::Clip) || node.inputs[1..].iter().flatten().all(|&v| graph.const_value(v).is_some());
        if !inputs_ok || !clip_ok {
            continue;
        }
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
        if let Some(p) = build(graph, root, &members) {
            planned.insert(root, p);
        }
    }
    planned
}

/// Builds the instructions of the chain rooted at `root`.
fn build(graph: &Graph, root: NodeId, members: &[NodeId]) -> Option<Planned> {
    let mut b =
        Builder { graph, members, insts: Vec::new(), inputs: Vec::new(), scalar: Vec::new(), memo: HashMap::new() };
    let out = graph.node(root).outputs[0]?;
    b.value(out)?;
    let shape = graph.ty(out).shape.clone();
    // Periodic inputs repeat along the output: the chain runs once per period, reading them whole each time.
    // Row inputs (neither full-shape, single elements nor periodic): the row boundary is after the last axis any
    // of them varies along; each row gets one element of each. A chain mixes at most one of the two kinds.
    let full_or_scalar = |v: ValueId| graph.ty(v).shape == shape || graph.ty(v).element_count() == Some(1);
    let periods: Vec<Option<usize>> =
        b.inputs.iter().map(|&v| if full_or_scalar(v) { None } else { periodic(&graph.ty(v).shape, &shape) }).collect();
    let is_row: Vec<bool> = b.inputs.iter().zip(&periods).map(|(&v, p)| !full_or_scalar(v) && p.is_none()).collect();
    let period = periods.iter().flatten().copied().max();
    if period.is_some() && (is_row.iter().any(|&r| r) || periods.iter().flatten().any(|&p| Some(p) != period)) {
        return None;
    }
    let split = b
        .inputs
        .iter()
        .zip(&is_row)
        .filter(|(_, r)| **r)
        .filter_map(|(&v, _)| last_varying_axis(&graph.ty(v).shape, &shape))
        .max();
    let (inner, rows) = match (period, split) {
        (Some(p), _) => (p, vec![None; b.inputs.len()]),
        (None, None) => (shape.iter().product(), vec![None; b.inputs.len()]),
        (None, Some(k)) => {
            let rows = b
                .inputs
                .iter()
                .zip(&is_row)
                .map(|(&v, &r)| r.then(|| row_table(&graph.ty(v).shape, &shape, k)))
                .collect();
            (shape[k + 1..].iter().product(), rows)
        }
    };
    let mut scalar = b.scalar;
    for (s, r) in scalar.iter_mut().zip(&is_row) {
        *s |= *r;
    }
    Some(Planned {
        chain: Chain { insts: b.insts, scalar_inputs: scalar },
        inputs: b.inputs,
        members: members.to_vec(),
        inner,
        rows,
        periodic: periods.iter().map(Option::is_some).collect(),
    })
}

/// For an input of `shape` broadcast to `out`, the offset of its element for each row (rows: the indices of
/// `out[..=k]` in row-major order).
fn row_table(shape: &[usize], out: &[usize], k: usize) -> Vec<usize> {
    let st = crate::kernels::broadcast::strides_for(shape, out);
    let outer = &out[..=k];
    let count: usize = outer.iter().product();
    (0..count)
        .map(|i| {
            let (mut rest, mut off) = (i, 0);
            for a in (0..outer.len()).rev() {
                off += (rest % outer[a]) * st[a];
                rest /= outer[a];
            }
            off
        })
        .collect()
}

struct Builder<'g> {
    graph: &'g Graph,
    members: &'g [NodeId],
    insts: Vec<Inst>,
    inputs: Vec<ValueId>,
    scalar: Vec<bool>,
    memo: HashMap<ValueId, usize>,
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
                let mut acc = *args.first()?;
                for step in node_fn(&node.op)? {
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
                    self.scalar.push(
                        g.ty(v).element_count() == Some(1) && g.ty(v).rank() < 2 || g.ty(v).element_count() == Some(1),
                    );
                    self.push(Inst::Input(k))
                }
            },
        };
        self.memo.insert(v, i);
        Some(i)
    }
}
