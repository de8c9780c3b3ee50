//! `stowage import`: prints the IR; bad models and options give one `error:` line and exit 1; usage errors exit 2.

use std::path::PathBuf;
use std::process::Command;

fn stowage(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_stowage")).args(args).output().expect("runs");
    (
        out.status.code().expect("exited"),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

fn light(name: &str) -> String {
    let p =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/onnx-models/light").join(name).join("model.onnx");
    assert!(p.exists(), "{} is missing: run scripts/test (it writes the light models)", p.display());
    p.to_string_lossy().into_owned()
}

#[test]
fn import_prints_the_ir() {
    let (code, out, err) = stowage(&["import", &light("squeezenet"), "--timings"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("graph \"squeezenet_old\" opset 9\n"), "{out}");
    assert!(out.contains("= Conv(") && out.contains("output \"softmaxout_1\""), "{out}");
    assert!(err.contains("pass fold_constants") && err.contains("pass eliminate_dead_code"), "{err}");
}

#[test]
fn input_shape_must_fit_the_model() {
    let (code, out, err) = stowage(&["import", &light("squeezenet"), "--input-shape", "data_0=1,3,224,224"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("input v"));
    let (code, _, err) = stowage(&["import", &light("squeezenet"), "--input-shape", "data_0=2,3,224,224"]);
    assert_eq!(code, 1);
    assert!(err.starts_with("error: ") && err.trim_end().lines().count() == 1, "{err}");
    assert!(err.contains("input 'data_0'") && err.contains("[2, 3, 224, 224]"), "{err}");
}

#[test]
fn bad_options_and_files_are_one_line_errors() {
    for (args, needle) in [
        (vec!["import", "/nonexistent.onnx"], "/nonexistent.onnx"),
        (vec!["import", "Cargo.toml"], "not an ONNX model"),
        (vec!["import", "x.onnx", "--input-shape", "data_0"], "expected NAME=VALUE"),
        (vec!["import", "x.onnx", "--input-shape", "a=1,x"], "non-negative integers"),
        (vec!["import", "x.onnx", "--input-value", "a=/nonexistent.pb"], "--input-value a"),
    ] {
        let (code, _, err) = stowage(&args);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(err.starts_with("error: ") && err.trim_end().lines().count() == 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn usage_errors_exit_2() {
    let (code, _, _) = stowage(&["import"]);
    assert_eq!(code, 2);
    let (code, _, _) = stowage(&["frobnicate"]);
    assert_eq!(code, 2);
}

/// README's main command: the demo compiles the bundled model, runs it and matches the bundled reference.
#[test]
fn demo_runs_and_matches_its_reference() {
    let (code, out, err) = stowage(&["demo"]);
    assert_eq!(code, 0, "{err}");
    for needle in
        ["x Conv", "copies: 0 planned, 0 performed", "peak memory:", "latency:", "matches (rtol 1e-3, atol 1e-4)"]
    {
        assert!(out.contains(needle), "demo output lacks {needle:?}:\n{out}");
    }
}

/// `--check` lists every op type stowage does not support, one a line, and exits 1; a model it supports imports.
#[test]
fn check_lists_every_unsupported_op_type_one_a_line() {
    use prost::Message;
    use stowage_compiler::onnx::proto::{GraphProto, ModelProto, NodeProto, OperatorSetIdProto};
    let node = |op: &str, name: &str, domain: &str| NodeProto {
        name: Some(name.into()),
        op_type: Some(op.into()),
        domain: Some(domain.into()),
        input: vec!["x".into()],
        output: vec![format!("{name}_out")],
        ..Default::default()
    };
    let model = ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(17) }],
        graph: Some(GraphProto {
            node: vec![
                node("ImageDecoder", "u_1", ""),
                node("Relu", "r", ""),
                node("Bernoulli", "n7", ""),
                node("ImageDecoder", "u_2", ""),
                node("SVMClassifier", "svm", "ai.onnx.ml"),
            ],
            ..Default::default()
        }),
        ..Default::default()
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("model.onnx");
    std::fs::write(&path, model.encode_to_vec()).expect("writes");
    let (code, out, err) = stowage(&["import", "--check", &path.to_string_lossy()]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(
        out,
        "ImageDecoder\tai.onnx\t2 nodes\tfirst 'u_1'\nBernoulli\tai.onnx\t1 nodes\tfirst 'n7'\n\
         SVMClassifier\tai.onnx.ml\t1 nodes\tfirst 'svm'\n"
    );
    assert!(err.starts_with("error: ") && err.contains("3 op types are not supported"), "{err}");
    let (code, out, err) = stowage(&["import", "--check", &light("squeezenet")]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("every op is supported"), "{out}");
}
