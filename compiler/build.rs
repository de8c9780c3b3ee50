//! Generates the ONNX protobuf types from `proto/onnx.proto` (ONNX 1.23.2, IR version 14, opset 28) with prost.
//! protox parses the schema in Rust, so no `protoc` binary is needed to build stowage.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let schema = "proto/onnx.proto";
    println!("cargo:rerun-if-changed={schema}");
    let files = protox::compile([schema], ["proto"])?;
    prost_build::Config::new().compile_fds(files)?;
    Ok(())
}
