//! The simulated accelerator as a plugin of `stowage-driver`: the `sim` target kind ([`KIND`]), the opened target
//! (the planner's `Backend`: its descriptor, which nodes it has kernels for; lowering a segment), and the lowered
//! segment ([`SimProgram`]).
//!
//! What crosses the device's boundary does so through the runtime: inputs through `device_input` (an output of an
//! earlier sim segment is used as is, a host tensor is uploaded once and recorded), outputs as lazy host tensors
//! (downloaded once, when first read, and recorded). So the ledger is the plan's copies and nothing else.

use std::collections::HashMap;

use stowage_compiler::ir::{Binary, Graph, NodeId, Op, Unary, ValueId};
use stowage_compiler::plan::{Accepts, Backend, Plan, Segment, TargetSpec};
use stowage_driver::{BackendError, Executable, KindSource, OpenOptions, OpenedTarget, Ran, TargetKind};
use stowage_runtime::{device_input, DatumType, DeviceBuffer, Ledger, LedgerTag, Tensor};

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

    fn accepts(&self, _graph: &Graph, _node: NodeId, _input: usize) -> Accepts {
        Accepts::PACKED
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
        _plan: &Plan,
        setup: &Ledger,
    ) -> Result<Box<dyn Executable>, BackendError> {
        Ok(Box::new(SimProgram::lower(&segment.graph, &self.device, setup)?))
    }
}

/// One step: a kernel launch.
#[derive(Debug)]
struct Step {
    node: String,
    op: &'static str,
    kernel: Kernel,
    inputs: Vec<usize>,
    output: usize,
    shape: Vec<usize>,
}

/// A segment lowered for the simulated device: its constants uploaded once, its steps over numbered slots.
pub struct SimProgram {
    device: SimDevice,
    /// Constants, uploaded at lowering: slot and buffer.
    consts: Vec<(usize, SimBuffer)>,
    /// Inputs: slot and name.
    inputs: Vec<(usize, String)>,
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
    /// Lowers `graph` (a segment) for `device`; constants are uploaded now, recorded in `setup`.
    pub fn lower(graph: &Graph, device: &SimDevice, setup: &Ledger) -> Result<SimProgram, LowerError> {
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
            program.inputs.push((slot, graph.value(v).name.clone()));
        }
        for &id in graph.order() {
            let n = graph.node(id);
            let kernel = kernel_for(graph, id).map_err(|why| LowerError::Unsupported {
                node: n.name.clone(),
                op: n.op.name(),
                why,
            })?;
            let mut inputs = Vec::new();
            for &v in n.inputs.iter().flatten() {
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
            program.steps.push(Step { node: n.name.clone(), op: n.op.name(), kernel, inputs, output, shape });
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
        for &(s, _) in program.outputs.iter().chain(&program.inputs) {
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
        for ((s, name), t) in self.inputs.iter().zip(inputs) {
            let t = t.with_name(name.clone());
            slots[*s] = Some(device_input::<SimBuffer>(&t, &self.device, ledger)?);
        }
        let (mut live, mut peak) = (0usize, 0usize);
        for (i, step) in self.steps.iter().enumerate() {
            let args: Vec<&SimBuffer> = step
                .inputs
                .iter()
                .map(|&s| slots[s].as_ref().ok_or_else(|| format!("node '{}': an input was not computed", step.node)))
                .collect::<Result<_, _>>()?;
            let out = launch(&self.device, &step.node, step.op, &step.kernel, &args, &step.shape)?;
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
