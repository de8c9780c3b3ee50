//! Memory planning: per memory space, one arena. Each value a space holds (a node's output, or a copy into it)
//! lives from the step that makes it to the last step that reads it there; values alive at the same time get
//! disjoint offsets, rounded to the space's alignment. Reshape-like views share their input's buffer, and an
//! elementwise node writes over an input of its size that nothing reads after it (in place). The plan reports the
//! arena's size (the peak) against the lower bound: the most bytes alive at any one step.
//!
//! Offsets are chosen largest buffer first, each at the lowest offset free for its whole lifetime: the usual
//! greedy for this interval-packing problem, within a few percent of the bound on the model suite (`docs/planning.md`).

use std::collections::{BTreeMap, HashSet};

use cranelift_entity::SecondaryMap;

use crate::ir::{Graph, Op, ValueDef, ValueId};

use super::copies::{PlannedCopy, When};
use super::cost::is_view;
use super::overlap::Overlaps;
use super::placement::Placed;
use super::target::Backend;

/// One buffer of an arena.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
    let mut outputs: SecondaryMap<ValueId, bool> = SecondaryMap::new();
    for o in graph.outputs() {
        outputs[o.value] = true;
    }
    let persistent: HashSet<&str> = states.iter().map(|(o, _)| o.as_str()).collect();
    // The last step that reads each value, in any space (a value read in another space stays alive until that
    // reader's step: its copy out happens by then); 0 when none does.
    let mut last_reader: SecondaryMap<ValueId, usize> = SecondaryMap::new();
    for (i, p) in placed.iter().enumerate() {
        for &v in graph.node(p.node).inputs.iter().flatten() {
            last_reader[v] = i;
        }
    }
    let last_read = |v: ValueId| last_reader[v];
    // Values copied into each space to be read there (setup uploads are constants, outside the arenas).
    let arrivals: HashSet<(ValueId, &str)> =
        copies.iter().filter(|c| c.when != When::Setup).map(|c| (c.id, c.to.as_str())).collect();
    let mut arenas = Vec::new();
    for space in spaces {
        let alignment =
            targets.iter().find(|t| t.spec().space == space).map_or(64, |t| t.spec().memory.alignment.max(1));
        // Intervals by root value; `root` maps views and in-place outputs to the buffer they share.
        let mut root: SecondaryMap<ValueId, Option<ValueId>> = SecondaryMap::new();
        let mut intervals: BTreeMap<ValueId, Interval> = BTreeMap::new();
        let mut kept = Vec::new();
        for (i, p) in placed.iter().enumerate() {
            if space_of_target(p.target) != space {
                continue;
            }
            let node = graph.node(p.node);
            for v in node.inputs.iter().flatten() {
                // Copies into this space: alive from their first reader here to their last.
                let arrives = arrivals.contains(&(*v, space.as_str()));
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
                let mut end = if outputs[*v] { steps } else { last_read(*v).max(i) };
                if persistent.contains(name) {
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
                            && !outputs[r] =>
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

/// A greedy order of buffers.
type Order = dyn Fn(&Interval, &Interval) -> std::cmp::Ordering;

/// Offsets for `intervals`. A few greedy orders (largest first; earliest first; longest-lived first) each place
/// every buffer at the lowest aligned offset free for its whole lifetime, or in the tightest free gap; the
/// smallest arena wins. Each try looks, per buffer, only at the placed buffers whose lifetimes overlap its own
/// ([`Overlaps`]): O(n log n) in buffers when few are alive at once, as on a long chain.
fn pack(
    graph: &Graph,
    space: String,
    alignment: usize,
    intervals: Vec<Interval>,
    persistent: Vec<(String, usize)>,
) -> Arena {
    let size = |iv: &Interval| iv.bytes.next_multiple_of(alignment).max(alignment);
    let orders: [&Order; 3] = [
        &|a, b| b.bytes.cmp(&a.bytes).then(a.start.cmp(&b.start)),
        &|a, b| a.start.cmp(&b.start).then(b.bytes.cmp(&a.bytes)),
        &|a, b| (b.end - b.start).cmp(&(a.end - a.start)).then(b.bytes.cmp(&a.bytes)),
    ];
    let lifetimes: Vec<(usize, usize)> = intervals.iter().map(|iv| (iv.start, iv.end)).collect();
    let mut best: Option<(usize, Vec<usize>)> = None;
    for order in orders {
        for tightest in [false, true] {
            let mut idx: Vec<usize> = (0..intervals.len()).collect();
            idx.sort_by(|&a, &b| order(&intervals[a], &intervals[b]));
            let mut offsets = vec![0; intervals.len()];
            let mut placed = Overlaps::new(&lifetimes);
            for &i in &idx {
                let iv = &intervals[i];
                let bytes = size(iv);
                let mut busy: Vec<(usize, usize)> = Vec::new();
                placed.each(iv.start, iv.end, |p| busy.push((offsets[p], offsets[p] + size(&intervals[p]))));
                busy.sort_unstable();
                // Free gaps between busy ranges, and the open end.
                let (mut gaps, mut at) = (Vec::new(), 0);
                for (lo, hi) in busy {
                    if lo > at {
                        gaps.push((at, lo - at));
                    }
                    at = at.max(hi);
                }
                let fitting = gaps.iter().filter(|g| g.1 >= bytes);
                let offset =
                    if tightest { fitting.min_by_key(|g| g.1).map(|g| g.0) } else { fitting.map(|g| g.0).next() };
                offsets[i] = offset.unwrap_or(at);
                placed.place(i, iv.end);
            }
            let peak = (0..intervals.len()).map(|i| offsets[i] + size(&intervals[i])).max().unwrap_or(0);
            if best.as_ref().is_none_or(|b| peak < b.0) {
                best = Some((peak, offsets));
            }
        }
    }
    let offsets = best.map(|b| b.1).unwrap_or_default();
    let mut buffers: Vec<Buffer> = intervals
        .iter()
        .zip(offsets)
        .map(|(iv, offset)| Buffer {
            values: iv.values.iter().map(|&v| graph.value(v).name.clone()).collect(),
            offset,
            bytes: size(iv),
            live: (iv.start, iv.end),
        })
        .collect();
    buffers.sort_by_key(|b| (b.offset, b.live.0));
    let peak_bytes = buffers.iter().map(|b| b.offset + b.bytes).max().unwrap_or(0);
    // The bytes alive at each step, in one sweep: each buffer counts from its first step to its last.
    let last = buffers.iter().map(|b| b.live.1).max().unwrap_or(0);
    let (mut starting, mut ended) = (vec![0usize; last + 2], vec![0usize; last + 2]);
    for b in buffers.iter().filter(|b| b.live.0 <= b.live.1) {
        starting[b.live.0] += b.bytes;
        ended[b.live.1 + 1] += b.bytes;
    }
    let (mut alive, mut lower_bound_bytes) = (0usize, 0usize);
    for s in 0..=last {
        alive = alive + starting[s] - ended[s];
        lower_bound_bytes = lower_bound_bytes.max(alive);
    }
    Arena { space, alignment, buffers, peak_bytes, lower_bound_bytes, persistent }
}
