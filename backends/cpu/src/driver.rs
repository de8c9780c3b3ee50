//! The CPU as a plugin of `stowage-driver`: the `cpu` target kind ([`KIND`]), the opened target (the planner's
//! [`CpuTarget`], lowering each segment with the layouts the plan gives its inputs, and its generated kernels
//! compiled ahead of time for `stowage build`), and a [`Program`] as the driver's executable.

use stowage_compiler::ir::Graph;
use stowage_compiler::plan::{self, Accepts, Backend, Plan, Segment, TargetSpec};
use stowage_driver::{
    BackendError, Executable, KindSource, ObjectCode, OpenOptions, OpenedTarget, Ran, StepTimes, TargetKind,
};
use stowage_runtime::{Ledger, Tensor};

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::arena::HostArena;
use crate::jit::Precompiled;
use crate::program::ArenaUse;
use crate::{CpuTarget, LowerOptions, Program};

/// Which of the kernels' paths this CPU takes, for `stowage targets`. They are chosen at run time from the
/// instruction sets the CPU reports, so one binary runs different code on two machines and times measured on one do
/// not carry over: this says which.
fn kernel_paths() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    let avx2_fma = std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma");
    #[cfg(not(target_arch = "x86_64"))]
    let avx2_fma = false;
    paths_for(crate::kernels::sgemm512::available(), avx2_fma)
}

/// [`kernel_paths`] for a CPU with AVX-512F or not, and with AVX2 and FMA or not.
fn paths_for(avx512: bool, avx2_fma: bool) -> &'static str {
    if avx512 {
        "AVX-512F: packed products, convolutions read in place, depthwise, MaxPool rows, softmax, LSTM and \
         elementwise tiles"
    } else if avx2_fma {
        "AVX2+FMA: products on the gemm crate over im2col (no AVX-512F: packed products, convolutions read in \
         place, MaxPool rows and softmax take their portable paths); depthwise, LSTM and elementwise tiles in AVX2"
    } else {
        "no AVX2: products on the gemm crate over im2col, the other kernels portable"
    }
}

/// The target name of the CPU with its convolutions and pools forced into channel blocks.
const FORCED: &str = "cpu:blocks";

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

    /// `cpu`, and `cpu:blocks`: the same CPU with every convolution and pool it takes in channel blocks run in
    /// blocks, converting around each whose values the plan keeps packed (for testing those kernels on every
    /// case of a suite, `tests/tests/conformance.rs`; not listed).
    fn answers(&self, target: &str) -> bool {
        target == "cpu" || target == FORCED
    }

    fn list(&self) -> Vec<String> {
        let d = crate::HostBuffer::DESCRIPTOR;
        vec![format!(
            "cpu       host memory, {}-byte aligned, rows padded to {} bytes; Cranelift-generated fused kernels; {}",
            d.alignment,
            d.row_pitch_alignment,
            kernel_paths()
        )]
    }

    /// In built code the table of linked kernels is the one [`OpenedTarget::compile_ahead`] wrote: a
    /// `&'static [Precompiled]`. Another backend's table is not the CPU's, and leaves the CPU compiling.
    fn open(&self, target: &str, options: &OpenOptions, _graph: &Graph) -> Result<Box<dyn OpenedTarget>, BackendError> {
        let linked = options.linked.and_then(|l| l.downcast_ref::<&'static [Precompiled]>()).copied();
        Ok(Box::new(OpenedCpu {
            target: CpuTarget::new(options.threads),
            threads: options.threads.max(1),
            linked,
            arena: Default::default(),
            force_blocks: target == FORCED,
        }))
    }

    /// `LSTM` runs as one kernel here (`kernels/recurrent.rs`): some 25 steps per time step fewer than unrolled;
    /// `If` with its branches as subgraphs, `Loop` and `Scan` with their bodies (`lower/subgraphs.rs`): only the
    /// branch taken runs, and a loop or scan the import cannot unroll runs inside a model.
    fn whole_ops(&self) -> &'static [&'static str] {
        &["LSTM", "If", "Loop", "Scan"]
    }
}

/// The CPU opened for one graph.
struct OpenedCpu {
    target: CpuTarget,
    threads: usize,
    linked: Option<&'static [Precompiled]>,
    /// The session's one host arena, made when the first segment is lowered (`crate::arena`, rule 1).
    arena: std::sync::OnceLock<Arc<HostArena>>,
    /// Opened as `cpu:blocks` ([`LowerOptions::force_blocks`]).
    force_blocks: bool,
}

impl OpenedCpu {
    /// How the CPU segments of a plan with `inputs` are lowered: inputs the plan has host kernels read in the
    /// caller's layout get kernels compiled for its strides. `graph` is the whole graph or a segment.
    fn lower_options(&self, graph: &Graph, inputs: &[plan::PlanInput]) -> LowerOptions {
        let mut lower = LowerOptions {
            threads: self.threads,
            linked: self.linked,
            force_blocks: self.force_blocks,
            ..Default::default()
        };
        for i in inputs {
            let Some(&v) = graph.inputs().iter().find(|&&v| graph.value(v).name == i.name) else { continue };
            let in_place = i.access.iter().any(|(s, a)| s == "host" && *a == plan::InputAccess::InPlace);
            if !i.layout.is_packed() && in_place {
                let ty = graph.ty(v);
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

    fn kernel_steps(&self, segment: &Graph, inputs: &[plan::PlanInput]) -> Vec<plan::KernelStep> {
        crate::lower::memory_steps(segment, &self.lower_options(segment, inputs))
    }

    fn channel_blocks(&self, graph: &Graph, node: stowage_compiler::ir::NodeId) -> Option<(usize, plan::BlockRole)> {
        self.target.channel_blocks(graph, node)
    }

    /// As [`crate::CpuTarget`] grants it: fp32, tf32 computed in fp32 (shown), fp16 and bf16 refused.
    fn precision(&self, asked: plan::Precision) -> Result<plan::Granted, String> {
        self.target.precision(asked)
    }
}

impl OpenedCpu {
    /// The session's arena, made at the plan's host peak the first time.
    fn arena(&self, plan: &Plan) -> Result<Arc<HostArena>, BackendError> {
        if let Some(a) = self.arena.get() {
            return Ok(Arc::clone(a));
        }
        let space = &self.spec().space;
        let peak = plan.arenas.iter().find(|a| a.space == *space).map_or(0, |a| a.peak_bytes);
        let made = HostArena::new(peak)?;
        Ok(Arc::clone(self.arena.get_or_init(|| made)))
    }
}

/// Where `program`'s values live in `arena` as `plan` placed them, and which of its slots the plan keeps out of
/// every arena.
fn arena_use(
    program: &Program,
    graph: &Graph,
    plan: &Plan,
    space: &str,
    arena: Arc<HostArena>,
) -> (ArenaUse, Vec<bool>) {
    let planned = plan.arenas.iter().find(|a| a.space == space);
    // Values in channel blocks take their padded bytes (`plan::blocked`, rule 4).
    let mut bytes: HashMap<&str, usize> =
        graph.values().map(|(v, d)| (d.name.as_str(), graph.ty(v).byte_len().unwrap_or(0))).collect();
    for b in &plan.blocked {
        if let Some(len) = bytes.get_mut(b.value.as_str()) {
            *len = b.bytes;
        }
    }
    // Per value: its region (start, end) and whether its step allocates it (the buffer's first value, or a
    // value placed inside a join's buffer), else it shares its buffer's memory (a view, an in-place output).
    let mut region_of: HashMap<&str, ((usize, usize), bool)> = HashMap::new();
    let mut outside: HashSet<&str> = HashSet::new();
    if let Some(a) = planned {
        for b in &a.buffers {
            for (k, v) in b.values.iter().enumerate() {
                region_of.insert(v.as_str(), ((b.offset, b.offset + b.bytes), k == 0));
            }
            for (v, at) in &b.inside {
                let start = b.offset + at;
                region_of.insert(v.as_str(), ((start, start + bytes.get(v.as_str()).copied().unwrap_or(0)), true));
            }
        }
        outside.extend(a.outside.iter().chain(&a.persistent).map(|(v, _)| v.as_str()));
    }
    let names = program.slot_names();
    let (mut offers, mut places) = (Vec::new(), Vec::new());
    for step in program.steps() {
        let (mut offer, mut place) = (Vec::new(), Vec::new());
        for slot in &step.outputs {
            let name = slot.map(|s| names[s].as_str());
            let r = name.and_then(|n| region_of.get(n));
            let len = name.and_then(|n| bytes.get(n)).copied().unwrap_or(0);
            offer.push(r.filter(|r| r.1).map(|r| (r.0 .0, len)));
            place.push(r.map(|r| r.0));
        }
        offers.push(offer);
        places.push(place);
    }
    let outside = names.iter().map(|n| outside.contains(n.as_str())).collect();
    (ArenaUse { arena, offers, places }, outside)
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
        let mut options = self.lower_options(whole, &plan.inputs);
        options.blocked = plan.blocked.iter().map(|b| (b.value.clone(), b.block)).collect();
        let mut program = crate::lower_with(&segment.graph, &options)?;
        program.threads = self.threads;
        let (memory, outside) = arena_use(&program, &segment.graph, plan, &self.spec().space, self.arena(plan)?);
        program.use_arena(memory, outside);
        Ok(Box::new(CpuExecutable(program)))
    }

    fn compile_ahead(
        &self,
        segments: &[&Segment],
        whole: &Graph,
        plan: &Plan,
        prefix: &str,
    ) -> Result<Option<ObjectCode>, BackendError> {
        let mut options = self.lower_options(whole, &plan.inputs);
        options.blocked = plan.blocked.iter().map(|b| (b.value.clone(), b.block)).collect();
        let mut specs: Vec<(String, crate::jit::Loops)> = Vec::new();
        for s in segments {
            specs.extend(crate::kernel_specs(&s.graph, &options)?);
        }
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

    fn branches(&self) -> Vec<(String, [u64; 2])> {
        self.0.branches()
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `stowage targets` names the paths of the instruction set this CPU reports, and only those.
    #[test]
    fn the_listing_names_the_paths_this_cpu_takes() {
        let line = KIND.list().concat();
        assert!(line.ends_with(kernel_paths()), "{line}");
        assert!(paths_for(true, true).starts_with("AVX-512F: packed products"));
        assert!(paths_for(false, true).starts_with("AVX2+FMA: products on the gemm crate"));
        assert!(paths_for(false, false).starts_with("no AVX2"));
        let aligned = format!("{}-byte aligned", crate::HostBuffer::DESCRIPTOR.alignment);
        assert!(line.starts_with("cpu ") && line.contains(&aligned), "{line}");
    }
}
