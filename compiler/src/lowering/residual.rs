//! Residual additions in a convolution's epilogue: `Conv → Add(conv, r) [→ Relu]`, the end of a ResNet block, runs
//! as the convolution's product with `r` added (and the ReLU applied) as it stores, instead of a product and then an
//! elementwise launch that reads the product's output back.
//!
//! The rules, each checked by [`residual_adds`]:
//! 1. the convolution's output (of one of the types the backend asks for: f32, f16 or bf16 on OpenCL, f32 on the
//!    CPU) has one reader, the `Add`, and is no graph output;
//! 2. the `Add` (or a `Sum` of two, as the model zoo's ResNets write it) takes two values of the output's type and shape
//!    (no broadcasting): the convolution's and `r`;
//! 3. `r` exists when the convolution runs: a graph input, a constant, or made by a node before it in the graph's
//!    order. Where both of an `Add`'s inputs are convolutions (a downsampling shortcut), the later one takes it;
//! 4. a `Relu` that is the `Add`'s one reader (its output no graph output) runs in the epilogue too.
//!
//! The step is written at the convolution, reads `r` there, and writes the last absorbed node's output: the plan's
//! memory pass sees the same through each backend's `memory_steps`. Both backends take the additions from here
//! (OpenCL's `lower/mod.rs`, the CPU's `lower/mod.rs`); each tests its own kernels' epilogues.

use std::collections::{HashMap, HashSet};

use crate::ir::{self, Graph, NodeId, Op, ValueDef, ValueId};
use stowage_runtime::DatumType;

/// A residual addition a convolution takes into its epilogue.
#[derive(Clone, Copy, Debug)]
pub struct Residual {
    /// The added value.
    pub other: ValueId,
    /// The `Add`.
    pub add: NodeId,
    /// The `Relu` after it, when it runs in the epilogue too.
    pub relu: Option<NodeId>,
}

impl Residual {
    /// The last node the step stands for: its output is the step's.
    pub fn last(&self) -> NodeId {
        self.relu.unwrap_or(self.add)
    }
}

/// The residual additions of `graph` whose values have one of the types `types`, by convolution; `taken`: nodes
/// already run in another step's epilogue.
pub fn residual_adds(graph: &Graph, taken: &HashSet<NodeId>, types: &[DatumType]) -> HashMap<NodeId, Residual> {
    let uses = graph.use_counts();
    let outputs: HashSet<ValueId> = graph.outputs().iter().map(|o| o.value).collect();
    let position: HashMap<NodeId, usize> = graph.order().iter().enumerate().map(|(i, &n)| (n, i)).collect();
    let mut reader: HashMap<ValueId, NodeId> = HashMap::new();
    for &n in graph.order() {
        for &v in graph.node(n).inputs.iter().flatten() {
            reader.insert(v, n);
        }
    }
    let first_output = |n: NodeId| graph.node(n).outputs.first().copied().flatten();
    // The convolution's own type, one of `types`: every term of the addition has it (rule 2).
    let float_value = |v: ValueId| types.contains(&graph.ty(v).dt);
    // Rule 1: a convolution whose output only the node `a` reads.
    let conv_into = |v: ValueId, a: NodeId| -> Option<NodeId> {
        let ValueDef::Node(c, 0) = graph.value(v).def else { return None };
        let single = uses[v] == 1 && !outputs.contains(&v) && reader.get(&v) == Some(&a);
        (matches!(graph.node(c).op, Op::Conv(_)) && single && float_value(v) && !taken.contains(&c)).then_some(c)
    };
    // Rule 3: made before `c` runs.
    let ready_before = |v: ValueId, c: NodeId| match graph.value(v).def {
        ValueDef::Node(p, _) => position[&p] < position[&c],
        ValueDef::Input(_) | ValueDef::Const(_) => true,
    };
    let mut found = HashMap::new();
    for &a in graph.order() {
        let node = graph.node(a);
        let adds = matches!(node.op, Op::Binary(ir::Binary::Add) | Op::Variadic(ir::Variadic::Sum));
        let ([Some(x), Some(y)], Some(out), true) = (node.inputs.as_slice(), first_output(a), adds) else {
            continue;
        };
        // Rule 2.
        if taken.contains(&a) || !float_value(out) || [*x, *y].iter().any(|&v| graph.ty(v) != graph.ty(out)) {
            continue;
        }
        let candidates = [(*x, *y), (*y, *x)]
            .into_iter()
            .filter_map(|(mine, other)| conv_into(mine, a).filter(|&c| ready_before(other, c)).map(|c| (c, other)));
        let Some((conv, other)) = candidates.max_by_key(|(c, _)| position[c]) else { continue };
        // Rule 4.
        let relu = reader
            .get(&out)
            .copied()
            .filter(|_| uses[out] == 1 && !outputs.contains(&out))
            .filter(|&r| matches!(graph.node(r).op, Op::Unary(ir::Unary::Relu)) && !taken.contains(&r));
        found.insert(conv, Residual { other, add: a, relu });
    }
    found
}
