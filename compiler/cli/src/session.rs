//! What `stowage run` does, as a library: import, specialise on shape-setting inputs, optimise, lower for the
//! target, run. The conformance and model suites call this, so they test the very code the command runs.

use std::path::Path;
use std::time::Instant;

use std::collections::HashMap;
use stowage_compiler::onnx::proto::tensor_shape_proto::dimension;
use stowage_compiler::onnx::proto::{type_proto, ValueInfoProto};

use stowage_compiler::ir::{Graph, ValueId};
use stowage_compiler::onnx::{self, ImportConfig};
use stowage_compiler::plan::{self, InputLayout, Plan, PlanOptions};
use stowage_compiler::Context;
use stowage_cpu::Program;
use stowage_runtime::{Accepts as RuntimeAccepts, LayoutNeed, Ledger, LedgerTag, Move, Tensor};

use crate::targets::{self, Opened};

/// How to compile and run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Target as given: `cpu`, `opencl`, `opencl:discrete`, `opencl:N`, `opencl:N:discrete`, or a comma-separated
    /// list of them in order of preference (`opencl,cpu`).
    pub target: String,
    /// Kernel threads.
    pub threads: usize,
    /// Runs (the first is timed separately).
    pub repeat: usize,
    /// Shapes and values fixed by the caller.
    pub config: ImportConfig,
    /// Caller layouts, fed-back state, copy budget.
    pub planning: Planning,
    /// The caller reads the outputs' bytes (so outputs on discrete memory are planned to be downloaded once).
    pub read_outputs: bool,
    /// In built code: the optimised graph compiled in (`stowage_compiler::ir::serial`), used instead of importing
    /// and optimising the model again; its constants are views of the executable's image.
    pub built_graph: Option<BuiltGraph>,
    /// In built code: the plans it was built with, by path (for OpenCL, the in-place-import plan of a unified
    /// device and the staging plan of a discrete one), each as its copies, one line each. A plan made at start-up
    /// that is none of them (another device, another stowage) is an error rather than a silent change.
    pub built_plans: Vec<BuiltPlan>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            target: "cpu".into(),
            threads: 1,
            repeat: 1,
            config: ImportConfig::new(),
            planning: Planning::default(),
            read_outputs: true,
            built_plans: Vec::new(),
            built_graph: None,
        }
    }
}

/// An optimised graph compiled into an executable or module.
#[derive(Clone, Copy, Debug)]
pub struct BuiltGraph {
    /// Its structure.
    pub graph: &'static [u8],
    /// Its constants, each at a 64-byte boundary of a page-aligned blob.
    pub constants: &'static [u8],
    /// The model's declared inputs, those fixed at build time included (what `--input` arguments are matched to).
    pub inputs: &'static [&'static str],
}

/// A plan built into an executable or module: which path it is, and its copies.
#[derive(Clone, Debug)]
pub struct BuiltPlan {
    /// The path, in words (`discrete memory: one upload per input through pinned staging`).
    pub path: String,
    /// Its copies, one line each ([`stowage_compiler::plan::PlannedCopy`]'s `Display`).
    pub copies: Vec<String>,
}

/// The alignment `stowage run` reads input files into, and `stowage plan` assumes of inputs it is not told about:
/// a page, which meets every device's import alignment.
pub const INPUT_ALIGNMENT: usize = 4096;

/// The planning options of a run (the CLI's `--input-layout`, `--state`, `--max-copies`, `--max-copy-bytes`).
#[derive(Clone, Debug, Default)]
pub struct Planning {
    /// `(input, layout)`: the caller's layout of an input, in `--input-layout`'s words
    /// ([`stowage_compiler::plan::InputLayout::parse`]). A tensor given for that input must be in it.
    pub input_layouts: Vec<(String, String)>,
    /// `(output, input)`: an output fed back as the next run's input. Over `repeat` runs, run k+1 gets run k's
    /// output as is, wherever it is.
    pub states: Vec<(String, String)>,
    /// `(node, target)`: nodes placed by hand (the library's [`PlanOptions::pin`]).
    pub pins: Vec<(String, String)>,
    /// At most this many copies per run.
    pub max_copies: Option<usize>,
    /// At most this many bytes copied per run.
    pub max_copy_bytes: Option<usize>,
}

impl Planning {
    /// The planner's options for `graph`: layouts parsed against its inputs' ranks.
    pub fn plan_options(&self, graph: &Graph) -> Result<PlanOptions, String> {
        let mut options = PlanOptions::default().copy_budget(self.max_copies, self.max_copy_bytes);
        for (name, text) in &self.input_layouts {
            let v = graph.inputs().iter().copied().find(|&v| graph.value(v).name == *name).ok_or_else(|| {
                let names: Vec<&str> = graph.inputs().iter().map(|&v| graph.value(v).name.as_str()).collect();
                format!(
                    "--input-layout {name}: the model has no run-time input '{name}' (its inputs: {})",
                    names.join(", ")
                )
            })?;
            let ty = graph.ty(v);
            let layout = InputLayout::parse(text, ty.rank())
                .and_then(|l| l.check(ty.dt, &ty.shape).map(|()| l))
                .map_err(|e| format!("--input-layout {name}={text}: {e} (the input is {}{:?})", ty.dt, ty.shape))?;
            options = options.input_layout(name.clone(), layout);
        }
        for (o, i) in &self.states {
            options = options.state(o.clone(), i.clone());
        }
        for (n, t) in &self.pins {
            options = options.pin(n.clone(), t.clone());
        }
        Ok(options)
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
    /// The OpenCL path taken, when an OpenCL target is used (`unified memory: inputs imported in place` …).
    pub path: Option<String>,
    /// The plan that ran.
    pub plan: Plan,
    /// In built code: which built plan ran (its path).
    pub built_path: Option<String>,
}

/// Checks a target list: known names, none twice.
pub fn check_target(target: &str) -> Result<(), String> {
    crate::targets::check(target).map(|_| ())
}

/// Compiles `model` for `inputs` and runs it. Inputs are by name; every graph input must be given, except those whose
/// value `options.config` fixes. The compilation is specialised on the given inputs: shape-setting ones are folded
/// as constants, and the others' shapes fix the symbolic dimensions.
pub fn run(model: &Path, inputs: Vec<(String, Tensor<'static>)>, options: &RunOptions) -> Result<Outcome, String> {
    let start = Instant::now();
    let bytes = std::fs::read(model).map_err(|e| format!("{}: cannot read the model: {e}", model.display()))?;
    run_bytes(&bytes, model, inputs, options, start)
}

/// Imports `model` specialised on `inputs` (see [`run`]) and optimises it.
fn compile(
    bytes: &[u8],
    model: &Path,
    inputs: &[(String, Tensor<'static>)],
    options: &RunOptions,
    progress: &Progress,
    running: bool,
) -> Result<Context, String> {
    check_target(&options.target)?;
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
    if let Some(missing) = needed.find(|w| running && !inputs.iter().any(|(n, _)| n == *w)) {
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
    for (name, t) in inputs {
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
    // The graph holds its own copies of the initializers now.
    drop(proto);
    let mut cx = Context::new(graph);
    progress.phase("folding constants and optimising");
    cx.optimize().map_err(|e| e.to_string())?;
    Ok(cx)
}

/// The compiled-in graph of built code, after checking the given inputs against its inputs' types.
fn built_graph(built: &BuiltGraph, inputs: &[(String, Tensor<'static>)]) -> Result<Context, String> {
    let graph = stowage_compiler::ir::serial::decode_static(built.graph, built.constants)?;
    for (name, t) in inputs {
        let Some(&v) = graph.inputs().iter().find(|&&v| graph.value(v).name == *name) else {
            let names: Vec<&str> = graph.inputs().iter().map(|&v| graph.value(v).name.as_str()).collect();
            return Err(format!("input '{name}': the model has no such input (its inputs: {})", names.join(", ")));
        };
        let ty = graph.ty(v);
        if ty.dt != t.dt() || ty.shape != t.shape() {
            return Err(format!(
                "input '{name}': the model takes {}{:?}, the given tensor is {}{:?}",
                ty.dt,
                ty.shape,
                t.dt(),
                t.shape()
            ));
        }
    }
    Ok(Context::new(graph))
}

/// The plan for `graph` on `opened`, with the caller's planning options and the layouts of the given inputs.
fn make_plan(
    graph: &Graph,
    opened: &[Opened],
    inputs: &[(String, Tensor<'static>)],
    options: &RunOptions,
) -> Result<Plan, String> {
    let mut plan_options = options.planning.plan_options(graph)?;
    plan_options.read_outputs = options.read_outputs;
    if inputs.is_empty() {
        // Planning alone: inputs not described are assumed where `stowage run` puts them.
        for &v in graph.inputs() {
            let name = &graph.value(v).name;
            if !plan_options.input_layouts.contains_key(name) {
                let layout = InputLayout { alignment: INPUT_ALIGNMENT, ..InputLayout::packed(graph.ty(v).rank()) };
                plan_options.input_layouts.insert(name.clone(), layout);
            }
        }
    }
    for (name, t) in inputs {
        if !graph.inputs().iter().any(|&v| graph.value(v).name == *name) {
            continue; // folded: a shape-setting input's value is a constant of this compilation
        }
        let Some(actual) = layout_of(t) else { continue };
        if let Some(declared) = plan_options.input_layouts.get(name) {
            let (a, b) = (declared.strides(t.dt(), t.shape()), actual.strides(t.dt(), t.shape()));
            // Axes of extent 1 are never stepped: their strides do not matter.
            if t.shape().iter().zip(a.iter().zip(&b)).any(|(&d, (x, y))| d > 1 && x != y) {
                return Err(format!(
                    "input '{name}': --input-layout says {}, the tensor given is {}",
                    declared.describe(),
                    actual.describe()
                ));
            }
        }
        plan_options.input_layouts.insert(name.clone(), actual);
    }
    plan::plan(graph, &targets::backends(opened), &plan_options).map_err(|e| e.to_string())
}

/// The layout and alignment of a tensor in host memory, as the planner describes caller memory (`None`: the
/// bytes are not on the host, as for a fed-back device output).
pub fn layout_of(t: &Tensor<'_>) -> Option<InputLayout> {
    let bytes = t.storage().host_bytes()?;
    let address = bytes.as_ptr() as usize + t.layout().offset();
    let alignment = if address == 0 { 4096 } else { (1usize << address.trailing_zeros()).min(4096) };
    let (strides, shape) = (t.layout().strides(), t.shape());
    let rank = shape.len();
    let mut order: Vec<usize> = (0..rank).collect();
    order.sort_by(|&a, &b| strides[b].cmp(&strides[a]).then(a.cmp(&b)));
    // Packed from the innermost axis out, up to the first axis whose step is larger: that step is the row pitch.
    let mut layout = InputLayout { order: order.clone(), alignment, ..InputLayout::packed(rank) };
    let mut packed = 1;
    for k in (0..rank).rev() {
        let axis = order[k];
        if shape[axis] > 1 && strides[axis] != packed && layout.row_pitch.is_none() {
            layout.row_pitch = Some(strides[axis] * t.dt().size_of());
            layout.row_axis = k;
            packed = strides[axis];
        }
        packed *= shape[axis].max(1);
    }
    // What an order and a pitch cannot say (slices along several axes, broadcasts) is kept as the strides.
    let described = layout.strides(t.dt(), shape);
    if shape.iter().zip(described.iter().zip(strides)).any(|(&d, (x, y))| d > 1 && x != y) {
        layout.strided = Some(strides.to_vec());
    }
    layout.view = !t.is_whole_storage();
    Some(layout)
}

/// How the CPU segments of `plan` are lowered: inputs the plan has host kernels read in the caller's layout get
/// kernels compiled for its strides.
fn cpu_lower_options(graph: &Graph, plan: &Plan, threads: usize) -> stowage_cpu::LowerOptions {
    let mut lower = stowage_cpu::LowerOptions { threads, ..Default::default() };
    for i in &plan.inputs {
        let Some(&v) = graph.inputs().iter().find(|&&v| graph.value(v).name == i.name) else { continue };
        let in_place = i.access.iter().any(|(s, a)| s == "host" && *a == plan::InputAccess::InPlace);
        if !i.layout.is_packed() && in_place {
            let ty = graph.ty(v);
            lower.input_strides.insert(i.name.clone(), i.layout.strides(ty.dt, &ty.shape));
        }
    }
    lower
}

/// What `stowage build` compiles ahead of time: the optimised graph, its plan, and the CPU segments' generated
/// kernels (node, spec) in the order their lowering makes them again at start-up.
pub struct Prepared {
    /// The optimised graph.
    pub cx: Context,
    /// Its plan.
    pub plan: Plan,
    /// Generated kernels of every CPU segment, in segment order.
    pub kernels: Vec<(String, stowage_cpu::jit::Loops)>,
    /// The memory path the plan takes, in words (see [`memory_path`]).
    pub path: String,
    /// An OpenCL device the plan uses has unified memory (so a staging plan, `opencl:discrete`, exists too).
    pub unified: bool,
}

/// The memory path a plan over `opened` takes, in words: host only, or each OpenCL device's path.
fn memory_path(opened: &[Opened], plan: &Plan) -> (String, bool) {
    let mut words = Vec::new();
    let mut unified = false;
    for (i, o) in opened.iter().enumerate() {
        if let (Opened::OpenCl(device, _), true) = (o, plan.uses(i)) {
            let space = device.space().name().to_string();
            match device.mode() {
                stowage_opencl::Mode::Unified => {
                    unified = true;
                    words.push(format!("{space}: unified memory, inputs imported in place"));
                }
                stowage_opencl::Mode::Discrete => {
                    words.push(format!("{space}: discrete memory, inputs uploaded through pinned staging"))
                }
            }
        }
    }
    if words.is_empty() {
        words.push("host memory only".to_string());
    }
    (words.join("; "), unified)
}

/// Imports, optimises and plans `model` as a built executable will at start-up (inputs page-aligned, in their
/// declared layouts), and collects the CPU kernels its lowering will ask for.
pub fn prepare_build(bytes: &[u8], model: &Path, options: &RunOptions) -> Result<Prepared, String> {
    let progress = Progress::start(model);
    let cx = compile(bytes, model, &[], options, &progress, false)?;
    progress.phase("planning");
    let opened = targets::open(&options.target, options.threads, &cx.graph)?;
    let plan = make_plan(&cx.graph, &opened, &[], options).map_err(|e| format!("{}: {e}", model.display()))?;
    let mut kernels = Vec::new();
    for seg in plan::segments(&cx.graph, &plan) {
        if let Opened::Cpu(_) = &opened[seg.target] {
            kernels
                .extend(stowage_cpu::kernel_specs(&seg.graph, &cpu_lower_options(&cx.graph, &plan, options.threads)));
        }
    }
    progress.finish();
    let (path, unified) = memory_path(&opened, &plan);
    Ok(Prepared { cx, plan, kernels, path, unified })
}

/// A program of one segment.
enum Lowered {
    Cpu(Program),
    OpenCl(stowage_opencl::ClProgram),
}

/// A model compiled, planned and lowered for its targets, ready to run any number of times: what `stowage run`
/// does once and a built model's typed module keeps.
pub struct Session {
    /// The optimised graph.
    pub cx: Context,
    /// Its plan.
    pub plan: Plan,
    segments: Vec<plan::Segment>,
    programs: Vec<Lowered>,
    opened: Vec<Opened>,
    /// Transfers made when the programs were made (constants to a device).
    pub setup: Ledger,
    /// Milliseconds from `start` to runnable.
    pub compile_ms: f64,
    /// In built code: the path of the built plan this one is.
    pub built_path: Option<String>,
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
    ) -> Result<Session, String> {
        let progress = Progress::start(model);
        let cx = match &options.built_graph {
            Some(built) => built_graph(built, inputs)?,
            None => compile(bytes, model, inputs, options, &progress, !inputs.is_empty())?,
        };
        let graph = &cx.graph;
        progress.phase("planning");
        let opened = targets::open(&options.target, options.threads, graph)?;
        let plan = make_plan(graph, &opened, inputs, options).map_err(|e| format!("{}: {e}", model.display()))?;
        let built_path = match options.built_plans.as_slice() {
            [] => None,
            plans => Some(check_built(&plan, plans)?),
        };
        progress.phase("generating kernels");
        let setup = Ledger::recording();
        let segments = plan::segments(graph, &plan);
        let mut programs = Vec::with_capacity(segments.len());
        for seg in &segments {
            let lowered = match &opened[seg.target] {
                Opened::Cpu(_) => Lowered::Cpu({
                    let lower = cpu_lower_options(graph, &plan, options.threads);
                    let mut p =
                        stowage_cpu::lower_with(&seg.graph, &lower).map_err(|e| format!("{}: {e}", model.display()))?;
                    p.threads = options.threads.max(1);
                    p
                }),
                Opened::OpenCl(device, _) => Lowered::OpenCl(
                    stowage_opencl::lower(&seg.graph, device, &setup)
                        .map_err(|e| format!("{}: {e}", model.display()))?,
                ),
            };
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
        let session = Session { cx, plan, segments, programs, opened, setup, compile_ms: 0.0, built_path };
        session.finish_devices()?;
        progress.finish();
        Ok(Session { compile_ms: start.elapsed().as_secs_f64() * 1e3, ..session })
    }

    fn devices(&self) -> impl Iterator<Item = &stowage_opencl::Target> {
        self.opened.iter().filter_map(|o| if let Opened::OpenCl(t, _) = o { Some(t) } else { None })
    }

    fn finish_devices(&self) -> Result<(), String> {
        for d in self.devices() {
            d.finish().map_err(|e| e.to_string())?;
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
    pub fn run(&self, inputs: &[(String, Tensor<'static>)], ledger: &Ledger) -> Result<RunResult, String> {
        let graph = &self.cx.graph;
        let mut values: HashMap<ValueId, Tensor<'static>> = HashMap::new();
        for &v in graph.inputs() {
            let name = &graph.value(v).name;
            let t = inputs.iter().find(|(n, _)| n == name).map(|(_, t)| t.clone());
            values.insert(v, t.ok_or_else(|| format!("input '{name}' is missing"))?);
        }
        let mut relaid: HashMap<ValueId, Tensor<'static>> = HashMap::new();
        for (&v, t) in &values {
            let name = &graph.value(v).name;
            if self.plan.inputs.iter().any(|i| i.name == *name && i.copied_for("host")) {
                let need = LayoutNeed { alignment: stowage_runtime::HOST_ALIGNMENT, accepts: RuntimeAccepts::RowMajor };
                let tag = LedgerTag::new(ledger, name.as_str());
                relaid.insert(v, t.conform(&need, &tag).map_err(|e| format!("input '{name}': {e}"))?);
            }
        }
        let mut peaks: Vec<(String, usize)> = Vec::new();
        for (seg, program) in self.segments.iter().zip(&self.programs) {
            let on_host = matches!(program, Lowered::Cpu(_));
            let args: Vec<Tensor<'static>> = seg
                .inputs
                .iter()
                .map(|v| {
                    let t = if on_host { relaid.get(v).or_else(|| values.get(v)) } else { values.get(v) };
                    t.cloned().ok_or_else(|| format!("value '{}' was not computed", graph.value(*v).name))
                })
                .collect::<Result<_, _>>()?;
            let (outs, peak, space) = match program {
                Lowered::Cpu(p) => {
                    let out = p.run(args).map_err(|e| e.to_string())?;
                    (out.outputs, out.peak_bytes, "host".to_string())
                }
                Lowered::OpenCl(p) => {
                    let out = p.run(args, ledger).map_err(|e| e.to_string())?;
                    (out, p.peak_bytes(), p.target().space().name().to_string())
                }
            };
            match peaks.iter_mut().find(|(s, _)| *s == space) {
                Some(e) => e.1 = e.1.max(peak),
                None => peaks.push((space, peak)),
            }
            for (v, t) in seg.outputs.iter().zip(outs) {
                values.insert(*v, t);
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
                    .ok_or_else(|| format!("output '{}' was not computed", o.name))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RunResult { outputs, peaks })
    }
}

/// Finds which of the built plans `plan` is, by its copies; refuses a plan that is none of them. Downloads made when
/// the caller reads an output depend on whether a run writes its outputs; the rest of the plan must be one built.
fn check_built(plan: &Plan, built: &[BuiltPlan]) -> Result<String, String> {
    let lazy = format!(" bytes, {}: ", plan::When::WhenRead);
    let now: Vec<String> =
        plan.copies.iter().filter(|c| c.when != plan::When::WhenRead).map(|c| c.to_string()).collect();
    let mut first_difference = String::new();
    for b in built {
        let then: Vec<&String> = b.copies.iter().filter(|l| !l.contains(&lazy)).collect();
        if then.len() == now.len() && then.iter().zip(&now).all(|(a, b)| *a == b) {
            return Ok(b.path.clone());
        }
        if first_difference.is_empty() {
            first_difference = match now.iter().enumerate().find(|(k, l)| then.get(*k) != Some(l)) {
                Some((k, line)) => format!("its copy {} would now be \"{line}\"", k + 1),
                None => format!("{} copies then, {} now", then.len(), now.len()),
            };
        }
    }
    Err(format!("this code was built for another plan: {first_difference}"))
}

/// [`run`] for a model already in memory; `model` names it in errors and locates external data.
pub fn run_bytes(
    bytes: &[u8],
    model: &Path,
    inputs: Vec<(String, Tensor<'static>)>,
    options: &RunOptions,
    start: Instant,
) -> Result<Outcome, String> {
    let session = Session::new(bytes, model, &inputs, options, start)?;
    let graph = &session.cx.graph;
    let compile_ms = session.compile_ms;
    let ledger = Ledger::recording();
    // Inputs folded into the compilation (shape-setting ones) are not given at run time.
    let mut given: Vec<(String, Tensor<'static>)> =
        inputs.into_iter().filter(|(n, _)| graph.inputs().iter().any(|&v| graph.value(v).name == *n)).collect();
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
    let outs = last.ok_or("no run happened")?;
    let Session { cx, plan, segments, programs, opened, setup, built_path, .. } = session;
    let graph = &cx.graph;
    if std::env::var_os("STOWAGE_PROFILE").is_some() {
        if let [Lowered::Cpu(p)] = programs.as_slice() {
            let by_name = |v: &ValueId| given.iter().find(|(n, _)| *n == graph.value(*v).name).map(|(_, t)| t.clone());
            let args = segments[0].inputs.iter().filter_map(by_name).collect();
            print_profile(p, args)?;
        }
    }
    let (first_run_ms, run_median_ms) = first_and_median(times);
    let mut path = None;
    for (i, o) in opened.iter().enumerate() {
        if let (Opened::OpenCl(device, _), true) = (o, plan.uses(i)) {
            let how = match device.mode() {
                stowage_opencl::Mode::Unified => {
                    "unified memory: inputs at the device's alignment are used in place, outputs read in place"
                }
                stowage_opencl::Mode::Discrete => {
                    "discrete: one upload per input through a pinned staging buffer, one download per output read"
                }
            };
            path = Some(format!("{how} ({})", device.info().name));
        }
    }
    let mut spaces: Vec<String> = Vec::new();
    for p in &plan.nodes {
        let s = &plan.targets[p.target].space;
        if !spaces.contains(s) {
            spaces.push(s.clone());
        }
    }
    let mut steps = Vec::new();
    let mut const_bytes = 0;
    for program in &programs {
        match program {
            Lowered::Cpu(p) => {
                steps.extend(p.steps().iter().map(|s| (s.name.clone(), s.op)));
                const_bytes += p.const_bytes();
            }
            Lowered::OpenCl(p) => {
                steps.extend(p.steps().iter().map(|s| (s.name.clone(), s.op)));
                const_bytes += p.const_bytes;
            }
        }
    }
    Ok(Outcome {
        outputs: graph.outputs().iter().map(|o| o.name.clone()).zip(outs).collect(),
        compile_ms,
        first_run_ms,
        run_median_ms,
        peak_bytes: peaks.iter().map(|p| p.1).max().unwrap_or(0),
        peaks,
        assumed_inputs: cx.graph.metadata.assumed_inputs.clone(),
        ran_on: if spaces.is_empty() { "host".into() } else { spaces.join(",") },
        steps,
        const_bytes,
        ledger,
        setup_copies: setup.entries(),
        path,
        plan,
        built_path,
    })
}

/// Imports, optimises and plans `model` without running it (`stowage plan`): the inputs' layouts are the
/// caller's (`options.planning`) or packed row-major at the host's alignment.
pub fn plan_only(model: &Path, options: &RunOptions) -> Result<(Context, Plan), String> {
    let bytes = std::fs::read(model).map_err(|e| format!("{}: cannot read the model: {e}", model.display()))?;
    let progress = Progress::start(model);
    let cx = compile(&bytes, model, &[], options, &progress, false)?;
    let opened = targets::open(&options.target, options.threads, &cx.graph)?;
    let plan = make_plan(&cx.graph, &opened, &[], options).map_err(|e| format!("{}: {e}", model.display()))?;
    progress.finish();
    Ok((cx, plan))
}

fn first_and_median(mut times: Vec<f64>) -> (f64, f64) {
    let first = times[0];
    times.sort_by(f64::total_cmp);
    (first, times[times.len() / 2])
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
pub(crate) struct Progress(Option<indicatif::ProgressBar>);

impl Progress {
    pub(crate) fn start(model: &Path) -> Progress {
        use std::io::IsTerminal;
        if !std::io::stderr().is_terminal() {
            return Progress(None);
        }
        let bar = indicatif::ProgressBar::new_spinner();
        bar.set_message(format!("compiling {}: reading", model.display()));
        bar.enable_steady_tick(std::time::Duration::from_millis(120));
        Progress(Some(bar))
    }

    pub(crate) fn phase(&self, what: &str) {
        if let Some(bar) = &self.0 {
            let msg = bar.message();
            let model = msg.split(':').next().unwrap_or("compiling");
            bar.set_message(format!("{model}: {what}"));
        }
    }

    pub(crate) fn finish(&self) {
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
