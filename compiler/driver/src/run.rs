//! `stowage run` (and a built executable, which takes its flags): reads inputs from TensorProto files (SequenceProto and OptionalProto files for inputs the model declares so), runs, writes `output_N.pb` files of the same kinds and a JSON report.
//! Outputs and report are staged and committed together ([`Staging`]): when any of them cannot be written, none is,
//! every file that was there before is left as it was, and no temporary file or folder the command created is
//! left behind.

use std::path::Path;
use std::time::Instant;

use crate::flags::RunFlags;
use crate::pipeline::{self as session, RunOptions};
pub use crate::staging::Staging;
use stowage_compiler::onnx;
use stowage_compiler::onnx::proto::TypeProto;
use stowage_compiler::onnx::structure::{self, Structure};
use stowage_compiler::plan::InputLayout;
use stowage_runtime::Tensor;

/// Assigns the `--input` arguments to the model's inputs `names` and reads them. An argument is NAME=FILE when NAME
/// is one of `names`, else a file for the next input not given yet; inputs in `fixed` (by `--input-value`) are
/// skipped, as they are not inputs at run time. A file larger than a value may be (`limit` bytes, and a TensorProto's
/// few bytes of header) is refused before it is read.
pub fn resolve_inputs(
    names: &[String],
    types: &[Option<TypeProto>],
    fixed: &[&String],
    args: &[String],
    limit: usize,
) -> Result<Vec<(String, Structure<Tensor<'static>>)>, String> {
    let runtime: Vec<&String> = names.iter().filter(|n| !fixed.contains(n)).collect();
    let mut out: Vec<(String, Structure<Tensor<'static>>)> = Vec::new();
    for arg in args {
        let named = arg.split_once('=').filter(|(n, _)| !n.is_empty());
        let (name, file) = match named {
            Some((n, f)) if names.iter().any(|m| m == n) => (n.to_string(), f),
            // A file whose name has a '=' in it is still a file.
            Some((n, _)) if !Path::new(arg).exists() => {
                return Err(format!("--input {arg}: the model has no input '{n}' (its inputs: {})", names.join(", ")));
            }
            _ => {
                let name = runtime.iter().find(|n| !out.iter().any(|(m, _)| m == **n)).ok_or_else(|| {
                    let list: Vec<&str> = runtime.iter().map(|n| n.as_str()).collect();
                    let besides = if fixed.is_empty() {
                        String::new()
                    } else {
                        let fixed: Vec<&str> = fixed.iter().map(|n| n.as_str()).collect();
                        format!(" besides those fixed by --input-value ({})", fixed.join(", "))
                    };
                    format!(
                        "--input {arg}: the model takes {} input{} ({}){besides}, this one is extra",
                        runtime.len(),
                        if runtime.len() == 1 { "" } else { "s" },
                        list.join(", ")
                    )
                })?;
                (name.to_string(), arg.as_str())
            }
        };
        if out.iter().any(|(n, _)| *n == name) {
            return Err(format!("input '{name}' is given twice"));
        }
        if fixed.iter().any(|n| **n == name) {
            return Err(format!("input '{name}' is given twice: by --input and by --input-value"));
        }
        // Read as the model declares the input: a tensor, a sequence or an optional (`onnx::structure`, rule 3).
        let ty = names.iter().position(|n| *n == name).and_then(|i| types.get(i)).and_then(Option::as_ref);
        let t = structure::read_value_within(Path::new(file), ty, limit).map_err(|e| format!("input '{name}': {e}"))?;
        out.push((name, t));
    }
    Ok(out)
}

/// Refuses a report that would be written over an output, before anything runs: `output_N.pb` in the output folder.
fn check_report_path(dir: &Path, report: &Path) -> Result<(), String> {
    let name = report.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let index = name.strip_prefix("output_").and_then(|n| n.strip_suffix(".pb"));
    let is_output = index.and_then(|n| n.parse::<usize>().ok()).is_some_and(|i| index == Some(i.to_string().as_str()));
    let report_dir = report.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if is_output && crate::staging::same_folder(report_dir, dir) {
        return Err(format!(
            "--report {}: that is the path of an output of --output-dir {} (outputs are written there as \
             output_N.pb); give the report another name",
            report.display(),
            dir.display()
        ));
    }
    Ok(())
}

/// Text as a terminal is shown it (names in summary lines, error lines): control and invisible characters
/// (newlines, CR, escape, U+202E…) escaped as Rust would (`\n`, `\u{202e}`), so that a name can neither forge a
/// line nor reorder or recolour a terminal's text. Quotes and backslashes are kept as they are.
pub(crate) fn shown(text: &str) -> String {
    text.chars()
        .map(|c| if matches!(c, '\'' | '"' | '\\') { c.to_string() } else { c.escape_debug().to_string() })
        .collect()
}

/// The JSON report of DESIGN.md's CLI contract.
pub fn report(target: &str, outcome: &session::Outcome) -> serde_json::Value {
    let moves = |moves: &[stowage_runtime::Move]| -> Vec<serde_json::Value> {
        moves
            .iter()
            .map(|m| {
                serde_json::json!({
                    "value": &*m.value,
                    "kind": m.kind.to_string(),
                    "from": m.from.name(),
                    "to": m.to.name(),
                    "bytes": m.bytes,
                    "reason": &*m.reason,
                    "per_run": true,
                })
            })
            .collect()
    };
    let performed = outcome.ledger.entries();
    // A model compiled in stages reports every part the last run ran: copies and placements in order, peaks added.
    let plans: Vec<&stowage_compiler::plan::Plan> =
        std::iter::once(&outcome.plan).chain(&outcome.later_plans).collect();
    let (mut planned_peak, mut bound) = (serde_json::Map::new(), serde_json::Map::new());
    for plan in &plans {
        for a in &plan.arenas {
            let add = |m: &mut serde_json::Map<String, serde_json::Value>, bytes: usize| {
                let had = m.get(&a.space).and_then(serde_json::Value::as_u64).unwrap_or(0);
                m.insert(a.space.clone(), (had + bytes as u64).into());
            };
            add(&mut planned_peak, a.peak_bytes);
            add(&mut bound, a.lower_bound_bytes);
        }
    }
    let planned_copies: Vec<serde_json::Value> = plans.iter().flat_map(|p| crate::show::copies_json(p)).collect();
    let placement: Vec<serde_json::Value> =
        plans.iter().flat_map(|p| crate::show::json(p)["placement"].as_array().cloned().unwrap_or_default()).collect();
    let measured: serde_json::Map<String, serde_json::Value> =
        outcome.peaks.iter().map(|(space, bytes)| (space.clone(), (*bytes).into())).collect();
    serde_json::json!({
        "target": target,
        "ran_on": outcome.ran_on,
        "path": outcome.path,
        "built_path": outcome.built_path,
        "planned_copies": planned_copies,
        "precision": crate::show::precision_json(&outcome.plan),
        "performed_copies": moves(&performed),
        "setup_copies": moves(&outcome.setup_copies),
        "placed_inputs": moves(&outcome.placed_inputs),
        "bytes_moved": outcome.ledger.bytes_moved(),
        "peak_bytes": planned_peak,
        "peak_lower_bound_bytes": bound,
        "measured_peak_bytes": measured,
        "placement": placement,
        "stages": outcome.cuts,
        "branches": outcome.branches,
        "assumed_inputs": outcome.assumed_inputs,
        "steps": outcome.steps.len(),
        "constant_bytes": outcome.const_bytes,
        "timings_ms": {
            "compile": outcome.compile_ms,
            "first_run": outcome.first_run_ms,
            "run_median": outcome.run_median_ms,
            "runs": outcome.run_times_ms,
        },
    })
}

/// A value as the run's summary shows it: `f32[2, 3]`, `sequence of 2: f32[3], f32[2]`, `optional: none`.
fn described(value: &Structure<Tensor<'static>>) -> String {
    let tensor = |t: &Tensor<'static>| format!("{}{:?}", t.dt(), t.shape());
    match value {
        Structure::Tensor(t) => tensor(t),
        Structure::Sequence { elem, items } if items.is_empty() => format!("sequence of 0 ({elem})"),
        Structure::Sequence { items, .. } => {
            let each: Vec<String> = items.iter().map(tensor).collect();
            format!("sequence of {}: {}", items.len(), each.join(", "))
        }
        Structure::Optional { value: None, .. } => "optional: none".into(),
        Structure::Optional { value: Some(v), .. } => format!("optional: {}", described(v)),
    }
}

/// The whole command. Errors are one line.
pub fn run(model: &Path, flags: &RunFlags, options: &RunOptions) -> Result<String, String> {
    let start = Instant::now();
    let run = || {
        session::check_target(options)?;
        let bytes =
            crate::outcome::map_model(model).map_err(|e| format!("{}: cannot read the model: {e}", model.display()))?;
        run_model_shared(&bytes, model, flags, options, start)
    };
    run().map_err(|e| one_line(&e))
}

/// A command's end: its text on stdout and exit 0, or one `error:` line on stderr and exit 1.
pub fn finish(result: Result<String, String>) -> std::process::ExitCode {
    match result {
        Ok(text) => {
            print!("{text}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {}", shown(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// An error's lines joined into one.
pub fn one_line(e: &str) -> String {
    let lines: Vec<&str> = e.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    lines.join("; ")
}

/// [`run`] of a model already in memory (a built executable's): `model` names it in errors.
pub fn run_model(
    bytes: &[u8],
    model: &Path,
    flags: &RunFlags,
    options: &RunOptions,
    start: Instant,
) -> Result<String, String> {
    run_model_shared(&prost::bytes::Bytes::copy_from_slice(bytes), model, flags, options, start)
}

/// [`run_model`] of bytes in a shared buffer (the model file's mapping, `outcome::map_model`), which the decoded
/// model's initializers take slices of instead of copies.
pub fn run_model_shared(
    bytes: &prost::bytes::Bytes,
    model: &Path,
    flags: &RunFlags,
    options: &RunOptions,
    start: Instant,
) -> Result<String, String> {
    let (output_dir, report_path) = (flags.output_dir.as_deref(), flags.report.as_deref());
    if let (Some(dir), Some(report)) = (output_dir, report_path) {
        check_report_path(dir, report)?;
    }
    // The model's input names, read without its weights (`onnx::graph_inputs`); bytes that are no model are
    // decoded whole for the error that says why.
    let (names, types): (Vec<String>, Vec<Option<TypeProto>>) = match &options.built_graph {
        Some(built) => built.inputs.iter().map(|n| (n.to_string(), None)).unzip(),
        None => match onnx::graph_inputs(bytes) {
            Some(inputs) => inputs,
            None => {
                let proto = onnx::decode_within(bytes, options.config.value_limit())
                    .map_err(|e| format!("{}: {e}", model.display()))?;
                let g = proto
                    .graph
                    .as_ref()
                    .ok_or_else(|| format!("{}: not an ONNX model: it has no graph", model.display()))?;
                let initializers: Vec<&str> = g.initializer.iter().map(|t| t.name()).collect();
                g.input
                    .iter()
                    .filter(|i| !initializers.contains(&i.name()))
                    .map(|i| (i.name().to_string(), i.r#type.clone()))
                    .unzip()
            }
        },
    };
    let fixed: Vec<&String> = options.config.input_values.keys().collect();
    let values = resolve_inputs(&names, &types, &fixed, &flags.inputs, options.config.value_limit())?;
    let mut options = options.clone();
    let mut inputs = session::structured_inputs(values, &mut options);
    let options = &options;
    // Inputs are read into page-aligned memory, which any device imports in place where it can import at all; an
    // input with a declared layout is placed in memory of that layout, as a caller holding it so would pass it.
    for (_, t) in inputs.iter_mut() {
        let packed = stowage_runtime::Layout::row_major(t.dt(), t.shape()).map_err(|e| e.to_string())?;
        *t = t.to_layout(packed, session::INPUT_ALIGNMENT).map_err(|e| e.to_string())?;
    }
    for (name, text) in &options.planning.input_layouts {
        if let Some((_, t)) = inputs.iter_mut().find(|(n, _)| n == name) {
            let layout =
                InputLayout::parse(text, t.shape().len()).map_err(|e| format!("--input-layout {name}={text}: {e}"))?;
            layout.check(t.dt(), t.shape()).map_err(|e| format!("--input-layout {name}={text}: {e}"))?;
            let strided = stowage_runtime::Layout::strided(layout.strides(t.dt(), t.shape()), 0);
            *t = t.to_layout(strided, layout.alignment).map_err(|e| format!("input '{name}': {e}"))?;
        }
    }
    let outcome = session::run_shared(bytes, model, inputs, options, start)?;
    let values = outcome.values()?;

    let mut staging = Staging::default();
    if let Some(dir) = output_dir {
        staging.create_dir(dir).map_err(|e| format!("output dir {}: cannot create it: {e}", dir.display()))?;
        for (i, (name, value)) in values.iter().enumerate() {
            let bytes = structure::encode_value(value, name).map_err(|e| format!("output '{name}': {e}"))?;
            let path = dir.join(format!("output_{i}.pb"));
            let what = format!("output dir {}: cannot write {}", dir.display(), path.display());
            staging.stage(&path, what, &bytes)?;
        }
    }
    if let Some(path) = report_path {
        let text = serde_json::to_string_pretty(&report(&options.target, &outcome)).map_err(|e| e.to_string())?;
        staging.stage(path, format!("report {}: cannot write it", path.display()), text.as_bytes())?;
    }
    staging.commit()?;

    let mut summary = String::new();
    for (name, value) in &values {
        summary.push_str(&format!("output '{}': {}\n", shown(name), described(value)));
    }
    let copies = outcome.ledger.entries();
    if let Some(path) = &outcome.path {
        summary.push_str(&format!("ran on {}: {path}\n", outcome.ran_on));
    }
    for line in &outcome.cuts {
        summary.push_str(&format!("staged: {}\n", shown(line)));
    }
    for line in &outcome.branches {
        summary.push_str(&format!("branches: {}\n", shown(line)));
    }
    for m in &copies {
        summary.push_str(&format!("copy: {}\n", shown(&m.to_string())));
    }
    summary.push_str(&format!(
        "compile {:.1} ms, first run {:.2} ms, median run {:.2} ms over {} runs, peak {} bytes, {} copies ({} planned per run)\n",
        outcome.compile_ms,
        outcome.first_run_ms,
        outcome.run_median_ms,
        options.repeat.max(1),
        outcome.peak_bytes,
        copies.len(),
        std::iter::once(&outcome.plan).chain(&outcome.later_plans).map(|p| p.run_copies().count()).sum::<usize>()
    ));
    Ok(summary)
}
