//! `If` at import (`onnx::branch`): a condition known at import selects its branch, imported in the node's place,
//! and the other branch leaves no trace; a condition known only at run time imports both and selects with `Where`;
//! branches that disagree with the node or each other, and nesting past the bound, are one-line errors naming the
//! node. `Scan` and `Loop` of a known number of iterations unroll (`onnx::unroll`); a trip count known only at run
//! time and a body of the wrong signature are refused.

mod common;

use common::build::{self, graph_attr, node, value};
use stowage_compiler::ir::print::print;
use stowage_compiler::onnx::proto::tensor_proto::DataType;
use stowage_compiler::onnx::proto::{GraphProto, NodeProto, TensorProto};
use stowage_compiler::onnx::{self, ImportConfig};
use stowage_runtime::Tensor;

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
fn a_condition_fixed_with_input_value_selects_and_one_left_open_selects_at_run_time() {
    let bytes = if_model(None);
    let model = onnx::decode(&bytes).expect("decodes");
    assert_eq!(onnx::value_inputs(&model), ["cond"], "the condition is an input to fix");
    let cond = Tensor::from_bytes(stowage_runtime::DatumType::Bool, &[], &[0]).expect("bool");
    let text = ops_of(&bytes, &ImportConfig::new().input_value("cond", cond));
    assert!(text.contains("Neg") && !text.contains("Relu") && !text.contains("Where"), "{text}");
    // Left open, both branches are imported and the output is selected by the condition.
    let text = ops_of(&bytes, &ImportConfig::new());
    assert!(text.contains("Neg") && text.contains("Relu") && text.contains("Where"), "{text}");
    assert!(text.contains("guard::select0"), "the selection is named for the If: {text}");
}

/// Branches chosen at run time must make the same types: otherwise one line names the node, the output and both
/// types, and the fix.
#[test]
fn run_time_branches_that_make_different_types_are_refused() {
    let then = branch(vec![node("Relu", &["x"], &["t"], vec![])], &["t"]);
    let reduce = vec![build::int("keepdims", 0)];
    let otherwise = branch(vec![node("ReduceSum", &["x"], &["e"], reduce)], &["e"]);
    let iff = NodeProto {
        name: Some("guard".into()),
        ..node("If", &["cond"], &["y"], vec![graph_attr("then_branch", then), graph_attr("else_branch", otherwise)])
    };
    let inputs = vec![value("x", &[2, 3]), build::typed_value("cond", DataType::Bool, &[])];
    let bytes = build::bytes(&build::model(16, vec![iff], inputs, vec![value("y", &[2, 3])], vec![]));
    let err = onnx::load_bytes(&bytes, &ImportConfig::new()).expect_err("refused").to_string();
    assert!(err.contains("node 'guard' (If)") && err.contains("different types for output 0"), "{err}");
    assert!(err.contains("f32[2,3] and f32[]") && err.contains("--input-value") && !err.contains('\n'), "{err}");
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

/// A cumulative sum as a Scan over x[4, 3]: state s[3], scan input rows of x, body `s' = s + row`, scan output s'.
fn scan_model(body_inputs: usize) -> Vec<u8> {
    let mut inputs = vec![value("s_in", &[3]), value("row", &[3]), value("extra", &[3])];
    inputs.truncate(body_inputs);
    let body = GraphProto {
        name: Some("body".into()),
        node: vec![node("Add", &["s_in", "row"], &["s_out"], vec![]), node("Identity", &["s_out"], &["y_out"], vec![])],
        input: inputs,
        output: vec![value("s_out", &[3]), value("y_out", &[3])],
        ..Default::default()
    };
    let scan = NodeProto {
        name: Some("cumsum".into()),
        ..node("Scan", &["s0", "x"], &["s", "ys"], vec![graph_attr("body", body), build::int("num_scan_inputs", 1)])
    };
    let zeros = build::floats("s0", &[3], &[0.0; 3]);
    build::bytes(&build::model(
        16,
        vec![scan],
        vec![value("x", &[4, 3])],
        vec![value("s", &[3]), value("ys", &[4, 3])],
        vec![zeros],
    ))
}

#[test]
fn a_scan_unrolls_over_its_static_sequence() {
    let text = ops_of(&scan_model(2), &ImportConfig::new());
    assert!(!text.contains("Scan"), "{text}");
    assert_eq!(text.matches("= Add(").count(), 4, "one Add per row: {text}");
    assert!(text.contains("cumsum::it3::"), "the iterations' values are named for the node: {text}");
    let err = onnx::load_bytes(&scan_model(3), &ImportConfig::new()).expect_err("refused").to_string();
    assert!(
        err.contains("node 'cumsum' (Scan)") && err.contains("body takes 3 inputs") && !err.contains('\n'),
        "{err}"
    );
}

/// A Loop doubling v[2] `trip` times, the trip count an input or a constant.
fn loop_model(trip: Option<i64>) -> Vec<u8> {
    let body = GraphProto {
        name: Some("body".into()),
        node: vec![node("Identity", &["c_in"], &["c_out"], vec![]), node("Add", &["v_in", "v_in"], &["v_out"], vec![])],
        input: vec![
            build::typed_value("i", DataType::Int64, &[]),
            build::typed_value("c_in", DataType::Bool, &[]),
            value("v_in", &[2]),
        ],
        output: vec![build::typed_value("c_out", DataType::Bool, &[]), value("v_out", &[2])],
        ..Default::default()
    };
    let lp = NodeProto {
        name: Some("doubling".into()),
        ..node("Loop", &["m", "go", "v"], &["w"], vec![graph_attr("body", body)])
    };
    let mut inits = vec![bool_const("go", true)];
    let mut inputs = vec![value("v", &[2])];
    match trip {
        Some(t) => inits.push(TensorProto {
            name: Some("m".into()),
            data_type: Some(DataType::Int64 as i32),
            int64_data: vec![t],
            ..Default::default()
        }),
        None => inputs.push(build::typed_value("m", DataType::Int64, &[])),
    }
    build::bytes(&build::model(16, vec![lp], inputs, vec![value("w", &[2])], inits))
}

#[test]
fn a_loop_of_known_trip_count_unrolls_and_one_known_at_run_time_is_refused() {
    let text = ops_of(&loop_model(Some(3)), &ImportConfig::new());
    assert!(!text.contains("Loop") && text.matches("= Add(").count() == 3, "{text}");
    let bytes = loop_model(None);
    assert_eq!(onnx::value_inputs(&onnx::decode(&bytes).expect("decodes")), ["m"], "the trip count is an input to fix");
    let err = onnx::load_bytes(&bytes, &ImportConfig::new()).expect_err("refused").to_string();
    assert!(
        err.contains("node 'doubling' (Loop)") && err.contains("trip count 'm' is known only at run time"),
        "{err}"
    );
    let m = Tensor::from_vec(&[], vec![5i64]).expect("scalar");
    let text = ops_of(&bytes, &ImportConfig::new().input_value("m", m));
    assert_eq!(text.matches("= Add(").count(), 5, "{text}");
    let err = onnx::load_bytes(&loop_model(Some(5000)), &ImportConfig::new()).expect_err("refused").to_string();
    assert!(err.contains("5000 iterations") && err.contains("0 to 4096"), "{err}");
}

/// Loops nested in loops unroll within one budget for the whole model: 4,096 × 4,096 iterations are refused
/// before they are written.
#[test]
fn nested_unrolling_is_bounded_for_the_whole_model() {
    let body = |inner: Vec<NodeProto>| GraphProto {
        name: Some("body".into()),
        node: inner,
        input: vec![
            build::typed_value("i", DataType::Int64, &[]),
            build::typed_value("c_in", DataType::Bool, &[]),
            value("v_in", &[2]),
        ],
        output: vec![build::typed_value("c_in", DataType::Bool, &[]), value("v_out", &[2])],
        ..Default::default()
    };
    let add = node("Add", &["v_in", "v_in"], &["v_out"], vec![]);
    let inner = NodeProto {
        name: Some("inner".into()),
        ..node("Loop", &["m", "", "v_in"], &["v_out"], vec![graph_attr("body", body(vec![add]))])
    };
    let outer = NodeProto {
        name: Some("outer".into()),
        ..node("Loop", &["m", "", "v"], &["w"], vec![graph_attr("body", body(vec![inner]))])
    };
    let m = TensorProto {
        name: Some("m".into()),
        data_type: Some(DataType::Int64 as i32),
        int64_data: vec![4096],
        ..Default::default()
    };
    let bytes = build::bytes(&build::model(16, vec![outer], vec![value("v", &[2])], vec![value("w", &[2])], vec![m]));
    let err = onnx::load_bytes(&bytes, &ImportConfig::new()).expect_err("refused").to_string();
    assert!(err.contains("(Loop)") && err.contains("more than stowage writes"), "{err}");
}

/// A run-time condition of shape [1] selects without changing the branches' shape.
#[test]
fn a_one_element_condition_keeps_the_branch_shape() {
    let then = branch(vec![node("Relu", &["x"], &["t"], vec![])], &["t"]);
    let otherwise = branch(vec![node("Neg", &["x"], &["e"], vec![])], &["e"]);
    let iff = NodeProto {
        name: Some("guard".into()),
        ..node("If", &["cond"], &["y"], vec![graph_attr("then_branch", then), graph_attr("else_branch", otherwise)])
    };
    let inputs = vec![value("x", &[2, 3]), build::typed_value("cond", DataType::Bool, &[1])];
    let bytes = build::bytes(&build::model(16, vec![iff], inputs, vec![value("y", &[2, 3])], vec![]));
    let text = ops_of(&bytes, &ImportConfig::new());
    assert!(text.contains("f32[2,3] = Where("), "{text}");
}
