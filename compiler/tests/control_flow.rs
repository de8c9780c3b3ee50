//! `If` at import (`onnx::branch`): a condition known at import selects its branch, imported in the node's place,
//! and the other branch leaves no trace; a condition known only at run time, branches that disagree with the node,
//! and nesting past the bound are one-line errors naming the node.

mod common;

use common::build::{self, node, value};
use stowage_compiler::ir::print::print;
use stowage_compiler::onnx::proto::{attribute_proto::AttributeType, tensor_proto::DataType};
use stowage_compiler::onnx::proto::{AttributeProto, GraphProto, NodeProto, TensorProto};
use stowage_compiler::onnx::{self, ImportConfig};
use stowage_runtime::Tensor;

fn graph_attr(name: &str, g: GraphProto) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Graph as i32),
        g: Some(g),
        ..Default::default()
    }
}

/// A branch of `nodes` making `outputs`.
fn branch(nodes: Vec<NodeProto>, outputs: &[&str]) -> GraphProto {
    GraphProto {
        name: Some("branch".into()),
        node: nodes,
        output: outputs.iter().map(|o| value(o, &[2, 3])).collect(),
        ..Default::default()
    }
}

fn bool_const(name: &str, v: bool) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        data_type: Some(DataType::Bool as i32),
        int32_data: vec![i32::from(v)],
        ..Default::default()
    }
}

/// `y = If(cond) { Relu(x) } else { Neg(x) }` over x[2,3]; `cond` is the initializer given, or a graph input.
fn if_model(cond: Option<bool>) -> Vec<u8> {
    let then = branch(vec![node("Relu", &["x"], &["t"], vec![])], &["t"]);
    let otherwise = branch(vec![node("Neg", &["x"], &["e"], vec![])], &["e"]);
    let iff = NodeProto {
        name: Some("guard".into()),
        ..node("If", &["cond"], &["y"], vec![graph_attr("then_branch", then), graph_attr("else_branch", otherwise)])
    };
    let mut inputs = vec![value("x", &[2, 3])];
    let inits = match cond {
        Some(v) => vec![bool_const("cond", v)],
        None => {
            inputs.push(build::typed_value("cond", DataType::Bool, &[]));
            vec![]
        }
    };
    build::bytes(&build::model(16, vec![iff], inputs, vec![value("y", &[2, 3])], inits))
}

fn ops_of(bytes: &[u8], config: &ImportConfig) -> String {
    print(&onnx::load_bytes(bytes, config).expect("imports"))
}

#[test]
fn a_constant_condition_imports_its_branch_only() {
    let taken = ops_of(&if_model(Some(true)), &ImportConfig::new());
    assert!(taken.contains("Relu") && !taken.contains("Neg") && !taken.contains("If"), "{taken}");
    let other = ops_of(&if_model(Some(false)), &ImportConfig::new());
    assert!(other.contains("Neg") && !other.contains("Relu") && !other.contains("If"), "{other}");
}

#[test]
fn a_condition_fixed_with_input_value_selects_and_one_left_open_is_refused() {
    let bytes = if_model(None);
    let model = onnx::decode(&bytes).expect("decodes");
    assert_eq!(onnx::value_inputs(&model), ["cond"], "the condition is an input to fix");
    let cond = Tensor::from_bytes(stowage_runtime::DatumType::Bool, &[], &[0]).expect("bool");
    let text = ops_of(&bytes, &ImportConfig::new().input_value("cond", cond));
    assert!(text.contains("Neg") && !text.contains("Relu"), "{text}");
    let err = onnx::load_bytes(&bytes, &ImportConfig::new()).expect_err("refused").to_string();
    assert!(err.contains("node 'guard' (If)") && err.contains("condition 'cond' is known only at run time"), "{err}");
    assert!(err.contains("--input-value") && !err.contains('\n'), "{err}");
}

/// The condition is a shape computation (`Shape(x)[0] == 2`), folded as it is imported; the branch reads `x` and an
/// outer initializer, and the If comes before both in the file.
#[test]
fn a_shape_condition_folds_and_outer_values_order_the_if() {
    let idx = TensorProto {
        name: Some("zero".into()),
        data_type: Some(DataType::Int64 as i32),
        int64_data: vec![0],
        ..Default::default()
    };
    let two = TensorProto { name: Some("two".into()), int64_data: vec![2], ..idx.clone() };
    let then = branch(vec![node("Add", &["r", "w"], &["t"], vec![])], &["t"]);
    let otherwise = branch(vec![node("Neg", &["r"], &["e"], vec![])], &["e"]);
    let nodes = vec![
        NodeProto {
            name: Some("guard".into()),
            ..node("If", &["c"], &["y"], vec![graph_attr("then_branch", then), graph_attr("else_branch", otherwise)])
        },
        node("Relu", &["x"], &["r"], vec![]),
        node("Shape", &["x"], &["s"], vec![]),
        node("Gather", &["s", "zero"], &["d"], vec![]),
        node("Equal", &["d", "two"], &["c"], vec![]),
    ];
    let w = build::floats("w", &[2, 3], &[1.0; 6]);
    let m = build::model(16, nodes, vec![value("x", &[2, 3])], vec![value("y", &[2, 3])], vec![idx, two, w]);
    let text = ops_of(&build::bytes(&m), &ImportConfig::new());
    assert!(text.contains("Add") && text.contains("Relu") && !text.contains("Neg"), "{text}");
}

#[test]
fn nested_ifs_fold_level_by_level() {
    let inner = |v: bool| NodeProto {
        name: Some("inner".into()),
        ..node(
            "If",
            &[if v { "yes" } else { "no" }],
            &["t"],
            vec![
                graph_attr("then_branch", branch(vec![node("Relu", &["x"], &["a"], vec![])], &["a"])),
                graph_attr("else_branch", branch(vec![node("Neg", &["x"], &["b"], vec![])], &["b"])),
            ],
        )
    };
    let outer = NodeProto {
        name: Some("outer".into()),
        ..node(
            "If",
            &["yes"],
            &["y"],
            vec![
                graph_attr("then_branch", branch(vec![inner(false)], &["t"])),
                graph_attr("else_branch", branch(vec![inner(true)], &["t"])),
            ],
        )
    };
    let inits = vec![bool_const("yes", true), bool_const("no", false)];
    let m = build::model(16, vec![outer], vec![value("x", &[2, 3])], vec![value("y", &[2, 3])], inits);
    let text = ops_of(&build::bytes(&m), &ImportConfig::new());
    assert!(text.contains("Neg") && !text.contains("Relu"), "then of outer, else of inner: {text}");
}

#[test]
fn branches_that_disagree_and_nesting_past_the_bound_are_refused() {
    // A then_branch with two outputs for a one-output If.
    let then = branch(vec![node("Relu", &["x"], &["t"], vec![])], &["t", "t"]);
    let otherwise = branch(vec![node("Neg", &["x"], &["e"], vec![])], &["e"]);
    let iff = NodeProto {
        name: Some("guard".into()),
        ..node("If", &["c"], &["y"], vec![graph_attr("then_branch", then), graph_attr("else_branch", otherwise)])
    };
    let m =
        build::model(16, vec![iff], vec![value("x", &[2, 3])], vec![value("y", &[2, 3])], vec![bool_const("c", true)]);
    let err = onnx::load_bytes(&build::bytes(&m), &ImportConfig::new()).expect_err("refused").to_string();
    assert!(
        err.contains("node 'guard' (If)") && err.contains("then_branch takes 0 inputs and makes 2 outputs"),
        "{err}"
    );

    // Ifs nested `levels` deep, each the then_branch of the one around it.
    let nested = |levels: usize| {
        let mut body = node("Relu", &["x"], &["y"], vec![]);
        for level in 0..levels {
            body = NodeProto {
                name: Some(format!("level{level}")),
                ..node(
                    "If",
                    &["c"],
                    &["y"],
                    vec![
                        graph_attr("then_branch", branch(vec![body], &["y"])),
                        graph_attr("else_branch", branch(vec![node("Neg", &["x"], &["y"], vec![])], &["y"])),
                    ],
                )
            };
        }
        let inputs = vec![value("x", &[2, 3])];
        build::bytes(&build::model(16, vec![body], inputs, vec![value("y", &[2, 3])], vec![bool_const("c", true)]))
    };
    assert!(ops_of(&nested(16), &ImportConfig::new()).contains("Relu"), "16 deep imports");
    let err = onnx::load_bytes(&nested(17), &ImportConfig::new()).expect_err("refused").to_string();
    assert!(err.contains("(If)") && err.contains("nest more than 16 deep"), "{err}");
}

/// A branch's names end with it: a node after the If cannot read them, and a branch name that an outer value has
/// is refused.
#[test]
fn branch_names_stay_in_the_branch_and_may_not_shadow() {
    let otherwise = || branch(vec![node("Neg", &["x"], &["e"], vec![])], &["e"]);
    let guarded = |then: GraphProto| NodeProto {
        name: Some("guard".into()),
        ..node("If", &["c"], &["y"], vec![graph_attr("then_branch", then), graph_attr("else_branch", otherwise())])
    };
    let then = branch(vec![node("Relu", &["x"], &["inner"], vec![]), node("Neg", &["inner"], &["t"], vec![])], &["t"]);
    let nodes = vec![guarded(then), node("Add", &["y", "inner"], &["z"], vec![])];
    let c = || vec![bool_const("c", true)];
    let m = build::model(16, nodes, vec![value("x", &[2, 3])], vec![value("z", &[2, 3])], c());
    let err = onnx::load_bytes(&build::bytes(&m), &ImportConfig::new()).expect_err("refused").to_string();
    assert!(err.contains("'inner'"), "{err}");

    let shadowing = branch(vec![node("Relu", &["x"], &["x"], vec![])], &["x"]);
    let m = build::model(16, vec![guarded(shadowing)], vec![value("x", &[2, 3])], vec![value("y", &[2, 3])], c());
    let err = onnx::load_bytes(&build::bytes(&m), &ImportConfig::new()).expect_err("refused").to_string();
    assert!(err.contains("'x'"), "{err}");
}
