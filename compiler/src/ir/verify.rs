//! The verifier: checks a graph's invariants after import and between passes.
//!
//! Invariants checked, in this order:
//! 1. Every live node appears once in the order, and every node input, output and graph output refers to a
//!    value that exists.
//! 2. Every input of a live node is a graph input, a constant, or an output of a live node earlier in the order
//!    (the order is topological and there are no dangling uses).
//! 3. Every output value of a node says it is defined by that node at that position.
//! 4. Each node's input count is within its op's arity.
//! 5. Inputs that set a shape ([`Op::static_inputs`](super::Op::static_inputs)) are constants.
//! 6. Shape inference, run again on the node as it stands, gives exactly the recorded output types (so a pass
//!    that rewrites a node must keep its types right), and leaves the op unchanged (attributes are normalised).
//! 7. A constant's recorded type is its tensor's datum type and shape.
//! 8. Graph outputs are defined by a graph input, a constant, or a live node.
//! 9. A node's subgraphs (an `If`'s branches, a `Loop`'s body: `ir/subgraph.rs`) hold every invariant here, nested at most
//!    [`MAX_DEPTH`](super::subgraph::MAX_DEPTH) deep; that they fit the node (inputs, outputs, types) is
//!    invariant 6, through inference.
//!
//! A failure is a bug in stowage (an import or a pass broke the graph), never a problem with the user's model.

use std::collections::HashSet;

use cranelift_entity::{EntityRef, SecondaryMap};

use super::{Graph, NodeId, ValueDef, ValueId, ValueType};
use crate::infer::{self, Fact};

/// A broken invariant: a bug in the pass that ran last.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("verifier: {location}: {message} (this is a bug in stowage)")]
pub struct VerifierError {
    /// The node or value at fault, as printed (`n3 "conv1"`, `v7`).
    pub location: String,
    /// The broken invariant.
    pub message: String,
}

fn fail<T>(location: impl Into<String>, message: impl Into<String>) -> Result<T, VerifierError> {
    Err(VerifierError { location: location.into(), message: message.into() })
}

/// Checks every invariant listed in the module doc.
pub fn verify(g: &Graph) -> Result<(), VerifierError> {
    verify_at(g, 0)
}

fn verify_at(g: &Graph, depth: usize) -> Result<(), VerifierError> {
    let exists = |v: ValueId| v.index() < g.value_count();
    let mut defined: SecondaryMap<ValueId, bool> = SecondaryMap::with_capacity(g.value_count());
    for (v, data) in g.values() {
        match &data.def {
            ValueDef::Input(_) => defined[v] = true,
            ValueDef::Const(t) => {
                defined[v] = true;
                if t.dt() != data.ty.dt || t.shape() != data.ty.shape.as_slice() {
                    return fail(
                        format!("{v}"),
                        format!("constant holds {}{:?} but is typed {}", t.dt(), t.shape(), data.ty),
                    );
                }
            }
            ValueDef::Node(..) => {}
        }
    }
    let mut seen: HashSet<NodeId> = HashSet::new();
    for &n in g.order() {
        let node = g.node(n);
        let at = || format!("{n} {:?}", node.name);
        if n.index() >= g.node_count() || !seen.insert(n) {
            return fail(at(), "appears twice in the order or does not exist");
        }
        for (i, input) in node.inputs.iter().enumerate() {
            let Some(v) = *input else { continue };
            if !exists(v) {
                return fail(at(), format!("input {i} refers to a value that does not exist"));
            }
            if !defined[v] {
                return fail(at(), format!("input {i} ({v}) is used before it is defined, or by no live node"));
            }
        }
        let (min, max) = node.op.arity();
        let count = node.inputs.len();
        if count < min || count > max {
            return fail(at(), format!("{} takes {min} to {max} inputs, has {count}", node.op.name()));
        }
        for &i in node.op.static_inputs() {
            if let Some(Some(v)) = node.inputs.get(i) {
                if g.const_value(*v).is_none() {
                    return fail(at(), format!("input {i} sets a shape but is not a constant"));
                }
            }
        }
        let facts: Vec<Option<Fact<'_>>> =
            node.inputs.iter().map(|v| v.map(|v| Fact { ty: g.ty(v), value: g.const_value(v) })).collect();
        let mut op = node.op.clone();
        let types: Vec<ValueType> = match infer::infer(&mut op, &facts, node.outputs.len()) {
            Ok(t) => t,
            Err(e) => return fail(at(), format!("shape inference fails on the node as it stands: {e}")),
        };
        let subgraphs = node.op.subgraphs();
        if !subgraphs.is_empty() {
            if depth >= super::subgraph::MAX_DEPTH {
                return fail(at(), format!("subgraphs nest more than {} deep", super::subgraph::MAX_DEPTH));
            }
            for (which, sub) in subgraphs {
                verify_at(sub, depth + 1).map_err(|e| VerifierError {
                    location: format!("{} {which}: {}", at(), e.location),
                    message: e.message,
                })?;
            }
        } else if format!("{op:?}") != format!("{:?}", node.op) {
            return fail(at(), "attributes are not normalised (inference changes them)");
        }
        for (i, out) in node.outputs.iter().enumerate() {
            let Some(v) = *out else { continue };
            if !exists(v) {
                return fail(at(), format!("output {i} refers to a value that does not exist"));
            }
            match g.value(v).def {
                ValueDef::Node(m, j) if m == n && j == i => {}
                _ => return fail(at(), format!("output {i} ({v}) is not defined by this node")),
            }
            if types.get(i) != Some(g.ty(v)) {
                return fail(
                    at(),
                    format!(
                        "output {i} ({v}) is typed {} but inference gives {:?}",
                        g.ty(v),
                        types.get(i).map(|t| t.to_string())
                    ),
                );
            }
            defined[v] = true;
        }
    }
    for o in g.outputs() {
        if !exists(o.value) || !defined[o.value] {
            return fail(format!("output {:?}", o.name), format!("{} is not defined by a live node", o.value));
        }
    }
    Ok(())
}
