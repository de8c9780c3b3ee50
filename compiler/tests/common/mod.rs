//! Shared helpers for the compiler's tests: where the generated ONNX data lives, a small model builder, and a long chain model.
#![allow(dead_code)]

pub mod build;
pub mod chain;
pub mod errors;
pub mod mutate;

use std::path::PathBuf;

/// The workspace root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("compiler/ has a parent").to_path_buf()
}

/// A folder under `target/` written by a project script, or a panic saying which script writes it.
pub fn generated(dir: &str, script: &str) -> PathBuf {
    let path = root().join("target").join(dir);
    assert!(
        path.is_dir(),
        "{} is missing: run `scripts/test`, or `PY=$(scripts/onnx/env -q) && \"$PY\" scripts/onnx/{script}`",
        path.display()
    );
    path
}

/// The op set of this round (issue: ONNX import), as ONNX op types.
pub const OP_SET: &[&str] = stowage_compiler::onnx::SUPPORTED_OPS;

/// stowage's name for a numpy dtype name, if it is one of the runtime's datum types.
pub fn dtype(numpy: &str) -> Option<&'static str> {
    Some(match numpy {
        "bool" => "bool",
        "uint8" => "u8",
        "uint16" => "u16",
        "uint32" => "u32",
        "uint64" => "u64",
        "int8" => "i8",
        "int16" => "i16",
        "int32" => "i32",
        "int64" => "i64",
        "float16" => "f16",
        "bfloat16" => "bf16",
        "float32" => "f32",
        "float64" => "f64",
        _ => return None,
    })
}
