//! `stowage run`: reads inputs from TensorProto files, runs, writes `output_N.pb` files and a JSON report.
//! Outputs are written under temporary names and renamed only when all of them are complete.

use std::path::{Path, PathBuf};

use prost::Message;
use stowage_cli::session::{self, RunOptions};
use stowage_compiler::onnx;
use stowage_runtime::Tensor;

/// One `--input` argument: a file for the next graph input, or NAME=FILE.
pub fn resolve_inputs(model: &Path, args: &[String]) -> Result<Vec<(String, Tensor<'static>)>, String> {
    let bytes = std::fs::read(model).map_err(|e| format!("{}: cannot read the model: {e}", model.display()))?;
    let proto = onnx::decode(&bytes).map_err(|e| format!("{}: {e}", model.display()))?;
    let g = proto.graph.as_ref().ok_or_else(|| format!("{}: not an ONNX model: it has no graph", model.display()))?;
    let initializers: Vec<&str> = g.initializer.iter().map(|t| t.name()).collect();
    let names: Vec<String> =
        g.input.iter().map(|i| i.name().to_string()).filter(|n| !initializers.contains(&n.as_str())).collect();
    let mut next = 0;
    let mut out: Vec<(String, Tensor<'static>)> = Vec::new();
    for arg in args {
        let (name, file) = match arg.split_once('=') {
            Some((n, f)) if names.iter().any(|m| m == n) => (n.to_string(), f),
            _ => {
                while next < names.len() && out.iter().any(|(n, _)| *n == names[next]) {
                    next += 1;
                }
                let name = names.get(next).cloned().ok_or_else(|| {
                    format!(
                        "--input {arg}: the model takes {} inputs ({}), this one is extra",
                        names.len(),
                        names.join(", ")
                    )
                })?;
                next += 1;
                (name, arg.as_str())
            }
        };
        if out.iter().any(|(n, _)| *n == name) {
            return Err(format!("input '{name}' is given twice"));
        }
        let t = onnx::read_tensor(file).map_err(|e| format!("input '{name}': {e}"))?;
        out.push((name, t));
    }
    Ok(out)
}

/// Writes the outputs as `output_N.pb` in `dir`: all under temporary names first, then renamed.
pub fn write_outputs(dir: &Path, outputs: &[(String, Tensor<'static>)]) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("output dir {}: {e}", dir.display()))?;
    let mut staged: Vec<(PathBuf, PathBuf)> = Vec::new();
    let cleanup = |staged: &[(PathBuf, PathBuf)]| {
        for (tmp, _) in staged {
            let _ = std::fs::remove_file(tmp);
        }
    };
    for (i, (name, t)) in outputs.iter().enumerate() {
        let final_path = dir.join(format!("output_{i}.pb"));
        let tmp = dir.join(format!(".output_{i}.pb.partial"));
        let bytes = onnx::tensor::encode(t, name).map_err(|e| format!("output '{name}': {e}"))?.encode_to_vec();
        if let Err(e) = std::fs::write(&tmp, bytes) {
            cleanup(&staged);
            let _ = std::fs::remove_file(&tmp);
            return Err(format!("output dir {}: cannot write {}: {e}", dir.display(), tmp.display()));
        }
        staged.push((tmp, final_path));
    }
    for (tmp, final_path) in &staged {
        std::fs::rename(tmp, final_path).map_err(|e| {
            cleanup(&staged);
            format!("output dir {}: cannot write {}: {e}", dir.display(), final_path.display())
        })?;
    }
    Ok(())
}

/// The JSON report of DESIGN.md's CLI contract.
pub fn report(target: &str, outcome: &session::Outcome) -> serde_json::Value {
    let peak = outcome.peak_bytes;
    serde_json::json!({
        "target": target,
        "planned_copies": [],
        "performed_copies": [],
        "bytes_moved": 0,
        "peak_bytes": { "host": peak },
        "peak_lower_bound_bytes": { "host": peak },
        "assumed_inputs": outcome.assumed_inputs,
        "steps": outcome.program.steps().len(),
        "constant_bytes": outcome.program.const_bytes(),
        "timings_ms": {
            "compile": outcome.compile_ms,
            "first_run": outcome.first_run_ms,
            "run_median": outcome.run_median_ms,
        },
    })
}

/// The whole command.
pub fn run(
    model: &Path,
    inputs: &[String],
    output_dir: Option<&Path>,
    report_path: Option<&Path>,
    options: &RunOptions,
) -> Result<String, String> {
    let inputs = resolve_inputs(model, inputs)?;
    let outcome = session::run(model, inputs, options)?;
    if let Some(dir) = output_dir {
        write_outputs(dir, &outcome.outputs)?;
    }
    if let Some(path) = report_path {
        let text = serde_json::to_string_pretty(&report(&options.target, &outcome)).map_err(|e| e.to_string())?;
        let tmp = path.with_extension("json.partial");
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, path))
            .map_err(|e| format!("report {}: {e}", path.display()))?;
    }
    let mut summary = String::new();
    for (name, t) in &outcome.outputs {
        summary.push_str(&format!("output '{name}': {}{:?}\n", t.dt(), t.shape()));
    }
    summary.push_str(&format!(
        "compile {:.1} ms, first run {:.2} ms, median run {:.2} ms over {} runs, peak {} bytes, 0 copies\n",
        outcome.compile_ms,
        outcome.first_run_ms,
        outcome.run_median_ms,
        options.repeat.max(1),
        outcome.peak_bytes
    ));
    Ok(summary)
}
