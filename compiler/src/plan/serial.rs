//! A plan written out at build time and read back at start-up, so that built code runs the plan it was built with
//! instead of planning again: placement, input layouts, copies, arenas and states, as bincode.
//!
//! What a plan says of its targets' descriptors is not written: it is the opened targets' (their descriptors hold
//! `'static` tables, and the device opened at start-up may be another than the build machine's). Instead each
//! target is written as what decides the plan, its memory space and its memory's kind and staging, and
//! [`decode`] refuses a plan whose targets are not those. Nodes and values are written by id with their names, so
//! a plan read against another graph than its own is refused too, naming the first node or value that differs.
//!
//! Rules [`decode`] checks, each with the test that breaks it (`compiler/tests/plan.rs`):
//! 1. the bytes are a plan of this version (`garbage_is_refused`);
//! 2. as many targets, each of the same space, memory kind and staging (`another_target_is_refused`);
//! 3. every node and value id is in the graph and has the name it had (`another_graph_is_refused`);
//! 4. every target index is one of the targets (checked with rule 3);
//! 5. each target is asked again for the precision the plan asked of it, and may refuse it
//!    (`super::precision`, rule 4);
//! 6. values held in channel blocks are the graph's too (rule 3), and blocks their target does not take here are
//!    dropped, the value packed in its planned buffer, which is at least as large.

use cranelift_entity::EntityRef;
use serde::{Deserialize, Serialize};
use stowage_runtime::MemoryKind;

use super::{Backend, Plan, TargetSpec};
use crate::ir::Graph;

/// Node and value ids as their index, for serde.
pub(crate) mod id {
    use cranelift_entity::EntityRef;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<E: EntityRef, S: Serializer>(e: &E, s: S) -> Result<S::Ok, S::Error> {
        (e.index() as u64).serialize(s)
    }

    pub fn deserialize<'de, E: EntityRef, D: Deserializer<'de>>(d: D) -> Result<E, D::Error> {
        let k = u64::deserialize(d)?;
        usize::try_from(k).map(E::new).map_err(serde::de::Error::custom)
    }
}

/// `MemoryKind` by name, for serde (the runtime has no serde).
fn kind_name(k: MemoryKind) -> &'static str {
    match k {
        MemoryKind::Host => "host",
        MemoryKind::Unified => "unified",
        MemoryKind::Device => "device",
    }
}

/// What of a target decides its plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct StoredTarget {
    name: String,
    space: String,
    kind: String,
    staged: bool,
    /// The precision the plan asked of it.
    asked: super::Precision,
}

impl StoredTarget {
    fn of(t: &TargetSpec, asked: super::Precision) -> StoredTarget {
        StoredTarget {
            name: t.name.clone(),
            space: t.space.clone(),
            kind: kind_name(t.memory.kind).to_string(),
            staged: t.memory.staged,
            asked,
        }
    }
}

/// The plan as written.
#[derive(Serialize, Deserialize)]
struct Stored {
    /// A format tag and version.
    format: String,
    graph: String,
    targets: Vec<StoredTarget>,
    nodes: Vec<super::Placed>,
    node_names: Vec<String>,
    inputs: Vec<super::PlanInput>,
    copies: Vec<super::PlannedCopy>,
    blocked: Vec<super::BlockedValue>,
    arenas: Vec<super::Arena>,
    states: Vec<(String, String)>,
}

const FORMAT: &str = "stowage plan 4";

/// Writes `plan` out.
pub fn encode(plan: &Plan) -> Vec<u8> {
    let stored = Stored {
        format: FORMAT.to_string(),
        graph: plan.graph.clone(),
        targets: plan.targets.iter().zip(&plan.precisions).map(|(t, p)| StoredTarget::of(t, p.asked)).collect(),
        nodes: plan.nodes.clone(),
        node_names: plan.node_names.iter().map(|(n, _)| n.clone()).collect(),
        inputs: plan.inputs.clone(),
        copies: plan.copies.clone(),
        blocked: plan.blocked.clone(),
        arenas: plan.arenas.clone(),
        states: plan.states.clone(),
    };
    bincode::serialize(&stored).expect("a plan is plain data: strings, numbers and vectors")
}

/// Why a written plan is not this graph's plan on these targets.
#[derive(Debug, thiserror::Error)]
pub enum PlanReadError {
    /// The bytes are no plan of this stowage.
    #[error("not a plan written by this stowage: {0}")]
    Format(String),
    /// The targets opened are not the ones the plan was made for.
    #[error("{0}")]
    Targets(String),
    /// The plan names nodes or values the graph does not have.
    #[error("the plan is of another graph: {0}")]
    Graph(String),
}

/// Reads a plan written by [`encode`] for `graph` on `targets` (the targets opened now, whose descriptors the plan
/// takes). Refuses a plan of another graph, or of targets with another memory path.
pub fn decode(bytes: &[u8], graph: &Graph, targets: &[&dyn Backend]) -> Result<Plan, PlanReadError> {
    let stored: Stored = bincode::deserialize(bytes).map_err(|e| PlanReadError::Format(e.to_string()))?;
    if stored.format != FORMAT {
        return Err(PlanReadError::Format(format!("its format is '{}', this stowage reads '{FORMAT}'", stored.format)));
    }
    let now: Vec<StoredTarget> = targets.iter().map(|t| StoredTarget::of(t.spec(), Default::default())).collect();
    if now.len() != stored.targets.len() {
        return Err(PlanReadError::Targets(format!(
            "it was made for {} targets, {} are open",
            stored.targets.len(),
            now.len()
        )));
    }
    for (then, now) in stored.targets.iter().zip(&now) {
        let same = then.space == now.space && then.kind == now.kind && then.staged == now.staged;
        if !same {
            let staging = |s: bool| if s { ", staged" } else { "" };
            return Err(PlanReadError::Targets(format!(
                "it was made for '{}' ({} memory in space {}{}), '{}' is {} memory in space {}{}",
                then.name,
                then.kind,
                then.space,
                staging(then.staged),
                now.name,
                now.kind,
                now.space,
                staging(now.staged)
            )));
        }
    }
    let bad = |m: String| PlanReadError::Graph(m);
    if stored.nodes.len() != stored.node_names.len() {
        return Err(bad(format!("{} nodes, {} names", stored.nodes.len(), stored.node_names.len())));
    }
    let mut node_names = Vec::with_capacity(stored.nodes.len());
    for (p, name) in stored.nodes.iter().zip(&stored.node_names) {
        if p.node.index() >= graph.node_count() || graph.node(p.node).name != *name {
            return Err(bad(format!("its node '{name}' is not node {} here", p.node.index())));
        }
        if p.target >= targets.len() {
            return Err(bad(format!("node '{name}' runs on target {}, of {}", p.target, targets.len())));
        }
        node_names.push((name.clone(), graph.node(p.node).op.name()));
    }
    for c in &stored.copies {
        // A copy names its value, or the graph output it is (an output's download).
        let named =
            |id| graph.value(id).name == c.value || graph.outputs().iter().any(|o| o.value == id && o.name == c.value);
        if c.id.index() >= graph.value_count() || !named(c.id) {
            return Err(bad(format!("its value '{}' is not value {} here", c.value, c.id.index())));
        }
    }
    for b in &stored.blocked {
        if b.id.index() >= graph.value_count() || super::segments::value_name(graph, b.id) != b.value {
            return Err(bad(format!("its value '{}' is not value {} here", b.value, b.id.index())));
        }
    }
    // Rule 6: channel blocks a target does not take here (a CPU without the vector width it was built on) are
    // dropped: their buffers were planned at least as large as packed, so the arenas still hold them.
    let blocked = stored
        .blocked
        .into_iter()
        .filter(|b| {
            let crate::ir::ValueDef::Node(producer, _) = graph.value(b.id).def else { return false };
            let target = stored.nodes.iter().find(|p| p.node == producer).map(|p| p.target);
            target.is_some_and(|t| targets[t].channel_blocks(graph, producer).is_some_and(|(w, _)| w == b.block))
        })
        .collect();
    let asked: Vec<super::Precision> = stored.targets.iter().map(|t| t.asked).collect();
    let precisions = super::precision::grant(targets, &asked).map_err(|e| PlanReadError::Targets(e.to_string()))?;
    Ok(Plan {
        graph: stored.graph,
        targets: targets.iter().map(|t| t.spec().clone()).collect(),
        precisions,
        nodes: stored.nodes,
        node_names,
        inputs: stored.inputs,
        copies: stored.copies,
        blocked,
        arenas: stored.arenas,
        states: stored.states,
    })
}
