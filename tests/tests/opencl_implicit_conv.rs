//! Convolutions as a large GPU runs them, checked on the CI's OpenCL device, which would otherwise take the
//! two-launch form on undivided products: the im2col unfolding computed inside the product, and products divided
//! for the 264 work-groups an H200 asks for (split along K where the output alone is too few tiles). Every ONNX
//! Conv node test and the random-weight SqueezeNet, ResNet-50 and Inception v1 on `opencl` against their
//! references. Its own test binary, because it sets the environment.

use std::path::Path;

use stowage_cli::session::{self, RunOptions};
use stowage_compiler::onnx;

fn run(dir: &Path, target: &str, rtol: f64, atol: f64) -> Result<(), String> {
    let model = dir.join("model.onnx");
    let data = dir.join("test_data_set_0");
    let proto = onnx::decode(&std::fs::read(&model).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    let graph = proto.graph.as_ref().ok_or("no graph")?;
    let inits: Vec<&str> = graph.initializer.iter().map(|t| t.name()).collect();
    let mut inputs = Vec::new();
    for (k, vi) in graph.input.iter().filter(|i| !inits.contains(&i.name())).enumerate() {
        inputs.push((vi.name().to_string(), onnx::read_tensor(data.join(format!("input_{k}.pb")))?));
    }
    let outcome = session::run(&model, inputs, &RunOptions { target: target.into(), ..stowage_cli::run_options() })?;
    for (k, (name, got)) in outcome.outputs.iter().enumerate() {
        let want = onnx::read_tensor(data.join(format!("output_{k}.pb")))?;
        stowage_tests::compare(got, &want, rtol, atol).map_err(|e| format!("output '{name}': {e}"))?;
    }
    Ok(())
}

#[test]
fn convolutions_computed_inside_the_product_match() {
    // SAFETY: this test binary has this one test, so nothing else reads the environment while it is set.
    unsafe {
        std::env::set_var("STOWAGE_OPENCL_IMPLICIT_CONV", "1");
        std::env::set_var("STOWAGE_OPENCL_GEMM_GROUPS", "264");
    }
    let cases = stowage_tests::generated("onnx-node-tests", "gen_node_tests.py");
    let mut names: Vec<String> = std::fs::read_dir(&cases)
        .expect("node tests")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("test_conv_") || n.starts_with("test_basic_conv_"))
        .collect();
    names.sort();
    assert!(names.len() >= 5, "conv cases: {names:?}");
    let models = stowage_tests::generated("onnx-models", "model_suite.py");
    // The three models first, so that each process starts on a long one; over two processes, as PoCL builds one
    // program at a time in each (see `stowage_tests::across_processes`).
    let mut work: Vec<(std::path::PathBuf, &str, f64, f64)> =
        ["random/squeezenet", "random/resnet50", "random/inception_v1"]
            .iter()
            .map(|name| (models.join(name), *name, 1e-3, 1e-4))
            .collect();
    work.extend(names.iter().map(|name| (cases.join(name), name.as_str(), 1e-3, 1e-5)));
    let results = stowage_tests::across_processes("convolutions_computed_inside_the_product_match", &work, |w| {
        run(&w.0, "opencl", w.2, w.3).map_err(|e| format!("{}: {e}", w.1))
    });
    let failures: Vec<String> = results.into_iter().filter_map(Result::err).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
