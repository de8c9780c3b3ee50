//! The `ai.onnx.ml` domain at import (`onnx/ml.rs`): a tree ensemble becomes one `TreeEnsemble` node, and every
//! kind of bad tree, list or option is one line naming node and attribute. Results against onnxruntime are the
//! exported-model suite's (`tests/tests/exported_models.rs`) and the node suite's ml cases.

mod common;

use common::errors::{check, error_of, import};

use common::build::{self, int, node, string, strings, typed_value};
use stowage_compiler::ir::print::print;
use stowage_compiler::onnx::proto::attribute_proto::AttributeType;
use stowage_compiler::onnx::proto::{tensor_proto::DataType, AttributeProto, ModelProto, OperatorSetIdProto};

fn ints(name: &str, v: &[i64]) -> AttributeProto {
    build::ints(name, v)
}

fn floats(name: &str, v: &[f32]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Floats as i32),
        floats: v.to_vec(),
        ..Default::default()
    }
}

/// A stump on feature 0 (`x < 0.5` → leaf 1 else leaf 2) as a `TreeEnsembleRegressor` or, with `labels`, a
/// classifier; `edit` changes its attributes first.
fn stump(classifier: bool, version: i64, edit: impl FnOnce(&mut Vec<AttributeProto>)) -> ModelProto {
    let votes = if classifier { "class" } else { "target" };
    let mut attrs = vec![
        ints("nodes_treeids", &[0, 0, 0]),
        ints("nodes_nodeids", &[0, 1, 2]),
        ints("nodes_featureids", &[0, 0, 0]),
        strings("nodes_modes", &["BRANCH_LT", "LEAF", "LEAF"]),
        floats("nodes_values", &[0.5, 0.0, 0.0]),
        ints("nodes_truenodeids", &[1, 0, 0]),
        ints("nodes_falsenodeids", &[2, 0, 0]),
        ints(&format!("{votes}_treeids"), &[0, 0]),
        ints(&format!("{votes}_nodeids"), &[1, 2]),
        ints(&format!("{votes}_ids"), &[0, 1]),
        floats(&format!("{votes}_weights"), &[1.0, 1.0]),
    ];
    if classifier {
        attrs.push(ints("classlabels_int64s", &[3, 7]));
    } else {
        attrs.push(int("n_targets", 2));
    }
    edit(&mut attrs);
    let op = if classifier { "TreeEnsembleClassifier" } else { "TreeEnsembleRegressor" };
    let outputs: &[&str] = if classifier { &["label", "scores"] } else { &["y"] };
    let mut n = node(op, &["x"], outputs, attrs);
    n.domain = Some("ai.onnx.ml".into());
    let outs = outputs.iter().map(|o| typed_value(o, DataType::Float, &[])).collect();
    let mut m = build::model(18, vec![n], vec![typed_value("x", DataType::Float, &[4, 2])], outs, vec![]);
    m.opset_import.push(OperatorSetIdProto { domain: Some("ai.onnx.ml".into()), version: Some(version) });
    m
}

fn set(attrs: &mut Vec<AttributeProto>, new: AttributeProto) {
    match attrs.iter().position(|a| a.name == new.name) {
        Some(at) => attrs[at] = new,
        None => attrs.push(new),
    }
}

#[test]
fn a_tree_ensemble_is_one_node_and_a_classifier_takes_its_label_at_the_argmax() {
    let g = import(&stump(false, 3, |_| {})).expect("imports");
    let text = print(&g);
    assert!(text.contains("TreeEnsemble(v0) {trees=1 nodes=1 leaves=2 targets=2 aggregate=Sum}"), "{text}");
    let text = print(&import(&stump(true, 1, |_| {})).expect("imports"));
    assert!(text.contains("TreeEnsemble") && text.contains("ArgMax") && text.contains("Gather"), "{text}");
}

#[test]
fn bad_trees_and_lists_of_different_lengths_are_named() {
    let err = error_of(&stump(false, 3, |a| set(a, floats("nodes_values", &[0.5, 0.0]))));
    check(&err, &["TreeEnsembleRegressor", "attribute 'nodes_values'", "has 2 entries, but nodes_treeids has 3"]);
    let err = error_of(&stump(false, 3, |a| set(a, ints("target_ids", &[0]))));
    check(&err, &["attribute 'target_ids'", "has 1 entries, but target_treeids has 2"]);
    let err = error_of(&stump(false, 3, |a| set(a, ints("nodes_truenodeids", &[7, 0, 0]))));
    check(&err, &["leads to node 7", "does not list"]);
    let err = error_of(&stump(false, 3, |a| set(a, ints("target_nodeids", &[1, 0]))));
    check(&err, &["attribute 'target_nodeids'", "node 0 of tree 0, which is not a leaf"]);
    // Node 0's false branch back to itself through an interior node 2.
    let err = error_of(&stump(false, 3, |a| {
        set(a, strings("nodes_modes", &["BRANCH_LT", "LEAF", "BRANCH_LEQ"]));
        set(a, ints("nodes_truenodeids", &[1, 0, 0]));
        set(a, ints("nodes_falsenodeids", &[2, 0, 1]));
        set(a, ints("target_nodeids", &[1, 1]));
    }));
    check(&err, &["its trees", "cycle"]);
    let err = error_of(&stump(false, 3, |a| set(a, ints("nodes_featureids", &[5, 0, 0]))));
    check(&err, &["TreeEnsembleRegressor", "f32[4,2]", "feature 5"]);
}

#[test]
fn one_label_probit_and_other_versions_are_refused_by_name() {
    // String labels are taken: the label is a Gather from a string constant.
    let g = import(&stump(true, 3, |a| {
        set(a, strings("classlabels_strings", &["cat", "dog"]));
        a.retain(|x| x.name() != "classlabels_int64s");
    }))
    .expect("imports");
    assert!(print(&g).contains("string["), "{}", print(&g));
    let err = error_of(&stump(true, 3, |a| {
        set(a, strings("classlabels_strings", &["cat"]));
        a.retain(|x| x.name() != "classlabels_int64s");
    }));
    check(&err, &["attribute 'classlabels_strings'", "1 labels"]);
    let err = error_of(&stump(true, 3, |a| a.push(string("post_transform", "PROBIT"))));
    check(&err, &["attribute 'post_transform'", "PROBIT"]);
    let err = error_of(&stump(false, 6, |_| {}));
    check(&err, &["ai.onnx.ml", "opset 6", "versions 1 to 5"]);
}
