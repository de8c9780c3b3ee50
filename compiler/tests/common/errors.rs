//! Importing a built model in memory, and checking that a bad one fails with one line naming what is wrong.

use stowage_compiler::onnx::proto::ModelProto;
use stowage_compiler::onnx::{self, ImportConfig};

/// `m` imported with the default configuration, or the error's text.
pub fn import(m: &ModelProto) -> Result<stowage_compiler::ir::Graph, String> {
    onnx::load_bytes(&super::build::bytes(m), &ImportConfig::new()).map_err(|e| e.to_string())
}

/// The one-line error importing `m` gives; panics when it imports or the error spans lines.
pub fn error_of(m: &ModelProto) -> String {
    let Err(err) = import(m) else { panic!("the model imported, but it should not have") };
    assert!(!err.contains('\n'), "error is not one line: {err}");
    err
}

/// Asserts that `err` mentions every one of `parts`.
pub fn check(err: &str, parts: &[&str]) {
    for p in parts {
        assert!(err.contains(p), "error {err:?} does not mention {p:?}");
    }
}
