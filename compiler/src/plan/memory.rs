//! Memory planning: per memory space, one arena. Each value a space holds (a node's output, or a copy into it)
//! lives from the step that makes it to the last step that reads it there; values alive at the same time get
//! disjoint offsets, rounded to the space's alignment. Reshape-like views share their input's buffer, and an
//! elementwise node writes over an input of its size that nothing reads after it (in place). The plan reports the
//! arena's size (the peak) against the lower bound: the most bytes alive at any one step.
//!
//! Offsets are chosen largest buffer first, each at the lowest offset free for its whole lifetime: the usual
//! greedy for this interval-packing problem, within a few percent of the bound on the model suite (`docs/planning.md`).

use std::collections::BTreeMap;

use cranelift_entity::SecondaryMap;

use crate::ir::{Graph, Op, ValueDef, ValueId};

use super::copies::{PlannedCopy, When};
use super::cost::is_view;
use super::placement::Placed;
use super::target::Backend;

/// One buffer of an arena.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Buffer {
    /// The values it holds (several when views or in-place nodes share it).
    pub values: Vec<String>,
    /// Offset in the arena, bytes.
    pub offset: usize,
    /// Size, bytes (rounded up to the alignment).
    pub bytes: usize,
    /// First and last step (node index in plan order) it is alive.
    pub live: (usize, usize),
}

/// The arena of one memory space.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Arena {
    /// The space (`host`, `opencl:0`).
    pub space: String,
    /// Alignment of every offset.
    pub alignment: usize,
    /// Its buffers, by offset.
    pub buffers: Vec<Buffer>,
    /// Bytes of the arena: the planned peak.
    pub peak_bytes: usize,
    /// The most bytes alive at one step: no plan can use less.
    pub lower_bound_bytes: usize,
    /// Buffers that live across runs, outside the arena: fed-back state outputs.
    pub persistent: Vec<(String, usize)>,
}

struct Interval {
    values: Vec<ValueId>,
    bytes: usize,
    start: usize,
    end: usize,
}

/// Plans the arenas of every space `placed` uses.
pub fn plan(
    graph: &Graph,
    targets: &[&dyn Backend],
    placed: &[Placed],
    copies: &[PlannedCopy],
    states: &[(String, String)],
) -> Vec<Arena> {
    let steps = placed.len();
    let space_of_target = |t: usize| targets[t].spec().space.clone();
    let mut spaces: Vec<String> = Vec::new();
    for p in placed {
        let t = &targets[p.target];
        if !spaces.contains(&t.spec().space) {
            spaces.push(t.spec().space.clone());
        }
    }
    let outputs: Vec<ValueId> = graph.outputs().iter().map(|o| o.value).collect();
    let persistent: Vec<&str> = states.iter().map(|(o, _)| o.as_str()).collect();
    let mut arenas = Vec::new();
    for space in spaces {
        let alignment =
            targets.iter().find(|t| t.spec().space == space).map_or(64, |t| t.spec().memory.alignment.max(1));
        // Intervals by root value; `root` maps views and in-place outputs to the buffer they share.
        let mut root: SecondaryMap<ValueId, Option<ValueId>> = SecondaryMap::new();
        let mut intervals: BTreeMap<ValueId, Interval> = BTreeMap::new();
        let mut kept = Vec::new();
        let last_read = |v: ValueId| -> usize {
            // A value read in another space stays alive until that reader's step (its copy out happens by then).
            placed.iter().rposition(|p| graph.node(p.node).inputs.contains(&Some(v))).unwrap_or(0)
        };
        for (i, p) in placed.iter().enumerate() {
            if space_of_target(p.target) != space {
                continue;
            }
            let node = graph.node(p.node);
            for v in node.inputs.iter().flatten() {
                // Copies into this space: alive from their first reader here to their last.
                let arrives = copies.iter().any(|c| c.id == *v && c.to == space && c.when != When::Setup);
                if arrives && root[*v].is_none() && !intervals.contains_key(v) {
                    let end = last_read(*v);
                    intervals.insert(
                        *v,
                        Interval { values: vec![*v], bytes: graph.ty(*v).byte_len().unwrap_or(0), start: i, end },
                    );
                }
            }
            let view = is_view(graph, p.node);
            for v in node.outputs.iter().flatten() {
                let name = graph.value(*v).name.as_str();
                let bytes = graph.ty(*v).byte_len().unwrap_or(0);
                let mut end = if outputs.contains(v) { steps } else { last_read(*v).max(i) };
                if persistent.contains(&name) {
                    kept.push((name.to_string(), bytes));
                    continue;
                }
                let source = node.inputs.first().copied().flatten();
                let shared = match source.and_then(|s| root[s].or(intervals.contains_key(&s).then_some(s))) {
                    Some(r) if view => Some(r),
                    Some(r)
                        if in_place(&node.op)
                            && intervals[&r].end <= i
                            && intervals[&r].bytes == bytes
                            && !outputs.contains(&r) =>
                    {
                        Some(r)
                    }
                    _ => None,
                };
                match shared {
                    Some(r) => {
                        root[*v] = Some(r);
                        let iv = intervals.get_mut(&r).expect("root has an interval");
                        iv.values.push(*v);
                        end = end.max(iv.end);
                        iv.end = end;
                    }
                    None if view && source.is_some_and(|s| !matches!(graph.value(s).def, ValueDef::Node(..))) => {}
                    None => {
                        intervals.insert(*v, Interval { values: vec![*v], bytes, start: i, end });
                    }
                }
            }
        }
        arenas.push(pack(graph, space, alignment, intervals.into_values().collect(), kept));
    }
    arenas
}

/// Elementwise ops that may write over an input of their size.
fn in_place(op: &Op) -> bool {
    matches!(op, Op::Unary(_) | Op::Binary(_) | Op::Clip)
}

/// Offsets for `intervals`: largest first, each at the lowest aligned offset free for its lifetime.
fn pack(
    graph: &Graph,
    space: String,
    alignment: usize,
    mut intervals: Vec<Interval>,
    persistent: Vec<(String, usize)>,
) -> Arena {
    intervals.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.start.cmp(&b.start)));
    let mut placed: Vec<(usize, usize, usize, usize)> = Vec::new(); // offset, bytes, start, end
    let mut buffers = Vec::new();
    for iv in &intervals {
        let bytes = iv.bytes.next_multiple_of(alignment).max(alignment);
        let mut busy: Vec<(usize, usize)> =
            placed.iter().filter(|p| p.2 <= iv.end && iv.start <= p.3).map(|p| (p.0, p.0 + p.1)).collect();
        busy.sort_unstable();
        let mut offset = 0;
        for (lo, hi) in busy {
            if offset + bytes <= lo {
                break;
            }
            offset = offset.max(hi);
        }
        placed.push((offset, bytes, iv.start, iv.end));
        buffers.push(Buffer {
            values: iv.values.iter().map(|&v| graph.value(v).name.clone()).collect(),
            offset,
            bytes,
            live: (iv.start, iv.end),
        });
    }
    buffers.sort_by_key(|b| (b.offset, b.live.0));
    let peak_bytes = buffers.iter().map(|b| b.offset + b.bytes).max().unwrap_or(0);
    let last = buffers.iter().map(|b| b.live.1).max().unwrap_or(0);
    let lower_bound_bytes = (0..=last)
        .map(|s| buffers.iter().filter(|b| b.live.0 <= s && s <= b.live.1).map(|b| b.bytes).sum::<usize>())
        .max()
        .unwrap_or(0);
    Arena { space, alignment, buffers, peak_bytes, lower_bound_bytes, persistent }
}
