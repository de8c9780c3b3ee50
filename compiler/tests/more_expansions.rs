//! The quantization ops (`onnx/quant.rs`), `Einsum` (`onnx/einsum.rs`), `TopK`, the spectral ops
//! (`onnx/spectral.rs`), the image ops (`onnx/images.rs`), `RotaryEmbedding` and `ReverseSequence`: what their import
//! writes where the node suite cannot tell (the float type of an exact integer product, a contraction as one
//! `MatMul`), and one clear line naming node and attribute or input for each kind of bad use.

mod common;

use common::errors::{check, error_of, import};

use common::build::{self, int, node, string, typed_value, value};
use stowage_compiler::ir::print::print;
use stowage_compiler::onnx::proto::{tensor_proto::DataType, ModelProto, NodeProto, TensorProto};

fn typed(name: &str, dt: DataType, dims: &[i64], i32s: Vec<i32>) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(dt as i32),
        int32_data: i32s,
        ..Default::default()
    }
}

/// One node over graph inputs `inputs` (name, type, dims) and initializers.
fn one(n: NodeProto, inputs: &[(&str, DataType, &[i64])], inits: Vec<TensorProto>) -> ModelProto {
    let ins = inputs.iter().map(|(name, dt, dims)| typed_value(name, *dt, dims)).collect();
    build::model(21, vec![n], ins, vec![], inits)
}

/// `MatMulInteger` of uint8 [4, k] by [k, 3].
fn matmul_integer(k: i64) -> ModelProto {
    one(
        node("MatMulInteger", &["a", "b"], &["y"], vec![]),
        &[("a", DataType::Uint8, &[4, k]), ("b", DataType::Uint8, &[k, 3])],
        vec![],
    )
}

#[test]
fn integer_products_run_in_the_float_type_that_keeps_them_exact() {
    // 258 · 255² < 2^24: every partial sum is an exact f32. 259 terms may not be: f64.
    let small = print(&import(&matmul_integer(258)).expect("imports"));
    assert!(small.contains("MatMul") && !small.contains("f64"), "{small}");
    let large = print(&import(&matmul_integer(259)).expect("imports"));
    assert!(large.contains("MatMul") && large.contains("f64["), "{large}");
}

#[test]
fn scales_and_zero_points_of_the_wrong_shape_name_the_input_and_the_axis() {
    let x = [("x", DataType::Float, &[2, 3][..])];
    let q = |scale: TensorProto, attrs| one(node("QuantizeLinear", &["x", "s"], &["y"], attrs), &x, vec![scale]);
    let err = error_of(&q(build::floats("s", &[2], &[1.0, 2.0]), vec![]));
    check(&err, &["node 'QuantizeLinear_y'", "y_scale is f32[2]", "along axis 1", "needs 3 elements"]);
    let err = error_of(&q(build::floats("s", &[2], &[1.0, 2.0]), vec![int("axis", 4)]));
    check(&err, &["attribute 'axis'", "is 4"]);
    let err = error_of(&q(build::floats("s", &[2, 1], &[1.0, 2.0]), vec![int("block_size", 2)]));
    check(&err, &["y_scale is f32[2,1]", "blocks of 2", "with 2 along that axis"]);
    let err = error_of(&q(build::floats("s", &[], &[1.0]), vec![int("block_size", -1)]));
    check(&err, &["attribute 'block_size'", "is -1"]);

    let zp = typed("z", DataType::Int8, &[], vec![0]);
    let both = one(
        node("QuantizeLinear", &["x", "s", "z"], &["y"], vec![int("output_dtype", DataType::Uint8 as i64)]),
        &x,
        vec![build::floats("s", &[], &[1.0]), zp],
    );
    check(&error_of(&both), &["attribute 'output_dtype'", "is u8", "y_zero_point is i8"]);
    let wide = one(
        node("QuantizeLinear", &["x", "s"], &["y"], vec![int("output_dtype", DataType::Int32 as i64)]),
        &x,
        vec![build::floats("s", &[], &[1.0])],
    );
    check(&error_of(&wide), &["the output is i32", "int8, uint8, int16, uint16, int4", "a float8 type"]);
}

#[test]
fn quantized_inputs_of_the_wrong_type_are_named() {
    let deq = one(
        node("DequantizeLinear", &["x", "s", "z"], &["y"], vec![]),
        &[("x", DataType::Uint8, &[4])],
        vec![build::floats("s", &[], &[0.5]), typed("z", DataType::Int8, &[], vec![1])],
    );
    check(&error_of(&deq), &["node 'DequantizeLinear_y'", "x_zero_point is i8", "x is u8"]);
    let float_a = one(
        node("MatMulInteger", &["a", "b"], &["y"], vec![]),
        &[("a", DataType::Float, &[2, 2]), ("b", DataType::Uint8, &[2, 2])],
        vec![],
    );
    check(&error_of(&float_a), &["node 'MatMulInteger_y'", "A is f32", "int8 or uint8"]);
    let bias = one(
        node("QLinearConv", &["x", "sx", "zx", "w", "sw", "zw", "sy", "zy", "b"], &["y"], vec![]),
        &[("x", DataType::Uint8, &[1, 1, 3, 3]), ("w", DataType::Uint8, &[2, 1, 1, 1])],
        vec![
            build::floats("sx", &[], &[0.5]),
            typed("zx", DataType::Uint8, &[], vec![0]),
            build::floats("sw", &[], &[0.5]),
            typed("zw", DataType::Uint8, &[], vec![0]),
            build::floats("sy", &[], &[0.5]),
            typed("zy", DataType::Uint8, &[], vec![0]),
            build::floats("b", &[2], &[0.0, 0.0]),
        ],
    );
    check(&error_of(&bias), &["node 'QLinearConv_y'", "B is f32[2]", "1-D int32"]);
}

/// `Einsum` of f32 inputs (name, dims), its output declared as `out`.
fn einsum(eq: &str, inputs: &[(&str, &[i64])], out: &[i64]) -> ModelProto {
    let names: Vec<&str> = inputs.iter().map(|(n, _)| *n).collect();
    let ins = inputs.iter().map(|(n, d)| value(n, d)).collect();
    let outs = vec![value("y", out)];
    build::model(12, vec![node("Einsum", &names, &["y"], vec![string("equation", eq)])], ins, outs, vec![])
}

#[test]
fn an_einsum_contraction_is_one_matmul_with_the_sums_before_it() {
    // j is contracted, l is summed out of b before the product, b and i and k stay.
    let g =
        import(&einsum("bij, bjkl -> bki", &[("x", &[2, 3, 4]), ("w", &[2, 4, 5, 6])], &[2, 5, 3])).expect("imports");
    let text = print(&g);
    assert_eq!(text.matches("= MatMul(").count(), 1, "{text}");
    assert!(!text.contains("Reshape"), "no reshape is needed here: {text}");
    assert!(text.contains("ReduceSum"), "{text}");
    assert_eq!(g.ty(g.outputs()[0].value).shape, vec![2, 5, 3]);
    // Implicit output: the letters that occur once, in order; the broadcast axes first.
    let g = import(&einsum("...ij,jk", &[("x", &[7, 2, 3]), ("w", &[3, 4])], &[7, 2, 4])).expect("imports");
    assert_eq!(g.ty(g.outputs()[0].value).shape, vec![7, 2, 4]);
}

#[test]
fn equations_that_do_not_fit_their_inputs_are_named() {
    let err = error_of(&einsum("ij,jk->ik", &[("x", &[2, 3, 4]), ("w", &[3, 4])], &[2, 4]));
    check(&err, &["node 'Einsum_y'", "attribute 'equation'", "'ij,jk->ik'", "term 0", "2 letters for 3 axes"]);
    let err = error_of(&einsum("ij,jk->iz", &[("x", &[2, 3]), ("w", &[3, 4])], &[2, 4]));
    check(&err, &["the output's 'z' is in no input"]);
    let err = error_of(&einsum("ij,jk->ik", &[("x", &[2, 3]), ("w", &[5, 4])], &[2, 4]));
    check(&err, &["'j' has length 3 in one place and 5 in another"]);
    let err = error_of(&einsum("i1,1k->ik", &[("x", &[2, 3]), ("w", &[3, 4])], &[2, 4]));
    check(&err, &["'1' is not a letter"]);
    let err = error_of(&einsum("ij->ij", &[("x", &[2, 3]), ("w", &[3, 4])], &[2, 4]));
    check(&err, &["1 terms for 2 inputs"]);
}

#[test]
fn top_k_needs_a_constant_k_that_fits_its_axis() {
    let k = |v: i64| build::int64s("k", &[1], &[v]);
    let topk = |inits: Vec<TensorProto>, inputs: &[(&str, DataType, &[i64])]| {
        let mut m = one(node("TopK", &["x", "k"], &["v", "i"], vec![int("axis", 1)]), inputs, inits);
        let g = m.graph.as_mut().expect("a graph");
        g.output = vec![value("v", &[2, 3]), typed_value("i", DataType::Int64, &[2, 3])];
        m
    };
    let x = ("x", DataType::Float, &[2, 5][..]);
    let g = import(&topk(vec![k(3)], &[x])).expect("imports");
    assert_eq!(g.ty(g.outputs()[1].value).shape, vec![2, 3]);
    check(&error_of(&topk(vec![k(6)], &[x])), &["node 'TopK_v'", "K is 6", "[0, 5]"]);
    let err = error_of(&topk(vec![], &[x, ("k", DataType::Int64, &[1])]));
    check(&err, &["node 'TopK_v'", "input 1 sets the output shape", "--input-value"]);
}

#[test]
fn transforms_name_the_input_or_length_that_does_not_fit() {
    let dft = |dims: &[i64], inputs: &[&str], extra: &[(&str, DataType, &[i64])], inits| {
        let mut ins = vec![("x", DataType::Float, dims)];
        ins.extend_from_slice(extra);
        let mut m = one(node("DFT", inputs, &["y"], vec![]), &ins, inits);
        m.opset_import[0].version = Some(20);
        m
    };
    let err = error_of(&dft(&[1, 8, 3], &["x"], &[], vec![]));
    check(&err, &["node 'DFT_y'", "input is f32[1,8,3]", "last axis is 1 (real) or 2 (complex)"]);
    let err = error_of(&dft(&[1, 8, 1], &["x", "", "axis"], &[("axis", DataType::Int64, &[])], vec![]));
    check(&err, &["node 'DFT_y'", "axis sets the output's shape", "--input-value"]);
    let err = error_of(&dft(&[1, 8, 1], &["x", "n"], &[], vec![build::int64s("n", &[], &[0])]));
    check(&err, &["dft_length is 0"]);

    let stft = one(
        node("STFT", &["s", "step", "", "len"], &["y"], vec![]),
        &[("s", DataType::Float, &[1, 16, 1])],
        vec![build::int64s("step", &[], &[4]), build::int64s("len", &[], &[32])],
    );
    check(&error_of(&stft), &["node 'STFT_y'", "frame_length 32", "at most the signal's 16"]);
}

#[test]
fn image_ops_name_the_shapes_that_disagree() {
    let col2im = one(
        node("Col2Im", &["x", "image", "block"], &["y"], vec![]),
        &[("x", DataType::Float, &[1, 4, 7])],
        vec![build::int64s("image", &[2], &[3, 3]), build::int64s("block", &[2], &[2, 2])],
    );
    check(&error_of(&col2im), &["node 'Col2Im_y'", "input has 7 columns", "make 4"]);
    let crop = one(
        node("CenterCropPad", &["x", "shape"], &["y"], vec![]),
        &[("x", DataType::Float, &[4, 4])],
        vec![build::int64s("shape", &[1], &[2])],
    );
    check(&error_of(&crop), &["node 'CenterCropPad_y'", "shape has 1 elements for 2 axes"]);
}

#[test]
fn rotary_embedding_and_reverse_sequence_name_what_they_cannot_take() {
    let rotary = one(
        node("RotaryEmbedding", &["x", "c", "s"], &["y"], vec![int("rotary_embedding_dim", 3)]),
        &[
            ("x", DataType::Float, &[1, 2, 3, 8]),
            ("c", DataType::Float, &[1, 3, 4]),
            ("s", DataType::Float, &[1, 3, 4]),
        ],
        vec![],
    );
    check(&error_of(&rotary), &["node 'RotaryEmbedding_y'", "attribute 'rotary_embedding_dim'", "is 3", "even"]);
    let reverse = one(
        node("ReverseSequence", &["x", "l"], &["y"], vec![]),
        &[("x", DataType::Float, &[5, 3]), ("l", DataType::Int64, &[2])],
        vec![],
    );
    check(
        &error_of(&reverse),
        &["node 'ReverseSequence_y'", "sequence_lens is i64[2]", "one length per batch element (3)"],
    );
}

#[test]
fn state_ops_name_the_state_or_cache_that_does_not_fit() {
    let conv = one(
        node("CausalConvWithState", &["x", "w", "", "p"], &["y", "s"], vec![string("activation", "gelu")]),
        &[("x", DataType::Float, &[1, 2, 5]), ("w", DataType::Float, &[2, 1, 3]), ("p", DataType::Float, &[1, 2, 2])],
        vec![],
    );
    check(&error_of(&conv), &["node 'CausalConvWithState_y'", "attribute 'activation'", "'gelu'"]);
    let conv = one(
        node("CausalConvWithState", &["x", "w", "", "p"], &["y", "s"], vec![]),
        &[("x", DataType::Float, &[1, 2, 5]), ("w", DataType::Float, &[2, 1, 3]), ("p", DataType::Float, &[1, 2, 3])],
        vec![],
    );
    check(&error_of(&conv), &["past_state is f32[1,2,3]", "f32[1,2,2]"]);
    let scatter = one(
        node("TensorScatter", &["c", "u"], &["y"], vec![]),
        &[("c", DataType::Float, &[2, 4, 5]), ("u", DataType::Float, &[2, 6, 5])],
        vec![],
    );
    check(&error_of(&scatter), &["node 'TensorScatter_y'", "update is f32[2,6,5]", "at most 4 along axis 1"]);
    let affine = one(
        node("AffineGrid", &["t", "size"], &["y"], vec![]),
        &[("t", DataType::Float, &[2, 2, 3])],
        vec![build::int64s("size", &[4], &[3, 1, 4, 4])],
    );
    check(&error_of(&affine), &["node 'AffineGrid_y'", "theta is f32[2,2,3]", "[3, 2, 3]"]);
}

#[test]
fn shapes_set_by_run_time_values_name_the_node_and_the_input_to_give() {
    let nz = one(node("NonZero", &["x"], &["y"], vec![]), &[("x", DataType::Float, &[2, 3])], vec![]);
    check(&error_of(&nz), &["node 'NonZero_y'", "values of X ('x')", "known only at run time", "--input-value"]);
    // Folded when the input is known: the positions of the nonzero elements, one row per axis.
    let known =
        one(node("NonZero", &["x"], &["y"], vec![]), &[], vec![build::floats("x", &[2, 2], &[0.0, 1.0, 2.0, 0.0])]);
    let g = import(&ModelProto {
        graph: known.graph.map(|mut g| {
            g.output = vec![typed_value("y", DataType::Int64, &[2, 2])];
            g
        }),
        ..known
    })
    .expect("imports");
    let y = g.const_value(g.outputs()[0].value).expect("a constant");
    assert_eq!(y.as_slice::<i64>().expect("i64"), &[0, 1, 1, 0]);
    let compress = one(
        node("Compress", &["x", "c"], &["y"], vec![int("axis", 0)]),
        &[("x", DataType::Float, &[3, 2]), ("c", DataType::Bool, &[3])],
        vec![],
    );
    check(&error_of(&compress), &["node 'Compress_y'", "values of condition ('c')", "--input-value"]);
}

#[test]
fn training_ops_import_in_their_domain_and_name_bad_groups_and_modes() {
    let training = |op: &str, inputs: &[&str], attrs, version: i64| {
        let ins: Vec<(&str, DataType, &[i64])> = inputs
            .iter()
            .map(|&n| if n == "T" { (n, DataType::Int64, &[][..]) } else { (n, DataType::Float, &[2][..]) })
            .collect();
        let mut m = one(node(op, inputs, &["x_new", "v_new"], attrs), &ins, vec![]);
        m.graph.as_mut().expect("a graph").node[0].domain = Some("ai.onnx.preview.training".into());
        m.opset_import = vec![stowage_compiler::onnx::proto::OperatorSetIdProto {
            domain: Some("ai.onnx.preview.training".into()),
            version: Some(version),
        }];
        m
    };
    let ok = training("Momentum", &["R", "T", "X", "G", "V"], vec![string("mode", "standard")], 1);
    import(&ok).expect("a model of training ops alone imports");
    let err = error_of(&training("Momentum", &["R", "T", "X", "G", "V"], vec![string("mode", "fast")], 1));
    check(&err, &["node 'Momentum_x_new'", "attribute 'mode'", "'standard' or 'nesterov'"]);
    let err = error_of(&training("Adam", &["R", "T", "X", "G", "V"], vec![], 1));
    check(&err, &["node 'Adam_x_new'", "has 5 inputs", "V and H"]);
    let err = error_of(&training("Momentum", &["R", "T", "X", "G", "V"], vec![string("mode", "standard")], 2));
    check(&err, &["ai.onnx.preview.training", "opset 2"]);
}

#[test]
fn selections_of_run_time_values_name_the_input_and_known_ones_fold() {
    let nms = one(
        node("NonMaxSuppression", &["b", "s"], &["y"], vec![]),
        &[("b", DataType::Float, &[1, 2, 4]), ("s", DataType::Float, &[1, 1, 2])],
        vec![],
    );
    check(&error_of(&nms), &["node 'NonMaxSuppression_y'", "values of boxes ('b')", "--input-value"]);
    let unique = one(
        node("Unique", &["x"], &["y", "i", "inv", "c"], vec![]),
        &[],
        vec![build::floats("x", &[5], &[3.0, 1.0, 3.0, 2.0, 1.0])],
    );
    let g = import(&ModelProto {
        graph: unique.graph.map(|mut g| {
            g.output = vec![value("y", &[3]), typed_value("inv", DataType::Int64, &[5])];
            g
        }),
        ..unique
    })
    .expect("imports");
    let y = g.const_value(g.outputs()[0].value).expect("a constant");
    assert_eq!(y.as_slice::<f32>().expect("f32"), &[1.0, 2.0, 3.0]);
    let inv = g.const_value(g.outputs()[1].value).expect("a constant");
    assert_eq!(inv.as_slice::<i64>().expect("i64"), &[2, 0, 2, 1, 0]);
}

#[test]
fn roi_align_and_det_name_the_shape_or_mode_they_cannot_take() {
    let roi = |mode: &str, rois: &[i64]| {
        one(
            node("RoiAlign", &["x", "rois", "idx"], &["y"], vec![string("mode", mode), int("output_height", 2)]),
            &[("x", DataType::Float, &[1, 3, 8, 8]), ("rois", DataType::Float, rois), ("idx", DataType::Int64, &[2])],
            vec![],
        )
    };
    let ok = print(&import(&roi("max", &[2, 4])).expect("imports"));
    assert!(ok.contains("f32[2,3,2,1] = RoiAlign") && ok.contains("mode=max coordinates=half_pixel"), "{ok}");
    check(&error_of(&roi("median", &[2, 4])), &["node 'RoiAlign_y'", "attribute 'mode'", "'median'"]);
    check(&error_of(&roi("avg", &[2, 5])), &["node 'RoiAlign_y'", "rois is f32[2,5]", "[R, 4]"]);
    let det = one(node("Det", &["m"], &["d"], vec![]), &[("m", DataType::Float, &[2, 3, 4])], vec![]);
    check(&error_of(&det), &["node 'Det_d'", "f32[2,3,4]", "square matrices"]);
}

#[test]
fn flex_attention_names_heads_that_do_not_group_and_modifiers_of_the_wrong_signature() {
    use stowage_compiler::onnx::proto::{attribute_proto::AttributeType, AttributeProto, GraphProto};
    let flex = |heads: (i64, i64), attrs: Vec<AttributeProto>| {
        let mut n = node("FlexAttention", &["q", "k", "v"], &["y"], attrs);
        n.domain = Some("ai.onnx.preview".into());
        let mut m = one(
            n,
            &[
                ("q", DataType::Float, &[1, heads.0, 3, 4]),
                ("k", DataType::Float, &[1, heads.1, 5, 4]),
                ("v", DataType::Float, &[1, heads.1, 5, 2]),
            ],
            vec![],
        );
        m.opset_import.push(stowage_compiler::onnx::proto::OperatorSetIdProto {
            domain: Some("ai.onnx.preview".into()),
            version: Some(1),
        });
        m
    };
    let ok = print(&import(&flex((4, 2), vec![])).expect("grouped heads import"));
    assert!(ok.contains("Softmax") && ok.contains("Gather"), "{ok}");
    check(&error_of(&flex((3, 2), vec![])), &["node 'FlexAttention_y'", "3 heads and K 2", "multiple"]);
    let two_outputs = AttributeProto {
        name: Some("score_mod".into()),
        r#type: Some(AttributeType::Graph as i32),
        g: Some(GraphProto {
            node: vec![node("Neg", &["s"], &["a"], vec![]), node("Abs", &["s"], &["b"], vec![])],
            input: vec![value("s", &[1, 4, 3, 5])],
            output: vec![value("a", &[1, 4, 3, 5]), value("b", &[1, 4, 3, 5])],
            ..Default::default()
        }),
        ..Default::default()
    };
    check(&error_of(&flex((4, 2), vec![two_outputs])), &["attribute 'score_mod'", "1 inputs and 2 outputs"]);
    let err = error_of(&flex((4, 2), vec![int("softmax_precision", 7)]));
    check(&err, &["attribute 'softmax_precision'", "is 7", "float type"]);
}

#[test]
fn tf_idf_pools_that_do_not_split_into_n_grams_are_named() {
    let tfidf = |attrs: Vec<stowage_compiler::onnx::proto::AttributeProto>| {
        one(node("TfIdfVectorizer", &["x"], &["y"], attrs), &[("x", DataType::Int64, &[2, 6])], vec![])
    };
    let good = || {
        vec![
            string("mode", "TF"),
            int("min_gram_length", 1),
            int("max_gram_length", 2),
            build::ints("pool_int64s", &[2, 3, 5, 4, 5, 6, 7]),
            build::ints("ngram_counts", &[0, 3]),
            build::ints("ngram_indexes", &[0, 1, 2, 3, 4]),
        ]
    };
    let ok = print(&import(&tfidf(good())).expect("imports"));
    assert!(ok.contains("f32[2,5] = TfIdfVectorizer") && ok.contains("pooled=5"), "{ok}");
    let mut odd = good();
    odd[4] = build::ints("ngram_counts", &[0, 2]);
    check(&error_of(&tfidf(odd)), &["attribute 'ngram_counts'", "group 1 holds 5 tokens"]);
    let mut short = good();
    short[5] = build::ints("ngram_indexes", &[0, 1, 2]);
    check(&error_of(&tfidf(short)), &["attribute 'ngram_indexes'", "no column for n-gram 3"]);
    let mut strings = good();
    strings[3] = build::strings("pool_strings", &["a", "b", "c", "b", "c", "d", "e"]);
    let mut tokens = tfidf(strings);
    tokens.graph.as_mut().expect("graph").input[0] = typed_value("x", DataType::String, &[2, 6]);
    let text = print(&import(&tokens).expect("imports"));
    assert!(text.contains("LabelEncoder") && text.contains("pooled=5"), "{text}");
}

#[test]
fn deform_conv_names_offsets_and_groups_that_do_not_fit() {
    let deform = |offset: &[i64], attrs| {
        one(
            node("DeformConv", &["x", "w", "off"], &["y"], attrs),
            &[
                ("x", DataType::Float, &[1, 4, 5, 5]),
                ("w", DataType::Float, &[2, 4, 3, 3]),
                ("off", DataType::Float, offset),
            ],
            vec![],
        )
    };
    let ok = print(&import(&deform(&[1, 18, 3, 3], vec![])).expect("imports"));
    assert!(ok.contains("GridSample") && ok.contains("f32[1,2,3,3]"), "{ok}");
    let err = error_of(&deform(&[1, 18, 5, 5], vec![]));
    check(&err, &["node 'DeformConv_y'", "offset is f32[1,18,5,5]", "needs [1, 18, 3, 3]"]);
    let err = error_of(&deform(&[1, 18, 3, 3], vec![int("offset_group", 3)]));
    check(&err, &["node 'DeformConv_y'", "offset_group 3", "multiple of offset_group"]);
}
