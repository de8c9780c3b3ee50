//! A compiled CPU program: steps in order, each a kernel reading and writing value slots, and the executor that
//! runs it. Intermediate values are freed after their last reader. Given the plan's arena ([`Program::use_arena`]),
//! kernels write each value the plan placed there at its offset (`crate::arena`), and the executor measures the
//! arena's high-water mark plus the most bytes of intermediates held elsewhere: the planned peak when everything
//! landed where the plan put it.

use std::sync::Arc;
use std::time::Instant;

use stowage_runtime::{DatumType, Tensor};

use crate::arena::{self, HostArena};
use crate::error::{CpuError, Result};
use crate::storage::HostBuffer;

/// What a kernel gets besides its inputs.
#[derive(Clone, Copy, Debug)]
pub struct Ctx {
    /// Threads a kernel may use.
    pub threads: usize,
}

/// A step's computation: inputs (`None` for omitted optional ones) to outputs, one per output slot.
pub type Kernel = Box<dyn Fn(&[Option<&Tensor<'static>>], &Ctx) -> Result<Vec<Tensor<'static>>> + Send + Sync>;

/// One kernel launch.
pub struct Step {
    /// The IR node's name (for errors and reports).
    pub name: String,
    /// The op's name.
    pub op: &'static str,
    /// Input slots.
    pub inputs: Vec<Option<usize>>,
    /// Output slots (`None`: computed but not kept).
    pub outputs: Vec<Option<usize>>,
    /// The computation.
    pub kernel: Kernel,
}

/// A named input or output of the program with its static type.
#[derive(Clone, Debug)]
pub struct Binding {
    /// Name (the model's).
    pub name: String,
    /// Slot holding it.
    pub slot: usize,
    /// Datum type.
    pub dt: DatumType,
    /// Shape.
    pub shape: Vec<usize>,
}

/// What a run produced.
pub struct RunOutput {
    /// Outputs in the program's output order.
    pub outputs: Vec<Tensor<'static>>,
    /// Peak bytes of intermediate values alive at once (constants and inputs excluded).
    pub peak_bytes: usize,
    /// Per step: name, op and wall time in seconds (filled when profiling is on).
    pub profile: Vec<(String, &'static str, f64)>,
}

/// Where a program's values live in the session's arena.
pub struct ArenaUse {
    /// The arena.
    pub arena: Arc<HostArena>,
    /// Per step, per output: the offset and the value's bytes where the step allocates it in the arena (what the
    /// kernel is offered).
    pub offers: Vec<Vec<Option<(usize, usize)>>>,
    /// Per step, per output: the arena buffer its memory must be (offset, end), views included; `None` where the
    /// plan keeps it out of the arena.
    pub places: Vec<Vec<Option<(usize, usize)>>>,
}

/// A program ready to run.
pub struct Program {
    pub(crate) slots: usize,
    /// Per slot, the value's name in the lowered graph.
    pub(crate) slot_names: Vec<String>,
    /// Per slot, true when the plan keeps the value out of every arena (a graph output, handed to the caller):
    /// not counted in the peak.
    pub(crate) outside: Vec<bool>,
    /// The arena and where values live in it, when a plan placed them.
    pub(crate) memory: Option<ArenaUse>,
    pub(crate) consts: Vec<(usize, Tensor<'static>)>,
    /// The constants again, indexed by slot (`None` for other slots).
    pub(crate) const_slots: Vec<Option<Tensor<'static>>>,
    /// Bytes of constants held inside kernels instead (convolution weights packed for the product kernel, the
    /// programs of an `If`'s branches or a `Loop`'s body).
    pub(crate) packed_bytes: usize,
    pub(crate) inputs: Vec<Binding>,
    pub(crate) outputs: Vec<Binding>,
    pub(crate) steps: Vec<Step>,
    /// For each slot, the index of the last step that reads it (`usize::MAX`: kept to the end).
    pub(crate) last_use: Vec<usize>,
    /// Threads for kernels.
    pub threads: usize,
    /// Record per-step timings.
    pub profile: bool,
    /// The rayon pool of `threads` threads kernels run in (made on the first run with more than one thread), so
    /// that `--threads N` bounds a run to N cores whatever the machine has.
    pub(crate) pool: std::sync::OnceLock<rayon::ThreadPool>,
    /// The spinners that keep the pool's workers awake during runs (`crate::warm`).
    pub(crate) warm: crate::warm::Warm,
    /// Whether runs on several threads take the pool or stay on the caller's thread (`crate::inline`).
    pub(crate) way: crate::inline::Choice,
    /// Per `If` with subgraphs among its steps and theirs (`lower/subgraphs.rs`): the node's name and how many
    /// times each branch ran.
    pub(crate) branches: Vec<(String, crate::lower::Taken)>,
}

impl Program {
    /// The program's inputs, in order.
    pub fn inputs(&self) -> &[Binding] {
        &self.inputs
    }

    /// The program's outputs, in order.
    pub fn outputs(&self) -> &[Binding] {
        &self.outputs
    }

    /// Per `If` with subgraphs it runs, nested ones included: the node and how many times each branch ran (then,
    /// else).
    pub fn branches(&self) -> Vec<(String, [u64; 2])> {
        self.branches.iter().map(|(n, t)| (n.clone(), t.counts())).collect()
    }

    /// The steps, in execution order.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// The value names of its slots, and per step the slots it writes, for placing them in an arena.
    pub fn slot_names(&self) -> &[String] {
        &self.slot_names
    }

    /// Runs with values in `memory` from now on; `outside` names the slots the plan keeps out of every arena.
    pub fn use_arena(&mut self, memory: ArenaUse, outside: Vec<bool>) {
        self.memory = Some(memory);
        self.outside = outside;
    }

    /// Bytes of constants the program holds, those packed inside kernels included.
    pub fn const_bytes(&self) -> usize {
        self.consts.iter().map(|(_, t)| t.len() * t.dt().size_of()).sum::<usize>() + self.packed_bytes
    }

    /// Runs the program on `inputs`, given in the order of [`Program::inputs`], each of its declared type.
    pub fn run(&self, inputs: Vec<Tensor<'static>>) -> Result<RunOutput> {
        self.run_profiled(inputs, self.profile)
    }

    /// [`Program::run`], timing every step when `profile` is true.
    pub fn run_profiled(&self, inputs: Vec<Tensor<'static>>, profile: bool) -> Result<RunOutput> {
        use crate::inline::Way;
        // `crate::inline`, rule 1.
        if self.threads <= 1 {
            return self.run_here(inputs, profile, 1);
        }
        let (way, trial) = self.way.next();
        let start = Instant::now();
        let ran = match way {
            Way::Caller => {
                // `crate::warm`, rule 8: the pool's spinners would take the core this run needs.
                self.warm.quiet();
                self.run_here(inputs, profile, 1)
            }
            Way::Pool => self.run_in_pool(inputs, profile),
        };
        if trial && ran.is_ok() {
            self.way.record(way, start.elapsed());
        }
        ran
    }

    /// A run inside another program's step (an `If`'s branch, `lower/subgraphs.rs`): on the current thread, its
    /// kernels on `threads` of the pool the step runs in, not profiled.
    pub(crate) fn run_within(&self, inputs: Vec<Tensor<'static>>, threads: usize) -> Result<RunOutput> {
        self.run_here(inputs, false, threads)
    }

    /// A run in the program's pool (made on the first), its kernels on all the program's threads.
    fn run_in_pool(&self, inputs: Vec<Tensor<'static>>, profile: bool) -> Result<RunOutput> {
        let pool = match self.pool.get() {
            Some(pool) => pool,
            None => {
                // Each worker on a CPU of its own (`affinity.rs`).
                let (threads, first) = (self.threads, crate::affinity::reserve(self.threads));
                let built = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .start_handler(move |index| {
                        crate::affinity::pin(first + index, threads);
                    })
                    .build()
                    .map_err(|e| CpuError::NotImplemented(format!("cannot start {} threads: {e}", self.threads)))?;
                self.pool.get_or_init(|| built)
            }
        };
        pool.install(|| {
            // `crate::warm` rules 5 and 6: a spinner that took this run is not one while it lasts, and the only
            // run in progress keeps spinners on the pool's threads.
            let _entered = self.warm.enter(pool, self.threads);
            self.run_here(inputs, profile, self.threads)
        })
    }

    /// A run on the current thread, its kernels on `threads`.
    fn run_here(&self, inputs: Vec<Tensor<'static>>, profile: bool, threads: usize) -> Result<RunOutput> {
        let _running = crate::warm::Busy::mark();
        if inputs.len() != self.inputs.len() {
            let names: Vec<&str> = self.inputs.iter().map(|b| b.name.as_str()).collect();
            return Err(CpuError::Input {
                input: names.get(inputs.len()).copied().unwrap_or("(extra)").to_string(),
                message: format!(
                    "the model takes {} inputs ({}), {} were given",
                    names.len(),
                    names.join(", "),
                    inputs.len()
                ),
            });
        }
        // Constants are read in place from `const_slots`; `values` holds inputs and intermediates.
        let mut values: Vec<Option<Tensor<'static>>> = vec![None; self.slots];
        for (b, t) in self.inputs.iter().zip(inputs) {
            if t.dt() != b.dt || t.shape() != b.shape.as_slice() {
                return Err(CpuError::Input {
                    input: b.name.clone(),
                    message: format!("expected {}{:?}, got {}{:?}", b.dt, b.shape, t.dt(), t.shape()),
                });
            }
            values[b.slot] = Some(t);
        }
        let ctx = Ctx { threads: threads.max(1) };
        let lease = self.memory.as_ref().and_then(|m| m.arena.lease());
        // Bytes of intermediates held outside the arena (alive now, at most), and the arena's high-water mark.
        let (mut live, mut peak, mut high) = (0usize, 0usize, 0usize);
        let mut held_outside = vec![false; self.slots];
        let mut timings = Vec::new();
        for (i, step) in self.steps.iter().enumerate() {
            let start = profile.then(Instant::now);
            let outs = {
                let args: smallvec::SmallVec<[Option<&Tensor<'static>>; 8]> = step
                    .inputs
                    .iter()
                    .map(|s| s.and_then(|s| self.const_slots[s].as_ref().or(values[s].as_ref())))
                    .collect();
                let _offer = match (&lease, &self.memory) {
                    (Some(l), Some(m)) => Some(arena::offer(l.arena(), &m.offers[i])),
                    _ => None,
                };
                (step.kernel)(&args, &ctx).map_err(|e| CpuError::Step {
                    node: step.name.clone(),
                    op: step.op,
                    source: Box::new(e),
                })?
            };
            if let Some(start) = start {
                timings.push((step.name.clone(), step.op, start.elapsed().as_secs_f64()));
            }
            for (k, (slot, t)) in step.outputs.iter().zip(outs).enumerate() {
                let Some(slot) = *slot else { continue };
                let place = self.memory.as_ref().and_then(|m| m.places[i][k]);
                let at = lease.as_ref().and_then(|l| arena_offset(&t, l.arena()));
                let t = match (place, at) {
                    (Some((offset, end)), Some(a)) if a == offset => {
                        high = high.max(end);
                        t
                    }
                    _ => {
                        // Not where the plan put it: memory of its own if it is in the arena (rule 3).
                        let t = if at.is_some() { own_copy(&t)? } else { t };
                        let shared = step.inputs.iter().flatten().any(|&s| {
                            self.const_slots[s]
                                .as_ref()
                                .or(values[s].as_ref())
                                .is_some_and(|x| x.shares_storage_with(&t))
                        });
                        if !self.outside[slot] && !shared {
                            live += t.len() * t.dt().size_of();
                            held_outside[slot] = true;
                        }
                        t
                    }
                };
                values[slot] = Some(t);
            }
            peak = peak.max(live);
            for s in step.inputs.iter().flatten() {
                if self.last_use[*s] == i {
                    if let Some(t) = values[*s].take() {
                        if std::mem::take(&mut held_outside[*s]) {
                            live = live.saturating_sub(t.len() * t.dt().size_of());
                        }
                    }
                }
            }
        }
        let peak = high + peak;
        let outputs = self
            .outputs
            .iter()
            .map(|b| {
                values[b.slot]
                    .clone()
                    .or_else(|| self.const_slots[b.slot].clone())
                    .ok_or_else(|| CpuError::NotImplemented(format!("output '{}' was not computed", b.name)))
            })
            .collect::<Result<_>>()?;
        Ok(RunOutput { outputs, peak_bytes: peak, profile: timings })
    }
}

/// The offset in `arena` of the memory `t` is a view of, when it is a region of it.
fn arena_offset(t: &Tensor<'static>, arena: &Arc<HostArena>) -> Option<usize> {
    let host = t.storage().as_any()?.downcast_ref::<HostBuffer>()?;
    host.arena_offset(arena).filter(|_| t.layout().offset() == 0)
}

/// `t` in memory of its own (made while no region is offered).
fn own_copy(t: &Tensor<'static>) -> Result<Tensor<'static>> {
    let packed = t.to_row_major()?;
    Ok(crate::storage::tensor_from_bytes(packed.dt(), packed.shape(), packed.as_bytes()?)?)
}
