//! `stowage run`: good runs write `output_N.pb` files equal to the references and a report with the contract's keys;
//! bad inputs, files, targets and paths give one `error:` line naming what is at fault and exit 1, and leave no
//! output or temporary file behind; usage errors exit 2.

mod common;

use std::path::Path;
use std::process::Command;

use common::{case, data, fails, light, model, s, stowage};
use prost::Message;
use stowage_compiler::onnx;
use stowage_runtime::Tensor;

fn write_tensor(path: &Path, t: &Tensor<'_>, name: &str) -> String {
    std::fs::write(path, onnx::tensor::encode(t, name).expect("encodes").encode_to_vec()).expect("writes");
    s(path)
}

fn read_f32(path: impl AsRef<Path>) -> (Vec<usize>, Vec<f32>) {
    let t = onnx::read_tensor(path.as_ref()).unwrap_or_else(|e| panic!("{e}"));
    (t.shape().to_vec(), t.to_vec::<f32>().expect("f32"))
}

/// Every file in `dir` (none when it does not exist), sorted.
fn files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| rd.map(|e| e.expect("entry").file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    names.sort();
    names
}

fn assert_same_output(got: &Path, want: &str) {
    let (got_shape, got) = read_f32(got);
    let (want_shape, want) = read_f32(want);
    assert_eq!(got_shape, want_shape);
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!((g - w).abs() <= 1e-6 * w.abs().max(1.0), "element {i}: {g} != {w}");
    }
}

#[test]
fn add_with_positional_inputs_writes_the_output_and_the_report() {
    let add = case("test_add");
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("out");
    let report = tmp.path().join("report.json");
    let (code, stdout, err) = stowage(&[
        "run",
        &model(&add),
        "--input",
        &data(&add, "input_0.pb"),
        "--input",
        &data(&add, "input_1.pb"),
        "--output-dir",
        &s(&out),
        "--report",
        &s(&report),
        "--repeat",
        "3",
        "--threads",
        "2",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(stdout.contains("output 'sum': f32[3, 4, 5]"), "{stdout}");
    assert_eq!(files(&out), ["output_0.pb"]);
    assert_same_output(&out.join("output_0.pb"), &data(&add, "output_0.pb"));
    assert_eq!(files(tmp.path()), ["out", "report.json"], "a temporary file was left behind");

    let r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).expect("report written")).expect("the report is JSON");
    for key in ["target", "planned_copies", "performed_copies", "bytes_moved", "peak_bytes", "peak_lower_bound_bytes"] {
        assert!(r.get(key).is_some(), "report lacks '{key}': {r}");
    }
    assert_eq!(r["target"], "cpu");
    assert_eq!(r["bytes_moved"], 0);
    assert!(r["planned_copies"].is_array() && r["performed_copies"].is_array(), "{r}");
    assert!(r["peak_bytes"]["host"].is_u64(), "{r}");
    for key in ["compile", "first_run", "run_median"] {
        let ms = r["timings_ms"][key].as_f64().unwrap_or_else(|| panic!("timings_ms.{key} missing: {r}"));
        assert!(ms >= 0.0 && ms.is_finite(), "timings_ms.{key} = {ms}");
    }
    assert!(stdout.contains("over 3 runs"), "{stdout}");
    // Every run's time, in order: the first is first_run.
    let runs = r["timings_ms"]["runs"].as_array().unwrap_or_else(|| panic!("timings_ms.runs missing: {r}"));
    assert_eq!(runs.len(), 3, "{r}");
    assert_eq!(runs[0], r["timings_ms"]["first_run"], "{r}");
}

#[test]
fn add_with_named_inputs_in_any_order() {
    let add = case("test_add");
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("out");
    let y = format!("y={}", data(&add, "input_1.pb"));
    let x = format!("x={}", data(&add, "input_0.pb"));
    let (code, _, err) = stowage(&["run", &model(&add), "--input", &y, "--input", &x, "--output-dir", &s(&out)]);
    assert_eq!(code, 0, "{err}");
    assert_same_output(&out.join("output_0.pb"), &data(&add, "output_0.pb"));

    // A name for one, the next graph input for the other.
    let out2 = tmp.path().join("out2");
    let (code, _, err) =
        stowage(&["run", &model(&add), "--input", &y, "--input", &data(&add, "input_0.pb"), "--output-dir", &s(&out2)]);
    assert_eq!(code, 0, "{err}");
    assert_same_output(&out2.join("output_0.pb"), &data(&add, "output_0.pb"));
}

#[test]
fn outputs_are_written_in_graph_output_order() {
    let split = case("test_split_1d_uneven_split_opset18");
    let tmp = tempfile::tempdir().expect("tempdir");
    let (code, _, err) =
        stowage(&["run", &model(&split), "--input", &data(&split, "input_0.pb"), "--output-dir", &s(tmp.path())]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(files(tmp.path()), ["output_0.pb", "output_1.pb", "output_2.pb", "output_3.pb"]);
    for k in 0..4 {
        let name = format!("output_{k}.pb");
        assert_same_output(&tmp.path().join(&name), &data(&split, &name));
    }
}

#[test]
fn a_shape_setting_input_is_specialised() {
    let reshape = case("test_reshape_negative_dim");
    let tmp = tempfile::tempdir().expect("tempdir");
    let report = tmp.path().join("r.json");
    let (code, _, err) = stowage(&[
        "run",
        &model(&reshape),
        "--input",
        &data(&reshape, "input_0.pb"),
        "--input",
        &data(&reshape, "input_1.pb"),
        "--output-dir",
        &s(tmp.path()),
        "--report",
        &s(&report),
    ]);
    assert_eq!(code, 0, "{err}");
    assert_same_output(&tmp.path().join("output_0.pb"), &data(&reshape, "output_0.pb"));
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).expect("report")).expect("JSON");
    assert_eq!(r["assumed_inputs"], serde_json::json!(["shape"]), "{r}");
}

#[test]
fn wrong_dtype_names_the_input_and_both_types() {
    let add = case("test_add");
    let tmp = tempfile::tempdir().expect("tempdir");
    let x = write_tensor(&tmp.path().join("x.pb"), &Tensor::from_vec(&[3, 4, 5], vec![1i64; 60]).unwrap(), "x");
    let err = fails(&["run", &model(&add), "--input", &x, "--input", &data(&add, "input_1.pb")]);
    assert!(err.contains("input 'x'") && err.contains("f32") && err.contains("i64"), "{err}");

    // The same for a shape-setting input, whose value is folded.
    let reshape = case("test_reshape_negative_dim");
    let shape = write_tensor(&tmp.path().join("shape.pb"), &Tensor::from_vec(&[3], vec![2i32, -1, 2]).unwrap(), "s");
    let err = fails(&["run", &model(&reshape), "--input", &data(&reshape, "input_0.pb"), "--input", &shape]);
    assert!(err.contains("input 'shape'") && err.contains("i64") && err.contains("i32"), "{err}");
}

#[test]
fn wrong_shape_names_the_input_and_both_shapes() {
    let add = case("test_add");
    let tmp = tempfile::tempdir().expect("tempdir");
    for shape in [vec![3, 4], vec![3, 4, 6]] {
        let n = shape.iter().product();
        let x = write_tensor(&tmp.path().join("x.pb"), &Tensor::from_vec(&shape, vec![1f32; n]).unwrap(), "x");
        let err = fails(&["run", &model(&add), "--input", &x, "--input", &data(&add, "input_1.pb")]);
        assert!(err.contains("input 'x'") && err.contains("[3, 4, 5]") && err.contains(&format!("{shape:?}")), "{err}");
    }

    let squeezenet = light("squeezenet");
    let big = write_tensor(
        &tmp.path().join("data.pb"),
        &Tensor::from_vec(&[2, 3, 224, 224], vec![0f32; 2 * 3 * 224 * 224]).unwrap(),
        "data_0",
    );
    let err = fails(&["run", &model(&squeezenet), "--input", &big]);
    assert!(
        err.contains("input 'data_0'") && err.contains("[2, 3, 224, 224]") && err.contains("[1, 3, 224, 224]"),
        "{err}"
    );
}

#[test]
fn a_missing_input_is_named() {
    let add = case("test_add");
    let err = fails(&["run", &model(&add), "--input", &data(&add, "input_0.pb")]);
    assert!(err.contains("input 'y'") && err.contains("missing"), "{err}");
    let x = format!("x={}", data(&add, "input_0.pb"));
    let err = fails(&["run", &model(&add), "--input", &x]);
    assert!(err.contains("input 'y'") && err.contains("missing"), "{err}");
    let err = fails(&["run", &model(&add)]);
    assert!(err.contains("input 'x'") && err.contains("missing"), "{err}");
}

#[test]
fn an_extra_input_is_named() {
    let add = case("test_add");
    let third = data(&add, "output_0.pb");
    let err = fails(&[
        "run",
        &model(&add),
        "--input",
        &data(&add, "input_0.pb"),
        "--input",
        &data(&add, "input_1.pb"),
        "--input",
        &third,
    ]);
    assert!(err.contains("extra") && err.contains(&third) && err.contains("2 inputs"), "{err}");
    let x = format!("x={}", data(&add, "input_0.pb"));
    let err = fails(&["run", &model(&add), "--input", &x, "--input", &x]);
    assert!(err.contains("input 'x'") && err.contains("twice"), "{err}");
}

#[test]
fn an_input_name_the_model_does_not_have() {
    let add = case("test_add");
    let nope = format!("nope={}", data(&add, "input_0.pb"));
    let err = fails(&["run", &model(&add), "--input", &nope, "--input", &data(&add, "input_1.pb")]);
    assert!(err.contains("'nope'") && err.contains("no input") && err.contains("x, y"), "{err}");
}

#[test]
fn an_unreadable_input_file_is_named() {
    let add = case("test_add");
    let tmp = tempfile::tempdir().expect("tempdir");
    let missing = s(&tmp.path().join("nonexistent.pb"));
    let text = tmp.path().join("notes.pb");
    std::fs::write(&text, "[package]\nname = \"not a tensor\"\n").expect("writes");
    let empty = tmp.path().join("empty.pb");
    std::fs::write(&empty, b"").expect("writes");
    for (file, why) in [
        (missing, "No such file"),
        (s(&text), "not a TensorProto"),
        (s(&empty), "not a TensorProto"),
        (s(tmp.path()), "directory"),
    ] {
        let err = fails(&["run", &model(&add), "--input", &file, "--input", &data(&add, "input_1.pb")]);
        assert!(err.contains(&file) && err.contains("input 'x'") && err.contains(why), "{err}");
        let named = format!("y={file}");
        let err = fails(&["run", &model(&add), "--input", &data(&add, "input_0.pb"), "--input", &named]);
        assert!(err.contains(&file) && err.contains("input 'y'"), "{err}");
    }
}

#[test]
fn nan_and_inf_inputs_are_computed() {
    let add = case("test_add");
    let tmp = tempfile::tempdir().expect("tempdir");
    let (_, mut x) = read_f32(data(&add, "input_0.pb"));
    let (_, mut y) = read_f32(data(&add, "input_1.pb"));
    x[0] = f32::NAN;
    x[1] = f32::INFINITY;
    x[2] = f32::NEG_INFINITY;
    x[3] = f32::INFINITY;
    y[3] = f32::NEG_INFINITY;
    let xf = write_tensor(&tmp.path().join("x.pb"), &Tensor::from_vec(&[3, 4, 5], x.clone()).unwrap(), "x");
    let yf = write_tensor(&tmp.path().join("y.pb"), &Tensor::from_vec(&[3, 4, 5], y.clone()).unwrap(), "y");
    let out = tmp.path().join("out");
    let (code, _, err) = stowage(&["run", &model(&add), "--input", &xf, "--input", &yf, "--output-dir", &s(&out)]);
    assert_eq!(code, 0, "{err}");
    let (shape, sum) = read_f32(out.join("output_0.pb"));
    assert_eq!(shape, [3, 4, 5]);
    assert!(sum[0].is_nan(), "{}", sum[0]);
    assert_eq!(sum[1], f32::INFINITY);
    assert_eq!(sum[2], f32::NEG_INFINITY);
    assert!(sum[3].is_nan(), "inf + -inf = {}", sum[3]);
    for i in 4..60 {
        assert_eq!(sum[i], x[i] + y[i], "element {i}");
    }
}

#[test]
fn an_output_dir_that_cannot_be_written_leaves_nothing() {
    let add = case("test_add");
    let tmp = tempfile::tempdir().expect("tempdir");
    let inputs = ["--input".to_string(), data(&add, "input_0.pb"), "--input".to_string(), data(&add, "input_1.pb")];
    let inputs: Vec<&str> = inputs.iter().map(String::as_str).collect();

    // The parent is a regular file.
    let file = tmp.path().join("file");
    std::fs::write(&file, "x").expect("writes");
    let dir = file.join("out");
    let err = fails(&[&["run", &model(&add)], &inputs[..], &["--output-dir", &s(&dir)]].concat());
    assert!(err.contains(&s(&dir)), "{err}");
    assert_eq!(std::fs::read(&file).expect("still a file"), b"x");
    assert_eq!(files(tmp.path()), ["file"], "something was left beside the file");

    // The output dir is itself a regular file.
    let err = fails(&[&["run", &model(&add)], &inputs[..], &["--output-dir", &s(&file)]].concat());
    assert!(err.contains(&s(&file)), "{err}");
    assert_eq!(files(tmp.path()), ["file"], "something was left beside the file");

    // output_0.pb cannot be replaced: it is a folder.
    let out = tmp.path().join("out");
    std::fs::create_dir_all(out.join("output_0.pb").join("inside")).expect("mkdir");
    let err = fails(&[&["run", &model(&add)], &inputs[..], &["--output-dir", &s(&out)]].concat());
    assert!(err.contains(&s(&out.join("output_0.pb"))), "{err}");
    assert_eq!(files(&out), ["output_0.pb"], "a temporary file was left behind");

    // With several outputs, one that cannot be written means none is.
    let split = case("test_split_1d_uneven_split_opset18");
    let out = tmp.path().join("split");
    std::fs::create_dir_all(out.join("output_2.pb").join("inside")).expect("mkdir");
    let err = fails(&["run", &model(&split), "--input", &data(&split, "input_0.pb"), "--output-dir", &s(&out)]);
    assert!(err.contains(&s(&out.join("output_2.pb"))), "{err}");
    assert_eq!(files(&out), ["output_2.pb"], "outputs or temporary files were left behind");
}

#[test]
fn a_report_that_cannot_be_written_is_named() {
    let add = case("test_add");
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("file");
    std::fs::write(&file, "x").expect("writes");
    let folder = tmp.path().join("folder");
    std::fs::create_dir(&folder).expect("mkdir");
    let out = tmp.path().join("out");
    for report in [file.join("report.json"), folder.clone()] {
        let err = fails(&[
            "run",
            &model(&add),
            "--input",
            &data(&add, "input_0.pb"),
            "--input",
            &data(&add, "input_1.pb"),
            "--output-dir",
            &s(&out),
            "--report",
            &s(&report),
        ]);
        assert!(err.contains(&s(&report)) && err.contains("report"), "{err}");
        assert_eq!(files(tmp.path()), ["file", "folder"], "outputs or temporary files were left behind");
        assert!(files(&folder).is_empty());
    }
}

#[test]
fn targets_are_checked_and_opencl_runs_where_there_is_a_device() {
    let add = case("test_add");
    let inputs = ["--input", &data(&add, "input_0.pb"), "--input", &data(&add, "input_1.pb")].map(String::from);
    let inputs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    let m = model(&add);
    let err = fails(&[&["run", &m, "--target", "nope"], &inputs[..]].concat());
    assert!(err.contains("unknown target 'nope'"), "{err}");
    // The target is checked before anything else.
    let err = fails(&["run", &m, "--target", "nope"]);
    assert!(err.contains("unknown target 'nope'"), "{err}");
    let err = fails(&[&["run", &m, "--target", "cpu,cpu"], &inputs[..]].concat());
    assert!(err.contains("target 'cpu' is listed twice"), "{err}");
    let (code, _, err) = stowage(&[&["run", &m, "--target", "opencl,cpu"], &inputs[..]].concat());
    assert_eq!(code, 0, "a list of targets is planned across: {err}");
    let (code, _, err) = stowage(&[&["run", &m, "--target", "cpu"], &inputs[..]].concat());
    assert_eq!(code, 0, "{err}");
    let tmp = tempfile::tempdir().expect("temp dir");
    let report = tmp.path().join("report.json").to_string_lossy().into_owned();
    for target in ["opencl", "opencl:discrete"] {
        let (code, out, err) = stowage(&[&["run", &m, "--target", target, "--report", &report], &inputs[..]].concat());
        assert_eq!(code, 0, "{target}: {err}");
        assert!(out.contains("ran on opencl:0"), "{target}: {out}");
        let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).expect("report")).expect("json");
        assert_eq!(r["ran_on"], "opencl:0", "{r}");
        // The one value is the output, handed to the caller, and the inputs arrive by import or upload: nothing
        // is left for the arena, planned or measured.
        assert_eq!(r["measured_peak_bytes"]["opencl:0"], 0, "{r}");
        assert_eq!(r["peak_bytes"]["opencl:0"], 0, "{r}");
        let uploads =
            r["performed_copies"].as_array().expect("copies").iter().filter(|c| c["kind"] == "upload").count();
        if target == "opencl:discrete" {
            assert_eq!(uploads, 2, "one upload per input: {r}");
        }
    }
    let err = fails(&[&["run", &m, "--target", "opencl:7"], &inputs[..]].concat());
    assert!(err.contains("opencl:7"), "{err}");
}

#[test]
fn without_an_opencl_platform_the_target_is_named_and_cpu_still_works() {
    let add = case("test_add");
    let inputs = ["--input", &data(&add, "input_0.pb"), "--input", &data(&add, "input_1.pb")].map(String::from);
    let inputs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    let m = model(&add);
    let none = tempfile::tempdir().expect("temp dir");
    let run = |target: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_stowage"))
            .args([&["run", &m, "--target", target], &inputs[..]].concat())
            .env("OCL_ICD_VENDORS", none.path())
            .output()
            .expect("runs");
        (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, err) = run("opencl");
    assert_eq!(code, 1, "{err}");
    assert!(err.starts_with("error: target 'opencl': no OpenCL device") && err.lines().count() == 1, "{err}");
    assert_eq!(run("cpu").0, 0);
    let listed = Command::new(env!("CARGO_BIN_EXE_stowage"))
        .arg("targets")
        .env("OCL_ICD_VENDORS", none.path())
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&listed.stdout);
    assert!(text.contains("cpu ") && text.contains("opencl    none:"), "{text}");
}

#[test]
fn zero_repeats_or_threads_are_usage_errors() {
    let add = case("test_add");
    let m = model(&add);
    for args in [
        vec!["run", &m, "--repeat", "0"],
        vec!["run", &m, "--threads", "0"],
        vec!["run", &m, "--repeat", "-1"],
        vec!["run", &m, "--threads", "many"],
        vec!["run"],
    ] {
        let (code, _, err) = stowage(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
    }
}

#[test]
fn a_model_that_is_not_onnx_is_one_line() {
    let add = case("test_add");
    let tmp = tempfile::tempdir().expect("tempdir");
    let text = tmp.path().join("model.onnx");
    std::fs::write(&text, "[package]\nname = \"stowage\"\n").expect("writes");
    let input = data(&add, "input_0.pb");
    let err = fails(&["run", &s(&text), "--input", &input]);
    assert!(err.contains(&s(&text)) && err.contains("not an ONNX model"), "{err}");
    // A TensorProto is a valid protobuf message but not a model.
    let err = fails(&["run", &input, "--input", &input]);
    assert!(err.contains(&input) && err.contains("not an ONNX model"), "{err}");
    let missing = s(&tmp.path().join("missing.onnx"));
    let err = fails(&["run", &missing, "--input", &input]);
    assert!(err.contains(&missing), "{err}");
}

/// A model computing `sum = Add(x, y)` over f32 inputs of shape `[N, 3]`, N symbolic.
fn symbolic_add(path: &Path) -> String {
    use onnx::proto::tensor_shape_proto::{dimension, Dimension};
    use onnx::proto::{tensor_proto::DataType, ValueInfoProto};
    use onnx::proto::{type_proto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorShapeProto, TypeProto};
    let dim = |v: dimension::Value| Dimension { value: Some(v), ..Default::default() };
    let input = |name: &str| ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(DataType::Float as i32),
                shape: Some(TensorShapeProto {
                    dim: vec![dim(dimension::Value::DimParam("N".into())), dim(dimension::Value::DimValue(3))],
                }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    };
    let model = ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(14) }],
        graph: Some(GraphProto {
            name: Some("symbolic_add".into()),
            node: vec![NodeProto {
                name: Some("add".into()),
                op_type: Some("Add".into()),
                input: vec!["x".into(), "y".into()],
                output: vec!["sum".into()],
                ..Default::default()
            }],
            input: vec![input("x"), input("y")],
            output: vec![ValueInfoProto { name: Some("sum".into()), ..Default::default() }],
            ..Default::default()
        }),
        ..Default::default()
    };
    std::fs::write(path, model.encode_to_vec()).expect("writes");
    s(path)
}

#[test]
fn symbolic_dimensions_take_the_given_shapes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let m = symbolic_add(&tmp.path().join("model.onnx"));
    let tensor = |name: &str, rows: usize, v: f32| {
        let t = Tensor::from_vec(&[rows, 3], (0..rows * 3).map(|i| v * i as f32).collect::<Vec<f32>>()).unwrap();
        write_tensor(&tmp.path().join(format!("{name}{rows}.pb")), &t, name)
    };
    let out = tmp.path().join("out");
    let (code, _, err) = stowage(&[
        "run",
        &m,
        "--input",
        &tensor("x", 2, 1.0),
        "--input",
        &tensor("y", 2, 10.0),
        "--output-dir",
        &s(&out),
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(read_f32(out.join("output_0.pb")), (vec![2, 3], (0..6).map(|i| 11.0 * i as f32).collect()));

    // A fixed dimension that does not fit is named with the symbolic ones.
    let x = write_tensor(&tmp.path().join("x24.pb"), &Tensor::from_vec(&[2, 4], vec![0f32; 8]).unwrap(), "x");
    let err = fails(&["run", &m, "--input", &x, "--input", &tensor("y", 2, 1.0)]);
    assert!(err.contains("input 'x'") && err.contains("[N, 3]") && err.contains("[2, 4]"), "{err}");
    // Shapes that fit the declaration but not each other: the node is named.
    let err = fails(&["run", &m, "--input", &tensor("x", 2, 1.0), "--input", &tensor("y", 4, 1.0)]);
    assert!(err.contains("'add'"), "{err}");
    // So is an --input-shape the tensor does not have.
    let err =
        fails(&["run", &m, "--input-shape", "x=5,3", "--input", &tensor("x", 2, 1.0), "--input", &tensor("y", 2, 1.0)]);
    assert!(
        err.contains("input 'x'") && err.contains("[5, 3]") && err.contains("[2, 3]") && err.contains("--input-shape"),
        "{err}"
    );
}

#[test]
fn an_input_fixed_by_input_value_is_not_given_again() {
    let reshape = case("test_reshape_negative_dim");
    let tmp = tempfile::tempdir().expect("tempdir");
    let shape = format!("shape={}", data(&reshape, "input_1.pb"));
    let (code, _, err) = stowage(&[
        "run",
        &model(&reshape),
        "--input-value",
        &shape,
        "--input",
        &data(&reshape, "input_0.pb"),
        "--output-dir",
        &s(tmp.path()),
    ]);
    assert_eq!(code, 0, "{err}");
    assert_same_output(&tmp.path().join("output_0.pb"), &data(&reshape, "output_0.pb"));
    let err = fails(&[
        "run",
        &model(&reshape),
        "--input-value",
        &shape,
        "--input",
        &data(&reshape, "input_0.pb"),
        "--input",
        &data(&reshape, "input_1.pb"),
    ]);
    assert!(err.contains("extra") && err.contains("--input-value"), "{err}");
    let err = fails(&["run", &model(&reshape), "--input-value", &shape, "--input", &shape]);
    assert!(err.contains("input 'shape'") && err.contains("twice"), "{err}");
}

#[test]
fn a_shape_value_that_does_not_fit_names_the_node() {
    let reshape = case("test_reshape_negative_dim");
    let tmp = tempfile::tempdir().expect("tempdir");
    let shape = write_tensor(&tmp.path().join("s.pb"), &Tensor::from_vec(&[3], vec![5i64, 5, 5]).unwrap(), "shape");
    let err = fails(&["run", &model(&reshape), "--input", &data(&reshape, "input_0.pb"), "--input", &shape]);
    assert!(err.contains("Reshape"), "{err}");
}
