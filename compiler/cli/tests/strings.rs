//! `stowage run` with string tensors: input files read with their `string_data`, outputs written so and equal to
//! the node suite's references, a split of strings given at run time compiled for them; text that is not UTF-8,
//! or not a number where a `Cast` wants one, is one `error:` line naming the input or the node.

mod common;

use common::{case, data, fails, model, s, stowage};
use prost::Message;
use stowage_compiler::onnx::proto::{
    self, tensor_proto::DataType, type_proto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    TypeProto, ValueInfoProto,
};
use stowage_compiler::onnx::tensor;
use stowage_runtime::strings;

/// The strings of a tensor file.
fn texts(path: &std::path::Path) -> (Vec<usize>, Vec<String>) {
    let t = TensorProto::decode(std::fs::read(path).expect("reads").as_slice()).expect("a TensorProto");
    let t = tensor::decode(&t, None).expect("decodes");
    let text = strings::resolve_all(&strings::handles(&t).expect("strings")).into_iter().map(String::from).collect();
    (t.shape().to_vec(), text)
}

#[test]
fn string_inputs_and_outputs_are_onnx_string_tensors() {
    let case = case("test_string_concat_utf8");
    let tmp = tempfile::tempdir().expect("tempdir");
    let (code, stdout, err) = stowage(&[
        "run",
        &model(&case),
        "--input",
        &data(&case, "input_0.pb"),
        "--input",
        &data(&case, "input_1.pb"),
        "--output-dir",
        &s(tmp.path()),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(stdout.contains("string[2]"), "{stdout}");
    let got = texts(&tmp.path().join("output_0.pb"));
    assert_eq!(got, texts(&case.join("test_data_set_0/output_0.pb")));
    assert_eq!(got.1, ["的的", "中中"]);
}

#[test]
fn a_split_of_strings_given_at_run_time_is_compiled_for_them() {
    let case = case("test_string_split_maxsplit");
    let tmp = tempfile::tempdir().expect("tempdir");
    let (code, stdout, err) =
        stowage(&["run", &model(&case), "--input", &data(&case, "input_0.pb"), "--output-dir", &s(tmp.path())]);
    assert_eq!(code, 0, "{err}");
    assert!(stdout.contains("string[2, 2, 3]"), "{stdout}");
    assert_eq!(texts(&tmp.path().join("output_0.pb")), texts(&case.join("test_data_set_0/output_0.pb")));
}

fn string_type(dims: &[i64], dt: DataType) -> Option<TypeProto> {
    let dim = dims
        .iter()
        .map(|&d| proto::tensor_shape_proto::Dimension {
            value: Some(proto::tensor_shape_proto::dimension::Value::DimValue(d)),
            ..Default::default()
        })
        .collect();
    Some(TypeProto {
        value: Some(type_proto::Value::TensorType(type_proto::Tensor {
            elem_type: Some(dt as i32),
            shape: Some(proto::TensorShapeProto { dim }),
        })),
        ..Default::default()
    })
}

/// `y = Cast(x: string[2], to=float)`, written to `dir`.
fn cast_model(dir: &std::path::Path) -> String {
    let node = NodeProto {
        name: Some("parse".into()),
        op_type: Some("Cast".into()),
        input: vec!["x".into()],
        output: vec!["y".into()],
        attribute: vec![proto::AttributeProto {
            name: Some("to".into()),
            i: Some(DataType::Float as i64),
            r#type: Some(proto::attribute_proto::AttributeType::Int as i32),
            ..Default::default()
        }],
        ..Default::default()
    };
    let value = |name: &str, dt| ValueInfoProto {
        name: Some(name.into()),
        r#type: string_type(&[2], dt),
        ..Default::default()
    };
    let m = ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(19) }],
        graph: Some(GraphProto {
            name: Some("cast".into()),
            node: vec![node],
            input: vec![value("x", DataType::String)],
            output: vec![value("y", DataType::Float)],
            ..Default::default()
        }),
        ..Default::default()
    };
    let path = dir.join("cast.onnx");
    std::fs::write(&path, m.encode_to_vec()).expect("writes");
    s(&path)
}

fn strings_file(dir: &std::path::Path, name: &str, items: &[&[u8]]) -> String {
    let t = TensorProto {
        dims: vec![items.len() as i64],
        data_type: Some(DataType::String as i32),
        string_data: items.iter().map(|b| b.to_vec()).collect(),
        ..Default::default()
    };
    let path = dir.join(name);
    std::fs::write(&path, t.encode_to_vec()).expect("writes");
    s(&path)
}

#[test]
fn strings_cast_to_numbers_and_bad_text_is_one_line() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = cast_model(tmp.path());
    let good = strings_file(tmp.path(), "good.pb", &[b"1.5", b"-INF"]);
    let (code, stdout, err) = stowage(&["run", &model, "--input", &format!("x={good}")]);
    assert_eq!(code, 0, "{err}");
    assert!(stdout.contains("output 'y': f32[2]"), "{stdout}");

    let words = strings_file(tmp.path(), "words.pb", &[b"1.5", b"one"]);
    let err = fails(&["run", &model, "--input", &format!("x={words}")]);
    assert!(err.contains("node 'parse' (Cast)") && err.contains("element 1 is \"one\""), "{err}");

    let latin1 = strings_file(tmp.path(), "latin1.pb", &[b"1", b"caf\xe9"]);
    let err = fails(&["run", &model, "--input", &format!("x={latin1}")]);
    assert!(err.contains("input 'x'") && err.contains("string_data[1] is not UTF-8"), "{err}");
}
