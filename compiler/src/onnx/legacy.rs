//! Models of opsets 1 to 6: each node rewritten into its opset-7 form before it is parsed, so the rest of the
//! importer knows one set of forms. Old models of the ONNX model zoo and of early exporters (Caffe2, CNTK, the
//! first PyTorch exporter) are written at these opsets. The rules:
//!
//! 1. **Same semantics, newer spelling.** Every op whose meaning did not change at opset 7 is read as its opset-7
//!    form (`consumed_inputs`, opset 1's memory hint, is ignored); those that changed are rewritten here:
//!    - arithmetic, comparisons and logic (`Add`, `Sub`, `Mul`, `Div`, `Pow`, `And`, `Or`, `Xor`, `Equal`,
//!      `Greater`, `Less`) broadcast only with `broadcast = 1`, the right operand's shape matching a contiguous
//!      run of the left's: from the end, or from `axis`. The attributes are dropped; with an `axis` that leaves
//!      trailing axes, the right operand gets those axes of size 1 (`Unsqueeze`), so that opset 7's broadcasting
//!      from the end lines it up the same way;
//!    - `Gemm`'s `broadcast` is dropped (C broadcasts one way from opset 7 on, a superset);
//!    - `Reshape` before opset 5 takes its `shape` attribute as a constant input; `Pad` before opset 2 names its
//!      pads `paddings`; `Concat` before opset 4 has `axis` 1 by default; `Cast` before opset 6 names its type
//!      (`to = "FLOAT"`); `Tile` before opset 6 repeats one axis (`tiles` times along `axis`, both inputs), made
//!      the repeats of opset 6 when both are constants; `Split` before opset 2 may take its split as input 1.
//! 2. **Refused, named.** What has no opset-7 form here (`Upsample` before opset 7, an experimental op of other
//!    attributes; a `Tile` whose count or axis is computed; a legacy `axis` broadcast of an operand of unknown
//!    rank) is an error naming the node.
//! 3. **Nothing else changes.** The rewritten node keeps its name, inputs and outputs; a constant or `Unsqueeze` it
//!    needs is named `NODE::legacyK`, out of the model's names.

use super::expand::ints as ints_attr;
use super::proto::{attribute_proto::AttributeType, AttributeProto, NodeProto};
use crate::error::ImportErrorKind as E;

/// The opset the rewritten nodes are read at.
pub const MODERN: i64 = 7;

/// Ops whose legacy `broadcast`/`axis` attributes rule 1 rewrites.
const BROADCASTING: &[&str] = &["Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "Equal", "Greater", "Less"];

/// What a legacy node becomes: the node in its opset-7 form, and the nodes to import before it (an `Unsqueeze` of
/// a broadcast operand, a constant input), each in opset-7 form too.
pub(super) struct Modern {
    pub before: Vec<NodeProto>,
    pub node: NodeProto,
}

fn int_of(node: &NodeProto, name: &str) -> Option<i64> {
    node.attribute.iter().find(|a| a.name() == name).map(|a| a.i())
}

fn without(node: &mut NodeProto, names: &[&str]) {
    node.attribute.retain(|a| !names.contains(&a.name()));
}

fn int_attr(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Int as i32),
        i: Some(v),
        ..Default::default()
    }
}

/// A `Constant` node of int64 values named `out`.
fn constant(out: &str, dims: Vec<i64>, values: Vec<i64>) -> NodeProto {
    let t = super::proto::TensorProto {
        dims,
        data_type: Some(super::proto::tensor_proto::DataType::Int64 as i32),
        int64_data: values,
        ..Default::default()
    };
    let value = AttributeProto {
        name: Some("value".into()),
        r#type: Some(AttributeType::Tensor as i32),
        t: Some(t),
        ..Default::default()
    };
    NodeProto {
        output: vec![out.into()],
        name: Some(out.into()),
        op_type: Some("Constant".into()),
        attribute: vec![value],
        ..Default::default()
    }
}

/// Rewrites `node` (named `name`, of a model at `opset` < 7) into its opset-7 form (rules 1 to 3). `rank` gives the
/// rank of a value in scope, `ints` the values of an integer constant in scope.
pub(super) fn modernize(
    node: &NodeProto,
    name: &str,
    opset: i64,
    rank: &dyn Fn(&str) -> Option<usize>,
    ints: &dyn Fn(&str) -> Option<Vec<i64>>,
) -> Result<Modern, E> {
    let op = node.op_type();
    let fail = |message: String| E::Node { node: name.into(), op: op.into(), message };
    let mut n = node.clone();
    without(&mut n, &["consumed_inputs"]);
    let mut before = Vec::new();
    match op {
        _ if BROADCASTING.contains(&op) => {
            let axis = int_of(node, "axis");
            let broadcast = int_of(node, "broadcast").unwrap_or(0) != 0;
            without(&mut n, &["broadcast", "axis"]);
            if let (true, Some(axis), [a, b, ..]) = (broadcast, axis, node.input.as_slice()) {
                let (ra, rb) = match (rank(a), rank(b)) {
                    (Some(ra), Some(rb)) => (ra, rb),
                    _ => {
                        return Err(fail(format!(
                            "broadcasts '{b}' along axis {axis} of '{a}', whose ranks are not known"
                        )))
                    }
                };
                let axis = if axis < 0 { axis + ra as i64 } else { axis };
                if axis < 0 || axis as usize + rb > ra {
                    return Err(fail(format!(
                        "broadcasts a rank-{rb} operand from axis {axis} of a rank-{ra} one: it does not fit"
                    )));
                }
                let trailing = ra - axis as usize - rb;
                if trailing > 0 {
                    let unsqueezed = format!("{name}::legacy_unsqueezed");
                    before.push(NodeProto {
                        input: vec![b.clone()],
                        output: vec![unsqueezed.clone()],
                        name: Some(unsqueezed.clone()),
                        op_type: Some("Unsqueeze".into()),
                        attribute: vec![ints_attr("axes", (rb..rb + trailing).map(|d| d as i64).collect())],
                        ..Default::default()
                    });
                    n.input[1] = unsqueezed;
                }
            }
        }
        "Gemm" => without(&mut n, &["broadcast"]),
        "Reshape" if opset < 5 => {
            let shape = node.attribute.iter().find(|a| a.name() == "shape").map(|a| a.ints.clone());
            without(&mut n, &["shape"]);
            if let Some(shape) = shape {
                let c = format!("{name}::legacy_shape");
                before.push(constant(&c, vec![shape.len() as i64], shape));
                n.input.truncate(1);
                n.input.push(c);
            }
        }
        "Pad" if opset < 2 => {
            for a in &mut n.attribute {
                if a.name() == "paddings" {
                    a.name = Some("pads".into());
                }
            }
        }
        "Concat" if opset < 4 && int_of(node, "axis").is_none() => n.attribute.push(int_attr("axis", 1)),
        "Cast" if opset < 6 => {
            let to = node.attribute.iter().find(|a| a.name() == "to");
            if let Some(a) = to.filter(|a| a.s.is_some()) {
                let text = String::from_utf8_lossy(a.s()).to_ascii_uppercase();
                let code = super::proto::tensor_proto::DataType::from_str_name(&text)
                    .ok_or_else(|| fail(format!("its type '{text}' is not an ONNX element type")))?;
                without(&mut n, &["to"]);
                n.attribute.push(int_attr("to", code as i64));
            }
        }
        "Tile" if opset < 6 => {
            let (x, tiles, axis) = match node.input.as_slice() {
                [x, t, a] => (x, t, a),
                _ => return Err(fail("takes three inputs before opset 6 (input, tiles, axis)".into())),
            };
            let (Some(t), Some(ax), Some(r)) = (ints(tiles), ints(axis), rank(x)) else {
                return Err(fail("repeats a count or along an axis known only at run time (opset < 6)".into()));
            };
            let (t, ax) = (t.first().copied().unwrap_or(1), ax.first().copied().unwrap_or(0));
            let ax = if ax < 0 { ax + r as i64 } else { ax };
            if !(0..r as i64).contains(&ax) {
                return Err(fail(format!("its axis {ax} is out of range for rank {r}")));
            }
            let repeats: Vec<i64> = (0..r as i64).map(|d| if d == ax { t } else { 1 }).collect();
            let c = format!("{name}::legacy_repeats");
            before.push(constant(&c, vec![r as i64], repeats));
            n.input = vec![x.clone(), c];
        }
        "Split" if opset < 2 && node.input.len() > 1 => {
            let split = ints(&node.input[1]).ok_or_else(|| fail("its split is known only at run time".into()))?;
            n.input.truncate(1);
            n.attribute.push(ints_attr("split", split));
        }
        "Upsample" => return Err(fail("Upsample before opset 7 (an experimental op) is not supported".into())),
        _ => {}
    }
    Ok(Modern { before, node: n })
}
