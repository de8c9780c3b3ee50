//! The real-model suite: trained models that other projects ship inside their PyPI packages (voice activity, wake
//! words, a mel front end, content-type detection, OCR detection and classification, …), with realistic inputs and
//! onnxruntime's outputs, written by `scripts/onnx/real_models.py` (its manifest says which package each comes from).
//! The models the manifest marks `ci` run here through `stowage run`'s code on `cpu` and on `opencl,cpu` (PoCL),
//! compared with rtol 1e-3, atol 1e-4 (exceptions below with their reason); `scripts/bench` times all of them.
//! An input the manifest lists under `input_values` (silero's sample rate, which an `If` reads) is one `stowage run`
//! folds from the value given (`onnx::value_inputs`), so one branch is imported; the wake word's `If` on a
//! threshold is chosen at run time (both branches run, `Where` selects).

use std::path::Path;

use serde_json::Value;
use stowage_cli::session::{self, RunOptions};
use stowage_compiler::onnx;
use stowage_runtime::Tensor;

/// Tolerances: rtol 1e-3, atol 1e-4 unless written here with the reason.
fn tolerance(_name: &str) -> (f64, f64) {
    (1e-3, 1e-4)
}

fn run_model(dir: &Path, entry: &Value, target: &str) -> Result<String, String> {
    let name = entry["name"].as_str().ok_or("no name")?;
    let data = dir.join("test_data_set_0");
    let names = entry["inputs"].as_array().ok_or("no inputs")?;
    let mut inputs: Vec<(String, Tensor<'static>)> = Vec::new();
    for (k, input) in names.iter().enumerate() {
        let input = input.as_str().ok_or("an input without a name")?;
        inputs.push((input.to_string(), onnx::read_tensor(data.join(format!("input_{k}.pb")))?));
    }
    let options = RunOptions { target: target.into(), ..stowage_cli::run_options() };
    let outcome = session::run(&dir.join("model.onnx"), inputs, &options)?;
    let expected = (0..).take_while(|k| data.join(format!("output_{k}.pb")).exists()).count();
    if outcome.outputs.len() != expected {
        return Err(format!("{} outputs, the reference has {expected}", outcome.outputs.len()));
    }
    let (rtol, atol) = tolerance(name);
    for (k, (out, got)) in outcome.outputs.iter().enumerate() {
        let want = onnx::read_tensor(data.join(format!("output_{k}.pb")))?;
        stowage_tests::compare(got, &want, rtol, atol).map_err(|e| format!("output '{out}': {e}"))?;
    }
    for a in &outcome.plan.arenas {
        let measured = outcome.peaks.iter().find(|(s, _)| *s == a.space).map_or(0, |p| p.1);
        if measured != a.peak_bytes {
            return Err(format!("{}: measured peak {measured} bytes, planned {}", a.space, a.peak_bytes));
        }
    }
    Ok(format!(
        "{name:<20} {target:<11} ok  compile {:>7.1} ms  run {:>8.2} ms  on {}",
        outcome.compile_ms, outcome.run_median_ms, outcome.ran_on
    ))
}

fn check(test: &str, target: &str) {
    let root = stowage_tests::generated("real-models", "real_models.py");
    let text = std::fs::read_to_string(root.join("manifest.json")).expect("manifest.json");
    let manifest: Vec<Value> = serde_json::from_str(&text).expect("manifest.json is JSON");
    assert!(manifest.len() >= 8, "the suite has {} models", manifest.len());
    let ci: Vec<&Value> = manifest.iter().filter(|e| e["ci"].as_bool() == Some(true)).collect();
    assert!(ci.len() >= 8, "{} models run in CI", ci.len());
    // Over two processes: PoCL builds one program at a time in each (see `stowage_tests::across_processes`).
    let results = stowage_tests::across_processes(test, &ci, |entry| {
        let name = entry["name"].as_str().unwrap_or_default();
        let line = run_model(&root.join(name), entry, target).map_err(|e| format!("{name}: {e}"))?;
        println!("{line}");
        Ok(())
    });
    let failures: Vec<String> = results.into_iter().filter_map(Result::err).collect();
    assert!(failures.is_empty(), "{target}: models that do not match:\n{}", failures.join("\n"));
}

#[test]
fn every_real_model_matches_onnxruntime_on_the_cpu() {
    check("every_real_model_matches_onnxruntime_on_the_cpu", "cpu");
}

/// Placed op by op on the OpenCL device (PoCL in CI), the CPU taking what it has no kernel for.
#[test]
fn every_real_model_matches_onnxruntime_on_opencl_and_cpu() {
    check("every_real_model_matches_onnxruntime_on_opencl_and_cpu", "opencl,cpu");
}
