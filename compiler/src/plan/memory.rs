//! Memory planning: per memory space, one arena, planned over the steps each backend says its lowering runs
//! ([`Backend::kernel_steps`]: a fused chain is one step, and its inner values get no buffer). Each value a step
//! writes lives from that step to the last step that reads it, in any space; values alive at the same time get
//! disjoint offsets, rounded to the space's alignment. A view (Reshape, Flatten…) shares its input's buffer, and a
//! backend whose step writes its result over a dead input of its size ([`KernelStep::in_place`]) shares
//! that one. The plan reports the arena's size (the peak) against the lower bound: the most bytes alive at any one
//! step.
//!
//! A step that joins its inputs end to end ([`KernelStep::joins`]: a Concat whose output is its inputs one after
//! another) gets one buffer for its output and those inputs it can hold, each at the offset where the output has
//! its bytes ([`Buffer::inside`]): their producers write them there and the join copies nothing. Its inputs are
//! placed inside when each is the one value of its own buffer so far (no view or in-place output shares it), read
//! once by the join, neither a graph output nor handed to another space, and at an offset in the output that is a
//! multiple of the alignment: all of them, or none (one left to copy, and the join makes its whole output anyway).
//! An input that is itself a join's output brings the values inside it along, each at its offset in the new
//! buffer: DenseNet's growing concatenations (each block's `c_k = c_{k-1} ++ x_k`) all sit in the last one's
//! buffer, and none copies.
//! The buffer lives from the first input's step to the last read of any of them or of the output. Not when the
//! output is a graph output or handed across (it is then outside the arena).
//!
//! Outside the arena, listed with it: graph outputs and every buffer that shares memory with one (handed to the
//! caller, who keeps them after the run), values another space reads in place with no copy (handed to its backend
//! as tensors: unified memory), copies arriving in the space (each made by its transfer) and fed-back state
//! outputs (kept across runs). Executors take every other value's memory from the arena at its offset, so
//! the peak they measure is the planned one.
//!
//! Offsets are chosen largest buffer first, each at the lowest offset free for its whole lifetime: the usual
//! greedy for this interval-packing problem, within a few percent of the bound on the model suite (`docs/planning.md`).

use std::collections::{BTreeMap, HashMap, HashSet};

use cranelift_entity::SecondaryMap;

use crate::ir::{Graph, ValueId};

use super::copies::{PlannedCopy, When};
use super::overlap::Overlaps;
use super::target::{Backend, KernelStep};

/// One buffer of an arena.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Buffer {
    /// The values it holds (several when views or in-place steps share it), the one that allocates it first.
    pub values: Vec<String>,
    /// Offset in the arena, bytes.
    pub offset: usize,
    /// Size, bytes (rounded up to the alignment).
    pub bytes: usize,
    /// First and last step (in the order the backends run their steps) it is alive.
    pub live: (usize, usize),
    /// Values made inside it before its first value, each at an offset from its start (bytes): a join's inputs,
    /// where the join's output has them, and what was inside an input that is itself a join's output (so entries
    /// may nest: `c` at 0 holding `a` at 0 and `b` after it).
    #[serde(default)]
    pub inside: Vec<(String, usize)>,
    /// The joins made in it, each output with its inputs in order (the buffer's first value's join, and those of
    /// join outputs inside it).
    #[serde(default)]
    pub joins: Vec<(String, Vec<String>)>,
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
    /// Buffers made on each run outside the arena, by the first value each holds: graph outputs (with what
    /// shares their memory, views in other spaces included), values another space reads in place, and copies
    /// arriving in the space.
    pub outside: Vec<(String, usize)>,
}

impl Arena {
    /// The buffer `value` allocates (it is the first value the buffer holds), if it is in the arena.
    pub fn buffer_of(&self, value: &str) -> Option<&Buffer> {
        self.buffers.iter().find(|b| b.values.first().is_some_and(|v| v == value))
    }
}

struct Interval {
    values: Vec<ValueId>,
    bytes: usize,
    start: usize,
    end: usize,
    /// Values placed inside at an offset (a join's inputs, and what was inside them).
    inside: Vec<(ValueId, usize)>,
    /// The joins made in it: output, inputs.
    joins: Vec<(ValueId, Vec<ValueId>)>,
}

/// Plans the arenas of every space that `steps` (each segment's target and its kernel steps, in run order) use.
pub fn plan(
    graph: &Graph,
    targets: &[&dyn Backend],
    steps: &[(usize, Vec<KernelStep>)],
    copies: &[PlannedCopy],
    states: &[(String, String)],
    blocked: &[super::BlockedValue],
) -> Vec<Arena> {
    // Values in channel blocks take their padded bytes (`blocked.rs`, rule 4).
    let blocked_bytes: HashMap<ValueId, usize> = blocked.iter().map(|b| (b.id, b.bytes)).collect();
    let by_name: HashMap<String, ValueId> =
        graph.values().map(|(v, _)| (super::segments::value_name(graph, v), v)).collect();
    let flat: Vec<(usize, &KernelStep)> = steps.iter().flat_map(|(t, s)| s.iter().map(move |s| (*t, s))).collect();
    let space_of_target = |t: usize| targets[t].spec().space.clone();
    let mut spaces: Vec<String> = Vec::new();
    for (t, _) in &flat {
        if !spaces.contains(&space_of_target(*t)) {
            spaces.push(space_of_target(*t));
        }
    }
    // A value read in another space stays alive until that reader's step (its copy out happens by then).
    let mut last_read: HashMap<ValueId, usize> = HashMap::new();
    for (i, (_, step)) in flat.iter().enumerate() {
        for v in step.reads.iter().filter_map(|r| by_name.get(r)) {
            last_read.insert(*v, i);
        }
    }
    let mut outputs: HashSet<ValueId> = graph.outputs().iter().map(|o| o.value).collect();
    // A view in one space of a value made in another (the CPU reshaping a lazy device tensor) reads the value's
    // memory until the view's own last reader: the value lives as long as its views, and is an output if one is.
    for (view, source) in cross_space_views(&flat, &by_name, &space_of_target) {
        if let Some(&end) = last_read.get(&view) {
            let at = last_read.entry(source).or_insert(end);
            *at = (*at).max(end);
        }
        if outputs.contains(&view) {
            outputs.insert(source);
        }
    }
    let handed = handed_across(&flat, &by_name, &space_of_target, copies);
    let persistent: HashSet<&str> = states.iter().map(|(o, _)| o.as_str()).collect();
    let mut arenas = Vec::new();
    for space in spaces {
        let alignment =
            targets.iter().find(|t| t.spec().space == space).map_or(64, |t| t.spec().memory.alignment.max(1));
        // Intervals by root value; `root` maps views and in-place outputs to the buffer they share.
        let mut root: SecondaryMap<ValueId, Option<ValueId>> = SecondaryMap::new();
        let mut intervals: BTreeMap<ValueId, Interval> = BTreeMap::new();
        let (mut kept, mut outside) = (Vec::new(), Vec::new());
        for (i, (t, step)) in flat.iter().enumerate() {
            if space_of_target(*t) != space {
                continue;
            }
            let source = step.reads.first().and_then(|r| by_name.get(r)).copied();
            let in_place = step.in_place && !step.view && step.writes.len() == 1;
            let joins = step.joins && !step.view && step.writes.len() == 1;
            for v in step.writes.iter().filter_map(|w| by_name.get(w)).copied() {
                let name = graph.value(v).name.as_str();
                let bytes = blocked_bytes.get(&v).copied().unwrap_or_else(|| graph.ty(v).byte_len().unwrap_or(0));
                if persistent.contains(&name) {
                    kept.push((name.to_string(), bytes));
                    continue;
                }
                let mut end =
                    if outputs.contains(&v) { flat.len() } else { last_read.get(&v).copied().unwrap_or(i).max(i) };
                let shared = match source.and_then(|s| root[s].or(intervals.contains_key(&s).then_some(s))) {
                    Some(r) if step.view => Some(r),
                    Some(r)
                        if in_place
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
                        root[v] = Some(r);
                        let iv = intervals.get_mut(&r).expect("root has an interval");
                        iv.values.push(v);
                        end = end.max(iv.end);
                        iv.end = end;
                    }
                    // A view of memory outside the arena (a graph input, a constant, a copy that arrived): none.
                    None if step.view && source.is_some() => {}
                    None => {
                        let mut iv =
                            Interval { values: vec![v], bytes, start: i, end, inside: Vec::new(), joins: Vec::new() };
                        if joins && !outputs.contains(&v) && !handed.contains(&v) {
                            let reads: Vec<ValueId> =
                                step.reads.iter().filter_map(|r| by_name.get(r)).copied().collect();
                            let ends = Join { graph, alignment, outputs: &outputs, handed: &handed };
                            ends.place(&mut iv, &reads, step.reads.len(), &mut intervals, &mut root);
                        }
                        intervals.insert(v, iv);
                    }
                }
            }
        }
        let (held, out): (Vec<Interval>, Vec<Interval>) = intervals
            .into_values()
            .partition(|iv| !iv.values.iter().any(|v| outputs.contains(v) || handed.contains(v)));
        outside.extend(out.iter().map(|iv| (super::segments::value_name(graph, iv.values[0]), iv.bytes)));
        outside.extend(
            copies.iter().filter(|c| c.to == space && c.when != When::Setup).map(|c| (c.value.clone(), c.bytes)),
        );
        let mut arena = pack(graph, space, alignment, held, kept);
        arena.outside = outside;
        arenas.push(arena);
    }
    arenas
}

/// What decides which of a join's inputs are placed inside its output's buffer (module docs).
struct Join<'a> {
    graph: &'a Graph,
    alignment: usize,
    outputs: &'a HashSet<ValueId>,
    handed: &'a HashSet<ValueId>,
}

impl Join<'_> {
    /// Moves the inputs `reads` (of `named` names in the step) of the join whose output's interval is `iv` into it,
    /// where that holds (module docs); none when an input's name is unknown or the inputs' bytes are not the
    /// output's.
    fn place(
        &self,
        iv: &mut Interval,
        reads: &[ValueId],
        named: usize,
        intervals: &mut BTreeMap<ValueId, Interval>,
        root: &mut SecondaryMap<ValueId, Option<ValueId>>,
    ) {
        let bytes = |v: ValueId| self.graph.ty(v).byte_len().unwrap_or(0);
        if reads.len() != named || reads.iter().map(|&r| bytes(r)).sum::<usize>() != iv.bytes {
            return;
        }
        let starts: Vec<usize> = reads.iter().scan(0, |at, &r| Some(std::mem::replace(at, *at + bytes(r)))).collect();
        let fits = |(&r, &at): (&ValueId, &usize)| {
            let alone = intervals.get(&r).is_some_and(|ri| ri.values == [r]);
            let once = reads.iter().filter(|&&x| x == r).count() == 1;
            let free = !self.outputs.contains(&r) && !self.handed.contains(&r) && root[r].is_none();
            alone && once && free && at % self.alignment == 0 && bytes(r) > 0
        };
        // All or none: with one input left to copy the join still makes its whole output, and the inputs placed
        // inside would only hold the output's memory from their own steps on.
        if !reads.iter().zip(&starts).all(fits) {
            return;
        }
        for (&r, &at) in reads.iter().zip(&starts) {
            let ri = intervals.remove(&r).expect("checked above");
            iv.start = iv.start.min(ri.start);
            iv.end = iv.end.max(ri.end);
            iv.inside.push((r, at));
            root[r] = Some(iv.values[0]);
            // What a join placed inside `r` moves with it.
            for (x, x_at) in ri.inside {
                iv.inside.push((x, at + x_at));
                root[x] = Some(iv.values[0]);
            }
            iv.joins.extend(ri.joins);
        }
        iv.joins.push((iv.values[0], reads.to_vec()));
    }
}

/// Views (and views of views) of values made in another space, each with that value: (view, value).
fn cross_space_views(
    flat: &[(usize, &KernelStep)],
    by_name: &HashMap<String, ValueId>,
    space_of_target: &dyn Fn(usize) -> String,
) -> Vec<(ValueId, ValueId)> {
    let mut written_in: HashMap<ValueId, String> = HashMap::new();
    let mut view_of: HashMap<ValueId, ValueId> = HashMap::new();
    let mut found = Vec::new();
    for (t, step) in flat {
        let space = space_of_target(*t);
        let (source, out) =
            (step.reads.first().and_then(|r| by_name.get(r)), step.writes.first().and_then(|w| by_name.get(w)));
        if let (true, Some(&s), Some(&v)) = (step.view, source, out) {
            let root = view_of.get(&s).copied().or((written_in.get(&s).is_some_and(|w| *w != space)).then_some(s));
            if let Some(r) = root {
                view_of.insert(v, r);
                found.push((v, r));
            }
        }
        for v in step.writes.iter().filter_map(|w| by_name.get(w)) {
            written_in.insert(*v, space.clone());
        }
    }
    found
}

/// The values that a step of another space reads with no copy planned into that space: memory both backends see
/// (unified memory), handed from one to the other as a tensor, which stays outside its space's arena like an
/// output. (A backend reads such a tensor in place through the runtime's storage contract, which hands out whole
/// allocations, not regions of an arena.)
fn handed_across(
    flat: &[(usize, &KernelStep)],
    by_name: &HashMap<String, ValueId>,
    space_of_target: &dyn Fn(usize) -> String,
    copies: &[PlannedCopy],
) -> HashSet<ValueId> {
    let copied: HashSet<(ValueId, &str)> =
        copies.iter().filter(|c| c.when != When::Setup).map(|c| (c.id, c.to.as_str())).collect();
    let mut written_in: HashMap<ValueId, String> = HashMap::new();
    let mut handed = HashSet::new();
    for (t, step) in flat {
        let space = space_of_target(*t);
        for v in step.reads.iter().filter_map(|r| by_name.get(r)) {
            if written_in.get(v).is_some_and(|w| *w != space) && !copied.contains(&(*v, space.as_str())) {
                handed.insert(*v);
            }
        }
        for v in step.writes.iter().filter_map(|w| by_name.get(w)) {
            written_in.insert(*v, space.clone());
        }
    }
    handed
}

/// A greedy order of buffers.
type Order = dyn Fn(&Interval, &Interval) -> std::cmp::Ordering;

/// Offsets for `intervals`. A few greedy orders (largest first, the earliest of a size first or the latest; earliest
/// first; longest-lived first) each place
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
    let orders: [&Order; 4] = [
        &|a, b| b.bytes.cmp(&a.bytes).then(a.start.cmp(&b.start)),
        &|a, b| a.start.cmp(&b.start).then(b.bytes.cmp(&a.bytes)),
        &|a, b| (b.end - b.start).cmp(&(a.end - a.start)).then(b.bytes.cmp(&a.bytes)),
        &|a, b| b.bytes.cmp(&a.bytes).then(b.end.cmp(&a.end)),
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
    let name = |v: ValueId| graph.value(v).name.clone();
    let mut buffers: Vec<Buffer> = intervals
        .iter()
        .zip(offsets)
        .map(|(iv, offset)| Buffer {
            values: iv.values.iter().map(|&v| graph.value(v).name.clone()).collect(),
            offset,
            bytes: size(iv),
            live: (iv.start, iv.end),
            inside: iv.inside.iter().map(|&(v, at)| (graph.value(v).name.clone(), at)).collect(),
            joins: iv.joins.iter().map(|(j, parts)| (name(*j), parts.iter().map(|&p| name(p)).collect())).collect(),
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
    Arena { space, alignment, buffers, peak_bytes, lower_bound_bytes, persistent, outside: Vec::new() }
}
