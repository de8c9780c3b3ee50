//! A program compiled for an OpenCL target and its executor.
//!
//! Constants are uploaded once, when the program is made. Each run takes the caller's inputs in place where the
//! target allows (unified memory, aligned) or uploads each once (recorded in the run's ledger), gives each value a
//! buffer: its region of the session's arena where the plan placed it ([`ArenaUse`]), else a dead value's of the
//! same size where there is one (the pool lives as long as the program, and holds scratch too), returned to the
//! pool after its last reader; and returns the outputs as lazy host tensors: nothing is read back until the caller
//! reads.

use std::sync::{Arc, Mutex};

use opencl3::kernel::Kernel;
use opencl3::program::Program;
use stowage_runtime::DatumType;

use crate::buffer::ClBuffer;
use crate::device::Target;
use crate::error::Result;

/// A named input or output with its static type.
#[derive(Clone, Debug)]
pub struct Binding {
    /// The model's name for it.
    pub name: String,
    /// Its slot.
    pub slot: usize,
    /// Datum type.
    pub dt: DatumType,
    /// Shape.
    pub shape: Vec<usize>,
}

/// A kernel argument, resolved at run time.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ArgRef {
    /// The buffer of a value slot.
    Slot(usize),
    /// A scratch buffer of the step.
    Scratch(usize),
    /// The program's tile counters for split products ([`ClProgram::counters`]).
    Counters,
    /// The program's accumulators for split products ([`ClProgram::accumulators`]).
    Accumulators,
}

/// One kernel launch.
#[derive(Clone, Debug)]
pub(crate) struct Launch {
    pub kernel: usize,
    pub args: Vec<ArgRef>,
    pub global: Vec<usize>,
    pub local: Option<Vec<usize>>,
    pub writes: Vec<ArgRef>,
}

/// What a step does.
#[derive(Clone, Debug)]
pub(crate) enum StepKind {
    /// The output is the input's buffer seen with another shape (Reshape, Flatten, Squeeze, Identity…).
    Alias { from: usize, to: usize },
    /// Allocates its outputs (and scratch of these byte sizes) and launches kernels.
    Launches { outs: Vec<usize>, scratch: Vec<usize>, launches: Vec<Launch> },
}

/// One node's work.
#[derive(Clone, Debug)]
pub struct Step {
    /// The node's name.
    pub name: String,
    /// The op (`Fused` for a fused chain).
    pub op: &'static str,
    pub(crate) kind: StepKind,
}

/// A program ready to run on its target.
pub struct ClProgram {
    pub(crate) target: Target,
    pub(crate) _program: Option<Arc<Program>>,
    pub(crate) kernels: Vec<Mutex<Kernel>>,
    pub(crate) steps: Vec<Step>,
    /// Per slot: datum type and shape.
    pub(crate) types: Vec<(DatumType, Vec<usize>)>,
    pub(crate) inputs: Vec<Binding>,
    pub(crate) outputs: Vec<Binding>,
    pub(crate) consts: Vec<(usize, ClBuffer)>,
    /// Per slot, the last step reading it (`usize::MAX`: kept to the end).
    pub(crate) last_use: Vec<usize>,
    /// Bytes uploaded when the program was made (its constants).
    pub const_bytes: usize,
    /// Per slot, the name of its value (`%N` for an unnamed one), as the plan names it.
    pub(crate) slot_names: Vec<String>,
    /// The plan's places for values, in the session's arena ([`ClProgram::use_arena`]).
    pub(crate) memory: Option<ArenaUse>,
    /// Held while a run enqueues its work: two runs of this program at once would write the same places of the
    /// arena. (The arena is the session's, shared by its segments on the device: `Session::run` runs one run at a
    /// time, which is what keeps two programs apart.)
    pub(crate) running: Mutex<()>,
    /// Zeroed `int`s the split products count their finished ranges in, one per tile (`codegen::gemm::split_tail`):
    /// `None` when no product is split.
    pub(crate) counters: Option<ClBuffer>,
    /// Zeroed floats the split products add their ranges up in where the device takes PTX, the largest product's
    /// output (`codegen::gemm::partial_store`): `None` elsewhere, or when no product is split.
    pub(crate) accumulators: Option<ClBuffer>,
    /// Replay of runs from a recorded command buffer (`replay.rs`).
    pub(crate) replay: Mutex<crate::replay::Replay>,
    /// Runs replayed so far.
    pub(crate) replayed: std::sync::atomic::AtomicUsize,
    /// Outputs handed to callers, taken back into the pool once dropped (`ClProgram::reclaim`).
    pub(crate) handed_out: Mutex<Vec<ClBuffer>>,
    /// The ids of the buffers this program allocated (`ClBuffer::id`): only those are taken back from callers.
    pub(crate) owned: Mutex<std::collections::HashSet<u64>>,
    /// The most bytes of values alive at once on the device over the runs so far.
    pub(crate) peak: std::sync::atomic::AtomicUsize,
    /// Device buffers of values and scratch that died, by byte length, for later steps and runs to reuse instead
    /// of allocating: a run allocates only the first time a size is needed (and the outputs it hands out).
    pub(crate) pool: Mutex<std::collections::HashMap<usize, Vec<ClBuffer>>>,
    /// Device time of each step's kernels summed over the runs so far, and the runs (when the target profiles).
    pub(crate) times: Mutex<(Vec<Vec<u64>>, usize)>,
    /// Per kernel, what it computes (a product's dimensions), for the profile.
    pub(crate) notes: Vec<String>,
}

/// Where a program's values live in its session's arena, as the plan placed them.
pub struct ArenaUse {
    /// Per slot, its place: a region of the arena at the plan's offset, and the end of the planned buffer (for
    /// the high-water mark). `None`: the value's memory is its own.
    pub(crate) places: Vec<Option<(ClBuffer, usize)>>,
    /// The slots a kernel writes that have no place and are not outside: intermediates held in memory of their
    /// own, counted beside the arena's high-water mark (none when the plan placed everything).
    pub(crate) elsewhere: Vec<usize>,
}

impl ArenaUse {
    /// Places in `arena` (one allocation at the plan's peak for the device's space): `planned` gives, by value
    /// name, the offset and size of the buffer a value allocates; `outside` names the values the plan keeps out
    /// of the arena.
    pub fn new(
        program: &ClProgram,
        arena: &ClBuffer,
        planned: &dyn Fn(&str) -> Option<(usize, usize)>,
        outside: &dyn Fn(&str) -> bool,
    ) -> Result<ArenaUse> {
        let written: std::collections::HashSet<usize> = program
            .steps
            .iter()
            .flat_map(|s| match &s.kind {
                StepKind::Launches { outs, .. } => outs.clone(),
                StepKind::Alias { .. } => Vec::new(),
            })
            .collect();
        // A plan made for another device (built code carries one made elsewhere) may place values off this one's
        // base alignment, which regions need: those values keep memory of their own.
        let align = program.target.info().base_align.max(1);
        let mut places = Vec::with_capacity(program.types.len());
        for (s, name) in program.slot_names.iter().enumerate() {
            let (dt, shape) = &program.types[s];
            let bytes = shape.iter().product::<usize>() * dt.size_of();
            // A region the device will not make (out of resources) leaves the value memory of its own too.
            let place = match planned(name) {
                Some((offset, size))
                    if written.contains(&s) && bytes > 0 && bytes <= size && offset.is_multiple_of(align) =>
                {
                    arena.region(offset, bytes, *dt, shape).ok().map(|r| (r, offset + size))
                }
                _ => None,
            };
            places.push(place);
        }
        let outside: Vec<bool> = program.slot_names.iter().map(|n| outside(n)).collect();
        let mut elsewhere: Vec<usize> = written.into_iter().filter(|&s| places[s].is_none() && !outside[s]).collect();
        elsewhere.sort_unstable();
        Ok(ArenaUse { places, elsewhere })
    }
}

/// One step's kernels timed on the device ([`ClProgram::profile`]).
#[derive(Clone, Debug)]
pub struct StepTime {
    /// The node's name.
    pub name: String,
    /// The op.
    pub op: &'static str,
    /// Each launch: its mean device time, its global size, and what its kernel computes where that is noted (a
    /// product's dimensions).
    pub launches: Vec<String>,
    /// Mean device time per run, in microseconds.
    pub micros: f64,
}

/// Bytes of the distinct device buffers in `slots` other than the `fixed` slots' (aliases share a buffer).
pub(crate) fn live_bytes(slots: &[Option<ClBuffer>], fixed: &[bool]) -> usize {
    use opencl3::memory::ClMem as _;
    // Memory of a fixed slot is not an intermediate's, whichever slot (an alias) holds it.
    let mut seen: std::collections::HashSet<usize> = slots
        .iter()
        .zip(fixed)
        .filter_map(|(b, &f)| b.as_ref().filter(|_| f))
        .map(|b| b.mem().get() as usize)
        .collect();
    slots
        .iter()
        .enumerate()
        .filter(|(s, _)| !fixed[*s])
        .filter_map(|(_, b)| b.as_ref())
        .filter(|b| seen.insert(b.mem().get() as usize))
        .map(ClBuffer::byte_len)
        .sum()
}

impl Step {
    /// The program's kernels it launches, in order, by index (see [`ClProgram::kernel_notes`]).
    pub fn kernels(&self) -> Vec<usize> {
        match &self.kind {
            StepKind::Alias { .. } => Vec::new(),
            StepKind::Launches { launches, .. } => launches.iter().map(|l| l.kernel).collect(),
        }
    }

    /// Kernel launches it makes per run (0 for an alias; one more for a convolution's im2col on a CPU device).
    pub fn launches(&self) -> usize {
        match &self.kind {
            StepKind::Alias { .. } => 0,
            StepKind::Launches { launches, .. } => launches.len(),
        }
    }
}

impl ClProgram {
    /// The target.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Inputs, in order.
    pub fn inputs(&self) -> &[Binding] {
        &self.inputs
    }

    /// Outputs, in order.
    pub fn outputs(&self) -> &[Binding] {
        &self.outputs
    }

    /// Steps, in order.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// The most bytes of values (not constants, inputs or outputs) alive at once on the device in any run so far:
    /// with the plan's arena, its high-water mark and any intermediate held elsewhere. Scratch inside a step (an
    /// im2col buffer) is not counted, as on the CPU.
    pub fn peak_bytes(&self) -> usize {
        self.peak.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Per slot, the name of its value (`%N` for an unnamed one), as the plan names values.
    pub fn slot_names(&self) -> &[String] {
        &self.slot_names
    }

    /// Runs with intermediate values at their places in the session's arena from now on; values the plan did not
    /// place keep memory of their own, counted in the measured peak beside the arena's high-water mark.
    pub fn use_arena(&mut self, memory: ArenaUse) {
        self.memory = Some(memory);
    }

    /// Runs enqueued as one recorded command buffer so far (`replay.rs`).
    pub fn replayed_runs(&self) -> usize {
        self.replayed.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// What each kernel computes, by kernel index, where lowering says (a product's dimensions, blocking, and
    /// whether it runs on tensor cores): what profiles print beside a launch.
    pub fn kernel_notes(&self) -> &[String] {
        &self.notes
    }

    /// Device time per step, in step order, when the target was opened with `STOWAGE_OPENCL_PROFILE=1` (empty
    /// otherwise): what a kernel's tiling is tuned against.
    pub fn profile(&self) -> Vec<StepTime> {
        let times = self.times.lock().unwrap_or_else(|p| p.into_inner());
        let runs = times.1.max(1) as f64;
        let none = Vec::new();
        self.steps
            .iter()
            .enumerate()
            .map(|(i, step)| {
                let ns = times.0.get(i).unwrap_or(&none);
                let us = |k: usize| ns.get(k).copied().unwrap_or(0) as f64 / runs / 1e3;
                StepTime {
                    name: step.name.clone(),
                    op: step.op,
                    launches: match &step.kind {
                        StepKind::Launches { launches, .. } => launches
                            .iter()
                            .enumerate()
                            .map(|(k, l)| {
                                let note = self.notes.get(l.kernel).map_or("", String::as_str);
                                format!("{:.1} µs {:?} {note}", us(k), l.global)
                            })
                            .collect(),
                        StepKind::Alias { .. } => Vec::new(),
                    },
                    micros: (0..ns.len()).map(us).sum(),
                }
            })
            .collect()
    }
}

/// With `STOWAGE_OPENCL_PROFILE=1`, a program prints its steps' device times to stderr when it is dropped, the
/// slowest first: a measuring aid, not part of any output.
impl Drop for ClProgram {
    fn drop(&mut self) {
        if !self.target.inner.profiling || self.times.get_mut().map_or(true, |t| t.1 == 0) {
            return;
        }
        let mut steps = self.profile();
        let total: f64 = steps.iter().map(|s| s.micros).sum();
        steps.sort_by(|a, b| b.micros.total_cmp(&a.micros));
        let mut table =
            format!("device time per run on {}: {total:.1} µs in {} steps\n", self.target.space(), steps.len());
        for s in steps.iter().filter(|s| s.micros > 0.0) {
            use std::fmt::Write as _;
            let _ = writeln!(
                table,
                "{:>9.1} µs {:>5.1}%  {:<10} {:<40} {}",
                s.micros,
                100.0 * s.micros / total,
                s.op,
                s.name,
                s.launches.join("; ")
            );
        }
        eprint!("{table}");
    }
}
