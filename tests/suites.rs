//! Suites of whole models with onnxruntime's outputs, in the node-test layout with a `manifest.json` (the
//! real-model suite of `scripts/onnx/real_models.py`, the exported-model suite of `scripts/onnx/sklearn_models.py`,
//! the run-time-shape suite of `scripts/onnx/run_time_models.py`):
//! each model the manifest marks `ci` runs through `stowage run`'s own code and must match within rtol 1e-3,
//! atol 1e-4 (a sequence output item by item), with its measured peak memory equal to the plan's.

use std::path::Path;

use serde_json::Value;
use stowage_cli::session::{self, RunOptions};
use stowage_compiler::onnx;
use stowage_compiler::onnx::proto::{type_proto, TypeProto};
use stowage_compiler::onnx::structure::{self, Structure};
use stowage_runtime::Tensor;

const RTOL: f64 = 1e-3;
const ATOL: f64 = 1e-4;

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
    // A sequence output is compared item by item with the reference's SequenceProto.
    let values = outcome.values().map_err(|e| e.to_string())?;
    if values.len() != expected {
        return Err(format!("{} outputs, the reference has {expected}", values.len()));
    }
    for (k, (out, got)) in values.iter().enumerate() {
        let path = data.join(format!("output_{k}.pb"));
        match got {
            Structure::Tensor(got) => {
                let want = onnx::read_tensor(&path)?;
                crate::compare(got, &want, RTOL, ATOL).map_err(|e| format!("output '{out}': {e}"))?;
            }
            got => {
                let sequence = TypeProto {
                    value: Some(type_proto::Value::SequenceType(Box::new(type_proto::Sequence { elem_type: None }))),
                    ..Default::default()
                };
                let want = structure::read_value_within(&path, Some(&sequence), usize::MAX)?;
                let (got, want) = (got.leaves(), want.leaves());
                if got.len() != want.len() {
                    return Err(format!("output '{out}': {} items, the reference has {}", got.len(), want.len()));
                }
                for (i, (g, w)) in got.into_iter().zip(want).enumerate() {
                    crate::compare(g, w, RTOL, ATOL).map_err(|e| format!("output '{out}' item {i}: {e}"))?;
                }
            }
        }
    }
    // A model compiled in stages holds each part's arenas: their peaks add up.
    let mut planned: Vec<(&str, usize)> = Vec::new();
    for a in std::iter::once(&outcome.plan).chain(&outcome.later_plans).flat_map(|p| &p.arenas) {
        match planned.iter_mut().find(|(s, _)| *s == a.space) {
            Some(e) => e.1 += a.peak_bytes,
            None => planned.push((&a.space, a.peak_bytes)),
        }
    }
    for (space, bytes) in planned {
        let measured = outcome.peaks.iter().find(|(s, _)| *s == space).map_or(0, |p| p.1);
        if measured != bytes {
            return Err(format!("{space}: measured peak {measured} bytes, planned {bytes}"));
        }
    }
    Ok(format!(
        "{name:<28} {target:<11} ok  compile {:>7.1} ms  run {:>8.2} ms  on {}",
        outcome.compile_ms, outcome.run_median_ms, outcome.ran_on
    ))
}

/// Runs the `ci` models of the suite in `target/<dir>` (written by `scripts/onnx/<script>`) on `target`, for the
/// test named `test`; the suite must have at least `min` models in CI. Panics listing every model that does not
/// match.
pub fn check(test: &str, dir: &str, script: &str, target: &str, min: usize) {
    let root = crate::generated(dir, script);
    let text = std::fs::read_to_string(root.join("manifest.json")).expect("manifest.json");
    let manifest: Vec<Value> = serde_json::from_str(&text).expect("manifest.json is JSON");
    let ci: Vec<&Value> = manifest.iter().filter(|e| e["ci"].as_bool() == Some(true)).collect();
    assert!(ci.len() >= min, "{} models of {dir} run in CI, expected at least {min}", ci.len());
    // Over two processes: PoCL builds one program at a time in each (see `crate::across_processes`).
    let results = crate::across_processes(test, &ci, |entry| {
        let name = entry["name"].as_str().unwrap_or_default();
        let line = run_model(&root.join(name), entry, target).map_err(|e| format!("{name}: {e}"))?;
        println!("{line}");
        Ok(())
    });
    let failures: Vec<String> = results.into_iter().filter_map(Result::err).collect();
    assert!(failures.is_empty(), "{target}: models that do not match:\n{}", failures.join("\n"));
}
