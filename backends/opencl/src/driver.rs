//! OpenCL as a plugin of `stowage-driver`: the `opencl` target kind ([`KIND`]: `opencl`, `opencl:N`, either with
//! `:discrete`), an opened device with the planner's view of it for one graph, and a [`ClProgram`] as the
//! driver's executable.

use stowage_compiler::ir::{Graph, NodeId};
use stowage_compiler::plan::{
    Accepts, Backend, Granted, KernelStep, Plan, PlanInput, Precision, Segment, TargetSpec, When,
};
use stowage_driver::{BackendError, Executable, KindSource, MemoryPath, OpenOptions, OpenedTarget, Ran, TargetKind};
use stowage_runtime::{DatumType, Ledger, Tensor};

use crate::{ClBuffer, ClProgram, Mode, PlanTarget, Target};

/// The `opencl` target kind: every OpenCL device the ICD loader finds.
pub static KIND: OpenClKind = OpenClKind;

/// OpenCL's target kind (see [`KIND`]).
pub struct OpenClKind;

impl TargetKind for OpenClKind {
    fn name(&self) -> &'static str {
        "opencl"
    }

    fn source(&self) -> KindSource {
        stowage_driver::kind_source!(KIND)
    }

    fn answers(&self, target: &str) -> bool {
        crate::parse_target(target).is_ok()
    }

    fn list(&self) -> Vec<String> {
        match crate::describe_devices() {
            Ok(mut lines) => {
                lines.push("opencl:discrete  any OpenCL device through the discrete path (staged copies)".into());
                lines
            }
            Err(e) => vec![format!("opencl    none: {e}")],
        }
    }

    /// A target the caller opened (`OpenOptions::adopted`: a `Target` on the same device, taken the same way,
    /// perhaps in the caller's own context, `Target::from_raw`) is used as it is; otherwise one is opened.
    fn open(&self, target: &str, options: &OpenOptions, graph: &Graph) -> Result<Box<dyn OpenedTarget>, BackendError> {
        let (index, discrete) = crate::parse_target(target)?;
        let adopted = options.adopted.0.iter().filter_map(|a| a.downcast_ref::<Target>()).find(|t| {
            let mode = if t.info().unified && !discrete { Mode::Unified } else { Mode::Discrete };
            t.info().index == index && t.mode() == mode
        });
        let device = match adopted {
            Some(t) => t.clone(),
            None => Target::open(target)?,
        };
        let view = PlanTarget::new(target, device.info(), device.mode(), graph)?;
        Ok(Box::new(OpenedDevice { device, view, arena: Default::default() }))
    }
}

/// An OpenCL device opened for one graph.
struct OpenedDevice {
    device: Target,
    view: PlanTarget,
    /// The session's one arena on the device, made at the plan's peak when the first segment is lowered (`None`
    /// when the plan has no intermediate on it).
    arena: std::sync::OnceLock<Option<ClBuffer>>,
}

impl OpenedDevice {
    /// The session's arena, made the first time. A device that cannot make it in one allocation (larger than
    /// its largest) runs with a buffer per value instead, as without a plan; the report's measured peak then
    /// differs from the planned one.
    fn arena(&self, plan: &Plan) -> Option<ClBuffer> {
        let made = || {
            let space = self.device.space().name();
            let peak = plan.arenas.iter().find(|a| a.space == space).map_or(0, |a| a.peak_bytes);
            (peak > 0).then(|| ClBuffer::allocate(&self.device, DatumType::U8, &[peak]).ok()).flatten()
        };
        self.arena.get_or_init(made).clone()
    }
}

impl Backend for OpenedDevice {
    fn spec(&self) -> &TargetSpec {
        self.view.spec()
    }

    fn supports(&self, graph: &Graph, node: NodeId) -> Result<(), String> {
        self.view.supports(graph, node)
    }

    fn accepts(&self, graph: &Graph, node: NodeId, input: usize) -> Accepts {
        self.view.accepts(graph, node, input)
    }

    fn precision(&self, asked: Precision) -> Result<Granted, String> {
        self.view.precision(asked)
    }

    /// The steps of this backend's lowering; a segment it cannot translate (which the planner would not give
    /// it) is planned node by node, and fails at lowering.
    fn kernel_steps(&self, segment: &Graph, _inputs: &[PlanInput]) -> Vec<KernelStep> {
        crate::lower::memory_steps(segment, self.device.info())
            .unwrap_or_else(|_| stowage_compiler::plan::one_step_per_node(segment))
    }
}

impl OpenedTarget for OpenedDevice {
    fn kind(&self) -> &'static str {
        KIND.name()
    }

    fn lower(
        &self,
        segment: &Segment,
        whole: &Graph,
        plan: &Plan,
        setup: &Ledger,
    ) -> Result<Box<dyn Executable>, BackendError> {
        // Constants are used in place but where the plan uploads them.
        let space = self.device.space().name();
        // By the segment's name of each value (an unnamed one is `%N` there).
        let uploaded = |name: &str| {
            plan.copies.iter().any(|c| {
                c.when == When::Setup
                    && c.to == space
                    && stowage_compiler::plan::segments::value_name(whole, c.id) == name
            })
        };
        let precision = plan.precisions.get(segment.target).map_or(Precision::Fp32, |p| p.computed);
        let mut program = crate::lower_planned(&segment.graph, &self.device, setup, &uploaded, precision)?;
        // Every device runs in the plan's arena: kernels reach a region through the arena's one buffer and an
        // offset (`codegen::offsets`), so a launch on it costs what one on own buffers does (on the H200, alternating
        // in one command: SqueezeNet 0.54-0.75 ms in the arena against 0.57-0.79 ms with a buffer per value,
        // DenseNet-121 6.2-6.3 ms against 12.4-19.2 ms). `STOWAGE_OPENCL_ARENA=0` runs with a buffer per value
        // instead (the pool), for measuring.
        let in_arena = std::env::var("STOWAGE_OPENCL_ARENA").as_deref() != Ok("0");
        let planned = plan.arenas.iter().find(|a| a.space == space).filter(|_| in_arena);
        if let (Some(planned), Some(arena)) = (planned, planned.and_then(|_| self.arena(plan))) {
            let place = |name: &str| planned.buffer_of(name).map(|b| (b.offset, b.bytes));
            let outside = |name: &str| planned.outside.iter().chain(&planned.persistent).any(|(v, _)| v == name);
            let memory = crate::exec::ArenaUse::new(&program, &arena, &place, &outside)?;
            program.use_arena(memory);
        }
        Ok(Box::new(DeviceExecutable(program)))
    }

    fn path(&self) -> Option<MemoryPath> {
        let space = self.device.space().name();
        let name = &self.device.info().name;
        Some(match self.device.mode() {
            Mode::Unified => MemoryPath {
                report: format!(
                    "unified memory: inputs at the device's alignment are used in place, outputs read in place \
                     ({name})"
                ),
                built: format!("{space}: unified memory, inputs imported in place"),
                alternative: Some(format!("{}:discrete", self.view.spec().name)),
            },
            Mode::Discrete => MemoryPath {
                report: format!(
                    "discrete: one upload per input through a pinned staging buffer, one download per output read \
                     ({name})"
                ),
                built: format!("{space}: discrete memory, inputs uploaded through pinned staging"),
                alternative: None,
            },
        })
    }

    fn finish(&self) -> Result<(), BackendError> {
        Ok(self.device.finish()?)
    }

    fn handle(&self) -> Option<&dyn std::any::Any> {
        Some(&self.device)
    }

    fn shared(&self) -> Option<std::sync::Arc<dyn std::any::Any + Send + Sync>> {
        Some(std::sync::Arc::new(self.device.clone()))
    }

    fn holds(&self, t: &Tensor<'static>) -> bool {
        ClBuffer::of(t).is_some_and(|b| b.is_of(&self.device))
    }

    /// A held tensor as a fresh lazy handle on the same buffer, in its layout; anything else uploaded as it is
    /// laid out (padding and all: the plan relays it on the device), recorded in `ledger`.
    fn resident(&self, t: &Tensor<'static>, ledger: &Ledger) -> Result<Tensor<'static>, BackendError> {
        let name = t.name_or_unnamed().to_string();
        let (buffer, layout) = match ClBuffer::of(t).filter(|b| b.is_of(&self.device)) {
            Some(b) => (b.clone(), t.layout().clone()),
            None => {
                let (dt, layout) = (t.dt(), t.layout());
                let host = t.storage().host_bytes().ok_or_else(|| format!("input '{name}' is not in host memory"))?;
                let (start, end) = (layout.offset(), layout.span_bytes(dt, t.shape())?);
                let bytes = host.get(start..end).ok_or_else(|| format!("input '{name}': its layout overruns it"))?;
                // Device memory of its own, as a caller's buffer is: a host reader downloads it, as planned.
                let up = ClBuffer::in_device_memory(&self.device, dt, bytes)?;
                let space = self.device.space();
                let tag = stowage_runtime::LedgerTag::new(ledger, name.as_str());
                tag.record(
                    stowage_runtime::MoveKind::Upload,
                    &stowage_runtime::MemorySpace::HOST,
                    space,
                    bytes.len(),
                    || format!("put on {space} before the runs, where --input-device says it lives").into(),
                );
                (up, stowage_runtime::Layout::strided(layout.strides().to_vec(), 0))
            }
        };
        let tag = stowage_runtime::LedgerTag::new(ledger, name.as_str());
        let lazy = stowage_runtime::LazyHost::new(buffer, tag)?;
        Ok(Tensor::from_storage(t.dt(), t.shape(), layout, lazy)?.with_name(name))
    }
}

/// An OpenCL program as the driver runs it.
struct DeviceExecutable(ClProgram);

impl Executable for DeviceExecutable {
    fn run(&self, inputs: Vec<Tensor<'static>>, ledger: &Ledger) -> Result<Ran, BackendError> {
        let outputs = self.0.run(inputs, ledger)?;
        Ok(Ran { outputs, peak_bytes: self.0.peak_bytes() })
    }

    fn steps(&self) -> Vec<(String, &'static str)> {
        self.0.steps().iter().map(|s| (s.name.clone(), s.op)).collect()
    }

    fn const_bytes(&self) -> usize {
        self.0.const_bytes
    }
}
