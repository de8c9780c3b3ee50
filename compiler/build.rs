//! Generates the ONNX protobuf types from `proto/onnx.proto` (ONNX 1.23.2, IR version 14, opset 28) with prost.
//! protox parses the schema in Rust, so no `protoc` binary is needed to build stowage.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let schema = "proto/onnx.proto";
    println!("cargo:rerun-if-changed={schema}");
    let files = protox::compile([schema], ["proto"])?;
    // An initializer's `raw_data` is a `Bytes`: decoded from a shared buffer (a model in an executable's image), it is
    // a view of the model's bytes, not a copy of them.
    prost_build::Config::new().bytes([".onnx.TensorProto.raw_data"]).compile_fds(files)?;
    Ok(())
}
