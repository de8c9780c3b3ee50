//! A model compiled, planned and lowered for its targets: [`Session`], run any number of times.

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use stowage_compiler::ir::ValueId;
use stowage_compiler::plan::{self, Plan};
use stowage_compiler::Context;
use stowage_runtime::{Accepts as RuntimeAccepts, LayoutNeed, Ledger, LedgerTag, Tensor};

use crate::backend::{Executable, OpenedTarget};
use crate::compile::{built_graph, compile, make_plan, place_constants, store_precision};
use crate::error::{DriverError, Result};
use crate::options::{BuiltPlan, RunOptions};
use crate::prepare::in_model;
use crate::progress::Progress;
use crate::targets;

/// A model compiled, planned and lowered for its targets, ready to run any number of times: what `stowage run`
/// does once and a built model's typed module keeps.
pub struct Session {
    /// The optimised graph.
    pub cx: Context,
    /// Its plan.
    pub plan: Plan,
    pub(crate) segments: Vec<plan::Segment>,
    pub(crate) programs: Vec<Box<dyn Executable>>,
    pub(crate) opened: Vec<Box<dyn OpenedTarget>>,
    /// Transfers made when the programs were made (constants to a device).
    pub setup: Ledger,
    /// Milliseconds from `start` to runnable.
    pub compile_ms: f64,
    /// In built code: the path of the built plan this one is.
    pub built_path: Option<String>,
    /// Held by a run: a session's arenas are one per memory space, so its runs take turns (values passed between
    /// its segments live in them until read).
    pub(crate) running: std::sync::Mutex<()>,
}

/// What one run of a [`Session`] produced.
pub struct RunResult {
    /// Outputs in graph output order.
    pub outputs: Vec<Tensor<'static>>,
    /// Measured peak bytes per memory space.
    pub peaks: Vec<(String, usize)>,
}

impl Session {
    /// Compiles `bytes` (the model `model` names), specialised on `inputs` as [`run`] is (with no inputs: inputs
    /// page-aligned and packed, or in their declared layouts), plans it and lowers every segment.
    pub fn new(
        bytes: &[u8],
        model: &Path,
        inputs: &[(String, Tensor<'static>)],
        options: &RunOptions,
        start: Instant,
    ) -> Result<Session> {
        Session::shared(&prost::bytes::Bytes::copy_from_slice(bytes), model, inputs, options, start)
    }

    /// [`Session::new`] of bytes in a shared buffer, which the decoded model's initializers take slices of instead
    /// of copies (`onnx::decode_shared`).
    pub fn shared(
        bytes: &prost::bytes::Bytes,
        model: &Path,
        inputs: &[(String, Tensor<'static>)],
        options: &RunOptions,
        start: Instant,
    ) -> Result<Session> {
        let progress = Progress::start(model);
        let mut cx = match &options.built_graph {
            Some(built) => built_graph(built, inputs)?,
            None => compile(bytes, model, inputs, options, &progress, !inputs.is_empty())?,
        };
        progress.phase("planning");
        let opened = targets::open(&options.registry, &options.target, &options.open_options(), &cx.graph)?;
        if options.built_graph.is_none() {
            store_precision(&mut cx, &opened, options).map_err(|e| in_model(model, e))?;
            place_constants(&mut cx.graph, &opened)?;
        }
        let graph = &cx.graph;
        let (plan, built_path) = match options.built_plans.as_slice() {
            [] => (make_plan(graph, &opened, inputs, options).map_err(|e| in_model(model, e))?, None),
            plans => {
                let (plan, path) = built_plan(graph, &opened, plans, options.read_outputs)?;
                check_built_inputs(graph, &plan, inputs).map_err(|e| in_model(model, e))?;
                (plan, Some(path.to_string()))
            }
        };
        progress.phase("generating kernels");
        let setup = Ledger::recording();
        let segments = plan::segments(graph, &plan);
        let mut programs = Vec::with_capacity(segments.len());
        for seg in &segments {
            let target = &opened[seg.target];
            let lowered = target.lower(seg, graph, &plan, &setup).map_err(|e| DriverError::Lower {
                model: model.display().to_string(),
                backend: target.kind(),
                message: e.to_string(),
            })?;
            programs.push(lowered);
        }
        // The programs hold what they read (packed, uploaded or as is): the graphs' copies of the constants are
        // released, so a packed weight is not held twice while the model runs.
        let mut cx = cx;
        let mut segments = segments;
        cx.graph.release_constant_data();
        for seg in &mut segments {
            seg.graph.release_constant_data();
        }
        let session = Session {
            cx,
            plan,
            segments,
            programs,
            opened,
            setup,
            compile_ms: 0.0,
            built_path,
            running: Default::default(),
        };
        session.finish_devices()?;
        progress.finish();
        Ok(Session { compile_ms: start.elapsed().as_secs_f64() * 1e3, ..session })
    }

    /// Waits for every target's queued work.
    fn finish_devices(&self) -> Result<()> {
        for t in &self.opened {
            t.finish().map_err(|e| DriverError::Run { backend: t.kind(), message: e.to_string() })?;
        }
        Ok(())
    }

    /// The graph inputs, by name, in order.
    pub fn input_names(&self) -> Vec<String> {
        self.cx.graph.inputs().iter().map(|&v| self.cx.graph.value(v).name.clone()).collect()
    }

    /// Runs once on `inputs` (every graph input by name), recording copies in `ledger`. Inputs the plan relays for
    /// the host are relaid once (the CPU segments read the copy, the devices read the caller's tensor, which their
    /// upload packs, as planned).
    /// Runs of one session take turns; a second session runs beside it.
    pub fn run(&self, inputs: &[(String, Tensor<'static>)], ledger: &Ledger) -> Result<RunResult> {
        let _running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let graph = &self.cx.graph;
        let mut values: HashMap<ValueId, Tensor<'static>> = HashMap::new();
        for &v in graph.inputs() {
            let name = &graph.value(v).name;
            let t = inputs.iter().find(|(n, _)| n == name).map(|(_, t)| t.clone());
            values.insert(v, t.ok_or_else(|| DriverError::Input(format!("input '{name}' is missing")))?);
        }
        // Inputs held on a device: each a fresh handle whose reads count in this run. One planned on a device must
        // be held there.
        for planned in &self.plan.inputs {
            let Some(&v) = graph.inputs().iter().find(|&&v| graph.value(v).name == planned.name) else { continue };
            let Some(t) = values.get(&v) else { continue };
            let home = match &planned.device {
                Some(space) => self.home(space)?,
                None => match self.opened.iter().find(|o| !o.spec().is_host() && o.holds(t)) {
                    Some(o) => o.as_ref(),
                    None => continue,
                },
            };
            if !home.holds(t) {
                return Err(DriverError::Input(format!(
                    "input '{}': planned as living on {}, the tensor given is not in that target's memory (it is in \
                     {} memory{}); give a tensor made there, or open the session in its context (RunOptions::adopted)",
                    planned.name,
                    home.spec().space,
                    t.space().name(),
                    if t.space().is_host() { "" } else { " of another context" }
                )));
            }
            let fresh =
                home.resident(t, ledger).map_err(|e| DriverError::Input(format!("input '{}': {e}", planned.name)))?;
            values.insert(v, fresh);
        }
        let mut relaid: HashMap<ValueId, Tensor<'static>> = HashMap::new();
        for (&v, t) in &values {
            let name = &graph.value(v).name;
            if self.plan.inputs.iter().any(|i| i.name == *name && i.copied_for("host")) {
                let need = LayoutNeed { alignment: stowage_runtime::HOST_ALIGNMENT, accepts: RuntimeAccepts::RowMajor };
                let tag = LedgerTag::new(ledger, name.as_str());
                relaid
                    .insert(v, t.conform(&need, &tag).map_err(|e| DriverError::Input(format!("input '{name}': {e}")))?);
            }
        }
        let mut peaks: Vec<(String, usize)> = Vec::new();
        for (k, (seg, program)) in self.segments.iter().zip(&self.programs).enumerate() {
            let target = &self.opened[seg.target];
            let on_host = target.spec().is_host();
            let args: Vec<Tensor<'static>> = seg
                .inputs
                .iter()
                .map(|v| {
                    let t = if on_host { relaid.get(v).or_else(|| values.get(v)) } else { values.get(v) };
                    t.cloned().ok_or_else(|| not_computed(&graph.value(*v).name))
                })
                .collect::<Result<_>>()?;
            let ran = program
                .run(args, ledger)
                .map_err(|e| DriverError::Run { backend: target.kind(), message: e.to_string() })?;
            let (outs, peak, space) = (ran.outputs, ran.peak_bytes, target.spec().space.clone());
            match peaks.iter_mut().find(|(s, _)| *s == space) {
                Some(e) => e.1 = e.1.max(peak),
                None => peaks.push((space, peak)),
            }
            for (v, t) in seg.outputs.iter().zip(outs) {
                values.insert(*v, t);
            }
            // A device may still be reading host values in place that the host's next steps write over once
            // they are dead (the arena reuses their bytes): it finishes first.
            let next_on_host = self.segments.get(k + 1).is_some_and(|n| self.opened[n.target].spec().is_host());
            if !on_host && next_on_host {
                target.finish().map_err(|e| DriverError::Run { backend: target.kind(), message: e.to_string() })?;
            }
        }
        self.finish_devices()?;
        let outputs = graph
            .outputs()
            .iter()
            .map(|o| {
                values
                    .get(&o.value)
                    .cloned()
                    .or_else(|| graph.const_value(o.value).cloned())
                    .ok_or_else(|| not_computed(&o.name))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(RunResult { outputs, peaks })
    }
}

impl Session {
    /// The opened target whose memory space is `space`.
    fn home(&self, space: &str) -> Result<&dyn OpenedTarget> {
        let found = self.opened.iter().find(|o| o.spec().space == space);
        found
            .map(|o| o.as_ref())
            .ok_or_else(|| DriverError::Plan(format!("no target of the plan has memory '{space}'")))
    }

    /// The backend's handle of the opened target whose memory space is `space` (`opencl:0`), for a caller that
    /// makes memory beside it ([`OpenedTarget::handle`]); `None` when no target has that memory or its backend
    /// offers none.
    pub fn target_handle(&self, space: &str) -> Option<&dyn std::any::Any> {
        self.opened.iter().find(|o| o.spec().space == space).and_then(|o| o.handle())
    }

    /// Puts the inputs the plan says live on a device (`--input-device`) there, as a caller holding them there
    /// would before the runs: each move is recorded in `ledger` (not a run's). Other inputs are returned as given.
    pub fn place(
        &self,
        inputs: Vec<(String, Tensor<'static>)>,
        ledger: &Ledger,
    ) -> Result<Vec<(String, Tensor<'static>)>> {
        inputs
            .into_iter()
            .map(|(name, t)| {
                let Some(space) = self.plan.inputs.iter().find(|i| i.name == name).and_then(|i| i.device.as_ref())
                else {
                    return Ok((name, t));
                };
                let home = self.home(space)?;
                let t = t.with_name(name.as_str());
                let placed =
                    home.resident(&t, ledger).map_err(|e| DriverError::Input(format!("input '{name}': {e}")))?;
                Ok((name, placed))
            })
            .collect()
    }
}

/// The built plan made for the targets `opened` (the first whose targets are these, by memory space, kind and
/// staging), read back without planning. A run that does not read its outputs drops the downloads planned for
/// reading them, as planning for it would. Targets none of the plans was made for are an error naming why each
/// does not fit.
fn built_plan(
    graph: &stowage_compiler::ir::Graph,
    opened: &[Box<dyn OpenedTarget>],
    built: &[BuiltPlan],
    read_outputs: bool,
) -> Result<(Plan, &'static str)> {
    let backends = targets::backends(opened);
    let mut refused = Vec::new();
    for b in built {
        match plan::serial::decode(b.plan, graph, &backends) {
            Ok(mut plan) => {
                if !read_outputs {
                    plan.copies.retain(|c| c.when != plan::When::WhenRead);
                }
                return Ok((plan, b.path));
            }
            Err(plan::PlanReadError::Targets(why)) => refused.push(format!("the plan for {}: {why}", b.path)),
            Err(e) => return Err(DriverError::Built(format!("the plan for {}: {e}", b.path))),
        }
    }
    Err(DriverError::Built(format!("this code was built for other targets ({})", refused.join("; "))))
}

/// Checks the given inputs against the layouts a built plan reads them in: the same strides, at least its
/// alignment. (A plan is made for its inputs' layouts; built code runs its plan as it is.)
fn check_built_inputs(
    graph: &stowage_compiler::ir::Graph,
    plan: &Plan,
    inputs: &[(String, Tensor<'static>)],
) -> Result<()> {
    for (name, t) in inputs {
        let (Some(planned), Some(&v)) = (
            plan.inputs.iter().find(|i| i.name == *name),
            graph.inputs().iter().find(|&&v| graph.value(v).name == *name),
        ) else {
            continue; // folded into the graph at build time
        };
        let Some(actual) = crate::compile::layout_of(t) else { continue };
        let shape = &graph.ty(v).shape;
        let actual = actual.simplified(shape);
        let (want, got) = (planned.layout.strides(t.dt(), shape), actual.strides(t.dt(), shape));
        let strides_differ = shape.iter().zip(want.iter().zip(&got)).any(|(&d, (a, b))| d > 1 && a != b);
        if strides_differ || actual.alignment < planned.layout.alignment || actual.view != planned.layout.view {
            return Err(DriverError::Input(format!(
                "input '{name}': this code was built for it {}, the tensor given is {}",
                planned.layout.describe(),
                actual.describe()
            )));
        }
    }
    Ok(())
}

/// A value the plan should have computed before it was read: a stowage bug, said as such.
fn not_computed(name: &str) -> DriverError {
    DriverError::Plan(format!("value '{name}' was not computed before it was read (a planning bug)"))
}
