//! Bad models and options: each gives one clear line naming what is wrong (file, node, op, input, attribute),
//! never a panic.

mod common;

use common::build::{self, float, int, node, value};
use prost::Message;
use stowage_compiler::onnx::proto::{tensor_proto::DataLocation, NodeProto, StringStringEntryProto, TensorProto};
use stowage_compiler::onnx::{self, ImportConfig};
use stowage_compiler::Context;

/// Imports `bytes` from a file in a fresh folder (with `extra` files beside it) and returns the error's text.
fn error_of(bytes: &[u8], extra: &[(&str, &[u8])], config: &ImportConfig) -> String {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("model.onnx");
    std::fs::write(&path, bytes).expect("write model");
    for (name, data) in extra {
        std::fs::write(dir.path().join(name), data).expect("write extra file");
    }
    let err = match Context::import(&path, config) {
        Ok(_) => panic!("the model imported, but it should not have"),
        Err(e) => e.to_string(),
    };
    assert!(!err.contains('\n'), "error is not one line: {err}");
    assert!(err.contains("model.onnx"), "error does not name the file: {err}");
    err
}

fn check(err: &str, parts: &[&str]) {
    for p in parts {
        assert!(err.contains(p), "error {err:?} does not mention {p:?}");
    }
}

/// x[2,3] + w[2,3] -> y: a model that imports, to break in one place at a time.
fn add_model() -> onnx::proto::ModelProto {
    build::model(
        13,
        vec![node("Add", &["x", "w"], &["y"], vec![])],
        vec![value("x", &[2, 3])],
        vec![value("y", &[2, 3])],
        vec![build::floats("w", &[2, 3], &[1.0; 6])],
    )
}

fn light_model_bytes() -> Vec<u8> {
    let dir = common::generated("onnx-models/light", "light_models.py");
    std::fs::read(dir.join("squeezenet/model.onnx")).expect("squeezenet")
}

#[test]
fn the_base_model_imports() {
    let g = onnx::load_bytes(&build::bytes(&add_model()), &ImportConfig::new()).expect("imports");
    assert_eq!(g.order().len(), 1);
}

#[test]
fn truncated_file() {
    let bytes = light_model_bytes();
    let err = error_of(&bytes[..bytes.len() / 2], &[], &ImportConfig::new());
    check(&err, &["not an ONNX model"]);
}

#[test]
fn random_bytes() {
    let mut rng = fastrand::Rng::with_seed(7);
    let bytes: Vec<u8> = (0..4096).map(|_| rng.u8(..)).collect();
    let err = error_of(&bytes, &[], &ImportConfig::new());
    check(&err, &["not an ONNX model"]);
}

#[test]
fn a_protobuf_that_is_not_a_model() {
    let tensor = build::floats("t", &[4], &[1.0, 2.0, 3.0, 4.0]).encode_to_vec();
    let err = error_of(&tensor, &[], &ImportConfig::new());
    check(&err, &["not an ONNX model"]);
}

#[test]
fn missing_file() {
    let err = Context::import("/nonexistent/model.onnx", &ImportConfig::new()).err().expect("fails").to_string();
    check(&err, &["/nonexistent/model.onnx", "cannot read"]);
}

#[test]
fn unknown_ops_are_listed_at_once_with_count_first_node_and_domain() {
    let mut m = add_model();
    let n = &mut m.graph.as_mut().expect("graph").node[0];
    n.op_type = Some("FancyAdd".into());
    let err = error_of(&build::bytes(&m), &[], &ImportConfig::new());
    check(&err, &["1 op type is not supported: FancyAdd (1 node, first 'Add_y')"]);

    let mut m = add_model();
    m.graph.as_mut().expect("graph").node[0].domain = Some("com.example".into());
    let err = error_of(&build::bytes(&m), &[], &ImportConfig::new());
    check(&err, &["1 op type is not supported: Add in domain 'com.example' (1 node, first 'Add_y')"]);

    // Every unknown op type at once, with its count and first node, in the order they first appear.
    let mut m = add_model();
    let g = m.graph.as_mut().expect("graph");
    g.node[0].op_type = Some("ImageDecoder".into());
    for (k, op) in ["Bernoulli", "ImageDecoder", "Bernoulli", "Bernoulli"].iter().enumerate() {
        g.node.push(NodeProto { name: Some(format!("n{k}")), ..node(op, &["x"], &[&format!("o{k}")], vec![]) });
    }
    let err = error_of(&build::bytes(&m), &[], &ImportConfig::new());
    check(
        &err,
        &["2 op types are not supported: ImageDecoder (2 nodes, first 'Add_y'), Bernoulli (3 nodes, first 'n0')"],
    );
}

#[test]
fn unsupported_opset() {
    for version in [0, 99] {
        let mut m = add_model();
        m.opset_import[0].version = Some(version);
        let err = error_of(&build::bytes(&m), &[], &ImportConfig::new());
        check(&err, &[&format!("opset {version}"), "not supported", "1 to 28"]);
    }
}

#[test]
fn missing_initializer() {
    let mut m = add_model();
    m.graph.as_mut().expect("graph").initializer.clear();
    let err = error_of(&build::bytes(&m), &[], &ImportConfig::new());
    check(&err, &["node 'Add_y'", "input 'w' is not defined"]);
}

fn external(location: &str) -> TensorProto {
    let entry = |k: &str, v: &str| StringStringEntryProto { key: Some(k.into()), value: Some(v.into()) };
    TensorProto {
        name: Some("w".into()),
        dims: vec![2, 3],
        data_type: Some(1),
        data_location: Some(DataLocation::External as i32),
        external_data: vec![entry("location", location), entry("offset", "4")],
        ..Default::default()
    }
}

#[test]
fn external_data_is_read_from_beside_the_model() {
    let mut m = add_model();
    m.graph.as_mut().expect("graph").initializer = vec![external("weights.bin")];
    let mut data = vec![0u8; 4];
    for i in 0..6 {
        data.extend((i as f32).to_le_bytes());
    }
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("model.onnx"), build::bytes(&m)).expect("write");
    std::fs::write(dir.path().join("weights.bin"), &data).expect("write");
    let g = onnx::load(dir.path().join("model.onnx"), &ImportConfig::new()).expect("imports");
    let w = g.node(g.order()[0]).inputs[1].expect("w");
    let t = g.const_value(w).expect("w is a constant");
    assert_eq!(t.to_vec::<f32>().expect("f32"), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
}

#[test]
fn missing_external_data_file() {
    let mut m = add_model();
    m.graph.as_mut().expect("graph").initializer = vec![external("weights.bin")];
    let err = error_of(&build::bytes(&m), &[], &ImportConfig::new());
    check(&err, &["initializer 'w'", "weights.bin"]);
}

#[test]
fn short_external_data_file() {
    let mut m = add_model();
    m.graph.as_mut().expect("graph").initializer = vec![external("weights.bin")];
    let err = error_of(&build::bytes(&m), &[("weights.bin", &[0u8; 10])], &ImportConfig::new());
    check(&err, &["initializer 'w'", "weights.bin", "has 10 bytes"]);
}

#[test]
fn external_data_outside_the_model_folder() {
    let mut m = add_model();
    m.graph.as_mut().expect("graph").initializer = vec![external("../secret.bin")];
    let err = error_of(&build::bytes(&m), &[], &ImportConfig::new());
    check(&err, &["initializer 'w'", "inside the model's folder"]);
}

#[test]
fn attribute_of_the_wrong_type() {
    let conv = build::model(
        13,
        vec![node("Conv", &["x", "w"], &["y"], vec![float("group", 1.0)])],
        vec![value("x", &[1, 1, 4, 4])],
        vec![value("y", &[1, 1, 4, 4])],
        vec![build::floats("w", &[1, 1, 1, 1], &[1.0])],
    );
    let err = error_of(&build::bytes(&conv), &[], &ImportConfig::new());
    check(&err, &["node 'Conv_y'", "(Conv)", "attribute 'group'", "expected an int, found a float"]);
}

#[test]
fn attribute_with_a_bad_value() {
    let conv = build::model(
        13,
        vec![node("Conv", &["x", "w"], &["y"], vec![int("group", 0)])],
        vec![value("x", &[1, 1, 4, 4])],
        vec![value("y", &[1, 1, 4, 4])],
        vec![build::floats("w", &[1, 1, 1, 1], &[1.0])],
    );
    let err = error_of(&build::bytes(&conv), &[], &ImportConfig::new());
    check(&err, &["node 'Conv_y'", "attribute 'group'", "at least 1"]);
}

#[test]
fn a_cycle() {
    let m = build::model(
        13,
        vec![node("Relu", &["b"], &["a"], vec![]), node("Relu", &["a"], &["b"], vec![])],
        vec![value("x", &[2])],
        vec![value("a", &[2])],
        vec![],
    );
    let err = error_of(&build::bytes(&m), &[], &ImportConfig::new());
    check(&err, &["node 'Relu_", "part of a cycle"]);
}

#[test]
fn shapes_that_cannot_broadcast_name_the_node_and_both_shapes() {
    let mut m = add_model();
    m.graph.as_mut().expect("graph").initializer = vec![build::floats("w", &[4, 3], &[1.0; 12])];
    let err = error_of(&build::bytes(&m), &[], &ImportConfig::new());
    check(&err, &["node 'Add_y' (Add)", "[2, 3]", "[4, 3]", "cannot broadcast"]);
}

#[test]
fn a_symbolic_dimension_needs_the_callers_shape() {
    let mut m = add_model();
    let g = m.graph.as_mut().expect("graph");
    g.input = vec![value("x", &[-1, 3])];
    g.initializer = vec![build::floats("w", &[1, 3], &[1.0; 3])];
    let bytes = build::bytes(&m);
    let err = error_of(&bytes, &[], &ImportConfig::new());
    check(&err, &["input 'x'", "dimension 0 ('N') is symbolic", "--input-shape x="]);

    let g = onnx::load_bytes(&bytes, &ImportConfig::new().input_shape("x", [5, 3])).expect("imports with a shape");
    assert_eq!(g.ty(g.outputs()[0].value).shape, [5, 3]);

    let err = error_of(&bytes, &[], &ImportConfig::new().input_shape("x", [5, 4]));
    check(&err, &["input 'x'", "[5, 4] does not fit the declared shape [N,3]"]);
}

#[test]
fn options_naming_an_unknown_input() {
    let err = error_of(&build::bytes(&add_model()), &[], &ImportConfig::new().input_shape("nope", [1]));
    check(&err, &["no input 'nope'", "its inputs: x"]);
}

#[test]
fn a_shape_input_that_is_not_fixed() {
    let m = build::model(
        13,
        vec![node("Reshape", &["x", "shape"], &["y"], vec![])],
        vec![value("x", &[2, 3]), build::typed_value("shape", onnx::proto::tensor_proto::DataType::Int64, &[2])],
        vec![value("y", &[3, 2])],
        vec![],
    );
    let bytes = build::bytes(&m);
    let err = error_of(&bytes, &[], &ImportConfig::new());
    check(&err, &["node 'Reshape_y' (Reshape)", "input 1 sets the output shape", "--input-value"]);
    assert_eq!(onnx::value_inputs(&onnx::decode(&bytes).expect("decodes")), ["shape"]);

    let shape = stowage_runtime::Tensor::from_vec(&[2], vec![3i64, 2]).expect("tensor");
    let g = onnx::load_bytes(&bytes, &ImportConfig::new().input_value("shape", shape)).expect("imports");
    assert_eq!(g.ty(g.outputs()[0].value).shape, [3, 2]);
    assert_eq!(g.metadata.assumed_inputs, ["shape"]);
}

#[test]
fn an_output_nothing_defines() {
    let mut m = add_model();
    m.graph.as_mut().expect("graph").output.push(value("z", &[1]));
    let err = error_of(&build::bytes(&m), &[], &ImportConfig::new());
    check(&err, &["graph output 'z' is not defined"]);
}

#[test]
fn an_unsupported_element_type() {
    let mut m = add_model();
    m.graph.as_mut().expect("graph").input =
        vec![build::typed_value("x", onnx::proto::tensor_proto::DataType::Complex64, &[2, 3])];
    let err = error_of(&build::bytes(&m), &[], &ImportConfig::new());
    check(&err, &["input 'x'", "COMPLEX64", "not supported"]);
}

#[test]
fn a_pool_pad_not_smaller_than_its_kernel_names_the_node_and_attribute() {
    // onnxruntime refuses these too: a window could lie wholly in the padding (the CPU kernel indexed past the row).
    let pool = |kernel: &[i64], pads: &[i64]| {
        build::model(
            13,
            vec![node("MaxPool", &["x"], &["y"], vec![build::ints("kernel_shape", kernel), build::ints("pads", pads)])],
            vec![value("x", &[1, 1, 4, 4])],
            vec![value("y", &[1, 1, 4, 4])],
            vec![],
        )
    };
    let err = error_of(&build::bytes(&pool(&[2, 2], &[0, 3, 0, 3])), &[], &ImportConfig::new());
    check(&err, &["node 'MaxPool_y' (MaxPool)", "attribute 'pads' [0, 3, 0, 3]", "spatial axis 1", "kernel (2"]);
    let err = error_of(&build::bytes(&pool(&[3, 3], &[0, 0, 3, 0])), &[], &ImportConfig::new());
    check(&err, &["attribute 'pads'", "pad of 3 on spatial axis 0", "smaller than the kernel (3"]);
    // A pad one short of the kernel is taken.
    onnx::load_bytes(&build::bytes(&pool(&[3, 3], &[2, 2, 2, 2])), &ImportConfig::new()).expect("imports");
}

/// x[1, 1] and an int64 initializer `s` of `values`, read by `op` (Expand's shape, Tile's repeats, Pad's pads) into
/// y: a node whose output no machine should allocate.
fn growing(op: &str, x: &[i64], values: &[i64]) -> Vec<u8> {
    use stowage_compiler::onnx::proto::tensor_proto::DataType;
    let s = TensorProto {
        name: Some("s".into()),
        dims: vec![values.len() as i64],
        data_type: Some(DataType::Int64 as i32),
        int64_data: values.to_vec(),
        ..Default::default()
    };
    let m = build::model(
        13,
        vec![node(op, &["x", "s"], &["y"], vec![])],
        vec![value("x", x)],
        vec![value("y", &[])],
        vec![s],
    );
    build::bytes(&m)
}

#[test]
fn a_node_whose_output_is_larger_than_the_limit_is_refused_naming_it() {
    let config = ImportConfig::new();
    let err = error_of(&growing("Expand", &[1, 1], &[100_000, 100_000]), &[], &config);
    check(
        &err,
        &[
            "node 'Expand_y' (Expand): output 'y' would be f32[100000,100000], 40000000000 bytes",
            "17179869184-byte limit",
            "--max-value-bytes",
        ],
    );
    let err = error_of(&growing("Tile", &[1, 1], &[100_000, 100_000]), &[], &config);
    check(&err, &["node 'Tile_y' (Tile): output 'y' would be f32[100000,100000]"]);
    let err = error_of(&growing("Pad", &[2, 2], &[100_000; 4]), &[], &config);
    check(&err, &["node 'Pad_y' (Pad): output 'y' would be f32[200002,200002]"]);
}

#[test]
fn an_input_larger_than_the_limit_is_refused_and_the_limit_can_be_moved() {
    let err = error_of(&build::bytes(&add_model()), &[], &ImportConfig::new().max_value_bytes(16));
    check(&err, &["initializer 'w' would be f32[2,3], 24 bytes: more than the 16-byte limit on one value"]);
    let mut m = add_model();
    m.graph.as_mut().expect("graph").initializer = vec![build::floats("w", &[1], &[1.0])];
    let err = error_of(&build::bytes(&m), &[], &ImportConfig::new().max_value_bytes(16));
    check(&err, &["input 'x' would be f32[2,3], 24 bytes: more than the 16-byte limit on one value"]);
    // Raised, the growing Expand imports: nothing of its size is made at import.
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("model.onnx");
    std::fs::write(&path, growing("Expand", &[1, 1], &[100_000, 100_000])).expect("write");
    Context::import(&path, &ImportConfig::new().max_value_bytes(1 << 40)).expect("imports under a raised limit");
}

/// A model whose protobuf would decode to more than the limit (packed int64s take 8 bytes each once decoded, one
/// on disk) is refused before it is decoded (a limit under 64 MiB bounds decoding at 64 MiB); an initializer over the limit is refused naming it, before its
/// external data is read.
#[test]
fn a_model_that_would_decode_past_the_limit_and_an_initializer_over_it_are_refused() {
    use stowage_compiler::onnx::proto::tensor_proto::DataType;
    let mut m = add_model();
    let packed = TensorProto {
        name: Some("k".into()),
        dims: vec![8 << 20],
        data_type: Some(DataType::Int64 as i32),
        int64_data: vec![1; 8 << 20],
        ..Default::default()
    };
    m.graph.as_mut().expect("graph").initializer.push(packed);
    let bytes = build::bytes(&m);
    // 8 MiB on disk, 64 MiB decoded (and as much again for a vector's spare capacity).
    assert!(bytes.len() < (8 << 20) + 4096, "{} bytes", bytes.len());
    let err = error_of(&bytes, &[], &ImportConfig::new().max_value_bytes(100 << 20));
    check(&err, &["decoding it would take up to", "more than the 104857600-byte limit", "--max-value-bytes"]);
    onnx::load_bytes(&bytes, &ImportConfig::new().max_value_bytes(200 << 20)).expect("imports under a raised limit");

    let mut m = add_model();
    let mut big = external("big.bin");
    big.dims = vec![1 << 30];
    m.graph.as_mut().expect("graph").initializer = vec![big];
    let err = error_of(&build::bytes(&m), &[("big.bin", b"")], &ImportConfig::new().max_value_bytes(1 << 20));
    check(&err, &["initializer 'w' would be f32[1073741824], 4294967296 bytes", "1048576-byte limit"]);
}

/// The expanded ops (`onnx::expand`): bad attributes and inputs are one line naming the node and what is wrong,
/// and a sequence past the unroll bound is refused before anything is written.
#[test]
fn bad_recurrent_and_transposed_convolution_nodes() {
    let lstm = |attrs: Vec<onnx::proto::AttributeProto>, x: &[i64], w: &[i64], r: &[i64]| {
        let n = |d: &[i64]| d.iter().product::<i64>() as usize;
        build::bytes(&build::model(
            17,
            vec![NodeProto { name: Some("rnn".into()), ..node("LSTM", &["x", "w", "r"], &["y"], attrs) }],
            vec![value("x", x)],
            vec![value("y", &[])],
            vec![build::floats("w", w, &vec![0.1; n(w)]), build::floats("r", r, &vec![0.1; n(r)])],
        ))
    };
    let ok = (&[5, 1, 3][..], &[1, 8, 3][..], &[1, 8, 2][..]);
    // Unrolled, and kept whole (the CPU's import): the same checks come first either way.
    for config in [ImportConfig::new(), ImportConfig::new().keep_whole("LSTM")] {
        let err = error_of(&lstm(vec![build::string("direction", "sideways")], ok.0, ok.1, ok.2), &[], &config);
        check(&err, &["node 'rnn' (LSTM)", "attribute 'direction'", "sideways"]);
        let err = error_of(&lstm(vec![], ok.0, &[1, 6, 3], ok.2), &[], &config);
        check(&err, &["node 'rnn' (LSTM)", "W is f32[1,6,3]", "[1, 8, 3]"]);
        let err = error_of(&lstm(vec![build::float("clip", -1.0)], ok.0, ok.1, ok.2), &[], &config);
        check(&err, &["attribute 'clip'", "positive"]);
        let acts = vec![build::strings("activations", &["Sigmoid", "Gelu", "Tanh"])];
        let err = error_of(&lstm(acts, ok.0, ok.1, ok.2), &[], &config);
        check(&err, &["attribute 'activations'", "'gelu' is not supported"]);
    }
    let err = error_of(&lstm(vec![], &[5000, 1, 3], ok.1, ok.2), &[], &ImportConfig::new());
    check(&err, &["node 'rnn' (LSTM)", "5000 steps", "1 to 4096"]);
    // Kept whole, a long sequence is no unrolling: it imports.
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("model.onnx");
    std::fs::write(&path, lstm(vec![], &[5000, 1, 3], ok.1, ok.2)).expect("write model");
    Context::import(&path, &ImportConfig::new().keep_whole("LSTM")).expect("5000 steps kept whole");

    let deconv = |attrs| {
        build::bytes(&build::model(
            17,
            vec![NodeProto { name: Some("up".into()), ..node("ConvTranspose", &["x", "w"], &["y"], attrs) }],
            vec![value("x", &[1, 2, 4, 4])],
            vec![value("y", &[])],
            vec![build::floats("w", &[2, 3, 3, 3], &[0.5; 54])],
        ))
    };
    let err = error_of(&deconv(vec![build::ints("strides", &[0, 2])]), &[], &ImportConfig::new());
    check(&err, &["node 'up' (ConvTranspose)", "attribute 'strides'", "1 to 2^31-1"]);
    let err = error_of(&deconv(vec![build::ints("strides", &[2])]), &[], &ImportConfig::new());
    check(&err, &["attribute 'strides'", "1 values, the input has 2 spatial axes"]);
    let err = error_of(&deconv(vec![build::ints("pads", &[9, 9, 9, 9])]), &[], &ImportConfig::new());
    check(&err, &["node 'up' (ConvTranspose)", "no element along spatial axis 0"]);
}
