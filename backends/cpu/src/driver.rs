//! The CPU as a plugin of `stowage-driver`: the `cpu` target kind ([`KIND`]), the opened target (the planner's
//! [`CpuTarget`], lowering each segment with the layouts the plan gives its inputs, and its generated kernels
//! compiled ahead of time for `stowage build`), and a [`Program`] as the driver's executable.

use stowage_compiler::ir::Graph;
use stowage_compiler::plan::{self, Accepts, Backend, Plan, Segment, TargetSpec};
use stowage_driver::{
    BackendError, Executable, KindSource, ObjectCode, OpenOptions, OpenedTarget, Ran, StepTimes, TargetKind,
};
use stowage_runtime::{Ledger, Tensor};

use crate::jit::Precompiled;
use crate::{CpuTarget, LowerOptions, Program};

/// The `cpu` target kind: host memory, this process's threads.
pub static KIND: CpuKind = CpuKind;

/// The CPU's target kind (see [`KIND`]).
pub struct CpuKind;

impl TargetKind for CpuKind {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn source(&self) -> KindSource {
        // Built code lowers at start-up (with its kernels linked in): it needs `compile`.
        stowage_driver::kind_source!(KIND, ["compile"])
    }

    fn answers(&self, target: &str) -> bool {
        target == "cpu"
    }

    fn list(&self) -> Vec<String> {
        let d = crate::HostBuffer::DESCRIPTOR;
        vec![format!(
            "cpu       host memory, {}-byte aligned, rows padded to {} bytes; Cranelift-generated fused kernels, \
             AVX-512 products",
            d.alignment, d.row_pitch_alignment
        )]
    }

    /// In built code the table of linked kernels is the one [`OpenedTarget::compile_ahead`] wrote: a
    /// `&'static [Precompiled]`. Another backend's table is not the CPU's, and leaves the CPU compiling.
    fn open(
        &self,
        _target: &str,
        options: &OpenOptions,
        _graph: &Graph,
    ) -> Result<Box<dyn OpenedTarget>, BackendError> {
        let linked = options.linked.and_then(|l| l.downcast_ref::<&'static [Precompiled]>()).copied();
        Ok(Box::new(OpenedCpu { target: CpuTarget::new(options.threads), threads: options.threads.max(1), linked }))
    }
}

/// The CPU opened for one graph.
struct OpenedCpu {
    target: CpuTarget,
    threads: usize,
    linked: Option<&'static [Precompiled]>,
}

impl OpenedCpu {
    /// How `plan`'s CPU segments are lowered: inputs the plan has host kernels read in the caller's layout get
    /// kernels compiled for its strides.
    fn lower_options(&self, whole: &Graph, plan: &Plan) -> LowerOptions {
        let mut lower = LowerOptions { threads: self.threads, linked: self.linked, ..Default::default() };
        for i in &plan.inputs {
            let Some(&v) = whole.inputs().iter().find(|&&v| whole.value(v).name == i.name) else { continue };
            let in_place = i.access.iter().any(|(s, a)| s == "host" && *a == plan::InputAccess::InPlace);
            if !i.layout.is_packed() && in_place {
                let ty = whole.ty(v);
                lower.input_strides.insert(i.name.clone(), i.layout.strides(ty.dt, &ty.shape));
            }
        }
        lower
    }
}

impl Backend for OpenedCpu {
    fn spec(&self) -> &TargetSpec {
        self.target.spec()
    }

    fn supports(&self, graph: &Graph, node: stowage_compiler::ir::NodeId) -> Result<(), String> {
        self.target.supports(graph, node)
    }

    fn accepts(&self, graph: &Graph, node: stowage_compiler::ir::NodeId, input: usize) -> Accepts {
        self.target.accepts(graph, node, input)
    }
}

impl OpenedTarget for OpenedCpu {
    fn kind(&self) -> &'static str {
        KIND.name()
    }

    fn lower(
        &self,
        segment: &Segment,
        whole: &Graph,
        plan: &Plan,
        _setup: &Ledger,
    ) -> Result<Box<dyn Executable>, BackendError> {
        let mut program = crate::lower_with(&segment.graph, &self.lower_options(whole, plan))?;
        program.threads = self.threads;
        Ok(Box::new(CpuExecutable(program)))
    }

    fn compile_ahead(
        &self,
        segments: &[&Segment],
        whole: &Graph,
        plan: &Plan,
        prefix: &str,
    ) -> Result<Option<ObjectCode>, BackendError> {
        let options = self.lower_options(whole, plan);
        let specs: Vec<(String, crate::jit::Loops)> =
            segments.iter().flat_map(|s| crate::kernel_specs(&s.graph, &options)).collect();
        let loops: Vec<crate::jit::Loops> = specs.iter().map(|(_, l)| l.clone()).collect();
        let object = crate::jit::compile_object(&loops, prefix)?;
        let kernels: Vec<(String, u64, String)> =
            specs.into_iter().zip(object.symbols).map(|((node, _), (symbol, key))| (node, key, symbol)).collect();
        let items = linked_items(&kernels);
        Ok(Some(ObjectCode { bytes: object.bytes, kernels, items }))
    }
}

/// A CPU program as the driver runs it.
struct CpuExecutable(Program);

impl Executable for CpuExecutable {
    fn run(&self, inputs: Vec<Tensor<'static>>, _ledger: &Ledger) -> Result<Ran, BackendError> {
        let out = self.0.run(inputs)?;
        Ok(Ran { outputs: out.outputs, peak_bytes: out.peak_bytes })
    }

    fn steps(&self) -> Vec<(String, &'static str)> {
        self.0.steps().iter().map(|s| (s.name.clone(), s.op)).collect()
    }

    fn const_bytes(&self) -> usize {
        self.0.const_bytes()
    }

    fn profile(&self, inputs: Vec<Tensor<'static>>) -> Result<Option<StepTimes>, BackendError> {
        Ok(Some(self.0.run_profiled(inputs, true)?.profile))
    }
}

/// The Rust items generated code includes for `kernels` (node, key, symbol): each symbol declared with the
/// signature of [`crate::jit::KernelFn`], and `LINKED`, the table [`CpuKind::open`] takes back. Node names are
/// written as string literals (escaped by `{:?}`), never as raw text.
fn linked_items(kernels: &[(String, u64, String)]) -> String {
    let mut decls = String::new();
    let mut table = String::new();
    for (node, key, symbol) in kernels {
        let doc = format!(" The generated kernel of node `{node}`.");
        decls.push_str(&format!(
            "#[doc = {doc:?}] fn {symbol}(inputs: *const *const u8, out: *mut u8, begin: usize, end: usize);\n"
        ));
        table.push_str(&format!("::stowage_cpu::jit::Precompiled {{ key: 0x{key:016x}, entry: {symbol} }},\n"));
    }
    format!(
        "extern \"C\" {{\n{decls}}}\n\
         /// The CPU kernels of the object file built with this code, each with the key of the loop nest it was\n\
         /// compiled from.\n\
         static LINKED: &[::stowage_cpu::jit::Precompiled] = &[{table}];\n"
    )
}
