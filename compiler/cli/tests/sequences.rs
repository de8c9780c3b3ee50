//! `stowage run` with inputs and outputs that are sequences and optionals: files read and written as ONNX writes
//! them (`SequenceProto`, `OptionalProto`), equal to the node suite's references, a summary line per value; a file
//! of the wrong kind, or a sequence input left out, is one `error:` line naming the input.

mod common;

use common::{case, data, fails, model, s, stowage};
use stowage_compiler::onnx::{self, proto::TypeProto, structure};

/// The declared type of `name` among the model's outputs.
fn output_type(dir: &std::path::Path, name: &str) -> Option<TypeProto> {
    let m = onnx::decode(&std::fs::read(dir.join("model.onnx")).expect("reads")).expect("decodes");
    m.graph.expect("graph").output.into_iter().find(|o| o.name() == name).and_then(|o| o.r#type)
}

/// A value's form with each tensor's type and bytes.
fn described(v: &structure::Structure<stowage_runtime::Tensor<'static>>) -> String {
    format!("{:?}", v.map(|t| format!("{}{:?} {:?}", t.dt(), t.shape(), t.as_bytes().expect("packed"))))
}

#[test]
fn sequence_inputs_and_outputs_are_read_and_written_as_onnx_files() {
    let case = case("test_sequence_insert_at_front");
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("out");
    let (code, stdout, err) = stowage(&[
        "run",
        &model(&case),
        "--input",
        &data(&case, "input_0.pb"),
        "--input",
        &data(&case, "input_1.pb"),
        "--input",
        &data(&case, "input_2.pb"),
        "--output-dir",
        &s(&out),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(stdout.contains("output 'output_sequence': sequence of 4: i64[3], i64[4], i64[3], i64[2]"), "{stdout}");
    let ty = output_type(&case, "output_sequence");
    let got = structure::read_value_within(&out.join("output_0.pb"), ty.as_ref(), 1 << 20).expect("a SequenceProto");
    let want =
        structure::read_value_within(&case.join("test_data_set_0/output_0.pb"), ty.as_ref(), 1 << 20).expect("reads");
    assert_eq!(described(&got), described(&want));
}

#[test]
fn an_empty_optional_input_runs_and_an_optional_output_is_written() {
    let case = case("test_optional_has_element_empty_optional_input");
    let (code, stdout, err) = stowage(&["run", &model(&case), "--input", &data(&case, "input_0.pb")]);
    assert_eq!(code, 0, "{err}");
    assert!(stdout.contains("output 'output': bool[]"), "{stdout}");

    let case = common::case("test_if_opt");
    let tmp = tempfile::tempdir().expect("tempdir");
    let (code, stdout, err) =
        stowage(&["run", &model(&case), "--input", &data(&case, "input_0.pb"), "--output-dir", &s(tmp.path())]);
    assert_eq!(code, 0, "{err}");
    assert!(stdout.contains("output 'sequence': optional: sequence of 1: f32[5]"), "{stdout}");
    let ty = output_type(&case, "sequence");
    let got = structure::read_value_within(&tmp.path().join("output_0.pb"), ty.as_ref(), 1 << 20).expect("reads");
    let want =
        structure::read_value_within(&case.join("test_data_set_0/output_0.pb"), ty.as_ref(), 1 << 20).expect("reads");
    assert_eq!(described(&got), described(&want));
}

#[test]
fn a_tensor_file_for_a_sequence_input_and_a_missing_one_are_named() {
    let case = case("test_sequence_insert_at_back");
    // input_1.pb is a TensorProto; the model's first input is a sequence.
    let err =
        fails(&["run", &model(&case), "--input", &data(&case, "input_1.pb"), "--input", &data(&case, "input_1.pb")]);
    assert!(err.contains("input 'sequence'") && err.contains("SequenceProto"), "{err}");
    let err = fails(&["run", &model(&case), "--input", &format!("tensor={}", data(&case, "input_1.pb"))]);
    assert!(err.contains("input 'sequence'") && err.contains("a sequence or an optional"), "{err}");
}
