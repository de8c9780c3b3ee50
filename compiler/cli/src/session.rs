//! What `stowage run` does, as a library: import, specialise on shape-setting inputs, optimise, lower for the
//! target, run. The conformance and model suites call this, so they test the very code the command runs.

use std::path::Path;
use std::time::Instant;

use stowage_compiler::onnx::{self, ImportConfig};
use stowage_compiler::Context;
use stowage_cpu::Program;
use stowage_runtime::Tensor;

/// How to compile and run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Target list as given (`cpu`; others are refused until their backends land).
    pub target: String,
    /// Kernel threads.
    pub threads: usize,
    /// Runs (the first is timed separately).
    pub repeat: usize,
    /// Shapes and values fixed by the caller.
    pub config: ImportConfig,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions { target: "cpu".into(), threads: 1, repeat: 1, config: ImportConfig::new() }
    }
}

/// What a run produced.
pub struct Outcome {
    /// Outputs by name, in graph output order.
    pub outputs: Vec<(String, Tensor<'static>)>,
    /// Milliseconds: import to runnable.
    pub compile_ms: f64,
    /// Milliseconds of the first run.
    pub first_run_ms: f64,
    /// Median milliseconds over all runs.
    pub run_median_ms: f64,
    /// Peak bytes of intermediate values on the host.
    pub peak_bytes: usize,
    /// Inputs whose values were folded into the compiled program.
    pub assumed_inputs: Vec<String>,
    /// The compiled program (for reports).
    pub program: Program,
}

/// Checks a target list: only `cpu` exists so far.
pub fn check_target(target: &str) -> Result<(), String> {
    for t in target.split(',') {
        match t.trim() {
            "cpu" => {}
            "opencl" | "opencl:discrete" => {
                return Err(format!(
                    "target '{t}' is not available yet (the OpenCL backend has not landed); try --target cpu"
                ))
            }
            other => return Err(format!("unknown target '{other}' (`stowage targets` lists them)")),
        }
    }
    Ok(())
}

/// Compiles `model` for `inputs` (by name; every graph input must be given) and runs it.
pub fn run(model: &Path, inputs: Vec<(String, Tensor<'static>)>, options: &RunOptions) -> Result<Outcome, String> {
    let start = Instant::now();
    let bytes = std::fs::read(model).map_err(|e| format!("{}: cannot read the model: {e}", model.display()))?;
    run_bytes(&bytes, model, inputs, options, start)
}

/// [`run`] for a model already in memory; `model` names it in errors and locates external data.
pub fn run_bytes(
    bytes: &[u8],
    model: &Path,
    inputs: Vec<(String, Tensor<'static>)>,
    options: &RunOptions,
    start: Instant,
) -> Result<Outcome, String> {
    check_target(&options.target)?;
    let proto = onnx::decode(bytes).map_err(|e| format!("{}: {e}", model.display()))?;
    let graph =
        proto.graph.as_ref().ok_or_else(|| format!("{}: not an ONNX model: it has no graph", model.display()))?;
    let initializers: Vec<&str> = graph.initializer.iter().map(|t| t.name()).collect();
    let wanted: Vec<&str> = graph.input.iter().map(|i| i.name()).filter(|n| !initializers.contains(n)).collect();
    for (name, _) in &inputs {
        if !wanted.contains(&name.as_str()) {
            return Err(format!("input '{name}': the model has no such input (its inputs: {})", wanted.join(", ")));
        }
    }
    if let Some(missing) = wanted.iter().find(|w| !inputs.iter().any(|(n, _)| n == *w)) {
        return Err(format!("input '{missing}' is missing (the model's inputs: {})", wanted.join(", ")));
    }
    // Specialise on the values of shape-setting inputs: they become constants of this compilation.
    let mut config = options.config.clone();
    for name in onnx::value_inputs(&proto) {
        if let Some((_, t)) = inputs.iter().find(|(n, _)| *n == name) {
            config.input_values.entry(name).or_insert_with(|| t.clone());
        }
    }
    let graph = onnx::import(&proto, model.parent(), &config)
        .map_err(|e| stowage_compiler::ImportError { path: Some(model.to_path_buf()), kind: e.kind }.to_string())?;
    let mut cx = Context::new(graph);
    cx.optimize().map_err(|e| e.to_string())?;
    let mut program =
        stowage_cpu::lower(&cx.graph, options.threads).map_err(|e| format!("{}: {e}", model.display()))?;
    let compile_ms = start.elapsed().as_secs_f64() * 1e3;
    let mut run_inputs = Vec::with_capacity(program.inputs().len());
    for b in program.inputs() {
        let t = inputs
            .iter()
            .find(|(n, _)| *n == b.name)
            .map(|(_, t)| t.clone())
            .ok_or_else(|| format!("input '{}' is missing", b.name))?;
        run_inputs.push(t);
    }
    program.threads = options.threads.max(1);
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..options.repeat.max(1) {
        let t0 = Instant::now();
        let out = program.run(run_inputs.clone()).map_err(|e| e.to_string())?;
        times.push(t0.elapsed().as_secs_f64() * 1e3);
        last = Some(out);
    }
    let out = last.ok_or("no run happened")?;
    if std::env::var_os("STOWAGE_PROFILE").is_some() {
        print_profile(&program, run_inputs)?;
    }
    let first_run_ms = times[0];
    times.sort_by(f64::total_cmp);
    let run_median_ms = times[times.len() / 2];
    let outputs = program.outputs().iter().map(|b| b.name.clone()).zip(out.outputs).collect();
    Ok(Outcome {
        outputs,
        compile_ms,
        first_run_ms,
        run_median_ms,
        peak_bytes: out.peak_bytes,
        assumed_inputs: cx.graph.metadata.assumed_inputs.clone(),
        program,
    })
}

/// With `STOWAGE_PROFILE` set: one more run, timed per step, summed per op, on stderr.
fn print_profile(program: &Program, inputs: Vec<Tensor<'static>>) -> Result<(), String> {
    let out = program.run_profiled(inputs, true).map_err(|e| e.to_string())?;
    let mut per_op: std::collections::BTreeMap<&str, (usize, f64)> = std::collections::BTreeMap::new();
    for (_, op, t) in &out.profile {
        let e = per_op.entry(op).or_default();
        e.0 += 1;
        e.1 += t;
    }
    let total: f64 = per_op.values().map(|v| v.1).sum();
    let mut rows: Vec<_> = per_op.into_iter().collect();
    rows.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1));
    for (op, (n, t)) in rows {
        eprintln!("profile {op:<20} {n:>4} steps {:>9.3} ms {:>5.1}%", t * 1e3, 100.0 * t / total);
    }
    Ok(())
}
