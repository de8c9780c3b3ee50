//! Models of opsets 1 to 6 (`onnx::legacy`): each node read as its opset-7 form. Constants fold at import, so the
//! legacy broadcast's values are checked here without running a kernel; what has no opset-7 form is an error naming
//! the node.

mod common;

use common::build::{self, int, ints, node, value};
use stowage_compiler::ir::print::print;
use stowage_compiler::onnx::proto::{attribute_proto::AttributeType, tensor_proto::DataType, AttributeProto};
use stowage_compiler::onnx::{self, ImportConfig};
use stowage_runtime::DatumType;

fn import(m: &stowage_compiler::onnx::proto::ModelProto) -> Result<stowage_compiler::ir::Graph, String> {
    onnx::load_bytes(&build::bytes(m), &ImportConfig::new()).map_err(|e| e.to_string())
}

fn string_attr(name: &str, v: &str) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::String as i32),
        s: Some(v.as_bytes().to_vec()),
        ..Default::default()
    }
}

#[test]
fn a_legacy_broadcast_along_an_axis_lines_up_as_it_did() {
    // y[i, j, k] = a[i, j, k] + b[j]: opset 6's `broadcast = 1, axis = 1`, both constants, so it folds.
    let a: Vec<f32> = (0..12).map(|v| v as f32).collect();
    let m = build::model(
        6,
        vec![node(
            "Add",
            &["a", "b"],
            &["y"],
            vec![int("broadcast", 1), int("axis", 1), ints("consumed_inputs", &[0])],
        )],
        vec![],
        vec![value("y", &[2, 3, 2])],
        vec![build::floats("a", &[2, 3, 2], &a), build::floats("b", &[3], &[100.0, 200.0, 300.0])],
    );
    let g = import(&m).expect("imports");
    let y = g.outputs()[0].value;
    let got = g.const_value(y).expect("folded").to_vec::<f32>().expect("f32");
    let want: Vec<f32> = (0..12).map(|v| v as f32 + 100.0 * ((v / 2) % 3 + 1) as f32).collect();
    assert_eq!(got, want);

    // The same over a graph input: an Unsqueeze of b to [3, 1], then opset 7's Add.
    let m = build::model(
        6,
        vec![node("Mul", &["x", "b"], &["y"], vec![int("broadcast", 1), int("axis", 1)])],
        vec![value("x", &[2, 3, 2])],
        vec![value("y", &[2, 3, 2])],
        vec![build::floats("b", &[3], &[1.0, 2.0, 3.0])],
    );
    let g = import(&m).expect("imports");
    let text = print(&g);
    assert!(text.contains("f32[3,1]") && text.contains("= Mul(") && text.contains("f32[2,3,2] = Mul"), "{text}");
}

/// Nodes inside an `If`'s branch are rewritten too: the branch's legacy broadcast lines up along its axis.
#[test]
fn nodes_in_subgraphs_are_rewritten_too() {
    let branch = |op: &str, out: &str| stowage_compiler::onnx::proto::GraphProto {
        name: Some("branch".into()),
        node: vec![node(op, &["a", "b"], &[out], vec![int("broadcast", 1), int("axis", 1)])],
        output: vec![value(out, &[2, 3, 2])],
        ..Default::default()
    };
    let graph_attr = |name: &str, g| AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Graph as i32),
        g: Some(g),
        ..Default::default()
    };
    let a: Vec<f32> = (0..12).map(|v| v as f32).collect();
    let cond = stowage_compiler::onnx::proto::TensorProto {
        name: Some("cond".into()),
        data_type: Some(DataType::Bool as i32),
        int32_data: vec![1],
        ..Default::default()
    };
    let m = build::model(
        6,
        vec![node(
            "If",
            &["cond"],
            &["y"],
            vec![graph_attr("then_branch", branch("Add", "t")), graph_attr("else_branch", branch("Sub", "e"))],
        )],
        vec![],
        vec![value("y", &[2, 3, 2])],
        vec![build::floats("a", &[2, 3, 2], &a), build::floats("b", &[3], &[100.0, 200.0, 300.0]), cond],
    );
    let g = import(&m).expect("imports");
    let got = g.const_value(g.outputs()[0].value).expect("folded").to_vec::<f32>().expect("f32");
    let want: Vec<f32> = (0..12).map(|v| v as f32 + 100.0 * ((v / 2) % 3 + 1) as f32).collect();
    assert_eq!(got, want);
}

#[test]
fn old_attributes_take_their_opset_7_forms() {
    let cast = AttributeProto { name: Some("to".into()), ..string_attr("to", "INT64") };
    let m = build::model(
        3,
        vec![
            node("Reshape", &["x"], &["r"], vec![ints("shape", &[3, 4])]),
            node("Cast", &["r"], &["c"], vec![cast]),
            node("Concat", &["r", "r"], &["cat"], vec![]),
        ],
        vec![value("x", &[2, 6])],
        vec![build::typed_value("c", DataType::Int64, &[3, 4]), value("cat", &[3, 8])],
        vec![],
    );
    let g = import(&m).expect("imports");
    let ty = |name: &str| {
        let v = g.outputs().iter().find(|o| o.name == name).expect("output").value;
        g.ty(v).clone()
    };
    assert_eq!((ty("c").dt, ty("c").shape), (DatumType::I64, vec![3, 4]));
    assert_eq!(ty("cat").shape, [3, 8], "Concat's axis is 1 before opset 4");

    // Pad's pads are `paddings` at opset 1.
    let m = build::model(
        1,
        vec![node("Pad", &["x"], &["p"], vec![ints("paddings", &[0, 1, 0, 1]), string_attr("mode", "edge")])],
        vec![value("x", &[2, 6])],
        vec![value("p", &[2, 8])],
        vec![],
    );
    let g = import(&m).expect("imports");
    assert_eq!(g.ty(g.outputs()[0].value).shape, [2, 8]);

    // Tile before opset 6: `tiles` copies along `axis`.
    let m = build::model(
        5,
        vec![node("Tile", &["x", "t", "ax"], &["y"], vec![])],
        vec![value("x", &[2, 3])],
        vec![value("y", &[2, 6])],
        vec![build::int64s("t", &[], &[2]), build::int64s("ax", &[], &[1])],
    );
    let g = import(&m).expect("imports");
    assert_eq!(g.ty(g.outputs()[0].value).shape, [2, 6]);
}

#[test]
fn what_has_no_opset_7_form_is_named() {
    let m = build::model(
        6,
        vec![node("Upsample", &["x"], &["y"], vec![])],
        vec![value("x", &[1, 1, 2, 2])],
        vec![value("y", &[1, 1, 4, 4])],
        vec![],
    );
    let err = import(&m).expect_err("refused");
    assert!(err.contains("'Upsample_y'") && err.contains("before opset 7"), "{err}");
    let m = build::model(
        5,
        vec![node("Tile", &["x", "t", "ax"], &["y"], vec![])],
        vec![value("x", &[2, 3]), build::typed_value("t", DataType::Int64, &[])],
        vec![value("y", &[2, 6])],
        vec![build::int64s("ax", &[], &[1])],
    );
    let err = import(&m).expect_err("refused");
    assert!(err.contains("'Tile_y'") && err.contains("known only at run time"), "{err}");
}
