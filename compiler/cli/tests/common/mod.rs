//! What the CLI suites share: running the binary, and where the generated test data lives.
#![allow(dead_code)] // each suite uses its own part

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn stowage(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_stowage")).args(args).output().expect("runs");
    (
        out.status.code().expect("exited, not killed by a signal"),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// Runs `stowage run ARGS…`, expects exit 1 with one `error:` line, and returns that line.
pub fn fails(args: &[&str]) -> String {
    let (code, out, err) = stowage(args);
    assert_eq!(code, 1, "{args:?}: stdout {out}\nstderr {err}");
    assert!(err.starts_with("error: ") && err.trim_end().lines().count() == 1, "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    err
}

pub fn target_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target")
}

/// An ONNX node test case's folder.
pub fn case(name: &str) -> PathBuf {
    let p = target_dir().join("onnx-node-tests").join(name);
    assert!(
        p.join("model.onnx").exists(),
        "{} is missing: run scripts/test (it writes the ONNX node tests)",
        p.display()
    );
    p
}

pub fn light(name: &str) -> PathBuf {
    let p = target_dir().join("onnx-models/light").join(name);
    assert!(p.join("model.onnx").exists(), "{} is missing: run scripts/test (it writes the light models)", p.display());
    p
}

pub fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

pub fn model(dir: &Path) -> String {
    s(&dir.join("model.onnx"))
}

pub fn data(dir: &Path, file: &str) -> String {
    s(&dir.join("test_data_set_0").join(file))
}

/// The model suite's MLP.
pub fn mlp() -> String {
    let p = target_dir().join("onnx-models/mlp/model.onnx");
    assert!(p.exists(), "{} is missing: run scripts/test (it writes the model suite)", p.display());
    s(&p)
}

/// One of the planner's examples (`camera`, `mixed`).
pub fn example(name: &str) -> String {
    let p = target_dir().join("planning-examples").join(format!("{name}.onnx"));
    assert!(p.exists(), "{} is missing: run scripts/test (it writes the planner's examples)", p.display());
    s(&p)
}

/// Runs a program, returning its exit code, stdout and stderr.
pub fn exec(program: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(program).args(args).output().unwrap_or_else(|e| panic!("{}: {e}", program.display()));
    (
        out.status.code().expect("exited, not killed by a signal"),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// A u8 camera frame [1,480,640,3] as a TensorProto file in `dir`.
pub fn frame_file(dir: &Path) -> String {
    let data: Vec<u8> = (0..480 * 640 * 3).map(|i| (i * 7 % 251) as u8).collect();
    let t = stowage_runtime::Tensor::from_slice(&[1, 480, 640, 3], &data).expect("frame");
    let path = dir.join("frame.pb");
    let proto = stowage_compiler::onnx::tensor::encode(&t, "frame").expect("encodes");
    std::fs::write(&path, prost::Message::encode_to_vec(&proto)).expect("writes");
    s(&path)
}
