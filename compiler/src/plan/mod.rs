//! The planner: from the optimised IR and the targets' descriptors to a [`Plan`] that says where every node runs,
//! how every value is laid out, every copy (with its bytes, reason and how often it runs) and each memory space's
//! arena. Each pass is one file, run in this order by [`plan`]:
//!
//! 1. [`placement`]: each node to a target with a kernel for it, least estimated compute plus transfer time
//!    ([`cost`]);
//! 2. [`layout`]: packed row-major values, graph inputs in the caller's layout; [`blocked`]: the values of
//!    convolution chains a target holds in channel blocks;
//! 3. [`copies`]: a transfer or relayout only where producer and consumer disagree, at most one per value and
//!    destination; outputs stay where they were made;
//! 4. [`memory`]: per space, arena offsets from liveness over the steps each backend will run
//!    ([`Backend::kernel_steps`]), against the lower bound;
//! 5. the copy budget, checked last, so its error names the copies.
//!
//! Backends take part through [`Backend`]; [`show`] prints a plan as text or Graphviz; [`serial`] writes one out for
//! built code, which runs it without planning again.

pub mod blocked;
pub mod copies;
pub mod cost;
pub mod layout;
pub mod memory;
mod overlap;
pub mod placement;
pub mod precision;
mod resident;
pub mod segments;
pub mod serial;
pub mod show;
pub mod target;

use std::collections::BTreeMap;

pub use blocked::BlockedValue;
pub use copies::{CopyKind, InputAccess, PlannedCopy, When};
pub use layout::InputLayout;
pub use memory::{Arena, Buffer};
pub use placement::Placed;
pub use precision::{Granted, Precision};
pub use segments::{segments, Segment};
pub use serial::PlanReadError;
pub use target::{one_step_per_node, Accepts, Backend, BlockRole, KernelStep, TargetSpec};

use crate::ir::{Graph, ValueDef};

/// What the caller asks of a plan besides the targets.
#[derive(Clone, Debug, Default)]
pub struct PlanOptions {
    /// Caller layouts of graph inputs, by input name (the default: packed row-major, 64-byte aligned).
    pub input_layouts: BTreeMap<String, InputLayout>,
    /// Outputs fed back as the next run's inputs: `(output, input)`.
    pub states: Vec<(String, String)>,
    /// At most this many copies per run (`--max-copies`).
    pub max_copies: Option<usize>,
    /// At most this many bytes copied per run (`--max-copy-bytes`).
    pub max_copy_bytes: Option<usize>,
    /// Nodes the caller places by hand, by node name: the target's name. Placement checks the target has a kernel
    /// for the node and otherwise leaves the choice to the cost model (tests use this to try every placement).
    pub pins: BTreeMap<String, String>,
    /// True when the caller reads the outputs' bytes (`stowage run` writes them): outputs on discrete memory are
    /// then downloaded once each.
    pub read_outputs: bool,
    /// Inputs that already live on a device, by input name: the memory space they live in (`--input-device`,
    /// `resident.rs`).
    pub input_devices: BTreeMap<String, String>,
    /// The precision asked of every target (`--precision P`; `None`: fp32).
    pub precision: Option<Precision>,
    /// The precision asked of one target, by its name or memory space (`--precision TARGET=P`), after
    /// [`PlanOptions::precision`]: the last word for a target wins.
    pub target_precisions: Vec<(String, Precision)>,
}

impl PlanOptions {
    /// Sets an input's layout (the library's `--input-layout`).
    pub fn input_layout(mut self, input: impl Into<String>, layout: InputLayout) -> Self {
        self.input_layouts.insert(input.into(), layout);
        self
    }

    /// Declares that `input` already lives in memory space `space` (a target's space, `opencl:0`) when a run
    /// starts (`--input-device NAME=TARGET`): the caller hands a tensor held there.
    pub fn input_device(mut self, input: impl Into<String>, space: impl Into<String>) -> Self {
        self.input_devices.insert(input.into(), space.into());
        self
    }

    /// Declares `output` fed back as the next run's `input` (`--state OUT=IN`).
    pub fn state(mut self, output: impl Into<String>, input: impl Into<String>) -> Self {
        self.states.push((output.into(), input.into()));
        self
    }

    /// Places node `node` on target `target` (by the target's name).
    pub fn pin(mut self, node: impl Into<String>, target: impl Into<String>) -> Self {
        self.pins.insert(node.into(), target.into());
        self
    }

    /// Asks `precision` of every target (`--precision P`).
    pub fn precision(mut self, precision: Precision) -> Self {
        self.precision = Some(precision);
        self
    }

    /// Asks `precision` of the target named `target` (`--precision TARGET=P`).
    pub fn target_precision(mut self, target: impl Into<String>, precision: Precision) -> Self {
        self.target_precisions.push((target.into(), precision));
        self
    }

    /// A copy budget (`--max-copies`, `--max-copy-bytes`).
    pub fn copy_budget(mut self, copies: Option<usize>, bytes: Option<usize>) -> Self {
        self.max_copies = copies;
        self.max_copy_bytes = bytes;
        self
    }
}

/// A plan: placements, input layouts, copies, arenas.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The graph's name.
    pub graph: String,
    /// The targets, in the caller's order.
    pub targets: Vec<TargetSpec>,
    /// Per target (parallel to `targets`), the precision asked of it and what it computes ([`precision`]).
    pub precisions: Vec<Granted>,
    /// Every node in run order, with its target and why.
    pub nodes: Vec<Placed>,
    /// Node names and ops, parallel to `nodes` (for showing without the graph).
    pub node_names: Vec<(String, &'static str)>,
    /// Graph inputs, in order.
    pub inputs: Vec<PlanInput>,
    /// Every copy.
    pub copies: Vec<PlannedCopy>,
    /// Values held in channel blocks ([`blocked`]), in value order; every other value is packed.
    pub blocked: Vec<BlockedValue>,
    /// Per space, its arena.
    pub arenas: Vec<Arena>,
    /// Fed-back outputs: `(output, input)`.
    pub states: Vec<(String, String)>,
}

impl Plan {
    /// Copies that run on every run (or the first, or when an output is read): what the budget counts.
    pub fn run_copies(&self) -> impl Iterator<Item = &PlannedCopy> {
        self.copies.iter().filter(|c| c.when != When::Setup)
    }

    /// The targets used, by index: true when some node runs there.
    pub fn uses(&self, target: usize) -> bool {
        self.nodes.iter().any(|p| p.target == target)
    }
}

/// A graph input as planned.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct PlanInput {
    /// Its name.
    pub name: String,
    /// The caller's layout of it.
    pub layout: InputLayout,
    /// Per memory space that reads it: in place, or through its one copy.
    pub access: Vec<(String, InputAccess)>,
    /// The memory space it lives in when a run starts, where the caller said (`--input-device`); `None`: the
    /// host.
    pub device: Option<String>,
}

impl PlanInput {
    /// True when the kernels of `space` read a copy of it.
    pub fn copied_for(&self, space: &str) -> bool {
        self.access.iter().any(|(s, a)| s == space && *a == InputAccess::Copied)
    }
}

/// Why a plan cannot be made. Each names what is at fault.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// No target has a kernel for a node.
    #[error("node '{node}' ({op}): no target can run it ({})", refused.iter().map(|(t, r)| format!("{t}: {r}")).collect::<Vec<_>>().join("; "))]
    NoTarget {
        /// The node.
        node: String,
        /// Its op.
        op: &'static str,
        /// Each target tried, and why it refused.
        refused: Vec<(String, String)>,
    },
    /// An option names an input or output the graph lacks, or contradicts its type.
    #[error("{option}: {message}")]
    BadOption {
        /// The option as given (`--input-layout frame=…`).
        option: String,
        /// What is wrong.
        message: String,
    },
    /// The plan moves more than the budget allows.
    #[error("the plan needs {count} copies of {bytes} bytes per run, over the budget of {budget}: {list}")]
    OverBudget {
        /// Copies planned.
        count: usize,
        /// Bytes planned.
        bytes: usize,
        /// The budget, as given.
        budget: String,
        /// The copies, one phrase each.
        list: String,
    },
}

/// Plans `graph` for `targets` (in order of preference).
pub fn plan(graph: &Graph, targets: &[&dyn Backend], options: &PlanOptions) -> Result<Plan, PlanError> {
    check_options(graph, targets, options)?;
    let asked = precision::resolve(targets, options.precision, &options.target_precisions)?;
    let precisions = precision::grant(targets, &asked)?;
    let mut simplified = options.clone();
    for (name, layout) in simplified.input_layouts.iter_mut() {
        if let Some(&v) = graph.inputs().iter().find(|&&v| graph.value(v).name == *name) {
            *layout = layout.simplified(&graph.ty(v).shape);
        }
    }
    let options = &simplified;
    let nodes = placement::place(graph, targets, &options.pins)?;
    let inserted = copies::insert(graph, targets, &nodes, options);
    let blocked = blocked::choose(graph, targets, &nodes, &options.states);
    let inputs: Vec<PlanInput> = graph
        .inputs()
        .iter()
        .map(|&v| {
            let name = graph.value(v).name.clone();
            let layout =
                options.input_layouts.get(&name).cloned().unwrap_or_else(|| InputLayout::packed(graph.ty(v).rank()));
            // The keys are (input, space): this input's entries are one range of the map.
            let access = inserted
                .input_access
                .range((name.clone(), String::new())..)
                .take_while(|((input, _), _)| *input == name)
                .map(|((_, space), a)| (space.clone(), a.clone()))
                .collect();
            let device = options.input_devices.get(&name).cloned();
            PlanInput { name, layout, access, device }
        })
        .collect();
    let steps: Vec<(usize, Vec<KernelStep>)> = segments::segments_of(graph, &nodes)
        .iter()
        .map(|seg| (seg.target, targets[seg.target].kernel_steps(&seg.graph, &inputs)))
        .collect();
    let arenas = memory::plan(graph, targets, &steps, &inserted.copies, &options.states, &blocked);
    let plan = Plan {
        graph: graph.name.clone(),
        targets: targets.iter().map(|t| t.spec().clone()).collect(),
        precisions,
        node_names: nodes.iter().map(|p| (graph.node(p.node).name.clone(), graph.node(p.node).op.name())).collect(),
        nodes,
        inputs,
        copies: inserted.copies,
        blocked,
        arenas,
        states: options.states.clone(),
    };
    check_budget(&plan, options)?;
    Ok(plan)
}

fn check_options(graph: &Graph, targets: &[&dyn Backend], options: &PlanOptions) -> Result<(), PlanError> {
    let input = |name: &str| graph.inputs().iter().copied().find(|&v| graph.value(v).name == name);
    let names = |vs: Vec<&str>| vs.join(", ");
    let input_names = || names(graph.inputs().iter().map(|&v| graph.value(v).name.as_str()).collect());
    for (name, layout) in &options.input_layouts {
        let bad = |message: String| PlanError::BadOption { option: format!("--input-layout {name}"), message };
        let v = input(name)
            .ok_or_else(|| bad(format!("the model has no run-time input '{name}' (its inputs: {})", input_names())))?;
        let ty = graph.ty(v);
        layout.check(ty.dt, &ty.shape).map_err(|m| bad(format!("{m} (the input is {}{:?})", ty.dt, ty.shape)))?;
    }
    for (name, space) in &options.input_devices {
        let bad = |message: String| PlanError::BadOption { option: format!("--input-device {name}={space}"), message };
        input(name)
            .ok_or_else(|| bad(format!("the model has no run-time input '{name}' (its inputs: {})", input_names())))?;
        if !targets.iter().any(|t| t.spec().space == *space && !t.spec().is_host()) {
            let devices: Vec<&str> =
                targets.iter().filter(|t| !t.spec().is_host()).map(|t| t.spec().space.as_str()).collect();
            return Err(bad(format!(
                "'{space}' is not the memory of a device among the targets (theirs: {})",
                if devices.is_empty() { "none".to_string() } else { devices.join(", ") }
            )));
        }
        if options.states.iter().any(|(_, i)| i == name) {
            return Err(bad(format!("'{name}' is a state input (--state): it is fed back where its output is made")));
        }
    }
    for (out, inp) in &options.states {
        let bad = |message: String| PlanError::BadOption { option: format!("--state {out}={inp}"), message };
        let o = graph.outputs().iter().find(|o| o.name == *out).ok_or_else(|| {
            bad(format!(
                "the model has no output '{out}' (its outputs: {})",
                names(graph.outputs().iter().map(|o| o.name.as_str()).collect())
            ))
        })?;
        let i = input(inp)
            .ok_or_else(|| bad(format!("the model has no run-time input '{inp}' (its inputs: {})", input_names())))?;
        let (to, ti) = (graph.ty(o.value), graph.ty(i));
        if to != ti {
            return Err(bad(format!(
                "output '{out}' is {}{:?}, input '{inp}' is {}{:?}",
                to.dt, to.shape, ti.dt, ti.shape
            )));
        }
        if matches!(graph.value(o.value).def, ValueDef::Input(_) | ValueDef::Const(_)) {
            return Err(bad(format!("output '{out}' is not computed by the model")));
        }
    }
    Ok(())
}

fn check_budget(plan: &Plan, options: &PlanOptions) -> Result<(), PlanError> {
    let count = plan.run_copies().count();
    let bytes: usize = plan.run_copies().map(|c| c.bytes).sum();
    let over_count = options.max_copies.is_some_and(|m| count > m);
    let over_bytes = options.max_copy_bytes.is_some_and(|m| bytes > m);
    if !over_count && !over_bytes {
        return Ok(());
    }
    let mut budget = Vec::new();
    if let Some(m) = options.max_copies {
        budget.push(format!("{m} copies"));
    }
    if let Some(m) = options.max_copy_bytes {
        budget.push(format!("{m} bytes"));
    }
    let list: Vec<String> = plan
        .run_copies()
        .map(|c| format!("{} '{}' {} → {}, {} bytes ({})", c.kind, c.value, c.from, c.to, c.bytes, c.reason))
        .collect();
    Err(PlanError::OverBudget { count, bytes, budget: budget.join(" and "), list: list.join("; ") })
}
