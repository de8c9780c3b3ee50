//! Channel blocks: which 4-D values a target holds as `[N, ⌈C/b⌉, H, W, b]` (`b` channels per block, the target's
//! vector width) rather than packed NCHW. A target says, per node, how its kernel takes blocks
//! ([`Backend::channel_blocks`], a [`BlockRole`]); this pass picks the values, so a chain of convolutions, pools and
//! the elementwise steps between them streams blocks from end to end. The rules:
//!
//! 1. **Kernels at the chain's ends convert as they run.** A convolution reads either layout and writes either, a
//!    global pool reads either and writes packed: the chain's first convolution reads packed NCHW and writes blocks,
//!    its last writes packed, and no relayout is a step of its own. So this pass adds no copy to the plan; the
//!    layouts are listed with it ([`super::Plan::blocked`], `stowage plan`'s `layouts:`).
//! 2. **Groups share one layout.** A pool's input and output, and an elementwise step's or a Concat's inputs of
//!    its output's shape (but along the channels) and its output ([`BlockRole::Same`], [`BlockRole::Along`]), are in
//!    one group (union-find): all of a group are blocked, or none. An elementwise step's other inputs (a
//!    per-channel scale, a scalar) are broadcast operands its kernel reads as they are.
//! 3. **A group is blocked only where every kernel can take it.** Each of its values is f32 and 4-D, made by a node
//!    as output 0 in a role that writes blocks, not a graph output nor a fed-back state, and read only by nodes of
//!    the producer's segment (so never an output or input of a segment's program) at an input their role reads
//!    blocked; one block width throughout. Values are named as segments name them (`segments::value_name`).
//! 4. **Padding only where no step walks the elements.** A value whose channels are not a multiple of the block is
//!    padded to whole blocks (its bytes in the memory plan are the padded ones); a group with an elementwise step
//!    or a Concat (which see the elements, not the channels) must have whole blocks.
//!
//! Tests: `compiler/tests/plan_blocked.rs` (rules 2–4 on graphs built there); the kernels and whole models in the
//! CPU backend and `tests/tests/conformance.rs`.

use std::collections::BTreeMap;

use crate::ir::{Graph, NodeId, ValueDef, ValueId};

use super::placement::Placed;
use super::target::{Backend, BlockRole};

/// A value the plan holds in channel blocks.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BlockedValue {
    /// The value's name.
    pub value: String,
    /// The value.
    #[serde(with = "super::serial::id")]
    pub id: ValueId,
    /// Channels per block.
    pub block: usize,
    /// Its bytes in blocks (more than packed where the channels are padded, rule 4).
    pub bytes: usize,
}

impl BlockedValue {
    /// Bytes of a value of f32 `shape` (`[N, C, H, W]`) in blocks of `block` channels.
    pub fn bytes_of(shape: &[usize], block: usize) -> Option<usize> {
        match *shape {
            [n, c, h, w] => Some(n * c.div_ceil(block) * block * h * w * 4),
            _ => None,
        }
    }
}

/// The values to hold in channel blocks (rules 2–4), in value order.
pub fn choose(
    graph: &Graph,
    targets: &[&dyn Backend],
    placed: &[Placed],
    states: &[(String, String)],
) -> Vec<BlockedValue> {
    // Each node's segment (a run of consecutive nodes on one target, `segments.rs`): a value crossing segments is
    // an output of one program and an input of another, which take packed values only (rule 3).
    let mut segment_of: BTreeMap<NodeId, usize> = BTreeMap::new();
    for (i, p) in placed.iter().enumerate() {
        let same = i > 0 && placed[i - 1].target == p.target;
        let k = if same { segment_of[&placed[i - 1].node] } else { i };
        segment_of.insert(p.node, k);
    }
    let role: BTreeMap<NodeId, (usize, BlockRole)> =
        placed.iter().filter_map(|p| targets[p.target].channel_blocks(graph, p.node).map(|r| (p.node, r))).collect();
    if role.is_empty() {
        return Vec::new();
    }
    let outputs: Vec<ValueId> = graph.outputs().iter().map(|o| o.value).collect();
    let fed_back = |v: ValueId| states.iter().any(|(o, _)| *o == graph.value(v).name);
    // Readers of each value: (node, input index).
    let mut readers: BTreeMap<ValueId, Vec<(NodeId, usize)>> = BTreeMap::new();
    for &n in graph.order() {
        for (k, v) in graph.node(n).inputs.iter().enumerate() {
            if let Some(v) = v {
                readers.entry(*v).or_default().push((n, k));
            }
        }
    }
    // Rule 2: the inputs a role ties to the output.
    let tied = |n: NodeId, k: usize, v: ValueId| -> bool {
        let Some(&(_, r)) = role.get(&n) else { return false };
        match r {
            BlockRole::Same => k == 0,
            BlockRole::Along => {
                // Inputs of the output's shape but along the channels (a Concat's differ there); any other is a
                // broadcast operand the kernel reads as it is.
                let out = graph.node(n).outputs.first().copied().flatten();
                let shape = &graph.ty(v).shape;
                out.is_some_and(|o| {
                    let o = &graph.ty(o).shape;
                    o.len() == shape.len() && shape.iter().zip(o).enumerate().all(|(a, (d, e))| a == 1 || d == e)
                })
            }
            BlockRole::Either | BlockRole::Reads => false,
        }
    };
    let reads_blocked = |n: NodeId, k: usize, v: ValueId| -> bool {
        match role.get(&n) {
            Some((_, BlockRole::Either | BlockRole::Reads)) => k == 0,
            Some(_) => tied(n, k, v),
            None => false,
        }
    };
    // Rule 3, one value at a time: its block width, or why not.
    let eligible = |v: ValueId| -> Option<usize> {
        let ty = graph.ty(v);
        if ty.dt != stowage_runtime::DatumType::F32 || ty.shape.len() != 4 || outputs.contains(&v) || fed_back(v) {
            return None;
        }
        let ValueDef::Node(producer, 0) = graph.value(v).def else { return None };
        let &(block, r) = role.get(&producer)?;
        if r == BlockRole::Reads {
            return None;
        }
        let here = segment_of.get(&producer)?;
        let all_read = readers.get(&v).is_some_and(|rs| {
            rs.iter().all(|&(n, k)| segment_of.get(&n) == Some(here) && reads_blocked(n, k, v) && role[&n].0 == block)
        });
        all_read.then_some(block)
    };
    // Union-find over values (rule 2).
    let mut parent: BTreeMap<ValueId, ValueId> = BTreeMap::new();
    fn find(parent: &mut BTreeMap<ValueId, ValueId>, v: ValueId) -> ValueId {
        let p = *parent.get(&v).unwrap_or(&v);
        if p == v {
            return v;
        }
        let root = find(parent, p);
        parent.insert(v, root);
        root
    }
    let mut along: BTreeMap<ValueId, bool> = BTreeMap::new();
    for (&n, &(_, r)) in &role {
        let node = graph.node(n);
        let Some(out) = node.outputs.first().copied().flatten() else { continue };
        for (k, v) in node.inputs.iter().enumerate() {
            let Some(v) = *v else { continue };
            if tied(n, k, v) {
                let (a, b) = (find(&mut parent, v), find(&mut parent, out));
                parent.insert(a, b);
                if r == BlockRole::Along {
                    along.insert(v, true);
                    along.insert(out, true);
                }
            }
        }
    }
    // Each group's members: every value that is some role node's output or tied input.
    let mut groups: BTreeMap<ValueId, Vec<ValueId>> = BTreeMap::new();
    let mut candidates: Vec<ValueId> = Vec::new();
    for &n in role.keys() {
        let node = graph.node(n);
        candidates.extend(node.outputs.first().copied().flatten());
        candidates.extend(node.inputs.iter().enumerate().filter_map(|(k, v)| v.filter(|&v| tied(n, k, v))));
    }
    candidates.sort();
    candidates.dedup();
    for v in candidates {
        let root = find(&mut parent, v);
        groups.entry(root).or_default().push(v);
    }
    let mut chosen = Vec::new();
    for members in groups.values() {
        let blocks: Option<Vec<usize>> = members.iter().map(|&v| eligible(v)).collect();
        let Some(blocks) = blocks else { continue };
        let block = blocks[0];
        if blocks.iter().any(|&b| b != block) {
            continue;
        }
        // Rule 4.
        let whole = members.iter().all(|&v| graph.ty(v).shape[1].is_multiple_of(block));
        if !whole && members.iter().any(|v| along.contains_key(v)) {
            continue;
        }
        for &v in members {
            let bytes = BlockedValue::bytes_of(&graph.ty(v).shape, block).unwrap_or(0);
            chosen.push(BlockedValue { value: super::segments::value_name(graph, v), id: v, block, bytes });
        }
    }
    chosen.sort_by_key(|b| b.id);
    chosen
}
