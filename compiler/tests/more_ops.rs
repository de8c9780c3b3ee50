//! The ops added to the node suite's coverage (issue 17): what their import computes where the node suite cannot
//! tell (a constant `depth`), and one clear line naming node and attribute or input for each kind of bad use.

mod common;

use common::errors::{check, error_of};

use common::build::{self, float, int, node, string, typed_value, value};
use stowage_compiler::onnx::proto::{tensor_proto::DataType, TensorProto};
use stowage_compiler::onnx::{self, ImportConfig};

use build::int64s;

/// OneHot of indices [2, 3] with a constant depth of 5 on axis 1: the output is [2, 5, 3] of the values' type.
fn one_hot(depth: Option<TensorProto>) -> onnx::proto::ModelProto {
    let mut inits = vec![build::floats("values", &[2], &[0.0, 1.0])];
    let mut inputs = vec![typed_value("i", DataType::Int64, &[2, 3])];
    match depth {
        Some(d) => inits.push(d),
        None => inputs.push(typed_value("depth", DataType::Int64, &[])),
    }
    build::model(
        13,
        vec![node("OneHot", &["i", "depth", "values"], &["y"], vec![int("axis", 1)])],
        inputs,
        vec![value("y", &[2, 5, 3])],
        inits,
    )
}

#[test]
fn one_hot_with_a_constant_depth_inserts_the_axis() {
    let g = onnx::load_bytes(&build::bytes(&one_hot(Some(int64s("depth", &[], &[5])))), &ImportConfig::new())
        .expect("imports");
    let out = &g.outputs()[0];
    assert_eq!(g.ty(out.value).shape, vec![2, 5, 3]);
}

#[test]
fn one_hot_with_a_run_time_depth_names_the_node_and_why() {
    let err = error_of(&one_hot(None));
    check(&err, &["node 'OneHot_y'", "depth must be a constant", "sets the output's shape"]);
}

fn unary_model(
    op: &str,
    dt: DataType,
    dims: &[i64],
    attrs: Vec<onnx::proto::AttributeProto>,
) -> onnx::proto::ModelProto {
    build::model(18, vec![node(op, &["x"], &["y"], attrs)], vec![typed_value("x", dt, dims)], vec![], vec![])
}

fn binary_model(op: &str, dt: DataType, attrs: Vec<onnx::proto::AttributeProto>) -> onnx::proto::ModelProto {
    build::model(
        18,
        vec![node(op, &["a", "b"], &["y"], attrs)],
        vec![typed_value("a", dt, &[4]), typed_value("b", dt, &[4])],
        vec![],
        vec![],
    )
}

#[test]
fn bad_attributes_of_the_integer_ops_are_named() {
    let err = error_of(&binary_model("BitShift", DataType::Uint8, vec![string("direction", "UP")]));
    check(&err, &["node 'BitShift_y'", "attribute 'direction'", "'LEFT' or 'RIGHT'", "'UP'"]);
    let err = error_of(&binary_model("BitShift", DataType::Uint8, vec![]));
    check(&err, &["attribute 'direction'", "is required"]);
    let err = error_of(&binary_model("Mod", DataType::Int32, vec![int("fmod", 2)]));
    check(&err, &["node 'Mod_y'", "attribute 'fmod'", "0 or 1"]);
}

#[test]
fn bitwise_ops_on_floats_name_the_input_and_the_types_they_take() {
    let err = error_of(&binary_model("BitwiseAnd", DataType::Float, vec![]));
    check(&err, &["node 'BitwiseAnd_y'", "input 0", "f32", "an integer type"]);
    let err = error_of(&unary_model("BitwiseNot", DataType::Float, &[4], vec![]));
    check(&err, &["node 'BitwiseNot_y'", "an integer type"]);
    let err = error_of(&unary_model("Round", DataType::Int32, &[4], vec![]));
    check(&err, &["node 'Round_y'", "a float type"]);
}

#[test]
fn shapes_the_mask_and_norm_ops_cannot_take_are_named() {
    let err = error_of(&unary_model("Trilu", DataType::Float, &[4], vec![]));
    check(&err, &["node 'Trilu_y'", "at least two axes"]);
    let err = error_of(&unary_model("EyeLike", DataType::Float, &[2, 2, 2], vec![]));
    check(&err, &["node 'EyeLike_y'", "must be a matrix"]);
    let err = error_of(&unary_model("Hardmax", DataType::Float, &[2, 3], vec![int("axis", 5)]));
    check(&err, &["node 'Hardmax_y'", "attribute 'axis'"]);
    let err = error_of(&unary_model("RMSNormalization", DataType::Float, &[2, 3], vec![float("epsilon", 1e-5)]));
    check(&err, &["node 'RMSNormalization_y'", "input 1 is required"]);

    let group = build::model(
        21,
        vec![node("GroupNormalization", &["x", "s", "b"], &["y"], vec![int("num_groups", 3)])],
        vec![value("x", &[1, 4, 2, 2])],
        vec![],
        vec![build::floats("s", &[4], &[1.0; 4]), build::floats("b", &[4], &[0.0; 4])],
    );
    let err = error_of(&group);
    check(&err, &["node 'GroupNormalization_y'", "attribute 'num_groups'", "divide X's 4 channels"]);
}

#[test]
fn a_cumulative_axis_of_several_values_or_out_of_range_is_named() {
    let cum = |axis: TensorProto| {
        build::model(
            14,
            vec![node("CumSum", &["x", "axis"], &["y"], vec![])],
            vec![value("x", &[2, 3])],
            vec![],
            vec![axis],
        )
    };
    let err = error_of(&cum(int64s("axis", &[2], &[0, 1])));
    check(&err, &["node 'CumSum_y'", "axis must have one element"]);
    let err = error_of(&cum(int64s("axis", &[], &[2])));
    check(&err, &["node 'CumSum_y'", "axis 2"]);
}

#[test]
fn scatter_and_gather_nd_name_bad_attributes_and_shapes() {
    let scatter = |op: &str, attrs, upd: &[i64]| {
        build::model(
            18,
            vec![node(op, &["x", "i", "u"], &["y"], attrs)],
            vec![value("x", &[4, 3]), value("u", upd)],
            vec![],
            vec![int64s("i", &[2, 1], &[0, 2])],
        )
    };
    let err = error_of(&scatter("ScatterND", vec![string("reduction", "avg")], &[2, 3]));
    check(&err, &["node 'ScatterND_y'", "attribute 'reduction'", "'avg'"]);
    let err = error_of(&scatter("ScatterND", vec![], &[2, 4]));
    check(&err, &["node 'ScatterND_y'", "they must be [2, 3]"]);
    let err = error_of(&scatter("ScatterElements", vec![], &[2, 3]));
    check(&err, &["node 'ScatterElements_y'", "must have one shape"]);
    // Indices longer than data along an axis they do not scatter on.
    let long = build::model(
        18,
        vec![node("ScatterElements", &["x", "i", "u"], &["y"], vec![int("axis", 1)])],
        vec![value("x", &[2, 2]), value("u", &[3, 1])],
        vec![],
        vec![int64s("i", &[3, 1], &[0, 0, 0])],
    );
    check(&error_of(&long), &["node 'ScatterElements_y'", "longer than data [2, 2] along axis 0"]);
    let gather = build::model(
        13,
        vec![node("GatherND", &["x", "i"], &["y"], vec![int("batch_dims", 1)])],
        vec![value("x", &[4, 3])],
        vec![],
        vec![int64s("i", &[2, 1], &[0, 2])],
    );
    let err = error_of(&gather);
    check(&err, &["node 'GatherND_y'", "batch_dims 1"]);
}

#[test]
fn attention_and_lp_pool_name_what_they_cannot_take() {
    let attention = |attrs, dims: &[i64]| {
        build::model(
            23,
            vec![node("Attention", &["q", "k", "v"], &["y"], attrs)],
            vec![value("q", dims), value("k", dims), value("v", dims)],
            vec![],
            vec![],
        )
    };
    let err = error_of(&attention(vec![], &[1, 4, 8]));
    check(&err, &["node 'Attention_y'", "attribute 'q_num_heads'", "3-D inputs"]);
    let err = error_of(&attention(vec![int("q_num_heads", 3), int("kv_num_heads", 3)], &[1, 4, 8]));
    check(&err, &["node 'Attention_y'", "3 heads do not divide its 8 features"]);
    let err = error_of(&attention(vec![int("qk_matmul_output_mode", 7)], &[1, 2, 4, 8]));
    check(&err, &["attribute 'qk_matmul_output_mode'", "0 to 3"]);

    let pool = |attrs| {
        build::model(18, vec![node("LpPool", &["x"], &["y"], attrs)], vec![value("x", &[1, 2, 5, 5])], vec![], vec![])
    };
    let err = error_of(&pool(vec![]));
    check(&err, &["node 'LpPool_y'", "attribute 'kernel_shape'", "is required"]);
    let err = error_of(&pool(vec![build::ints("kernel_shape", &[2, 2]), int("ceil_mode", 1)]));
    check(&err, &["attribute 'ceil_mode'", "not supported"]);
}

/// A bidirectional f32 LSTM over 7 steps: one node where the import keeps it whole (the CPU's targets), its
/// products and gates per step otherwise; the same output types either way.
#[test]
fn lstm_is_one_node_where_kept_whole() {
    let m = build::model(
        17,
        vec![node(
            "LSTM",
            &["x", "w", "r", "b"],
            &["y", "y_h", "y_c"],
            vec![string("direction", "bidirectional"), int("hidden_size", 2)],
        )],
        vec![value("x", &[7, 3, 4])],
        vec![value("y", &[]), value("y_h", &[]), value("y_c", &[])],
        vec![
            build::floats("w", &[2, 8, 4], &[0.1; 64]),
            build::floats("r", &[2, 8, 2], &[0.2; 32]),
            build::floats("b", &[2, 16], &[0.3; 32]),
        ],
    );
    let bytes = build::bytes(&m);
    let whole = onnx::load_bytes(&bytes, &ImportConfig::new().keep_whole("LSTM")).expect("imports whole");
    let unrolled = onnx::load_bytes(&bytes, &ImportConfig::new()).expect("imports unrolled");
    let ops = |g: &stowage_compiler::ir::Graph| g.order().iter().map(|&n| g.node(n).op.name()).collect::<Vec<_>>();
    assert_eq!(ops(&whole), ["LSTM"]);
    assert!(ops(&unrolled).len() > 7 * 2 * 5 && !ops(&unrolled).contains(&"LSTM"), "{:?}", ops(&unrolled));
    let types =
        |g: &stowage_compiler::ir::Graph| g.outputs().iter().map(|o| g.ty(o.value).to_string()).collect::<Vec<_>>();
    assert_eq!(types(&whole), types(&unrolled));
    assert_eq!(types(&whole), ["f32[7,2,3,2]", "f32[2,3,2]", "f32[2,3,2]"]);
}
