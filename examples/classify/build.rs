//! Compiles the model suite's SqueezeNet for the CPU, its MLP for OpenCL, and a run-time model compiled in stages
//! for the CPU, into typed modules.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let models = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../target/onnx-models");
    let squeezenet = models.join("random/squeezenet/model.onnx");
    let mlp = models.join("mlp/model.onnx");
    for model in [&squeezenet, &mlp] {
        if !model.exists() {
            return Err(format!("{} is missing: run scripts/test (it writes the model suite)", model.display()).into());
        }
    }
    let mut build = stowage_driver::build::Build::new();
    build.backends(&[&stowage_cpu::KIND, &stowage_opencl::KIND]);
    build.clone().target("cpu").module_name("squeezenet").compile(&squeezenet)?;
    // On a unified device the MLP's input is imported in place when it is page-aligned: its `run` takes an
    // `Aligned` buffer, or plain memory at the cost of one counted copy.
    build.clone().target("opencl").module_name("mlp_opencl").compile(&mlp)?;
    // A detector's tail whose NonMaxSuppression keeps as many boxes as the data says: the part before it is built
    // ahead of time, the rest compiles when a run reaches it (docs/building.md, "Models compiled in stages").
    let detections = models.join("../run-time-models/nms_after_softmax/model.onnx");
    if !detections.exists() {
        return Err(
            format!("{} is missing: run scripts/test (it writes the run-time models)", detections.display()).into()
        );
    }
    build.target("cpu").module_name("detections").compile(&detections)?;
    Ok(())
}
