//! The simulated accelerator as a plugin of `stowage-driver`: the `sim` target kind ([`KIND`]), the opened target
//! (the planner's `Backend`: its descriptor, which nodes it has kernels for; lowering a segment), and the lowered
//! segment ([`SimProgram`]).
//!
//! What crosses the device's boundary does so through the runtime: inputs through `device_input` (an output of an
//! earlier sim segment is used as is, a host tensor is uploaded once and recorded; a caller's padded rows, which
//! the device holds and its Add and Relu read, through `device_input_as_held`: uploaded as they are), outputs as
//! lazy host tensors (downloaded once, when first read, and recorded). So the ledger is the plan's copies and
//! nothing else.

use std::collections::HashMap;

use stowage_compiler::ir::{Binary, Graph, NodeId, Op, Unary, ValueId};
use stowage_compiler::plan::{Accepts, Backend, InputAccess, Plan, Segment, TargetSpec};
use stowage_driver::{BackendError, Executable, KindSource, OpenOptions, OpenedTarget, Ran, TargetKind};
use stowage_runtime::{
    device_input, device_input_as_held, DatumType, DeviceBuffer, LayoutSupport, Ledger, LedgerTag, Tensor,
};

use crate::kernels::{launch, Kernel};
use crate::storage::{SimBuffer, SimDevice};

/// The `sim` target kind: each target opened is a new simulated device.
pub static KIND: SimKind = SimKind::new();

/// The simulated accelerator's target kind (see [`KIND`]).
pub struct SimKind {
    device: Option<SimDevice>,
}

impl SimKind {
    /// A kind that opens a new device for each target.
    pub const fn new() -> SimKind {
        SimKind { device: None }
    }

    /// A kind whose targets all open `device` (a test's window on what the device holds).
    pub fn on(device: SimDevice) -> SimKind {
        SimKind { device: Some(device) }
    }
}

impl Default for SimKind {
    fn default() -> Self {
        SimKind::new()
    }
}

impl TargetKind for SimKind {
    fn name(&self) -> &'static str {
        "sim"
    }

    fn source(&self) -> KindSource {
        stowage_driver::kind_source!(KIND)
    }

    fn answers(&self, target: &str) -> bool {
        target == "sim"
    }

    fn list(&self) -> Vec<String> {
        let d = SimBuffer::DESCRIPTOR;
        vec![format!(
            "sim       a simulated discrete accelerator: {} memory, {}-byte aligned, rows padded to {} bytes, no \
             staging; MatMul, Gemm, Add, Relu on f32",
            d.name, d.alignment, d.row_pitch_alignment
        )]
    }

    fn open(
        &self,
        target: &str,
        _options: &OpenOptions,
        _graph: &Graph,
    ) -> Result<Box<dyn OpenedTarget>, BackendError> {
        let device = self.device.clone().unwrap_or_default();
        let spec = TargetSpec {
            name: target.to_string(),
            space: SimBuffer::DESCRIPTOR.name.to_string(),
            memory: SimBuffer::DESCRIPTOR,
            // A fast device with cheap launches, so that the planner gives it what it has kernels for.
            gflops: 2000.0,
            launch_us: 1.0,
        };
        Ok(Box::new(OpenedSim { spec, device }))
    }
}

/// One simulated device, opened for a graph.
struct OpenedSim {
    spec: TargetSpec,
    device: SimDevice,
}

/// The kernel of `node`, or why the device has none.
fn kernel_for(graph: &Graph, node: NodeId) -> Result<Kernel, String> {
    let n = graph.node(node);
    let rank = |k: usize| n.inputs.get(k).copied().flatten().map(|v| graph.ty(v).rank());
    let kernel = match &n.op {
        Op::MatMul if rank(0) == Some(2) && rank(1) == Some(2) => {
            Ok(Kernel::Product { trans_a: false, trans_b: false, alpha: 1.0, beta: 0.0 })
        }
        Op::Gemm(g) => Ok(Kernel::Product { trans_a: g.trans_a, trans_b: g.trans_b, alpha: g.alpha, beta: g.beta }),
        Op::Binary(Binary::Add) => Ok(Kernel::Add),
        Op::Unary(Unary::Relu) => Ok(Kernel::Relu),
        Op::MatMul => Err("no sim kernel for MatMul but of two matrices".to_string()),
        op => Err(format!("no sim kernel for {}", op.name())),
    }?;
    if n.inputs.iter().chain(&n.outputs).flatten().any(|&v| graph.ty(v).dt != DatumType::F32) {
        return Err(format!("no sim kernel for {} but on f32", n.op.name()));
    }
    Ok(kernel)
}

impl Backend for OpenedSim {
    fn spec(&self) -> &TargetSpec {
        &self.spec
    }

    fn supports(&self, graph: &Graph, node: NodeId) -> Result<(), String> {
        if self.device.claims(graph.node(node).op.name()) {
            return Ok(());
        }
        kernel_for(graph, node).map(|_| ())
    }

    /// Add and Relu index their inputs with strides compiled in at lowering, so they read rows padded as the
    /// device holds them; the product reads packed rows.
    fn accepts(&self, graph: &Graph, node: NodeId, _input: usize) -> Accepts {
        match graph.node(node).op {
            Op::Binary(Binary::Add) | Op::Unary(Unary::Relu) => {
                Accepts { layouts: &[LayoutSupport::RowMajor, LayoutSupport::PaddedRows], at_lowering: true }
            }
            _ => Accepts::PACKED,
        }
    }
}

impl OpenedTarget for OpenedSim {
    fn kind(&self) -> &'static str {
        "sim"
    }

    fn lower(
        &self,
        segment: &Segment,
        _whole: &Graph,
        plan: &Plan,
        setup: &Ledger,
    ) -> Result<Box<dyn Executable>, BackendError> {
        // The inputs the plan uploads as the caller holds them, with their element strides.
        let held: HashMap<String, Vec<usize>> = plan
            .inputs
            .iter()
            .filter(|i| i.access.iter().any(|(s, a)| *s == self.spec.space && *a == InputAccess::Held))
            .filter_map(|i| {
                let v = segment.graph.inputs().iter().find(|&&v| segment.graph.value(v).name == i.name)?;
                let ty = segment.graph.ty(*v);
                Some((i.name.clone(), i.layout.strides(ty.dt, &ty.shape)))
            })
            .collect();
        Ok(Box::new(SimProgram::lower(&segment.graph, &self.device, setup, &held)?))
    }
}

/// One step: a kernel launch.
#[derive(Debug)]
struct Step {
    node: String,
    op: &'static str,
    kernel: Kernel,
    inputs: Vec<usize>,
    /// Per input, its shape and element strides (row-major but for an input uploaded as the caller holds it).
    views: Vec<(Vec<usize>, Vec<usize>)>,
    output: usize,
    shape: Vec<usize>,
}

/// A segment lowered for the simulated device: its constants uploaded once, its steps over numbered slots.
pub struct SimProgram {
    device: SimDevice,
    /// Constants, uploaded at lowering: slot and buffer.
    consts: Vec<(usize, SimBuffer)>,
    /// Inputs: slot, name, and the element strides its kernels read it with where it is uploaded as the caller
    /// holds it.
    inputs: Vec<(usize, String, Option<Vec<usize>>)>,
    steps: Vec<Step>,
    /// Outputs: slot and name.
    outputs: Vec<(usize, String)>,
    /// Per slot, the last step that reads it (`usize::MAX`: an output, kept).
    last_use: Vec<usize>,
    slots: usize,
}

/// Why a segment could not be lowered.
#[derive(Debug, thiserror::Error)]
pub enum LowerError {
    /// A node the planner should not have given the device.
    #[error("node '{node}' ({op}): {why}")]
    Unsupported {
        /// The node.
        node: String,
        /// Its op.
        op: &'static str,
        /// Why the device has no kernel.
        why: String,
    },
    /// A constant could not be uploaded.
    #[error("constant '{name}': {message}")]
    Upload {
        /// The constant.
        name: String,
        /// Why.
        message: String,
    },
}

impl SimProgram {
    /// Lowers `graph` (a segment) for `device`; constants are uploaded now, recorded in `setup`. The inputs in
    /// `held` arrive as the caller holds them, read with these element strides.
    pub fn lower(
        graph: &Graph,
        device: &SimDevice,
        setup: &Ledger,
        held: &HashMap<String, Vec<usize>>,
    ) -> Result<SimProgram, LowerError> {
        let mut slot_of: HashMap<ValueId, usize> = HashMap::new();
        let mut program = SimProgram {
            device: device.clone(),
            consts: Vec::new(),
            inputs: Vec::new(),
            steps: Vec::new(),
            outputs: Vec::new(),
            last_use: Vec::new(),
            slots: 0,
        };
        for &v in graph.inputs() {
            let slot = program.slot(&mut slot_of, v);
            let name = graph.value(v).name.clone();
            program.inputs.push((slot, name.clone(), held.get(&name).cloned()));
        }
        for &id in graph.order() {
            let n = graph.node(id);
            let kernel = kernel_for(graph, id).map_err(|why| LowerError::Unsupported {
                node: n.name.clone(),
                op: n.op.name(),
                why,
            })?;
            let (mut inputs, mut views) = (Vec::new(), Vec::new());
            for &v in n.inputs.iter().flatten() {
                let (value, shape) = (graph.value(v), graph.ty(v).shape.clone());
                let strides = match held.get(&value.name).filter(|_| graph.inputs().contains(&v)) {
                    Some(s) => s.clone(),
                    None => crate::kernels::packed_strides(&shape),
                };
                views.push((shape, strides));
                if !slot_of.contains_key(&v) {
                    if let Some(t) = graph.const_value(v) {
                        let name = graph.value(v).name.clone();
                        let t = t.clone().with_name(name.clone());
                        let up = device_input::<SimBuffer>(&t, device, setup)
                            .map_err(|e| LowerError::Upload { name, message: e.to_string() })?;
                        let slot = program.slot(&mut slot_of, v);
                        program.consts.push((slot, up));
                    }
                }
                inputs.push(program.slot(&mut slot_of, v));
            }
            let Some(out) = n.outputs.first().copied().flatten() else { continue };
            let output = program.slot(&mut slot_of, out);
            let shape = graph.ty(out).shape.clone();
            let step = Step { node: n.name.clone(), op: n.op.name(), kernel, inputs, views, output, shape };
            program.steps.push(step);
        }
        for o in graph.outputs() {
            let slot = program.slot(&mut slot_of, o.value);
            program.outputs.push((slot, o.name.clone()));
        }
        program.last_use = vec![0; program.slots];
        for (i, step) in program.steps.iter().enumerate() {
            for &s in &step.inputs {
                program.last_use[s] = i;
            }
        }
        for s in program.outputs.iter().map(|o| o.0).chain(program.inputs.iter().map(|i| i.0)) {
            program.last_use[s] = usize::MAX;
        }
        Ok(program)
    }

    fn slot(&mut self, slot_of: &mut HashMap<ValueId, usize>, v: ValueId) -> usize {
        *slot_of.entry(v).or_insert_with(|| {
            self.slots += 1;
            self.slots - 1
        })
    }
}

impl Executable for SimProgram {
    fn run(&self, inputs: Vec<Tensor<'static>>, ledger: &Ledger) -> Result<Ran, BackendError> {
        if inputs.len() != self.inputs.len() {
            return Err(format!("the segment takes {} inputs, {} were given", self.inputs.len(), inputs.len()).into());
        }
        // Every buffer of this run lives in `slots`: on an error they are all released as it goes.
        let mut slots: Vec<Option<SimBuffer>> = vec![None; self.slots];
        for (s, b) in &self.consts {
            slots[*s] = Some(b.clone());
        }
        for ((s, name, held), t) in self.inputs.iter().zip(inputs) {
            let t = t.with_name(name.clone());
            slots[*s] = Some(match held {
                Some(strides) => device_input_as_held::<SimBuffer>(&t, strides, &self.device, ledger)?,
                None => device_input::<SimBuffer>(&t, &self.device, ledger)?,
            });
        }
        let (mut live, mut peak) = (0usize, 0usize);
        for (i, step) in self.steps.iter().enumerate() {
            let args: Vec<&SimBuffer> = step
                .inputs
                .iter()
                .map(|&s| slots[s].as_ref().ok_or_else(|| format!("node '{}': an input was not computed", step.node)))
                .collect::<Result<_, _>>()?;
            let out = launch(&self.device, &step.node, step.op, &step.kernel, &args, &step.views, &step.shape)?;
            live += out.byte_len();
            peak = peak.max(live);
            slots[step.output] = Some(out);
            for &s in &step.inputs {
                if self.last_use[s] == i && !self.consts.iter().any(|(c, _)| *c == s) {
                    if let Some(freed) = slots[s].take() {
                        live = live.saturating_sub(freed.byte_len());
                    }
                }
            }
        }
        let mut outputs = Vec::with_capacity(self.outputs.len());
        for (s, name) in &self.outputs {
            let buffer = slots[*s].clone().ok_or_else(|| format!("output '{name}' was not computed"))?;
            outputs.push(buffer.into_tensor(LedgerTag::new(ledger, name.as_str()))?);
        }
        Ok(Ran { outputs, peak_bytes: peak })
    }

    fn steps(&self) -> Vec<(String, &'static str)> {
        self.steps.iter().map(|s| (s.node.clone(), s.op)).collect()
    }

    fn const_bytes(&self) -> usize {
        self.consts.iter().map(|(_, b)| b.byte_len()).sum()
    }
}
