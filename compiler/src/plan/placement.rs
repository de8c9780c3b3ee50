//! Placement: each node to one target. A node goes to a target whose backend has a kernel for it; among those,
//! the one with the least estimated compute plus transfer time ([`super::cost`]). Estimates close to the cheapest
//! ([`super::cost::ties`]) are ties, and ties go to the earlier target in the caller's list, so
//! `opencl,cpu` means "OpenCL, falling back to the CPU op by op", as in a list of execution providers. The plan
//! keeps, per node, why it went where it did.

use cranelift_entity::SecondaryMap;

use crate::ir::{Graph, NodeId, ValueDef, ValueId};

use super::cost;
use super::target::Backend;
use super::PlanError;

/// Where one node runs, and why.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Placed {
    /// The node.
    #[serde(with = "super::serial::id")]
    pub node: NodeId,
    /// Index of its target in the plan's target list.
    pub target: usize,
    /// Why: one line.
    pub reason: String,
}

/// Places every node of `graph` in order.
pub fn place(
    graph: &Graph,
    targets: &[&dyn Backend],
    pins: &std::collections::BTreeMap<String, String>,
) -> Result<Vec<Placed>, PlanError> {
    let names: std::collections::HashSet<&str> = if pins.is_empty() {
        Default::default()
    } else {
        graph.order().iter().map(|&n| graph.node(n).name.as_str()).collect()
    };
    for (node, target) in pins {
        let bad = |message: String| PlanError::BadOption { option: format!("pin {node}={target}"), message };
        if !names.contains(node.as_str()) {
            return Err(bad(format!("the graph has no node '{node}'")));
        }
        if !targets.iter().any(|t| t.spec().name == *target) {
            return Err(bad(format!("'{target}' is not one of the targets")));
        }
    }
    // The spaces each value is in once computed or moved; graph inputs start on the host.
    let mut homes: SecondaryMap<ValueId, Vec<&str>> = SecondaryMap::new();
    for &v in graph.inputs() {
        homes[v] = vec!["host"];
    }
    let spec_of = |space: &str| targets.iter().map(|t| t.spec()).find(|s| s.space == space);
    let mut placed = Vec::with_capacity(graph.order().len());
    for &n in graph.order() {
        let node = graph.node(n);
        let mut refused = Vec::new();
        let mut options = Vec::new();
        for (i, t) in targets.iter().enumerate() {
            match t.supports(graph, n) {
                Ok(()) => options.push(i),
                Err(why) => refused.push((t.spec().name.clone(), why)),
            }
        }
        if options.is_empty() {
            return Err(PlanError::NoTarget { node: node.name.clone(), op: node.op.name(), refused });
        }
        let data_inputs =
            || node.inputs.iter().flatten().filter(|v| !matches!(graph.value(**v).def, ValueDef::Const(_)));
        // Estimated µs on target `i`: compute, plus moving each input that is not in its space yet (out of a
        // device, then into this one).
        let cost = |i: usize| -> f64 {
            let spec = targets[i].spec();
            let mut t = cost::compute_us(graph, n, spec);
            for v in data_inputs() {
                if homes[*v].contains(&spec.space.as_str()) {
                    continue;
                }
                let bytes = graph.ty(*v).byte_len().unwrap_or(0);
                t += cost::transfer_us(bytes, spec);
                if let Some(from) = homes[*v].first().and_then(|h| spec_of(h)) {
                    t += cost::transfer_us(bytes, from);
                }
            }
            t
        };
        let costs: Vec<(usize, f64)> = options.iter().map(|&i| (i, cost(i))).collect();
        let best = costs.iter().map(|c| c.1).fold(f64::INFINITY, f64::min);
        let pinned = pins.get(&node.name).and_then(|t| costs.iter().copied().find(|c| targets[c.0].spec().name == *t));
        let (chosen, chosen_cost) =
            pinned.or_else(|| costs.iter().copied().find(|c| cost::ties(c.1, best))).unwrap_or(costs[0]);
        let reason = if pinned.is_some() {
            "pinned by the caller".to_string()
        } else if targets.len() == 1 {
            "the only target".to_string()
        } else if !refused.is_empty() && chosen == options[0] {
            let why: Vec<String> = refused.iter().map(|(t, r)| format!("{t}: {r}")).collect();
            format!("the first target with a kernel for it ({})", why.join("; "))
        } else if chosen == options[0] {
            match costs.iter().find(|c| c.0 != chosen) {
                Some(other) => format!(
                    "first in the target list; {chosen_cost:.1} µs estimated against {:.1} µs on {}",
                    other.1,
                    targets[other.0].spec().name
                ),
                None => "first in the target list".to_string(),
            }
        } else {
            let first = costs[0];
            format!(
                "{chosen_cost:.1} µs estimated, transfers included, against {:.1} µs on {}",
                first.1,
                targets[first.0].spec().name
            )
        };
        let space = targets[chosen].spec().space.as_str();
        for v in data_inputs() {
            if !homes[*v].contains(&space) {
                homes[*v].push(space);
            }
        }
        for v in node.outputs.iter().flatten() {
            homes[*v] = vec![space];
        }
        placed.push(Placed { node: n, target: chosen, reason });
    }
    Ok(placed)
}
