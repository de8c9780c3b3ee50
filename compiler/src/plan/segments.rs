//! Splitting a placed graph into segments: maximal runs of consecutive nodes (in plan order) on one target, each
//! its own graph for its backend to lower. A segment's inputs are the values it reads that are made elsewhere
//! (graph inputs or earlier segments' results); its outputs are the values it makes that a later segment reads or
//! that are graph outputs. Values keep their names across segments, so the runtime passes tensors by name.

use std::collections::{HashMap, HashSet};

use crate::ir::{Graph, NodeId, ValueDef, ValueId};

use super::{Placed, Plan};

/// One segment of a plan.
pub struct Segment {
    /// Index of its target in the plan's list.
    pub target: usize,
    /// Its nodes, as a graph of their own.
    pub graph: Graph,
    /// Its inputs: values of the whole graph, in the segment graph's input order.
    pub inputs: Vec<ValueId>,
    /// Its outputs: values of the whole graph, in the segment graph's output order.
    pub outputs: Vec<ValueId>,
}

/// A name for `v` that is unique in `graph`: its own, or one made from its id when it has none.
pub fn value_name(graph: &Graph, v: ValueId) -> String {
    let name = &graph.value(v).name;
    if name.is_empty() {
        format!("%{}", v.as_u32())
    } else {
        name.clone()
    }
}

/// The segments of `plan` over `graph`. A plan on one target is one segment: the whole graph.
pub fn segments(graph: &Graph, plan: &Plan) -> Vec<Segment> {
    segments_of(graph, &plan.nodes)
}

/// The segments of the placement `nodes` over `graph`.
pub fn segments_of(graph: &Graph, nodes: &[Placed]) -> Vec<Segment> {
    let mut runs: Vec<(usize, Vec<NodeId>)> = Vec::new();
    for p in nodes {
        match runs.last_mut() {
            Some((t, nodes)) if *t == p.target => nodes.push(p.node),
            _ => runs.push((p.target, vec![p.node])),
        }
    }
    let outputs: HashSet<ValueId> = graph.outputs().iter().map(|o| o.value).collect();
    let mut made_in: HashMap<ValueId, usize> = HashMap::new();
    for (k, (_, nodes)) in runs.iter().enumerate() {
        for &n in nodes {
            for v in graph.node(n).outputs.iter().flatten() {
                made_in.insert(*v, k);
            }
        }
    }
    let mut read_after: HashMap<ValueId, usize> = HashMap::new();
    for (k, (_, nodes)) in runs.iter().enumerate() {
        for &n in nodes {
            for v in graph.node(n).inputs.iter().flatten() {
                let e = read_after.entry(*v).or_insert(k);
                *e = (*e).max(k);
            }
        }
    }
    runs.into_iter()
        .enumerate()
        .map(|(k, (target, nodes))| {
            let mut g = Graph::new(format!("{} (segment {k})", graph.name));
            g.metadata = graph.metadata.clone();
            let mut map: HashMap<ValueId, ValueId> = HashMap::new();
            let mut inputs = Vec::new();
            for &n in &nodes {
                let node = graph.node(n);
                let mut ins = Vec::with_capacity(node.inputs.len());
                for v in &node.inputs {
                    let Some(v) = *v else {
                        ins.push(None);
                        continue;
                    };
                    if let Some(&m) = map.get(&v) {
                        ins.push(Some(m));
                        continue;
                    }
                    let m = match &graph.value(v).def {
                        ValueDef::Const(t) => g.add_const(value_name(graph, v), t.clone()),
                        _ => {
                            inputs.push(v);
                            g.add_input(value_name(graph, v), graph.ty(v).clone())
                        }
                    };
                    map.insert(v, m);
                    ins.push(Some(m));
                }
                let outs =
                    node.outputs.iter().map(|o| o.map(|o| (value_name(graph, o), graph.ty(o).clone()))).collect();
                let id = g.add_node(node.name.clone(), node.op.clone(), ins, outs);
                for (o, m) in node.outputs.iter().zip(g.node(id).outputs.clone()) {
                    if let (Some(o), Some(m)) = (o, m) {
                        map.insert(*o, m);
                    }
                }
            }
            let mut seg_outputs = Vec::new();
            for &n in &nodes {
                for v in graph.node(n).outputs.iter().flatten() {
                    let later = read_after.get(v).is_some_and(|&r| r > k);
                    if (later || outputs.contains(v)) && made_in.get(v) == Some(&k) {
                        g.add_output(value_name(graph, *v), map[v]);
                        seg_outputs.push(*v);
                    }
                }
            }
            Segment { target, graph: g, inputs, outputs: seg_outputs }
        })
        .collect()
}
