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
use stowage_runtime::{DatumType, DeviceBuffer, Ledger, LedgerTag, MemorySpace, MoveKind, Tensor};

use crate::buffer::ClBuffer;
use crate::device::Target;
use crate::error::{ClError, Result};
use crate::program::Arg;

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
    places: Vec<Option<(ClBuffer, usize)>>,
    /// The slots a kernel writes that have no place and are not outside: intermediates held in memory of their
    /// own, counted beside the arena's high-water mark (none when the plan placed everything).
    elsewhere: Vec<usize>,
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
fn live_bytes(slots: &[Option<ClBuffer>], fixed: &[bool]) -> usize {
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
    /// Kernel launches it makes per run (0 for an alias; one more for a product split along K, and one more for a
    /// convolution's im2col on a CPU device).
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

    /// Runs on `inputs` (in [`ClProgram::inputs`] order). Transfers are recorded in `ledger`; outputs are lazy.
    pub fn run(&self, inputs: Vec<Tensor<'static>>, ledger: &Ledger) -> Result<Vec<Tensor<'static>>> {
        let _running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let bad = |name: &str, m: String| ClError::Input { input: name.into(), message: m };
        if inputs.len() != self.inputs.len() {
            let name = self.inputs.get(inputs.len()).map_or("(extra)", |b| b.name.as_str());
            return Err(bad(
                name,
                format!("the model takes {} inputs, {} were given", self.inputs.len(), inputs.len()),
            ));
        }
        let mut slots: Vec<Option<ClBuffer>> = vec![None; self.types.len()];
        for (s, b) in &self.consts {
            slots[*s] = Some(b.clone());
        }
        for (b, t) in self.inputs.iter().zip(&inputs) {
            if t.dt() != b.dt || t.shape() != b.shape.as_slice() {
                return Err(bad(&b.name, format!("expected {}{:?}, got {}{:?}", b.dt, b.shape, t.dt(), t.shape())));
            }
            let t = t.clone().with_name(b.name.clone());
            let transfer =
                |e: stowage_runtime::RuntimeError| ClError::Transfer { value: b.name.clone(), message: e.to_string() };
            if let Some(held) = ClBuffer::of(&t) {
                if let Some(buffer) = self.held_input(held, &t, ledger)? {
                    slots[b.slot] = Some(buffer);
                    continue;
                }
            }
            let buffer = match ClBuffer::import(&self.target, &t)? {
                Ok(imported) => imported,
                // A device output handed back: the runtime's rule (used as is where it is).
                Err(_) if t.device_buffer::<ClBuffer>().is_some() => {
                    ClBuffer::from_tensor(&t, &self.target, ledger).map_err(transfer)?
                }
                // A strided host tensor (a caller's padded rows): packed as it is uploaded, one copy.
                Err(_) if !t.is_row_major() => {
                    let bytes = t.len() * t.dt().size_of();
                    let up = ClBuffer::upload_packed(&self.target, &t)?;
                    let tag = LedgerTag::new(ledger, b.name.as_str());
                    tag.record(MoveKind::Upload, &MemorySpace::HOST, self.target.space(), bytes, || {
                        format!("the caller's {} input, packed as it is uploaded", t.layout_kind()).into()
                    });
                    up
                }
                Err(why) => {
                    let bytes = t.as_bytes().map_err(transfer)?;
                    let up =
                        <ClBuffer as DeviceBuffer>::upload(&self.target, t.dt(), t.shape(), bytes).map_err(transfer)?;
                    if up.copied {
                        let tag = LedgerTag::new(ledger, b.name.as_str());
                        let space = self.target.space();
                        tag.record(MoveKind::Upload, &MemorySpace::HOST, space, bytes.len(), || why.into());
                    }
                    up.value
                }
            };
            slots[b.slot] = Some(buffer);
        }
        // Constants, inputs and outputs (handed to the caller) are not intermediates: the plan keeps them out of
        // its arenas too, with the values it hands to another space. Values at their places in the arena count
        // as its high-water mark; any other intermediate counts while it is alive.
        // Without a plan, every buffer alive but theirs is counted (aliases share one), each step.
        let mut fixed: Vec<bool> = vec![false; self.types.len()];
        if self.memory.is_none() {
            let kept =
                self.consts.iter().map(|(s, _)| *s).chain(self.inputs.iter().chain(&self.outputs).map(|b| b.slot));
            for s in kept {
                fixed[s] = true;
            }
        }
        let (mut peak, mut high_water) = (0, 0);
        let mut events = Vec::new();
        for (i, step) in self.steps.iter().enumerate() {
            let timed = self.run_step(step, &mut slots)?;
            if self.target.inner.profiling {
                events.extend(timed.into_iter().enumerate().map(|(k, e)| (i, k, e)));
            }
            if let (Some(m), StepKind::Launches { outs, .. }) = (&self.memory, &step.kind) {
                for &o in outs {
                    high_water = high_water.max(m.places[o].as_ref().map_or(0, |p| p.1));
                }
            }
            // With one, only the intermediates the plan placed nowhere (a few slots, precomputed): per step this is
            // the enqueueing thread's time, which a GPU's short kernels wait on.
            let elsewhere = match &self.memory {
                Some(m) => m.elsewhere.iter().filter_map(|&s| slots[s].as_ref()).map(ClBuffer::byte_len).sum(),
                None => live_bytes(&slots, &fixed),
            };
            peak = peak.max(high_water + elsewhere);
            for (s, slot) in slots.iter_mut().enumerate() {
                if self.last_use[s] == i {
                    if let Some(b) = slot.take() {
                        self.recycle(b);
                    }
                }
            }
        }
        self.peak.fetch_max(peak, std::sync::atomic::Ordering::Relaxed);
        if self.target.inner.profiling {
            self.target.finish()?;
            let mut times = self.times.lock().unwrap_or_else(|p| p.into_inner());
            times.0.resize(self.steps.len(), Vec::new());
            times.1 += 1;
            for (i, k, e) in events {
                let (start, end) = (e.profiling_command_start(), e.profiling_command_end());
                if let (Ok(start), Ok(end)) = (start, end) {
                    let launches = &mut times.0[i];
                    if launches.len() <= k {
                        launches.resize(k + 1, 0);
                    }
                    launches[k] += end.saturating_sub(start);
                }
            }
        }
        self.outputs
            .iter()
            .map(|b| {
                let buffer = slots[b.slot].clone().ok_or_else(|| ClError::Input {
                    input: b.name.clone(),
                    message: "the output was not computed".into(),
                })?;
                buffer
                    .with_shape(&b.shape)
                    .into_tensor(LedgerTag::new(ledger, b.name.as_str()))
                    .map_err(|e| ClError::Transfer { value: b.name.clone(), message: e.to_string() })
            })
            .collect()
    }

    /// The buffer to run on for input `t`, held in OpenCL memory (`buffer/external.rs`, rule 5): this target's own
    /// memory used as is when packed, padded rows packed on the device (one relayout); another target's buffer
    /// copied in through the host (a download and an upload, counted). `None` leaves `t` to the host paths.
    fn held_input(&self, held: &ClBuffer, t: &Tensor<'static>, ledger: &Ledger) -> Result<Option<ClBuffer>> {
        let name = t.name_or_unnamed();
        let packed = t.is_row_major() && t.is_whole_storage();
        if held.is_of(&self.target) {
            if packed {
                return Ok(Some(held.with_shape(t.shape())));
            }
            // Rows at one pitch are packed on the device; any other view (a transposed output) takes the host
            // path, its download and upload counted.
            return held.packed_on_device(t, ledger);
        }
        if !packed || t.is_host_readable() {
            return Ok(None);
        }
        // Another target's memory: read to the host and written here, each counted, as the plan counts a value
        // crossing between devices.
        let transfer = |m: String| ClError::Transfer { value: name.to_string(), message: m };
        let bytes = held.read_now()?;
        let up = <ClBuffer as DeviceBuffer>::upload(&self.target, t.dt(), t.shape(), &bytes)
            .map_err(|e| transfer(e.to_string()))?;
        let (from, tag) = (DeviceBuffer::space(held), LedgerTag::new(ledger, name));
        let why = || format!("a buffer of another OpenCL target ({from}), through the host").into();
        tag.record(MoveKind::Download, &from, &MemorySpace::HOST, bytes.len(), why);
        tag.record(MoveKind::Upload, &MemorySpace::HOST, self.target.space(), bytes.len(), why);
        Ok(Some(up.value))
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

    /// Runs one step; returns its launches' events.
    fn run_step(&self, step: &Step, slots: &mut [Option<ClBuffer>]) -> Result<Vec<Arc<opencl3::event::Event>>> {
        let mut events = Vec::new();
        let missing = |s: usize| ClError::Step {
            node: step.name.clone(),
            op: step.op,
            message: format!("value slot {s} is empty"),
        };
        match &step.kind {
            StepKind::Alias { from, to } => {
                let b = slots[*from].clone().ok_or_else(|| missing(*from))?;
                slots[*to] = Some(b.with_shape(&self.types[*to].1));
            }
            StepKind::Launches { outs, scratch, launches } => {
                let alloc_err = |e: stowage_runtime::RuntimeError| ClError::Step {
                    node: step.name.clone(),
                    op: step.op,
                    message: e.to_string(),
                };
                for &o in outs {
                    let placed = self.memory.as_ref().and_then(|m| m.places[o].as_ref());
                    slots[o] = Some(match placed {
                        Some((region, _)) => region.clone(),
                        None => {
                            let (dt, shape) = &self.types[o];
                            self.buffer(*dt, shape).map_err(alloc_err)?
                        }
                    });
                }
                let scratch: Vec<ClBuffer> = scratch
                    .iter()
                    .map(|&bytes| self.buffer(DatumType::U8, &[bytes]).map_err(alloc_err))
                    .collect::<Result<_>>()?;
                let get = |r: &ArgRef| -> Result<&ClBuffer> {
                    match *r {
                        ArgRef::Slot(s) => slots[s].as_ref().ok_or_else(|| missing(s)),
                        ArgRef::Scratch(k) => Ok(&scratch[k]),
                    }
                };
                for l in launches {
                    let bufs: Vec<&ClBuffer> = l.args.iter().map(get).collect::<Result<_>>()?;
                    let args: Vec<Arg<'_>> = bufs.iter().map(|b| Arg::Buf(b)).collect();
                    let writes: Vec<&ClBuffer> = l.writes.iter().map(get).collect::<Result<_>>()?;
                    let kernel = self.kernels[l.kernel].lock().unwrap_or_else(|p| p.into_inner());
                    let event = self
                        .target
                        .launch(&kernel, &args, &l.global, l.local.as_deref(), &writes)
                        .map_err(|e| ClError::Step { node: step.name.clone(), op: step.op, message: e.to_string() })?;
                    events.extend(event);
                }
                for b in scratch {
                    self.recycle(b);
                }
            }
        }
        Ok(events)
    }

    /// A buffer for a `dt` value of `shape`: a dead one of the same byte length where there is one, else a new
    /// one. Commands run in queue order, so the new writer runs after every command that used the old value.
    fn buffer(&self, dt: DatumType, shape: &[usize]) -> stowage_runtime::Result<ClBuffer> {
        let len = shape.iter().product::<usize>() * dt.size_of();
        let reused = self.pool.lock().unwrap_or_else(|p| p.into_inner()).get_mut(&len).and_then(Vec::pop);
        match reused {
            Some(b) => Ok(b.retyped(dt, shape)),
            None => ClBuffer::allocate(&self.target, dt, shape),
        }
    }

    /// Keeps `b` for reuse when nothing else holds its memory (an alias still alive, an imported input, a buffer
    /// handed out as an output are never pooled).
    fn recycle(&self, b: ClBuffer) {
        if b.is_unique() && !b.is_imported() {
            self.pool.lock().unwrap_or_else(|p| p.into_inner()).entry(b.byte_len()).or_default().push(b);
        }
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
