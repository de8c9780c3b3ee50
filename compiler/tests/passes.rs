//! Each import pass on a small graph: IR text before and after as snapshots, and the numbers that matter checked.

mod common;

use common::build::{self, float, int, ints, node, value};
use stowage_compiler::onnx::proto::tensor_proto::DataType;
use stowage_compiler::onnx::{self, proto::ModelProto, ImportConfig};
use stowage_compiler::{ir::Op, Context};

fn context(m: &ModelProto) -> Context {
    let g = onnx::load_bytes(&build::bytes(m), &ImportConfig::new()).unwrap_or_else(|e| panic!("{e}"));
    let mut cx = Context::new(g);
    cx.set_verify(true);
    cx
}

/// Runs `pass` and returns the IR before and after, for one snapshot.
fn before_after(
    m: &ModelProto,
    pass: impl FnOnce(&mut Context) -> Result<(), stowage_compiler::Error>,
) -> (Context, String) {
    let mut cx = context(m);
    let before = cx.print();
    pass(&mut cx).unwrap_or_else(|e| panic!("{e}"));
    let text = format!("{before}---\n{}", cx.print());
    (cx, text)
}

fn consts_of(cx: &Context, input: usize) -> Vec<f32> {
    let g = &cx.graph;
    let n = g.order()[0];
    let v = g.node(n).inputs[input].expect("input");
    g.const_value(v).expect("a constant").to_vec::<f32>().expect("f32")
}

#[test]
fn batchnorm_folds_into_conv() {
    let m = build::model(
        13,
        vec![
            node("Conv", &["x", "w", "b"], &["c"], vec![]),
            node("BatchNormalization", &["c", "scale", "beta", "mean", "var"], &["y"], vec![float("epsilon", 1.0)]),
        ],
        vec![value("x", &[1, 1, 2, 2])],
        vec![value("y", &[1, 2, 2, 2])],
        vec![
            build::floats("w", &[2, 1, 1, 1], &[1.0, 2.0]),
            build::floats("b", &[2], &[0.5, -1.0]),
            build::floats("scale", &[2], &[4.0, 3.0]),
            build::floats("beta", &[2], &[1.0, 1.0]),
            build::floats("mean", &[2], &[0.5, 1.0]),
            build::floats("var", &[2], &[3.0, 8.0]),
        ],
    );
    let (cx, text) = before_after(&m, |cx| cx.fold_batchnorm());
    insta::assert_snapshot!(text);
    assert_eq!(cx.graph.order().len(), 1);
    // s = scale / sqrt(var + eps) = [2, 1]; W' = W * s; B' = (B - mean) * s + beta.
    assert_eq!(consts_of(&cx, 1), [2.0, 2.0]);
    assert_eq!(consts_of(&cx, 2), [1.0, -1.0]);
}

#[test]
fn batchnorm_stays_when_the_conv_has_another_user() {
    let m = build::model(
        13,
        vec![
            node("Conv", &["x", "w"], &["c"], vec![]),
            node("BatchNormalization", &["c", "s", "s", "s", "s"], &["y"], vec![]),
            node("Relu", &["c"], &["z"], vec![]),
        ],
        vec![value("x", &[1, 1, 2, 2])],
        vec![value("y", &[1, 1, 2, 2]), value("z", &[1, 1, 2, 2])],
        vec![build::floats("w", &[1, 1, 1, 1], &[1.0]), build::floats("s", &[1], &[1.0])],
    );
    let (cx, text) = before_after(&m, |cx| cx.fold_batchnorm());
    insta::assert_snapshot!(text);
    // Not folded into the Conv (its output has another user): a per-channel scale and shift instead.
    let g = &cx.graph;
    let ops: Vec<&str> = g.order().iter().map(|&n| g.node(n).op.name()).collect();
    assert_eq!(ops, ["Conv", "Mul", "Add", "Relu"]);
}

#[test]
fn matmul_and_add_become_gemm() {
    let m = build::model(
        13,
        vec![node("MatMul", &["x", "w"], &["p"], vec![]), node("Add", &["b", "p"], &["y"], vec![])],
        vec![value("x", &[2, 3])],
        vec![value("y", &[2, 4])],
        vec![build::floats("w", &[3, 4], &[0.5; 12]), build::floats("b", &[4], &[1.0; 4])],
    );
    let (cx, text) = before_after(&m, |cx| cx.canonicalize_gemm());
    insta::assert_snapshot!(text);
    let g = &cx.graph;
    assert_eq!(g.order().len(), 1);
    assert!(matches!(g.node(g.order()[0]).op, Op::Gemm(_)));
    assert_eq!(g.outputs()[0].name, "y");
}

#[test]
fn gemm_without_c_takes_the_following_add() {
    let m = build::model(
        13,
        vec![
            node("Gemm", &["x", "w"], &["p"], vec![int("transB", 1), float("alpha", 2.0)]),
            node("Add", &["p", "b"], &["y"], vec![]),
        ],
        vec![value("x", &[2, 3])],
        vec![value("y", &[2, 4])],
        vec![build::floats("w", &[4, 3], &[0.5; 12]), build::floats("b", &[1, 4], &[1.0; 4])],
    );
    let (cx, text) = before_after(&m, |cx| cx.canonicalize_gemm());
    insta::assert_snapshot!(text);
    assert_eq!(cx.graph.order().len(), 1);
}

#[test]
fn a_product_with_two_users_is_not_fused() {
    let m = build::model(
        13,
        vec![
            node("MatMul", &["x", "w"], &["p"], vec![]),
            node("Add", &["p", "b"], &["y"], vec![]),
            node("Relu", &["p"], &["z"], vec![]),
        ],
        vec![value("x", &[2, 3])],
        vec![value("y", &[2, 4]), value("z", &[2, 4])],
        vec![build::floats("w", &[3, 4], &[0.5; 12]), build::floats("b", &[4], &[1.0; 4])],
    );
    let (cx, _) = before_after(&m, |cx| cx.canonicalize_gemm());
    assert_eq!(cx.graph.order().len(), 3);
}

#[test]
fn identity_and_dropout_are_removed() {
    let m = build::model(
        13,
        vec![
            node("Identity", &["x"], &["a"], vec![]),
            node("Dropout", &["a"], &["b", "mask"], vec![]),
            node("Relu", &["b"], &["y"], vec![]),
            node("Identity", &["x"], &["same"], vec![]),
        ],
        vec![value("x", &[2])],
        vec![value("y", &[2]), value("mask", &[2]), value("same", &[2])],
        vec![],
    );
    let (cx, text) = before_after(&m, |cx| cx.remove_identities());
    insta::assert_snapshot!(text);
    let g = &cx.graph;
    assert_eq!(g.order().len(), 1);
    let mask = g.const_value(g.outputs()[1].value).expect("the mask is a constant");
    assert_eq!(mask.to_vec::<bool>().expect("bool"), [true, true]);
    assert_eq!(g.outputs()[2].value, g.inputs()[0], "an output that was Identity(x) reads x");
}

#[test]
fn dead_nodes_are_removed() {
    let m = build::model(
        13,
        vec![
            node("Relu", &["x"], &["dead1"], vec![]),
            node("Neg", &["dead1"], &["dead2"], vec![]),
            node("Abs", &["x"], &["y"], vec![]),
        ],
        vec![value("x", &[2])],
        vec![value("y", &[2])],
        vec![],
    );
    let (cx, text) = before_after(&m, |cx| cx.eliminate_dead_code());
    insta::assert_snapshot!(text);
    assert_eq!(cx.graph.order().len(), 1);
}

#[test]
fn large_constants_fold_in_the_pass_small_ones_at_import() {
    let shape = |name: &str, dims: &[i64]| stowage_compiler::onnx::proto::TensorProto {
        name: Some(name.into()),
        dims: vec![dims.len() as i64],
        data_type: Some(7),
        int64_data: dims.to_vec(),
        ..Default::default()
    };
    let m = build::model(
        13,
        vec![
            node("ConstantOfShape", &["big_shape"], &["big"], vec![]),
            node("ConstantOfShape", &["small_shape"], &["small"], vec![]),
            node("Add", &["big", "x"], &["y"], vec![]),
            node("Add", &["small", "x"], &["z"], vec![]),
        ],
        vec![value("x", &[64, 128])],
        vec![value("y", &[64, 128]), value("z", &[64, 128])],
        vec![shape("big_shape", &[64, 128]), shape("small_shape", &[1, 128])],
    );
    let (cx, text) = before_after(&m, |cx| cx.fold_constants());
    insta::assert_snapshot!(text);
    assert_eq!(cx.graph.order().len(), 2);
}

#[test]
fn shape_arithmetic_folds_at_import() {
    // Reshape(x, Concat(Gather(Shape(x), 0), [-1])): the shape input becomes a constant during import.
    let m = build::model(
        13,
        vec![
            node("Shape", &["x"], &["s"], vec![]),
            node("Gather", &["s", "zero"], &["n"], vec![int("axis", 0)]),
            node("Unsqueeze", &["n", "zero1"], &["n1"], vec![]),
            node("Concat", &["n1", "minus1"], &["target"], vec![int("axis", 0)]),
            node("Reshape", &["x", "target"], &["y"], vec![]),
        ],
        vec![value("x", &[2, 3, 4])],
        vec![value("y", &[2, 12])],
        vec![
            stowage_compiler::onnx::proto::TensorProto {
                name: Some("zero".into()),
                data_type: Some(7),
                int64_data: vec![0],
                ..Default::default()
            },
            stowage_compiler::onnx::proto::TensorProto {
                name: Some("zero1".into()),
                dims: vec![1],
                data_type: Some(7),
                int64_data: vec![0],
                ..Default::default()
            },
            stowage_compiler::onnx::proto::TensorProto {
                name: Some("minus1".into()),
                dims: vec![1],
                data_type: Some(7),
                int64_data: vec![-1],
                ..Default::default()
            },
        ],
    );
    let cx = context(&m);
    insta::assert_snapshot!(cx.print());
    assert_eq!(cx.graph.order().len(), 1);
}

/// Old opsets' attributes that became inputs are imported as constant inputs: one IR form.
#[test]
fn old_opset_attributes_become_constant_inputs() {
    let cases: Vec<(&str, ModelProto)> = vec![
        (
            "Slice opset 9",
            build::model(
                9,
                vec![node("Slice", &["x"], &["y"], vec![ints("starts", &[1]), ints("ends", &[3]), ints("axes", &[1])])],
                vec![value("x", &[2, 4])],
                vec![value("y", &[2, 2])],
                vec![],
            ),
        ),
        (
            "Squeeze opset 11",
            build::model(
                11,
                vec![node("Squeeze", &["x"], &["y"], vec![ints("axes", &[0])])],
                vec![value("x", &[1, 4])],
                vec![value("y", &[4])],
                vec![],
            ),
        ),
        (
            "Unsqueeze opset 11",
            build::model(
                11,
                vec![node("Unsqueeze", &["x"], &["y"], vec![ints("axes", &[0, -1])])],
                vec![value("x", &[4])],
                vec![value("y", &[1, 4, 1])],
                vec![],
            ),
        ),
        (
            "Clip opset 9",
            build::model(
                9,
                vec![node("Clip", &["x"], &["y"], vec![float("min", -1.0), float("max", 1.0)])],
                vec![value("x", &[4])],
                vec![value("y", &[4])],
                vec![],
            ),
        ),
        (
            "Pad opset 9",
            build::model(
                9,
                vec![node("Pad", &["x"], &["y"], vec![ints("pads", &[0, 1, 0, 2]), float("value", 7.0)])],
                vec![value("x", &[2, 4])],
                vec![value("y", &[2, 7])],
                vec![],
            ),
        ),
        (
            "Split opset 11",
            build::model(
                11,
                vec![node("Split", &["x"], &["a", "b"], vec![int("axis", 1), ints("split", &[1, 3])])],
                vec![value("x", &[2, 4])],
                vec![value("a", &[2, 1]), value("b", &[2, 3])],
                vec![],
            ),
        ),
        (
            "ReduceMean opset 13",
            build::model(
                13,
                vec![node("ReduceMean", &["x"], &["y"], vec![ints("axes", &[1]), int("keepdims", 0)])],
                vec![value("x", &[2, 4])],
                vec![value("y", &[2])],
                vec![],
            ),
        ),
        (
            "Softmax opset 11",
            build::model(
                11,
                vec![node("Softmax", &["x"], &["y"], vec![])],
                vec![value("x", &[2, 3, 4])],
                vec![value("y", &[2, 3, 4])],
                vec![],
            ),
        ),
        (
            "Dropout opset 10",
            build::model(
                10,
                vec![node("Dropout", &["x"], &["y"], vec![float("ratio", 0.25)])],
                vec![value("x", &[4])],
                vec![value("y", &[4])],
                vec![],
            ),
        ),
    ];
    let mut text = String::new();
    for (what, m) in cases {
        let cx = context(&m);
        let declared = &m.graph.as_ref().expect("graph").output;
        for (out, decl) in cx.graph.outputs().iter().zip(declared) {
            let want: Vec<usize> = match &decl.r#type.as_ref().and_then(|t| t.value.as_ref()) {
                Some(onnx::proto::type_proto::Value::TensorType(t)) => t
                    .shape
                    .as_ref()
                    .expect("shape")
                    .dim
                    .iter()
                    .map(|d| match d.value {
                        Some(onnx::proto::tensor_shape_proto::dimension::Value::DimValue(v)) => v as usize,
                        _ => unreachable!(),
                    })
                    .collect(),
                _ => unreachable!(),
            };
            assert_eq!(cx.graph.ty(out.value).shape, want, "{what}: output {}", out.name);
        }
        text.push_str(&format!("# {what}\n{}", cx.print()));
    }
    insta::assert_snapshot!(text);
}

/// The nodes' op names, in order.
fn ops(cx: &Context) -> Vec<&'static str> {
    cx.graph.order().iter().map(|&n| cx.graph.node(n).op.name()).collect()
}

#[test]
fn hard_swish_spelled_out_becomes_one_node() {
    // Paddle2ONNX's form, x · Clip(x + 3, 0, 6) / 6, behind a Relu that also reads x; and the 1/6 form.
    let m = build::model(
        13,
        vec![
            node("Relu", &["x"], &["r"], vec![]),
            node("Add", &["three", "r"], &["a"], vec![]),
            node("Clip", &["a", "zero", "six"], &["c"], vec![]),
            node("Mul", &["c", "r"], &["m"], vec![]),
            node("Div", &["m", "six"], &["y"], vec![]),
            node("Add", &["y", "three"], &["a2"], vec![]),
            node("Clip", &["a2", "zero", "six"], &["c2"], vec![]),
            node("Mul", &["y", "c2"], &["m2"], vec![]),
            node("Mul", &["sixth", "m2"], &["z"], vec![]),
        ],
        vec![value("x", &[2, 3])],
        vec![value("z", &[2, 3]), value("r", &[2, 3])],
        vec![
            build::floats("three", &[], &[3.0]),
            build::floats("zero", &[], &[0.0]),
            build::floats("six", &[], &[6.0]),
            build::floats("sixth", &[1], &[1.0 / 6.0]),
        ],
    );
    let (cx, text) = before_after(&m, |cx| cx.recognize_activations());
    insta::assert_snapshot!(text);
    assert_eq!(ops(&cx), ["Relu", "HardSwish", "HardSwish"]);
    assert_eq!(cx.graph.outputs()[0].name, "z");
}

#[test]
fn hard_swish_needs_its_exact_form_and_private_parts() {
    let form = |add: f32, extra_reader: bool| {
        let mut nodes = vec![
            node("Add", &["x", "k"], &["a"], vec![]),
            node("Clip", &["a", "zero", "six"], &["c"], vec![]),
            node("Mul", &["x", "c"], &["m"], vec![]),
            node("Div", &["m", "six"], &["y"], vec![]),
        ];
        let mut outputs = vec![value("y", &[4])];
        if extra_reader {
            nodes.push(node("Neg", &["c"], &["n"], vec![]));
            outputs.push(value("n", &[4]));
        }
        build::model(
            13,
            nodes,
            vec![value("x", &[4])],
            outputs,
            vec![
                build::floats("k", &[], &[add]),
                build::floats("zero", &[], &[0.0]),
                build::floats("six", &[], &[6.0]),
            ],
        )
    };
    let (cx, _) = before_after(&form(3.0, false), |cx| cx.recognize_activations());
    assert_eq!(ops(&cx), ["HardSwish"]);
    // x + 2 is not HardSwish's; a Clip another node reads must stay.
    let (cx, _) = before_after(&form(2.0, false), |cx| cx.recognize_activations());
    assert_eq!(ops(&cx), ["Add", "Clip", "Mul", "Div"]);
    let (cx, _) = before_after(&form(3.0, true), |cx| cx.recognize_activations());
    assert_eq!(ops(&cx), ["Add", "Clip", "Mul", "Div", "Neg"]);
}

#[test]
fn x_times_its_hard_sigmoid_is_hard_swish() {
    let m = build::model(
        13,
        vec![
            node("HardSigmoid", &["x"], &["h"], vec![float("alpha", 1.0 / 6.0), float("beta", 0.5)]),
            node("Mul", &["x", "h"], &["y"], vec![]),
            node("HardSigmoid", &["y"], &["h2"], vec![float("alpha", 0.2), float("beta", 0.5)]),
            node("Mul", &["h2", "y"], &["z"], vec![]),
        ],
        vec![value("x", &[3])],
        vec![value("z", &[3])],
        vec![],
    );
    let (cx, _) = before_after(&m, |cx| cx.recognize_activations());
    // The second HardSigmoid's α is ONNX's default 0.2, not 1/6: it stays.
    assert_eq!(ops(&cx), ["HardSwish", "HardSigmoid", "Mul"]);
}

#[test]
fn a_scale_and_shift_per_channel_fold_into_the_conv() {
    // Paddle2ONNX's batch norm: Mul by [M, 1, 1] then Add of [1, M, 1, 1]; then a scalar scale on a second Conv
    // whose output another node also reads, which stays.
    let m = build::model(
        13,
        vec![
            node("Conv", &["x", "w", "b"], &["c"], vec![]),
            node("Mul", &["s", "c"], &["p"], vec![]),
            node("Add", &["p", "t"], &["y"], vec![]),
            node("Conv", &["x", "w"], &["c2"], vec![]),
            node("Mul", &["c2", "half"], &["z"], vec![]),
            node("Relu", &["c2"], &["r"], vec![]),
        ],
        vec![value("x", &[1, 1, 2, 2])],
        vec![value("y", &[1, 2, 2, 2]), value("z", &[1, 2, 2, 2]), value("r", &[1, 2, 2, 2])],
        vec![
            build::floats("w", &[2, 1, 1, 1], &[1.0, 2.0]),
            build::floats("b", &[2], &[0.5, -1.0]),
            build::floats("s", &[2, 1, 1], &[4.0, 3.0]),
            build::floats("t", &[1, 2, 1, 1], &[1.0, 0.25]),
            build::floats("half", &[], &[0.5]),
        ],
    );
    let (cx, text) = before_after(&m, |cx| cx.fold_batchnorm());
    insta::assert_snapshot!(text);
    assert_eq!(ops(&cx), ["Conv", "Conv", "Mul", "Relu"]);
    // W' = W·s = [4, 6]; B' = B·s + t = [3, -2.75].
    assert_eq!(consts_of(&cx, 1), [4.0, 6.0]);
    assert_eq!(consts_of(&cx, 2), [3.0, -2.75]);
}

/// `Pow(x, 2)` of a float becomes `Mul(x, x)` in place (`passes::powers`); `Pow(x, 3)`, `Pow(x, 2)` whose exponent
/// widens the shape, and a power of integers stay.
#[test]
fn a_square_is_a_product() {
    let m = build::model(
        13,
        vec![
            node("Pow", &["x", "two"], &["sq"], vec![]),
            node("Pow", &["x", "three"], &["cube"], vec![]),
            node("Pow", &["x", "two_wide"], &["wide"], vec![]),
            node("Pow", &["i", "two_int"], &["isq"], vec![]),
        ],
        vec![value("x", &[2, 3]), build::typed_value("i", DataType::Int64, &[2])],
        vec![
            value("sq", &[2, 3]),
            value("cube", &[2, 3]),
            value("wide", &[1, 2, 3]),
            build::typed_value("isq", DataType::Int64, &[2]),
        ],
        vec![
            build::floats("two", &[], &[2.0]),
            build::floats("three", &[], &[3.0]),
            build::floats("two_wide", &[1, 1, 1], &[2.0]),
            build::int64s("two_int", &[1], &[2]),
        ],
    );
    let (cx, text) = before_after(&m, |cx| cx.square_powers());
    insta::assert_snapshot!(text);
    let ops: Vec<String> = cx.graph.order().iter().map(|&n| cx.graph.node(n).op.name().to_string()).collect();
    assert_eq!(ops, ["Mul", "Pow", "Pow", "Pow"]);
    let n = cx.graph.order()[0];
    let x = cx.graph.inputs()[0];
    assert_eq!(cx.graph.node(n).inputs, [Some(x), Some(x)]);
}

/// GELU's tanh form as jax2tf writes it (Magika), with `k` in place of 0.044715; `leak` makes the Tanh's output
/// a graph output too.
fn tanh_gelu(k: f32, leak: bool) -> ModelProto {
    let mut outputs = vec![value("y", &[2, 5]), value("r", &[2, 5])];
    if leak {
        outputs.push(value("t", &[2, 5]));
    }
    build::model(
        13,
        vec![
            node("Relu", &["x"], &["r"], vec![]),
            node("Mul", &["k", "x"], &["a"], vec![]),
            node("Mul", &["x", "a"], &["b"], vec![]),
            node("Mul", &["x", "b"], &["c"], vec![]),
            node("Add", &["x", "c"], &["d"], vec![]),
            node("Mul", &["s", "d"], &["e"], vec![]),
            node("Tanh", &["e"], &["t"], vec![]),
            node("Add", &["one", "t"], &["u"], vec![]),
            node("Mul", &["half", "u"], &["w"], vec![]),
            node("Mul", &["x", "w"], &["y"], vec![]),
        ],
        vec![value("x", &[2, 5])],
        outputs,
        vec![
            build::floats("k", &[], &[k]),
            build::floats("s", &[], &[0.797_884_6]),
            build::floats("one", &[], &[1.0]),
            build::floats("half", &[1], &[0.5]),
        ],
    )
}

#[test]
fn gelu_spelled_out_becomes_one_node() {
    let (cx, _) = before_after(&tanh_gelu(0.044715, false), |cx| cx.recognize_activations());
    assert_eq!(ops(&cx), ["Relu", "Gelu"]);
    assert!(cx.print().contains("approximate=tanh"), "{}", cx.print());
    assert_eq!(cx.graph.outputs()[0].name, "y");
    // PyTorch's exact GELU: x · (1 + erf(x / √2)) · 0.5.
    let m = build::model(
        13,
        vec![
            node("Div", &["x", "root2"], &["a"], vec![]),
            node("Erf", &["a"], &["b"], vec![]),
            node("Add", &["b", "one"], &["c"], vec![]),
            node("Mul", &["x", "c"], &["d"], vec![]),
            node("Mul", &["d", "half"], &["y"], vec![]),
        ],
        vec![value("x", &[3])],
        vec![value("y", &[3])],
        vec![
            build::floats("root2", &[], &[std::f32::consts::SQRT_2]),
            build::floats("one", &[], &[1.0]),
            build::floats("half", &[], &[0.5]),
        ],
    );
    let (cx, _) = before_after(&m, |cx| cx.recognize_activations());
    assert_eq!(ops(&cx), ["Gelu"]);
    assert!(!cx.print().contains("approximate=tanh"), "{}", cx.print());
}

#[test]
fn gelu_needs_its_constants_and_private_parts() {
    // 0.05 for 0.044715 computes something else; a Tanh another reader sees must stay.
    let (cx, _) = before_after(&tanh_gelu(0.05, false), |cx| cx.recognize_activations());
    assert_eq!(ops(&cx).len(), 10);
    let (cx, _) = before_after(&tanh_gelu(0.044715, true), |cx| cx.recognize_activations());
    assert_eq!(ops(&cx).len(), 10);
}

/// A layer normalisation spelled out as PyTorch writes it below opset 17, over `axes` of an `[2, 3, 8]` input, with
/// `Pow(d, 2)` (or `Mul(d, d)` where `product`), then `Mul(·, gamma)` and `Add(·, beta)` where given; `leak` makes
/// the centred value a graph output too.
fn spelled_layer_norm(
    axes: &[i64],
    product: bool,
    gamma: Option<(&[i64], Vec<f32>)>,
    beta: bool,
    leak: bool,
) -> ModelProto {
    let square =
        if product { node("Mul", &["d", "d"], &["q"], vec![]) } else { node("Pow", &["d", "two"], &["q"], vec![]) };
    let mut nodes = vec![
        node("ReduceMean", &["x"], &["m"], vec![ints("axes", axes)]),
        node("Sub", &["x", "m"], &["d"], vec![]),
        square,
        node("ReduceMean", &["q"], &["v"], vec![ints("axes", axes)]),
        // ε first, as paddle2onnx writes it.
        node("Add", &["eps", "v"], &["e"], vec![]),
        node("Sqrt", &["e"], &["s"], vec![]),
        node("Div", &["d", "s"], &["n"], vec![]),
    ];
    let mut inits = vec![build::floats("two", &[], &[2.0]), build::floats("eps", &[], &[1e-5])];
    let mut last = "n";
    if let Some((dims, data)) = &gamma {
        nodes.push(node("Mul", &[last, "gamma"], &["scaled"], vec![]));
        inits.push(build::floats("gamma", dims, data));
        last = "scaled";
    }
    if beta {
        nodes.push(node("Add", &["beta", last], &["shifted"], vec![]));
        inits.push(build::floats("beta", &[8], &[0.5; 8]));
        last = "shifted";
    }
    nodes.push(node("Relu", &[last], &["y"], vec![]));
    let mut outputs = vec![value("y", &[2, 3, 8])];
    if leak {
        outputs.push(value("d", &[2, 3, 8]));
    }
    build::model(13, nodes, vec![value("x", &[2, 3, 8])], outputs, inits)
}

#[test]
fn layer_norm_spelled_out_becomes_one_node() {
    let gamma: Vec<f32> = (0..8).map(|i| i as f32 / 4.0).collect();
    let m = spelled_layer_norm(&[-1], false, Some((&[8], gamma.clone())), true, false);
    let (cx, text) = before_after(&m, |cx| cx.recognize_layer_norms());
    insta::assert_snapshot!(text);
    assert_eq!(ops(&cx), ["LayerNormalization", "Relu"]);
    let n = cx.graph.order()[0];
    assert!(matches!(cx.graph.node(n).op, Op::LayerNorm { axis: 2, epsilon, .. } if epsilon == 1e-5));
    assert_eq!(consts_of(&cx, 1), gamma);
    assert_eq!(consts_of(&cx, 2), [0.5; 8]);
    // Over the last two axes, squared as a product, with a scale of shape [1, 1, 8] broadcast over the rows: the
    // scale is the row's [3, 8]; no Add after it, no bias.
    let m = spelled_layer_norm(&[2, -2], true, Some((&[1, 1, 8], gamma.clone())), false, false);
    let (cx, _) = before_after(&m, |cx| cx.recognize_layer_norms());
    assert_eq!(ops(&cx), ["LayerNormalization", "Relu"]);
    let n = cx.graph.order()[0];
    assert!(matches!(cx.graph.node(n).op, Op::LayerNorm { axis: 1, .. }));
    assert_eq!(consts_of(&cx, 1), gamma.repeat(3));
    assert_eq!(cx.graph.node(n).inputs.len(), 2);
    // No scale: ones.
    let (cx, _) = before_after(&spelled_layer_norm(&[-1], false, None, false, false), |cx| cx.recognize_layer_norms());
    assert_eq!(ops(&cx), ["LayerNormalization", "Relu"]);
    assert_eq!(consts_of(&cx, 1), [1.0; 8]);
}

#[test]
fn layer_norm_needs_its_form_and_private_parts() {
    let gamma: Vec<f32> = (0..8).map(|i| i as f32).collect();
    // The centred value is read outside the form: nothing changes.
    let (cx, _) = before_after(&spelled_layer_norm(&[-1], false, None, false, true), |cx| cx.recognize_layer_norms());
    assert_eq!(ops(&cx).len(), 8);
    // Reduced over every axis (an empty list of axes): a normalisation of the whole tensor, left alone.
    let (cx, _) = before_after(&spelled_layer_norm(&[], false, None, false, false), |cx| cx.recognize_layer_norms());
    assert_eq!(ops(&cx).len(), 8);
    // Reduced over a middle axis: not a layer normalisation.
    let (cx, _) = before_after(&spelled_layer_norm(&[1], false, None, false, false), |cx| cx.recognize_layer_norms());
    assert_eq!(ops(&cx).len(), 8);
    // A scale that varies along the rows ([3, 1] against a row of [8]) is not the node's: the form ends before
    // it, and the Add after it stays too.
    let along_rows: Vec<f32> = vec![1.0, 2.0, 3.0];
    let m = spelled_layer_norm(&[-1], false, Some((&[3, 1], along_rows)), true, false);
    let (cx, _) = before_after(&m, |cx| cx.recognize_layer_norms());
    assert_eq!(ops(&cx), ["LayerNormalization", "Mul", "Add", "Relu"]);
    // A square by another power (3) is not the variance.
    let mut m = spelled_layer_norm(&[-1], false, Some((&[8], gamma)), false, false);
    let graph = m.graph.as_mut().expect("a graph");
    graph.initializer[0] = build::floats("two", &[], &[3.0]);
    let (cx, _) = before_after(&m, |cx| cx.recognize_layer_norms());
    assert_eq!(ops(&cx).len(), 9);
}
