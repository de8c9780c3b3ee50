//! The cost model: estimated compute time of a node on a target and transfer time of bytes between spaces. The
//! estimates are coarse (peak-throughput guesses from the descriptors), so placement treats costs within
//! [`TIE`] times, or [`SLACK_US`] µs, of the cheapest as equal and lets the caller's target order decide.

use crate::ir::{Graph, NodeId, Op};

use super::target::TargetSpec;

/// Costs within this factor of the cheapest count as ties.
pub const TIE: f64 = 1.5;

/// Costs within this many µs of the cheapest count as ties too: below it the estimates say nothing.
pub const SLACK_US: f64 = 50.0;

/// True when `cost` ties with the cheapest, `best`.
pub fn ties(cost: f64, best: f64) -> bool {
    cost <= best * TIE || cost - best <= SLACK_US
}

/// Floating-point operations of one node, estimated from its op and shapes (products count 2 per multiply-add,
/// everything else one per output element).
pub fn flops(graph: &Graph, node: NodeId) -> f64 {
    let n = graph.node(node);
    let out_elems: f64 = n.outputs.iter().flatten().map(|&v| graph.ty(v).element_count().unwrap_or(0) as f64).sum();
    let in_shape = |i: usize| n.inputs.get(i).copied().flatten().map(|v| graph.ty(v).shape.clone()).unwrap_or_default();
    match &n.op {
        Op::Conv(c) => {
            // Each output element reads C_in / group · kernel elements.
            let _ = c.group;
            let w = in_shape(1);
            let per_output: f64 = w.iter().skip(1).map(|&d| d as f64).product();
            2.0 * out_elems * per_output
        }
        Op::MatMul | Op::Gemm(_) => {
            let a = in_shape(0);
            let k = match &n.op {
                Op::Gemm(g) if g.trans_a => a.first().copied().unwrap_or(1),
                _ => a.last().copied().unwrap_or(1),
            };
            2.0 * out_elems * k as f64
        }
        Op::Pool(p) => out_elems * p.window.kernel.iter().product::<usize>() as f64,
        Op::Lstm(_) => {
            // Every column of X (a step of one batch element) meets all of W and R.
            let elems = |s: Vec<usize>| s.iter().map(|&d| d as f64).product::<f64>();
            let x = in_shape(0);
            let columns = elems(x.clone()) / x.last().copied().unwrap_or(1).max(1) as f64;
            2.0 * columns * (elems(in_shape(1)) + elems(in_shape(2)))
        }
        Op::Reduce { .. }
        | Op::GlobalPool(_)
        | Op::Softmax { .. }
        | Op::LayerNorm { .. }
        | Op::ArgMax { .. }
        | Op::TopK { .. } => in_shape(0).iter().map(|&d| d as f64).product::<f64>().max(out_elems),
        _ => out_elems,
    }
}

/// Estimated µs of `node` on `target`.
pub fn compute_us(graph: &Graph, node: NodeId, target: &TargetSpec) -> f64 {
    if is_view(graph, node) {
        return 0.0;
    }
    flops(graph, node) / (target.gflops.max(1e-3) * 1e3) + target.launch_us
}

/// Estimated µs to move `bytes` into or out of `target`'s memory (zero where that memory is the host's).
pub fn transfer_us(bytes: usize, target: &TargetSpec) -> f64 {
    if target.is_host() {
        return 0.0;
    }
    let gbps = target.memory.bandwidth_gbps;
    let t = if gbps.is_finite() && gbps > 0.0 { bytes as f64 / (gbps * 1e3) } else { 0.0 };
    t + target.memory.latency_us
}

/// Nodes whose output is their first input seen with another shape: no kernel, no new memory (an inference-mode
/// Dropout, without its mask, is one).
pub fn is_view(graph: &Graph, node: NodeId) -> bool {
    let n = graph.node(node);
    match n.op {
        Op::Reshape { .. } | Op::Flatten { .. } | Op::Squeeze | Op::Unsqueeze | Op::Identity => true,
        Op::Dropout { .. } => {
            n.outputs.iter().skip(1).all(Option::is_none) && n.inputs.iter().skip(1).all(Option::is_none)
        }
        _ => false,
    }
}
