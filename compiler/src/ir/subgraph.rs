//! Subgraphs: the branches of an [`Op::If`](super::Op::If) whose condition is known only at run time, and the body
//! of an [`Op::Loop`](super::Op::Loop) iterated at run time or of an [`Op::Scan`](super::Op::Scan) too long to
//! unroll, kept in the IR as graphs of their own where a target
//! runs them (the CPU: `whole_ops`), instead of both branches inlined behind `Where` (`onnx/branch.rs`, rule 2)
//! or the import's error.
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
//! 6. **A `Loop` iterated at run time** keeps its body as a graph ([`LoopBody`]) where a target runs a `Loop`
//!    whole (the CPU) and the driver does not iterate it itself (a loop inside another node's subgraph, or any
//!    loop where no run compiles in stages, as `stowage import`): rules 1 to 5 hold for it as for branches, its
//!    carried values keep their types from one iteration to the next (inference checks it), it has no scan
//!    outputs (their length would be known only at run time), and it runs at most [`MAX_ITERATIONS`] times.
//! 7. **A `Scan` too long to unroll** (more than `MAX_STEPS` steps, or over the unrolling budget) keeps its body
//!    as a graph ([`ScanBody`]) where a target runs a `Scan` whole (the CPU): rules 2, 3 and 5 hold for it, and
//!    rule 1 with its own order (the body's inputs: the states, a slice of each scan input, then the values read
//!    from around the node, as the node's inputs after the states and scan inputs); its states
//!    keep their types, its scan inputs agree in length along their axes (the number of steps, static), and each
//!    scan output is its per-step slices stacked along its axis.
//!
//! Tests: `compiler/tests/subgraphs.rs`, and `tests/tests/run_time_shapes.rs` for runs.

use serde::{Deserialize, Serialize};

use super::Graph;

/// How deep subgraphs nest, at most (the importer checks it before each level, `onnx/branch.rs`, rule 5).
pub const MAX_DEPTH: usize = 16;

/// The most iterations a `Loop` runs (rule 6; the driver's iterated loops too): a loop still going when it is
/// reached stops with an error naming it.
pub const MAX_ITERATIONS: i64 = 1 << 20;

/// The two branches of an `If` (rule 1: their inputs are the node's inputs after the condition).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Branches {
    /// Taken when the condition is true.
    #[serde(with = "written")]
    pub then: Graph,
    /// Taken when it is false.
    #[serde(with = "written")]
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

/// The body of a `Loop` iterated at run time (rule 6). The node's inputs: the trip count and the condition (each
/// `None` when absent), the carried values, then the values the body reads from around the node. The body's
/// inputs: the iteration number (`i64[]`), the condition (`bool[]`), then the node's inputs from the third on,
/// in order and of the same types; its outputs: the next condition and the carried values, of the types they
/// came in (no scan outputs). The node's outputs: the carried values after the last iteration.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LoopBody {
    /// The body.
    #[serde(with = "written")]
    pub body: Graph,
    /// How many values it carries.
    pub carried: usize,
}

/// The body of a `Scan` too long to unroll (rule 7). The node's inputs: the states, the scan inputs, then the
/// values the body reads from around the node. The body's inputs: the states, one slice of each scan input (its
/// axis removed), then those values, of the node's types; its outputs: the states, of the types they came in, then
/// one slice of each scan output. The node's outputs: the states after the last step, then the scan outputs, each
/// its slices stacked along its axis.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ScanBody {
    /// The body.
    #[serde(with = "written")]
    pub body: Graph,
    /// How many states it carries.
    pub states: usize,
    /// Per scan input: the axis it is sliced along, and whether it is read from its end.
    pub inputs: Vec<(usize, bool)>,
    /// Per scan output: the axis its slices are stacked along, and whether the last step's slice comes first.
    pub outputs: Vec<(usize, bool)>,
}

/// Calls `f` on every subgraph of `g`'s live nodes, and theirs, innermost first (rule 3: passes run inside them).
pub fn for_each_mut(g: &mut Graph, f: &mut dyn FnMut(&mut Graph)) {
    let order = g.order().to_vec();
    for n in order {
        for (_, sub) in g.node_mut(n).op.subgraphs_mut() {
            for_each_mut(sub, f);
            f(sub);
        }
    }
}

/// A graph as built code writes it (rule 5): its structure and its constants, through `serial`.
mod written {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use crate::ir::{serial, Graph};

    pub fn serialize<S: Serializer>(g: &Graph, s: S) -> Result<S::Ok, S::Error> {
        let encoded = serial::encode(g).map_err(serde::ser::Error::custom)?;
        (encoded.graph, encoded.constants).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Graph, D::Error> {
        let (graph, constants): (Vec<u8>, Vec<u8>) = Deserialize::deserialize(d)?;
        serial::decode(&graph, &constants).map_err(serde::de::Error::custom)
    }
}
