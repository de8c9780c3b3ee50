//! Subgraphs: the branches of an [`Op::If`](super::Op::If) whose condition is known only at run time, kept in the
//! IR as graphs of their own where a target runs them (the CPU: `whole_ops`), instead of both branches inlined
//! behind `Where` (`onnx/branch.rs`, rule 2).
//!
//! The contract, each rule checked where it says:
//! 1. **Outer values are explicit.** A branch is a [`Graph`] whose inputs are the values it reads from around the
//!    node, in the node's input order after the condition: the node's input `k + 1` is the branch's input `k`, of
//!    the same type (inference checks it: `infer::branches`). Outer constants are copied into the branch as
//!    constants, so folding and shape-setting inputs work inside it as anywhere. Nothing else crosses.
//! 2. **Both branches have the node's signature.** Both take the node's inputs after the condition and make
//!    exactly the node's outputs, of the same types (inference checks it; the importer refuses branches that
//!    disagree, naming the node and the output).
//! 3. **Branches are graphs like any other.** The verifier checks each one with every invariant of a graph
//!    (`verify`, invariant 9), the text form prints them indented under their node (`print`), and the passes run
//!    inside them (`Context::run`), with a depth bound: [`MAX_DEPTH`], the importer's.
//! 4. **Only a condition known at run time keeps its branches**: one known at import takes its branch there
//!    (`onnx/branch.rs`, rule 2), so the other leaves no trace; a nested `If` whose condition is an outer constant
//!    is such a one, since outer constants are copied in (rule 1).
//! 5. **Built code carries them**: a branch is written out and read back with the graph (`serial`), as a graph of
//!    its own, constants included.
//!
//! Tests: `compiler/tests/subgraphs.rs`, and `tests/tests/run_time_shapes.rs` for runs.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::Graph;

/// How deep subgraphs nest, at most (the importer checks it before each level, `onnx/branch.rs`, rule 5).
pub const MAX_DEPTH: usize = 16;

/// The two branches of an `If` (rule 1: their inputs are the node's inputs after the condition).
#[derive(Clone, Debug)]
pub struct Branches {
    /// Taken when the condition is true.
    pub then: Graph,
    /// Taken when it is false.
    pub otherwise: Graph,
}

impl Branches {
    /// Both branches, `then` first.
    pub fn graphs(&self) -> [&Graph; 2] {
        [&self.then, &self.otherwise]
    }

    /// Both branches, mutably.
    pub fn graphs_mut(&mut self) -> [&mut Graph; 2] {
        [&mut self.then, &mut self.otherwise]
    }
}

/// Calls `f` on every subgraph of `g`'s live nodes, and theirs, innermost first (rule 3: passes run inside them).
pub fn for_each_mut(g: &mut Graph, f: &mut dyn FnMut(&mut Graph)) {
    let order = g.order().to_vec();
    for n in order {
        if let super::Op::If(b) = &mut g.node_mut(n).op {
            for branch in b.graphs_mut() {
                for_each_mut(branch, f);
                f(branch);
            }
        }
    }
}

/// A branch as built code writes it (rule 5): its structure and its constants.
#[derive(Serialize, Deserialize)]
struct Written {
    graph: Vec<u8>,
    constants: Vec<u8>,
}

fn write(g: &Graph) -> Result<Written, String> {
    let encoded = super::serial::encode(g)?;
    Ok(Written { graph: encoded.graph, constants: encoded.constants })
}

impl Serialize for Branches {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let then = write(&self.then).map_err(serde::ser::Error::custom)?;
        let otherwise = write(&self.otherwise).map_err(serde::ser::Error::custom)?;
        (then, otherwise).serialize(s)
    }
}

impl<'de> Deserialize<'de> for Branches {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let (then, otherwise): (Written, Written) = Deserialize::deserialize(d)?;
        let read = |w: Written| super::serial::decode(&w.graph, &w.constants).map_err(serde::de::Error::custom);
        Ok(Branches { then: read(then)?, otherwise: read(otherwise)? })
    }
}
