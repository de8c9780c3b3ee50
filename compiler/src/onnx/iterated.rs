//! A `Loop` the import cannot unroll, kept as one [`Op::Loop`](crate::ir::Op::Loop) with its body as a graph of
//! its own (`ir/subgraph.rs`, rule 6), and a `Scan` too long to unroll, kept as one
//! [`Op::Scan`](crate::ir::Op::Scan) (rule 7), where a target runs the op whole (`ImportConfig::whole` holds
//! "Loop" or "Scan": the CPU) and, for a loop, the driver does not iterate it itself (`driver/src/loops.rs` iterates a top-level loop of a model it
//! compiles in stages, so that carried values stay on the device that makes them). The rules:
//! 1. **Only a loop that can be typed.** Its carried values (a scan's states) keep their types from one iteration
//!    to the next, a loop has no scan outputs (their length would be known only at run time), and it reads tensors
//!    from around it; otherwise the import's own error stands (`unroll.rs`), naming the node.
//! 2. **Outer values are explicit**, as for an `If`'s branches: a loop body's inputs are the iteration number, the
//!    condition, the carried values, then what it reads from around the node (constants copied in); a scan body's
//!    the states, a slice of each scan input, then what it reads from around the node. The
//!    iteration number and the condition are scalars, or `[1]` where the body declares them so ([`scalar_shape`],
//!    as the driver's iterated loops read them).

use super::branch::{outer_inputs, subgraph};
use super::expand::Ex;
use super::proto::{GraphProto, NodeProto, ValueInfoProto};
use super::scope::Scope;
use super::structure::Structure;
use crate::error::ImportErrorKind as E;
use crate::ir::{LoopBody, Op, ScanBody, ValueId, ValueType};
use stowage_runtime::DatumType;

/// The loop of `ex`, with body `g` and carried values `carried` (names in scope), as one `Op::Loop` node: the
/// names of its outputs, or `None` where it is not kept (rule 1; the caller returns the import's error).
pub(super) fn keep(ex: &mut Ex<'_, '_>, g: &GraphProto, carried: &[String]) -> Result<Option<Vec<Option<String>>>, E> {
    let driver_iterates = ex.at.depth == 0 && ex.at.branch_at_run_time;
    if !ex.at.whole.contains("Loop") || driver_iterates || g.output.len() != carried.len() + 1 {
        return Ok(None);
    }
    let (graph, names) = ex.scope();
    let mut own: Vec<(String, ValueType)> = vec![
        (g.input[0].name().to_string(), ValueType::new(DatumType::I64, scalar_shape(&g.input[0]))),
        (g.input[1].name().to_string(), ValueType::new(DatumType::Bool, scalar_shape(&g.input[1]))),
    ];
    for (vi, c) in g.input[2..].iter().zip(carried) {
        match names.get(c.as_str()) {
            Some(&v) => own.push((vi.name().to_string(), graph.ty(v).clone())),
            None => return Ok(None),
        }
    }
    let Some(outer) = tensors_read(ex.node, names) else { return Ok(None) };
    let fail = |m: String| ex.fail(m);
    let at = super::import::At { depth: ex.at.depth + 1, ..ex.at };
    let Some(body) = subgraph(graph, g, &format!("{}::body", ex.name), &own, &outer, "body", at, &fail)? else {
        return Ok(None);
    };
    // Rule 1: carried values of changing types are not kept.
    let same = |k: usize| body.ty(body.outputs()[1 + k].value) == &own[2 + k].1;
    if !(0..carried.len()).all(same) {
        return Ok(None);
    }
    let reads: Vec<String> =
        outer.iter().filter(|(_, v)| graph.const_value(*v).is_none()).map(|(n, _)| n.to_string()).collect();
    let mut inputs = vec![ex.optional(0), ex.optional(1)];
    inputs.extend(carried.iter().cloned().map(Some));
    inputs.extend(reads.into_iter().map(Some));
    let op = Op::Loop(Box::new(LoopBody { body, carried: carried.len() }));
    ex.whole(op, &inputs, carried.len()).map(Some)
}

/// The scan of `ex` (opset 9 on), with body `g`, `n` states, its scan inputs (names in scope, each with its axis)
/// and the directions and axes of its inputs and outputs as the attributes give them, as one `Op::Scan` node: the
/// names of its outputs, or `None` where it is not kept (rule 1; the caller returns the import's error).
pub(super) fn keep_scan(
    ex: &mut Ex<'_, '_>,
    g: &GraphProto,
    n: usize,
    scans: &[(String, i64)],
    (in_dirs, out_axes, out_dirs): (&[i64], &[i64], &[i64]),
) -> Result<Option<Vec<Option<String>>>, E> {
    if !ex.at.whole.contains("Scan") {
        return Ok(None);
    }
    let (graph, names) = ex.scope();
    let states: Vec<String> = ex.node.input[..n].to_vec();
    let mut own: Vec<(String, ValueType)> = Vec::with_capacity(n + scans.len());
    for (vi, st) in g.input.iter().zip(&states) {
        match names.get(st.as_str()) {
            Some(&v) => own.push((vi.name().to_string(), graph.ty(v).clone())),
            None => return Ok(None),
        }
    }
    for (vi, (name, axis)) in g.input[n..].iter().zip(scans) {
        let Some(&v) = names.get(name.as_str()) else { return Ok(None) };
        let t = graph.ty(v);
        let mut shape = t.shape.clone();
        shape.remove(*axis as usize);
        own.push((vi.name().to_string(), ValueType::new(t.dt, shape)));
    }
    let Some(outer) = tensors_read(ex.node, names) else { return Ok(None) };
    let fail = |m: String| ex.fail(m);
    let at = super::import::At { depth: ex.at.depth + 1, ..ex.at };
    let Some(body) = subgraph(graph, g, &format!("{}::body", ex.name), &own, &outer, "body", at, &fail)? else {
        return Ok(None);
    };
    if !(0..n).all(|i| body.ty(body.outputs()[i].value) == &own[i].1) {
        return Ok(None);
    }
    let mut outputs = Vec::with_capacity(out_axes.len());
    for (j, (&a, &d)) in out_axes.iter().zip(out_dirs).enumerate() {
        let rank = body.ty(body.outputs()[n + j].value).rank() as i64 + 1;
        let axis = if a < 0 { a + rank } else { a };
        if !(0..rank).contains(&axis) {
            return Err(ex.attr_fail("scan_output_axes", format!("axis {a} is out of range for scan output {j}")));
        }
        outputs.push((axis as usize, d == 1));
    }
    let inputs_axes = scans.iter().zip(in_dirs).map(|((_, a), &d)| (*a as usize, d == 1)).collect();
    let reads: Vec<String> =
        outer.iter().filter(|(_, v)| graph.const_value(*v).is_none()).map(|(n, _)| n.to_string()).collect();
    let mut inputs: Vec<Option<String>> = states.into_iter().map(Some).collect();
    inputs.extend(scans.iter().map(|(name, _)| Some(name.clone())));
    inputs.extend(reads.into_iter().map(Some));
    let count = n + outputs.len();
    let op = Op::Scan(Box::new(ScanBody { body, states: n, inputs: inputs_axes, outputs }));
    ex.whole(op, &inputs, count).map(Some)
}

/// The tensors `node`'s subgraphs read from around it (names not in scope left to the body's import, which names
/// them); `None` where one is a sequence or an optional (rule 1).
fn tensors_read<'n>(node: &'n NodeProto, names: &Scope) -> Option<Vec<(&'n str, ValueId)>> {
    let mut outer = Vec::new();
    for read in outer_inputs(node) {
        match names.bound(read) {
            Some(Structure::Tensor(v)) => outer.push((read, v)),
            Some(_) => return None,
            None => {}
        }
    }
    Some(outer)
}

/// The shape a body declares for its iteration number or condition: `[1]` where it says so (as older exporters
/// write), a scalar otherwise (the spec's).
pub fn scalar_shape(vi: &ValueInfoProto) -> Vec<usize> {
    use super::proto::tensor_shape_proto::dimension::Value;
    use super::proto::type_proto;
    let dims = match vi.r#type.as_ref().and_then(|t| t.value.as_ref()) {
        Some(type_proto::Value::TensorType(t)) => t.shape.as_ref().map(|s| s.dim.as_slice()).unwrap_or_default(),
        _ => &[],
    };
    match dims {
        [d] if matches!(d.value, Some(Value::DimValue(1))) => vec![1],
        _ => Vec::new(),
    }
}
