//! Generates the ONNX protobuf types from `proto/onnx.proto` (ONNX 1.23.2, IR version 14, opset 28) and the value
//! messages of `proto/onnx-data.proto` (sequences, maps, optionals) with prost. protox parses the schemas in Rust,
//! so no `protoc` binary is needed to build stowage.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let schemas = ["proto/onnx.proto", "proto/onnx-data.proto"];
    for schema in schemas {
        println!("cargo:rerun-if-changed={schema}");
    }
    let files = protox::compile(schemas, ["proto"])?;
    prost_build::Config::new().compile_fds(files)?;
    Ok(())
}
