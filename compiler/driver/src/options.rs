//! How to compile, plan and run: [`RunOptions`], the caller's [`Planning`], and what built code carries.

use stowage_compiler::ir::Graph;
use stowage_compiler::onnx::ImportConfig;
use stowage_compiler::plan::{InputLayout, PlanOptions, Precision};

use crate::backend::Registry;
use crate::error::{DriverError, Result};

/// How to compile and run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The backends target names are looked up in.
    pub registry: Registry,
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
    /// device and the staging plan of a discrete one), each written out ([`stowage_compiler::plan::serial`]). At
    /// start-up the one made for the targets opened is run as it is, without planning; targets none of them was
    /// made for (another device) are an error rather than a silent change.
    pub built_plans: Vec<BuiltPlan>,
    /// In built code: the kernels linked in, handed to every target opened
    /// ([`OpenOptions::linked`](crate::OpenOptions::linked)).
    pub linked: Option<&'static (dyn std::any::Any + Send + Sync)>,
    /// In built code of a model compiled in stages: the cuts `stowage build` made, outermost first (each a
    /// top-level node's position in the part before the cut above it, `stages.rs` rule 5). The part before the
    /// innermost cut is the built graph; the parts after each cut are compiled at run time. Empty otherwise.
    pub built_cuts: &'static [usize],
    /// Targets the caller opened itself, taken by the kinds they are for instead of opening their own
    /// ([`OpenOptions::adopted`](crate::OpenOptions::adopted)): a session in the caller's OpenCL context.
    pub adopted: crate::backend::Adopted,
}

impl RunOptions {
    /// `stowage run`'s defaults over `registry`: the `cpu` target, one thread, one run, outputs read.
    pub fn new(registry: Registry) -> Self {
        RunOptions {
            registry,
            target: "cpu".into(),
            threads: 1,
            repeat: 1,
            config: ImportConfig::new(),
            planning: Planning::default(),
            read_outputs: true,
            built_plans: Vec::new(),
            built_graph: None,
            linked: None,
            built_cuts: &[],
            adopted: Default::default(),
        }
    }

    /// What each target is told when it is opened.
    pub fn open_options(&self) -> crate::backend::OpenOptions {
        crate::backend::OpenOptions { threads: self.threads, linked: self.linked, adopted: self.adopted.clone() }
    }
}

/// An optimised graph compiled into an executable or module.
#[derive(Clone, Copy, Debug)]
pub struct BuiltGraph {
    /// Its structure.
    pub graph: &'static [u8],
    /// Its constants, each at a 256-byte boundary of a page-aligned blob.
    pub constants: &'static [u8],
    /// The model's declared inputs, those fixed at build time included (what `--input` arguments are matched to).
    pub inputs: &'static [&'static str],
}

/// A plan built into an executable or module: which path it is, and the plan.
#[derive(Clone, Copy, Debug)]
pub struct BuiltPlan {
    /// The path, in words (`discrete memory: one upload per input through pinned staging`).
    pub path: &'static str,
    /// The plan, written out by [`stowage_compiler::plan::serial::encode`].
    pub plan: &'static [u8],
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
    /// `(input, target)`: an input that already lives on a device when a run starts (`--input-device`), the target
    /// named as in `--target` or by its memory space (`opencl:0`). A tensor given for it must be held there
    /// ([`crate::OpenedTarget::holds`]); `stowage run` puts its file there before the runs ([`crate::Session::place`]).
    pub input_devices: Vec<(String, String)>,
    /// `(node, target)`: nodes placed by hand (the library's [`PlanOptions::pin`]).
    pub pins: Vec<(String, String)>,
    /// At most this many copies per run.
    pub max_copies: Option<usize>,
    /// At most this many bytes copied per run.
    pub max_copy_bytes: Option<usize>,
    /// The arithmetic precision asked of every target (`--precision P`; `None`: fp32).
    pub precision: Option<Precision>,
    /// `(target, precision)`: the precision asked of one target (`--precision TARGET=P`), named as in `--target`
    /// or by its memory space; after [`Planning::precision`], the last word for a target winning.
    pub target_precisions: Vec<(String, Precision)>,
}

impl Planning {
    /// The planner's options for `graph`: layouts parsed against its inputs' ranks.
    pub fn plan_options(&self, graph: &Graph) -> Result<PlanOptions> {
        let mut options = PlanOptions::default().copy_budget(self.max_copies, self.max_copy_bytes);
        for (name, text) in &self.input_layouts {
            let v = graph.inputs().iter().copied().find(|&v| graph.value(v).name == *name).ok_or_else(|| {
                let names: Vec<&str> = graph.inputs().iter().map(|&v| graph.value(v).name.as_str()).collect();
                DriverError::Plan(format!(
                    "--input-layout {name}: the model has no run-time input '{name}' (its inputs: {})",
                    names.join(", ")
                ))
            })?;
            let ty = graph.ty(v);
            let layout = InputLayout::parse(text, ty.rank())
                .and_then(|l| l.check(ty.dt, &ty.shape).map(|()| l))
                .map_err(|e| {
                    DriverError::Plan(format!(
                        "--input-layout {name}={text}: {e} (the input is {}{:?})",
                        ty.dt, ty.shape
                    ))
                })?;
            options = options.input_layout(name.clone(), layout);
        }
        for (o, i) in &self.states {
            options = options.state(o.clone(), i.clone());
        }
        options.precision = self.precision;
        options.target_precisions = self.target_precisions.clone();
        for (n, t) in &self.pins {
            options = options.pin(n.clone(), t.clone());
        }
        Ok(options)
    }
}
