//! A model cut around a node that needs a value known only at run time (`onnx::split`, rules 1 to 5), and the
//! import error that asks for it (`ImportErrorKind::AtRunTime`: the top-level node's position, the node's own line).

mod common;

use common::build::{self, int, int64s, node, value};
use stowage_compiler::onnx::proto::{attribute_proto::AttributeType, AttributeProto, GraphProto, ModelProto};
use stowage_compiler::onnx::split::{split, Part};
use stowage_compiler::onnx::{self, ImportConfig};
use stowage_compiler::ImportErrorKind;
use stowage_runtime::DatumType;

fn names(p: &ModelProto) -> Vec<String> {
    p.graph.as_ref().unwrap().node.iter().map(|n| n.name().to_string()).collect()
}

fn outputs(p: &ModelProto) -> Vec<String> {
    p.graph.as_ref().unwrap().output.iter().map(|o| o.name().to_string()).collect()
}

fn named(mut n: onnx::proto::NodeProto, name: &str) -> onnx::proto::NodeProto {
    n.name = Some(name.into());
    n
}

/// x → MatMul → NonZero → Transpose → pos; MatMul → ReduceSum → total; an unrelated Relu of x; the nodes listed
/// out of order (the Transpose first).
fn model() -> ModelProto {
    build::model(
        18,
        vec![
            named(node("Transpose", &["nz"], &["pos"], vec![]), "t"),
            named(node("MatMul", &["x", "w"], &["h"], vec![]), "mm"),
            named(node("NonZero", &["h"], &["nz"], vec![]), "hits"),
            named(node("ReduceSum", &["h"], &["total"], vec![int("keepdims", 0)]), "sum"),
            named(node("Relu", &["x"], &["r"], vec![]), "relu"),
            named(node("Add", &["pos", "one"], &["pos1"], vec![]), "shift"),
        ],
        vec![value("x", &[2, 3])],
        vec![value("pos1", &[-1, 2]), value("total", &[]), value("r", &[2, 3])],
        vec![build::floats("w", &[3, 3], &[1.0; 9]), int64s("one", &[], &[1])],
    )
}

#[test]
fn the_import_stops_at_the_node_naming_it_and_its_position() {
    let e = onnx::import(&model(), None, &ImportConfig::new()).expect_err("refused");
    match *e.kind {
        ImportErrorKind::AtRunTime { index, ref source } => {
            assert_eq!(index, 2);
            assert!(source.to_string().contains("node 'hits' (NonZero)"), "{source}");
        }
        ref other => panic!("{other}"),
    }
    assert!(e.kind.needs_value());
    // The line is the node's own.
    assert!(e.to_string().starts_with("node 'hits' (NonZero): its output's shape depends"), "{e}");
}

#[test]
fn rules_1_to_4_the_three_parts_their_inputs_and_outputs() {
    let m = model();
    let s = split(&m, 2).expect("a node");
    // Rule 1: the readers of the node, through each other, whatever the file's order.
    assert_eq!(names(&s.before), ["mm", "sum", "relu"]);
    assert_eq!(names(&s.node.model), ["hits"]);
    let after = s.after.as_ref().expect("the Transpose and Add read it");
    assert_eq!(names(&after.model), ["t", "shift"]);
    // Rule 2: the before part keeps the model's inputs; the others read names from earlier parts.
    assert_eq!(s.before.graph.as_ref().unwrap().input.len(), 1);
    assert_eq!(s.node.inputs, ["h"]);
    assert_eq!(after.inputs, ["nz"]);
    // Rule 3: initializers go where they are read.
    let inits =
        |p: &Part| p.model.graph.as_ref().unwrap().initializer.iter().map(|t| t.name().to_string()).collect::<Vec<_>>();
    assert_eq!(inits(after), ["one"]);
    assert!(inits(&s.node).is_empty());
    assert_eq!(s.before.graph.as_ref().unwrap().initializer.iter().map(|t| t.name()).collect::<Vec<_>>(), ["w"]);
    // The inputs that set shapes: none of the after part's; the NonZero's data for the node.
    assert!(after.value_inputs().is_empty());
    assert_eq!(s.node.value_inputs(), ["h"]);
    // Rule 4: the model's outputs the later parts do not make, then what they read from the before part.
    assert_eq!(outputs(&s.before), ["total", "r", "h"]);
    assert_eq!(outputs(&s.node.model), ["nz"]);
    assert_eq!(outputs(&after.model), ["pos1"]);
    assert_eq!(s.outputs, ["pos1", "total", "r"]);
    // Rule 5: the rest of the model is the same.
    assert_eq!(s.before.opset_import, m.opset_import);
    assert_eq!(after.model.ir_version, m.ir_version);
}

#[test]
fn each_part_imports_once_its_inputs_are_typed() {
    let s = split(&model(), 2).unwrap();
    onnx::import(&s.before, None, &ImportConfig::new()).expect("the part before imports as it is");
    let after = s.after.unwrap();
    let typed = after.typed(&[(DatumType::I64, vec![2, 4])]);
    let g = onnx::import(&typed, None, &ImportConfig::new()).expect("the part after, typed");
    let out = g.outputs()[0].value;
    assert_eq!(g.ty(out).shape, [4, 2]);
}

#[test]
fn what_a_subgraph_reads_from_around_it_counts_as_read() {
    // An If whose branch reads the node's output from around it belongs to the part after.
    let then = GraphProto {
        name: Some("then".into()),
        node: vec![node("Identity", &["nz"], &["a"], vec![])],
        output: vec![value("a", &[-1, -1])],
        ..Default::default()
    };
    let graph_attr = |name: &str, g: GraphProto| AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Graph as i32),
        g: Some(g),
        ..Default::default()
    };
    let m = build::model(
        18,
        vec![
            named(node("NonZero", &["x"], &["nz"], vec![]), "hits"),
            named(
                node(
                    "If",
                    &["c"],
                    &["y"],
                    vec![graph_attr("then_branch", then.clone()), graph_attr("else_branch", then)],
                ),
                "pick",
            ),
        ],
        vec![value("x", &[2, 3]), build::typed_value("c", onnx::proto::tensor_proto::DataType::Bool, &[])],
        vec![value("y", &[-1, -1])],
        vec![],
    );
    let s = split(&m, 0).unwrap();
    assert!(names(&s.before).is_empty());
    let after = s.after.unwrap();
    assert_eq!(names(&after.model), ["pick"]);
    assert_eq!(after.inputs, ["c", "nz"]);
    assert!(split(&m, 7).is_none());
}
