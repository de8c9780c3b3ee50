//! What the planner knows of a target: its memory (the backend storage's descriptor), a throughput estimate for the
//! cost model, and, per node, whether the backend has a kernel for it and which layouts that kernel reads in place.
//! Backends implement [`Backend`]; the planner never sees their code.

use stowage_runtime::{LayoutSupport, StorageDescriptor};

use crate::ir::{Graph, NodeId};

use super::PlanInput;

use super::precision::{Granted, Precision};

/// One target as the planner sees it.
#[derive(Clone, Debug)]
pub struct TargetSpec {
    /// The target's name as the caller wrote it (`cpu`, `opencl:0`, `opencl:0:discrete`).
    pub name: String,
    /// The memory space its values live in (`host` for the CPU, `opencl:0` for an OpenCL device).
    pub space: String,
    /// Its storage's descriptor: unified or not, alignments, import rule, transfer bandwidth and latency.
    pub memory: StorageDescriptor,
    /// Sustained f32 throughput estimate, GFLOP/s, for the cost model.
    pub gflops: f64,
    /// Fixed cost of one kernel launch, µs.
    pub launch_us: f64,
}

impl TargetSpec {
    /// True when values of this target live in host memory (they need no transfer to be read by the host).
    pub fn is_host(&self) -> bool {
        self.memory.kind == stowage_runtime::MemoryKind::Host
    }
}

/// The layouts one kernel input reads in place, and when they must be known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accepts {
    /// Layouts read in place.
    pub layouts: &'static [LayoutSupport],
    /// True when the layout is compiled into the kernel (fixed at lowering); false when the kernel reads each
    /// tensor's strides when it runs.
    pub at_lowering: bool,
}

/// How a node's kernel takes channel blocks (`[N, ⌈C/b⌉, H, W, b]`, [`super::blocked`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockRole {
    /// Reads input 0 in either layout and writes output 0 in either (a convolution).
    Either,
    /// Reads input 0 and writes output 0 in one layout, either (a pool).
    Same,
    /// Reads every input of the output's shape (but along the channels) and writes output 0 in one layout, either,
    /// the channels in whole blocks (an elementwise step, a Concat along the channels); other inputs (broadcast
    /// operands: a per-channel scale, a scalar) are read as they are.
    Along,
    /// Reads input 0 in either layout, writes packed (a global pool).
    Reads,
}

impl Accepts {
    /// Packed row-major input only.
    pub const PACKED: Accepts = Accepts { layouts: &[LayoutSupport::RowMajor], at_lowering: false };
}

/// A backend, as placement and layout assignment ask of it.
pub trait Backend {
    /// The target.
    fn spec(&self) -> &TargetSpec;
    /// `Ok` when the backend has a kernel for `node` of `graph`, else why not (one phrase: "no kernel for Resize").
    fn supports(&self, graph: &Graph, node: NodeId) -> Result<(), String>;
    /// What the kernel of `node` reads in place for its input `input`.
    fn accepts(&self, graph: &Graph, node: NodeId, input: usize) -> Accepts;

    /// What this target computes when a plan asks `asked` of it ([`super::precision`], rule 3): the precision as
    /// asked, a documented fallback with its reason, or `Err` saying what the target lacks. The default grants
    /// fp32 only.
    fn precision(&self, asked: Precision) -> Result<Granted, String> {
        match asked {
            Precision::Fp32 => Ok(Granted::as_asked(asked, "fp32 arithmetic")),
            _ => Err(format!("this backend computes fp32 only (its kind has no {asked} kernels)")),
        }
    }

    /// The steps this backend's lowering of `segment` (a graph of its nodes, as [`super::segments`] cuts it, whose
    /// graph `inputs` the plan reads as given) will run, in order, each with the values it reads and writes by
    /// name: what the memory pass plans buffers over. A fused chain is one step that writes only its result, so
    /// its inner values get no buffer, and it reads its inputs at its own position. The default is one step per
    /// node, as the node reads and writes.
    fn kernel_steps(&self, segment: &Graph, inputs: &[PlanInput]) -> Vec<KernelStep> {
        let _ = inputs;
        one_step_per_node(segment)
    }

    /// How the kernel of `node` takes channel blocks, with the block's width in channels; `None` (the default):
    /// packed NCHW only ([`super::blocked`]).
    fn channel_blocks(&self, graph: &Graph, node: NodeId) -> Option<(usize, BlockRole)> {
        let _ = (graph, node);
        None
    }
}

/// One step a backend runs: a kernel, or a view of its first input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelStep {
    /// The node it is written at (the root of a fused chain), by name.
    pub node: String,
    /// Values it reads, by name (constants included).
    pub reads: Vec<String>,
    /// Values it writes, by name.
    pub writes: Vec<String>,
    /// True when its one output is its first input's memory seen with another shape (Reshape, Flatten…).
    pub view: bool,
    /// True when its kernel writes its one output over its first input where that input is of the output's size
    /// and read by nothing after it (the memory pass may then give both one buffer).
    pub in_place: bool,
    /// True when its one output is its inputs end to end, in order (a Concat along an axis with only axes of
    /// extent 1 before it), and its kernel copies only the inputs not already where the output has them: the
    /// memory pass may then place inputs inside the output's buffer ([`super::memory::Buffer::inside`]).
    pub joins: bool,
}

/// One [`KernelStep`] per node of `graph`, in order, reading and writing what the node does.
pub fn one_step_per_node(graph: &Graph) -> Vec<KernelStep> {
    let name = |v: crate::ir::ValueId| super::segments::value_name(graph, v);
    graph
        .order()
        .iter()
        .map(|&n| {
            let node = graph.node(n);
            KernelStep {
                node: node.name.clone(),
                reads: node.inputs.iter().flatten().map(|&v| name(v)).collect(),
                writes: node.outputs.iter().flatten().map(|&v| name(v)).collect(),
                view: super::cost::is_view(graph, n),
                in_place: false,
                joins: false,
            }
        })
        .collect()
}
