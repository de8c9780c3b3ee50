//! A whole run as `stowage run` makes it: compile, plan, lower, run `repeat` times, and what came of it
//! ([`Outcome`]); and planning alone ([`plan_only`]).

use std::path::Path;
use std::time::Instant;

use stowage_compiler::ir::ValueId;
use stowage_compiler::onnx::structure::{self, Structure};
use stowage_compiler::plan::Plan;
use stowage_compiler::Context;
use stowage_runtime::{Ledger, Move, Tensor};

use crate::compile::{compile, make_plan, place_constants, store_precision};
use crate::error::{DriverError, Result};
use crate::options::RunOptions;
use crate::prepare::in_model;
use crate::progress::Progress;
use crate::session::Session;
use crate::stages::{taken, Stage};
use crate::targets;

/// Compiles `model` for `inputs` and runs it. Inputs are by name; every graph input must be given, except those whose
/// value `options.config` fixes. The compilation is specialised on the given inputs: shape-setting ones are folded
/// as constants, and the others' shapes fix the symbolic dimensions.
pub fn run(model: &Path, inputs: Vec<(String, Tensor<'static>)>, options: &RunOptions) -> Result<Outcome> {
    let start = Instant::now();
    let bytes = read_model(model)?;
    run_shared(&bytes, model, inputs, options, start)
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
    /// Milliseconds of each run, in order (the first is `first_run_ms`).
    pub run_times_ms: Vec<f64>,
    /// Peak bytes of intermediate values measured while running, the largest over the spaces (`peaks`).
    pub peak_bytes: usize,
    /// Measured peak bytes per memory space (`host`, `opencl:0`).
    pub peaks: Vec<(String, usize)>,
    /// Inputs whose values were folded into the compiled program.
    pub assumed_inputs: Vec<String>,
    /// Where it ran: the memory spaces of the targets used, joined by commas (`host`, `opencl:0`,
    /// `opencl:0,host`).
    pub ran_on: String,
    /// The steps that ran: node and op.
    pub steps: Vec<(String, &'static str)>,
    /// Bytes of constants the programs hold.
    pub const_bytes: usize,
    /// Every copy the runtime performed (uploads, relayouts, reads of outputs once they are read): the ledger
    /// keeps recording after the runs, so reading an output later shows here.
    pub ledger: Ledger,
    /// Transfers made once when the program was made (its constants to a device).
    pub setup_copies: Vec<Move>,
    /// Inputs put on the device they are declared to live on (`--input-device`) before the runs, as a caller
    /// holding them there would have: not a run's copies.
    pub placed_inputs: Vec<Move>,
    /// The memory path of each device target used, when one is (`unified memory: inputs imported in place` …).
    pub path: Option<String>,
    /// The plan that ran.
    pub plan: Plan,
    /// In built code: which built plan ran (its path).
    pub built_path: Option<String>,
    /// A model compiled in stages (`stages.rs`): the plans of the parts after the first, in the order the last run
    /// ran them (`plan` is the first's).
    pub later_plans: Vec<Plan>,
    /// A model compiled in stages: one line per node it was cut at.
    pub cuts: Vec<String>,
    /// One line per `If` run with its branches as subgraphs (`stowage_compiler::ir::subgraph`): the node and how
    /// many runs took each branch (`node 'guard' (If): the then branch 3 times, the else branch never`).
    pub branches: Vec<String>,
    /// Every model output with its flat names when some output is a sequence or an optional, else empty
    /// (`onnx::structure`, rule 2): [`Outcome::values`] puts `outputs` back together by it.
    pub structured_outputs: Vec<(String, Structure<String>)>,
}

impl Outcome {
    /// The model's outputs as values, in the model's output order: `outputs` put back together into the sequences
    /// and optionals the model makes (each a tensor when it makes none).
    pub fn values(&self) -> Result<Vec<(String, Structure<Tensor<'static>>)>> {
        structure::assemble(self.outputs.clone(), &self.structured_outputs).map_err(DriverError::Model)
    }
}

/// Gives `values`, by input name, as a run takes them: a sequence's or an optional's tensors under their flat names,
/// with its form recorded in `options` (`onnx::structure`, rules 1 and 2); a tensor as itself.
pub fn structured_inputs(
    values: Vec<(String, Structure<Tensor<'static>>)>,
    options: &mut RunOptions,
) -> Vec<(String, Tensor<'static>)> {
    let mut flat = Vec::new();
    for (name, value) in values {
        match value {
            Structure::Tensor(t) => flat.push((name, t)),
            other => {
                let (form, tensors) = structure::flatten(&name, &other);
                options.config.input_structures.insert(name, form);
                flat.extend(tensors);
            }
        }
    }
    flat
}

/// Checks the target list of `options`: registered names, none twice.
pub fn check_target(options: &RunOptions) -> Result<()> {
    targets::check(&options.registry, &options.target).map(|_| ())
}

/// The model file's bytes, in a buffer the decoded model's initializers share ([`onnx::decode_shared`]).
pub(crate) fn read_model(model: &Path) -> Result<prost::bytes::Bytes> {
    map_model(model).map_err(|e| DriverError::Model(format!("{}: cannot read the model: {e}", model.display())))
}

/// The bytes of the file at `path`, mapped where it is a regular file that maps, else read. Mapped, the file's
/// pages are the page cache's: the weights are not copied into fresh memory before the import copies them into
/// tensors (VGG-19's 548 MB: reading took a third of its compile on the development machine).
pub fn map_model(path: &Path) -> std::io::Result<prost::bytes::Bytes> {
    let file = std::fs::File::open(path)?;
    let meta = file.metadata()?;
    if meta.is_file() && meta.len() > 0 {
        // SAFETY: the mapping is read-only and stowage never writes the model file. Its pages are read while the
        // model is decoded, imported and lowered (`compile`): a large weight's bytes stay in it
        // (`stowage_runtime::SharedBytes`) until a backend packs them from there or copies them out; what a
        // compiled program keeps is owned (`Tensor::owned`) and the graph's constants are released after lowering
        // (`Graph::release_constant_data`), so nothing reads or holds the mapping after the compile. The parts a
        // staged model compiles later own copies of their bytes (`stages.rs` decodes with copies). What the map
        // cannot rule out is another process truncating the file during that compile (the lost pages would
        // fault): outside what is defended, as for onnxruntime's mapped external data.
        if let Ok(map) = unsafe { memmap2::Mmap::map(&file) } {
            return Ok(prost::bytes::Bytes::from_owner(map));
        }
    }
    // Read through the handle already open: opening a named pipe a second time would wait for another writer.
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    std::io::Read::read_to_end(&mut &file, &mut bytes)?;
    Ok(bytes.into())
}

/// [`run`] for a model already in memory; `model` names it in errors and locates external data.
pub fn run_bytes(
    bytes: &[u8],
    model: &Path,
    inputs: Vec<(String, Tensor<'static>)>,
    options: &RunOptions,
    start: Instant,
) -> Result<Outcome> {
    run_shared(&prost::bytes::Bytes::copy_from_slice(bytes), model, inputs, options, start)
}

/// [`run_bytes`] for bytes in a shared buffer, which the decoded model's initializers take slices of instead of
/// copies ([`onnx::decode_shared`]).
pub fn run_shared(
    bytes: &prost::bytes::Bytes,
    model: &Path,
    inputs: Vec<(String, Tensor<'static>)>,
    options: &RunOptions,
    start: Instant,
) -> Result<Outcome> {
    // A top-level If whose condition is known only at run time is cut at, so that only the branch taken runs.
    let mut staged_options = options.clone();
    staged_options.config.branch_at_run_time = branch_at_run_time(options);
    let options = &staged_options;
    let session = match Stage::new(bytes, model, &inputs, options, start)? {
        Stage::Whole(session) => *session,
        staged => return run_staged(staged, model, inputs, options, start),
    };
    let graph = &session.cx.graph;
    let compile_ms = session.compile_ms;
    let ledger = Ledger::recording();
    // Inputs folded into the compilation (shape-setting ones) are not given at run time.
    let given: Vec<(String, Tensor<'static>)> =
        inputs.into_iter().filter(|(n, _)| graph.inputs().iter().any(|&v| graph.value(v).name == *n)).collect();
    // Inputs declared on a device (`--input-device`) are put there first, as their holder would.
    let placing = Ledger::recording();
    let mut given = session.place(given, &placing)?;
    let state_pairs: Vec<(usize, String)> = options
        .planning
        .states
        .iter()
        .filter_map(|(o, i)| Some((graph.outputs().iter().position(|g| g.name == *o)?, i.clone())))
        .collect();
    let mut times = Vec::new();
    let mut last: Option<Vec<Tensor<'static>>> = None;
    let mut peaks: Vec<(String, usize)> = Vec::new();
    for _ in 0..options.repeat.max(1) {
        if let Some(prev) = &last {
            for (o, i) in &state_pairs {
                if let Some(entry) = given.iter_mut().find(|(n, _)| n == i) {
                    entry.1 = prev[*o].clone();
                }
            }
        }
        let t0 = Instant::now();
        let result = session.run(&given, &ledger)?;
        times.push(t0.elapsed().as_secs_f64() * 1e3);
        for (space, peak) in result.peaks {
            match peaks.iter_mut().find(|(s, _)| *s == space) {
                Some(e) => e.1 = e.1.max(peak),
                None => peaks.push((space, peak)),
            }
        }
        last = Some(result.outputs);
    }
    let outs = last.unwrap_or_default();
    let branches = branch_lines(&session);
    let Session { cx, plan, segments, programs, opened, setup, built_path, .. } = session;
    let graph = &cx.graph;
    if std::env::var_os("STOWAGE_PROFILE").is_some() {
        if let [p] = programs.as_slice() {
            let by_name = |v: &ValueId| given.iter().find(|(n, _)| *n == graph.value(*v).name).map(|(_, t)| t.clone());
            // Several profiled runs, each step's median shown: one run alone is what the machine did then (at two
            // threads, the first after a pause starts its workers from sleep: every parallel step looked slower
            // than at one thread).
            let mut runs = Vec::with_capacity(PROFILED_RUNS);
            for _ in 0..PROFILED_RUNS {
                let args = segments[0].inputs.iter().filter_map(by_name).collect();
                let run = p
                    .profile(args)
                    .map_err(|e| DriverError::Run { backend: opened[0].kind(), message: e.to_string() })?;
                runs.extend(run);
            }
            if let Some(profile) = median_profile(runs) {
                print_profile(&profile);
            }
        }
    }
    let (first_run_ms, run_median_ms) = first_and_median(times.clone());
    // The report names one device path: the last device target the plan uses.
    let path = opened.iter().enumerate().filter(|(i, _)| plan.uses(*i)).rev().find_map(|(_, o)| o.path());
    let mut spaces: Vec<String> = Vec::new();
    for p in &plan.nodes {
        let s = &plan.targets[p.target].space;
        if !spaces.contains(s) {
            spaces.push(s.clone());
        }
    }
    let steps = programs.iter().flat_map(|p| p.steps()).collect();
    let const_bytes = programs.iter().map(|p| p.const_bytes()).sum();
    Ok(Outcome {
        outputs: graph.outputs().iter().map(|o| o.name.clone()).zip(outs).collect(),
        compile_ms,
        first_run_ms,
        run_median_ms,
        run_times_ms: times,
        peak_bytes: peaks.iter().map(|p| p.1).max().unwrap_or(0),
        peaks,
        assumed_inputs: cx.graph.metadata.assumed_inputs.clone(),
        ran_on: if spaces.is_empty() { "host".into() } else { spaces.join(",") },
        steps,
        const_bytes,
        ledger,
        setup_copies: setup.entries(),
        placed_inputs: placing.entries(),
        path: path.map(|p| p.report),
        plan,
        built_path,
        later_plans: Vec::new(),
        cuts: Vec::new(),
        branches,
        structured_outputs: graph.metadata.structured_outputs.clone(),
    })
}

/// The [`Outcome::branches`] lines of `session`'s programs.
fn branch_lines(session: &Session) -> Vec<String> {
    let programs = session.programs.iter().flat_map(|p| p.branches());
    programs.map(|(node, [then, otherwise])| format!("node '{node}' (If): {}", taken(then, otherwise))).collect()
}

/// Whether a top-level `If` whose condition is known only at run time is cut at (`stages.rs`): unless the options
/// are ones a staged model does not take (`--state`, `--input-device`), where it keeps its `Where` form.
pub(crate) fn branch_at_run_time(options: &RunOptions) -> bool {
    options.planning.states.is_empty() && options.planning.input_devices.is_empty()
}

/// [`run_bytes`] of a model compiled in stages (`stages.rs`): the parts after the first compile as the runs reach
/// them, and the outcome describes the parts the last run ran.
fn run_staged(
    stage: Stage,
    model: &Path,
    inputs: Vec<(String, Tensor<'static>)>,
    options: &RunOptions,
    start: Instant,
) -> Result<Outcome> {
    let ledger = Ledger::recording();
    let mut times = Vec::new();
    let mut peaks: Vec<(String, usize)> = Vec::new();
    let mut last = Vec::new();
    for _ in 0..options.repeat.max(1) {
        let t0 = Instant::now();
        let (outs, run_peaks) = stage.run(&inputs, model, options, &ledger)?;
        times.push(t0.elapsed().as_secs_f64() * 1e3);
        for (space, peak) in run_peaks {
            match peaks.iter_mut().find(|(s, _)| *s == space) {
                Some(e) => e.1 = e.1.max(peak),
                None => peaks.push((space, peak)),
            }
        }
        last = outs;
    }
    // Compiling the first part counts as compiling; the later parts' compilations are in the first run's time.
    let compile_ms = {
        let mut first = None;
        stage.each_session(&mut |s| {
            first.get_or_insert(s.compile_ms);
        });
        first.unwrap_or_else(|| start.elapsed().as_secs_f64() * 1e3)
    };
    let (mut plans, mut steps, mut const_bytes, mut setup, mut assumed) =
        (Vec::new(), Vec::new(), 0, Vec::new(), Vec::new());
    let mut paths: Vec<String> = Vec::new();
    // In built code, the first part runs a built plan (`stages.rs`, rule 5): its path is the report's.
    let mut built_path = None;
    stage.each_session(&mut |s| {
        if plans.is_empty() {
            built_path.clone_from(&s.built_path);
        }
        plans.push(s.plan.clone());
        steps.extend(s.programs.iter().flat_map(|p| p.steps()));
        const_bytes += s.programs.iter().map(|p| p.const_bytes()).sum::<usize>();
        setup.extend(s.setup.entries());
        // Only the model's own inputs: a later part's fixed values are its inputs, not the caller's.
        for a in &s.cx.graph.metadata.assumed_inputs {
            let own = inputs.iter().any(|(n, _)| n == a) || options.config.input_values.contains_key(a);
            if own && !assumed.contains(a) {
                assumed.push(a.clone());
            }
        }
        let used = s.opened.iter().enumerate().filter(|(i, _)| s.plan.uses(*i)).rev().find_map(|(_, o)| o.path());
        paths.extend(used.map(|p| p.report));
    });
    let mut spaces: Vec<String> = Vec::new();
    for plan in &plans {
        for p in &plan.nodes {
            let s = &plan.targets[p.target].space;
            if !spaces.contains(s) {
                spaces.push(s.clone());
            }
        }
    }
    let (first_run_ms, run_median_ms) = first_and_median(times.clone());
    let mut plans = plans.into_iter();
    let plan = plans.next().ok_or_else(|| DriverError::Plan("a staged run ran no part (a staging bug)".into()))?;
    Ok(Outcome {
        outputs: last,
        compile_ms,
        first_run_ms,
        run_median_ms,
        run_times_ms: times,
        peak_bytes: peaks.iter().map(|p| p.1).max().unwrap_or(0),
        peaks,
        assumed_inputs: assumed,
        ran_on: if spaces.is_empty() { "host".into() } else { spaces.join(",") },
        steps,
        const_bytes,
        ledger,
        setup_copies: setup,
        placed_inputs: Vec::new(),
        path: paths.pop(),
        plan,
        built_path,
        later_plans: plans.collect(),
        cuts: stage.cuts(),
        branches: {
            let mut lines = Vec::new();
            stage.each_session(&mut |s| lines.extend(branch_lines(s)));
            lines
        },
        // Sequences and optionals among the outputs, as the last run made them (`crossing.rs`, rule 3).
        structured_outputs: stage.output_forms(&crate::crossing::input_forms(&options.config.input_structures)),
    })
}

/// Imports, optimises and plans `model` without running it (`stowage plan`): the inputs' layouts are the
/// caller's (`options.planning`) or packed row-major at the host's alignment.
pub fn plan_only(model: &Path, options: &RunOptions) -> Result<(Context, Plan)> {
    let bytes = read_model(model)?;
    plan_bytes(&bytes, model, options)
}

/// [`plan_only`] of a model `stowage run` compiles in stages (`stages.rs`): the part that runs first is planned,
/// and each cut is a line saying that the node and what follows it are planned at run time, in the order the
/// cuts run. A model with no cut plans whole, with no line.
pub fn plan_first_part(model: &Path, options: &RunOptions) -> Result<(Context, Plan, Vec<String>)> {
    let mut bytes = read_model(model)?;
    // As `stowage run` compiles it: a top-level If with a run-time condition is cut at.
    let mut staged = options.clone();
    staged.config.branch_at_run_time = branch_at_run_time(options);
    let options = &staged;
    let mut cuts = Vec::new();
    loop {
        let (index, message) = match plan_bytes(&bytes, model, options) {
            Ok((cx, plan)) => return Ok((cx, plan, cuts)),
            Err(DriverError::AtRunTime { index, message }) => (index, message),
            Err(e) => return Err(e),
        };
        let proto = stowage_compiler::onnx::decode_within(&bytes, options.config.value_limit())
            .map_err(|e| DriverError::Model(format!("{}: {e}", model.display())))?;
        let node = proto
            .graph
            .as_ref()
            .and_then(|g| g.node.get(index))
            .map(|n| (stowage_compiler::onnx::node_name(n, index), n.op_type().to_string()));
        let cut = stowage_compiler::onnx::split::split(&proto, index).zip(node);
        let Some((cut, (name, op))) = cut.filter(|(c, _)| c.before.graph.as_ref().is_some_and(|g| !g.node.is_empty()))
        else {
            return Err(DriverError::Model(format!(
                "{message} (stowage run compiles it when the value is known; nothing runs before it to plan)"
            )));
        };
        cuts.insert(
            0,
            format!(
                "node '{name}' ({op}) needs a value known only at run time: it and what follows it are planned at run time, for the shapes that come out"
            ),
        );
        bytes = prost::bytes::Bytes::from(prost::Message::encode_to_vec(&cut.before));
    }
}

/// [`plan_only`] of model bytes.
fn plan_bytes(bytes: &prost::bytes::Bytes, model: &Path, options: &RunOptions) -> Result<(Context, Plan)> {
    let progress = Progress::start(model);
    let mut cx = compile(bytes, model, &[], options, &progress, false)?;
    let opened = targets::open(&options.registry, &options.target, &options.open_options(), &cx.graph)?;
    store_precision(&mut cx, &opened, options).map_err(|e| in_model(model, e))?;
    place_constants(&mut cx.graph, &opened)?;
    let plan = make_plan(&cx.graph, &opened, &[], options).map_err(|e| in_model(model, e))?;
    progress.finish();
    Ok((cx, plan))
}

fn first_and_median(mut times: Vec<f64>) -> (f64, f64) {
    let first = times[0];
    times.sort_by(f64::total_cmp);
    (first, times[times.len() / 2])
}

/// Runs timed per step with `STOWAGE_PROFILE` set, after the timed runs.
const PROFILED_RUNS: usize = 7;

/// Each step's median over profiled runs of the same steps (`None` for no run).
fn median_profile(mut runs: Vec<crate::backend::StepTimes>) -> Option<crate::backend::StepTimes> {
    let mut first = runs.pop()?;
    for (k, step) in first.iter_mut().enumerate() {
        let mut times: Vec<f64> = runs.iter().filter_map(|r| r.get(k).map(|s| s.2)).chain([step.2]).collect();
        times.sort_by(f64::total_cmp);
        step.2 = times[times.len() / 2];
    }
    Some(first)
}

/// With `STOWAGE_PROFILE` set: [`PROFILED_RUNS`] more runs, timed per step (each step's median), summed per op, on
/// stderr, then the eight slowest steps (every step with `STOWAGE_PROFILE=all`).
fn print_profile(profile: &[(String, &'static str, f64)]) {
    let mut per_op: std::collections::BTreeMap<&str, (usize, f64)> = std::collections::BTreeMap::new();
    for (_, op, t) in profile {
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
    let mut steps: Vec<&(String, &str, f64)> = profile.iter().collect();
    steps.sort_by(|a, b| b.2.total_cmp(&a.2));
    // `STOWAGE_PROFILE=all` lists every step, in order of time.
    let shown = if std::env::var("STOWAGE_PROFILE").is_ok_and(|v| v == "all") { steps.len() } else { 8 };
    for (name, op, t) in steps.iter().take(shown) {
        eprintln!("profile step {name:<28} {op:<12} {:>9.3} ms", t * 1e3);
    }
}

#[cfg(test)]
mod tests {
    /// A model file maps with its bytes as they are; an empty file and a directory are read, the directory's
    /// error is the operating system's.
    #[test]
    fn model_files_map_or_read() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("m.onnx");
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        std::fs::write(&file, &bytes).expect("writes");
        assert_eq!(&super::map_model(&file).expect("maps")[..], &bytes[..]);
        let empty = dir.path().join("empty.onnx");
        std::fs::write(&empty, b"").expect("writes");
        assert!(super::map_model(&empty).expect("reads").is_empty());
        assert!(super::map_model(dir.path()).is_err(), "a directory is no model");
        assert!(super::map_model(&dir.path().join("missing.onnx")).is_err());
    }

    /// A named pipe is read through the one handle opened: a second open would wait for a writer that is gone.
    #[cfg(unix)]
    #[test]
    fn a_named_pipe_is_read_once() {
        let dir = tempfile::tempdir().expect("temp dir");
        let fifo = dir.path().join("m.onnx");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo runs");
        assert!(made.success());
        let writer = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::write(&fifo, b"not much of a model").expect("writes"))
        };
        assert_eq!(&super::map_model(&fifo).expect("reads")[..], b"not much of a model");
        writer.join().expect("writer");
    }
}
