//! What `stowage run` does, as a library: import, specialise on shape-setting inputs, optimise, lower for the
//! target, run. The conformance and model suites call this, so they test the very code the command runs.

use std::path::Path;
use std::time::Instant;

use stowage_compiler::onnx::proto::tensor_shape_proto::dimension;
use stowage_compiler::onnx::proto::{type_proto, ValueInfoProto};
use stowage_compiler::onnx::{self, ImportConfig};
use stowage_compiler::Context;
use stowage_cpu::Program;
use stowage_runtime::{Ledger, Move, Tensor};

/// How to compile and run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Target as given: `cpu`, `opencl`, `opencl:discrete`, `opencl:N`, `opencl:N:discrete` (lists of several
    /// come with the planner).
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
    /// Peak bytes of intermediate values in the memory the program ran in (`ran_on`).
    pub peak_bytes: usize,
    /// Inputs whose values were folded into the compiled program.
    pub assumed_inputs: Vec<String>,
    /// Where it ran: `cpu` or the OpenCL device's memory space (`opencl:0`).
    pub ran_on: String,
    /// The steps that ran: node and op.
    pub steps: Vec<(String, &'static str)>,
    /// Bytes of constants the program holds.
    pub const_bytes: usize,
    /// Every transfer the runtime performed (uploads of inputs, reads of outputs once they are read): the ledger
    /// keeps recording after the runs, so reading an output later shows here.
    pub ledger: Ledger,
    /// Transfers made once when the program was made (its constants to a device).
    pub setup_copies: Vec<Move>,
    /// The OpenCL path taken, when the target is OpenCL (`unified memory: inputs imported in place` …).
    pub path: Option<String>,
}

/// Checks a target: `cpu` or one OpenCL target. A list of several needs the planner (its own issue).
pub fn check_target(target: &str) -> Result<(), String> {
    let list: Vec<&str> = target.split(',').map(str::trim).collect();
    for t in &list {
        if *t != "cpu" && stowage_opencl::parse_target(t).is_err() {
            return Err(format!("unknown target '{t}' (`stowage targets` lists them)"));
        }
    }
    if list.len() > 1 {
        return Err(format!(
            "target list '{target}': placing nodes across several targets comes with the planner; give one target"
        ));
    }
    Ok(())
}

/// Compiles `model` for `inputs` and runs it. Inputs are by name; every graph input must be given, except those whose
/// value `options.config` fixes. The compilation is specialised on the given inputs: shape-setting ones are folded
/// as constants, and the others' shapes fix the symbolic dimensions.
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
    let progress = Progress::start(model);
    let proto = onnx::decode(bytes).map_err(|e| format!("{}: {e}", model.display()))?;
    let graph =
        proto.graph.as_ref().ok_or_else(|| format!("{}: not an ONNX model: it has no graph", model.display()))?;
    let initializers: Vec<&str> = graph.initializer.iter().map(|t| t.name()).collect();
    let declared: Vec<&ValueInfoProto> = graph.input.iter().filter(|i| !initializers.contains(&i.name())).collect();
    let wanted: Vec<&str> = declared.iter().map(|i| i.name()).collect();
    for (k, (name, _)) in inputs.iter().enumerate() {
        if !wanted.contains(&name.as_str()) {
            return Err(format!("input '{name}': the model has no such input (its inputs: {})", wanted.join(", ")));
        }
        if inputs[..k].iter().any(|(n, _)| n == name) {
            return Err(format!("input '{name}' is given twice"));
        }
        if options.config.input_values.contains_key(name) {
            return Err(format!("input '{name}' is given twice: as an input and as a fixed value (--input-value)"));
        }
    }
    // An input whose value is fixed by the caller is folded: it is not needed at run time.
    let mut needed = wanted.iter().filter(|w| !options.config.input_values.contains_key(**w));
    if let Some(missing) = needed.find(|w| !inputs.iter().any(|(n, _)| n == *w)) {
        return Err(format!("input '{missing}' is missing (the model's inputs: {})", wanted.join(", ")));
    }
    // Types are checked here, before compiling, so that a wrong input is reported as such (not as a fixed value
    // that does not fit, for a shape-setting input) and without waiting for the compilation.
    for vi in &declared {
        if let Some((_, t)) = inputs.iter().find(|(n, _)| n == vi.name()) {
            check_input(vi, options.config.input_shapes.get(vi.name()), t)?;
        }
    }
    let mut config = options.config.clone();
    let value_inputs = onnx::value_inputs(&proto);
    for (name, t) in &inputs {
        if value_inputs.contains(name) {
            // Specialise on the values of shape-setting inputs: they become constants of this compilation.
            config.input_values.insert(name.clone(), t.clone());
        } else {
            // And on the shapes of the others: symbolic dimensions take those of the given tensors.
            config.input_shapes.entry(name.clone()).or_insert_with(|| t.shape().to_vec());
        }
    }
    progress.phase("importing");
    let graph = onnx::import(&proto, model.parent(), &config)
        .map_err(|e| stowage_compiler::ImportError { path: Some(model.to_path_buf()), kind: e.kind }.to_string())?;
    let mut cx = Context::new(graph);
    progress.phase("folding constants and optimising");
    cx.optimize().map_err(|e| e.to_string())?;
    progress.phase("generating kernels");
    let target = options.target.trim();
    if target != "cpu" {
        return run_opencl(&cx, model, target, inputs, options, start, progress);
    }
    let mut program =
        stowage_cpu::lower(&cx.graph, options.threads).map_err(|e| format!("{}: {e}", model.display()))?;
    let compile_ms = start.elapsed().as_secs_f64() * 1e3;
    progress.finish();
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
    let (first_run_ms, run_median_ms) = first_and_median(times);
    let outputs = program.outputs().iter().map(|b| b.name.clone()).zip(out.outputs).collect();
    Ok(Outcome {
        outputs,
        compile_ms,
        first_run_ms,
        run_median_ms,
        peak_bytes: out.peak_bytes,
        assumed_inputs: cx.graph.metadata.assumed_inputs.clone(),
        ran_on: "cpu".into(),
        steps: program.steps().iter().map(|s| (s.name.clone(), s.op)).collect(),
        const_bytes: program.const_bytes(),
        ledger: Ledger::recording(),
        setup_copies: Vec::new(),
        path: None,
    })
}

fn first_and_median(mut times: Vec<f64>) -> (f64, f64) {
    let first = times[0];
    times.sort_by(f64::total_cmp);
    (first, times[times.len() / 2])
}

/// The OpenCL half of [`run_bytes`]: open the target, lower, run `repeat` times (each timed to the end of its
/// work), outputs lazy.
fn run_opencl(
    cx: &Context,
    model: &Path,
    target: &str,
    inputs: Vec<(String, Tensor<'static>)>,
    options: &RunOptions,
    start: Instant,
    progress: Progress,
) -> Result<Outcome, String> {
    let device = stowage_opencl::Target::open(target).map_err(|e| e.to_string())?;
    let setup = Ledger::recording();
    let program = stowage_opencl::lower(&cx.graph, &device, &setup).map_err(|e| format!("{}: {e}", model.display()))?;
    device.finish().map_err(|e| e.to_string())?;
    let compile_ms = start.elapsed().as_secs_f64() * 1e3;
    progress.finish();
    let mut run_inputs = Vec::with_capacity(program.inputs().len());
    for b in program.inputs() {
        let t = inputs.iter().find(|(n, _)| *n == b.name).map(|(_, t)| t.clone());
        run_inputs.push(t.ok_or_else(|| format!("input '{}' is missing", b.name))?);
    }
    let ledger = Ledger::recording();
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..options.repeat.max(1) {
        let t0 = Instant::now();
        let out = program.run(run_inputs.clone(), &ledger).map_err(|e| e.to_string())?;
        device.finish().map_err(|e| e.to_string())?;
        times.push(t0.elapsed().as_secs_f64() * 1e3);
        last = Some(out);
    }
    let out = last.ok_or("no run happened")?;
    let (first_run_ms, run_median_ms) = first_and_median(times);
    let path = match device.mode() {
        stowage_opencl::Mode::Unified => {
            "unified memory: inputs at the device's alignment are used in place, outputs read in place"
        }
        stowage_opencl::Mode::Discrete => {
            "discrete: one upload per input through a pinned staging buffer, one download per output read"
        }
    };
    Ok(Outcome {
        outputs: program.outputs().iter().map(|b| b.name.clone()).zip(out).collect(),
        compile_ms,
        first_run_ms,
        run_median_ms,
        peak_bytes: program.peak_bytes(),
        assumed_inputs: cx.graph.metadata.assumed_inputs.clone(),
        ran_on: device.space().to_string(),
        steps: program.steps().iter().map(|s| (s.name.clone(), s.op)).collect(),
        const_bytes: program.const_bytes,
        ledger,
        setup_copies: setup.entries(),
        path: Some(format!("{} ({})", path, device.info().name)),
    })
}

/// Checks a given input against the model's declaration of it (or its `--input-shape`): datum type, rank and every
/// fixed dimension. A declaration stowage cannot read is left to the importer to explain.
fn check_input(vi: &ValueInfoProto, fixed: Option<&Vec<usize>>, t: &Tensor<'static>) -> Result<(), String> {
    let Some(type_proto::Value::TensorType(tt)) = vi.r#type.as_ref().and_then(|t| t.value.as_ref()) else {
        return Ok(());
    };
    let Ok(dt) = onnx::tensor::datum_type(tt.elem_type()) else { return Ok(()) };
    // Each dimension: its size when fixed, else its symbol.
    let dims: Option<Vec<Result<usize, String>>> = match fixed {
        Some(shape) => Some(shape.iter().map(|&d| Ok(d)).collect()),
        None => tt.shape.as_ref().map(|s| {
            s.dim
                .iter()
                .map(|d| match &d.value {
                    Some(dimension::Value::DimValue(v)) if *v >= 0 => Ok(*v as usize),
                    Some(dimension::Value::DimParam(p)) if !p.is_empty() => Err(p.clone()),
                    _ => Err("?".to_string()),
                })
                .collect()
        }),
    };
    let shape_fits = dims.as_ref().is_none_or(|dims| {
        dims.len() == t.shape().len() && dims.iter().zip(t.shape()).all(|(d, g)| d.as_ref().is_err() || d == &Ok(*g))
    });
    if dt == t.dt() && shape_fits {
        return Ok(());
    }
    let expected = match &dims {
        Some(dims) => {
            let dims: Vec<String> =
                dims.iter().map(|d| d.as_ref().map_or_else(Clone::clone, usize::to_string)).collect();
            format!("{dt}[{}]", dims.join(", "))
        }
        None => format!("{dt} (of any shape)"),
    };
    let by = if fixed.is_some() { " (as fixed by --input-shape)" } else { "" };
    Err(format!("input '{}': the model takes {expected}{by}, the given tensor is {}{:?}", vi.name(), t.dt(), t.shape()))
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
    let mut steps: Vec<&(String, &str, f64)> = out.profile.iter().collect();
    steps.sort_by(|a, b| b.2.total_cmp(&a.2));
    for (name, op, t) in steps.iter().take(8) {
        eprintln!("profile step {name:<28} {op:<12} {:>9.3} ms", t * 1e3);
    }
    Ok(())
}

/// A spinner on stderr while a model compiles, shown only when stderr is a terminal and compiling takes longer
/// than a moment (tests and pipes see nothing).
struct Progress(Option<indicatif::ProgressBar>);

impl Progress {
    fn start(model: &Path) -> Progress {
        use std::io::IsTerminal;
        if !std::io::stderr().is_terminal() {
            return Progress(None);
        }
        let bar = indicatif::ProgressBar::new_spinner();
        bar.set_message(format!("compiling {}: reading", model.display()));
        bar.enable_steady_tick(std::time::Duration::from_millis(120));
        Progress(Some(bar))
    }

    fn phase(&self, what: &str) {
        if let Some(bar) = &self.0 {
            let msg = bar.message();
            let model = msg.split(':').next().unwrap_or("compiling");
            bar.set_message(format!("{model}: {what}"));
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    /// An error leaves no spinner behind its one-line message.
    fn drop(&mut self) {
        self.finish();
    }
}
