//! Generates the ONNX protobuf types from `proto/onnx.proto` (ONNX 1.23.2, IR version 14, opset 28) and the value
//! messages of `proto/onnx-data.proto` (sequences, maps, optionals) with prost. protox parses the schemas in Rust,
//! so no `protoc` binary is needed to build stowage.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let schemas = ["proto/onnx.proto", "proto/onnx-data.proto"];
    for schema in schemas {
        println!("cargo:rerun-if-changed={schema}");
    }
    let files = protox::compile(schemas, ["proto"])?;
    // `raw_data` as `Bytes`: a model's weights are then sliced out of the bytes they were decoded from where those
    // are `Bytes` themselves, and copied once (not twice, as into a `Vec`) where they are a slice.
    prost_build::Config::new().bytes([".onnx.TensorProto.raw_data"]).compile_fds(files)?;
    Ok(())
}
