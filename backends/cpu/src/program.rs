//! A compiled CPU program: steps in order, each a kernel reading and writing value slots, and the executor that
//! runs it. Intermediate values are freed after their last reader, and the executor measures the peak of live
//! intermediate bytes.

use std::time::Instant;

use stowage_runtime::{DatumType, Tensor};

use crate::error::{CpuError, Result};

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

/// A program ready to run.
pub struct Program {
    pub(crate) slots: usize,
    pub(crate) consts: Vec<(usize, Tensor<'static>)>,
    /// The constants again, indexed by slot (`None` for other slots).
    pub(crate) const_slots: Vec<Option<Tensor<'static>>>,
    /// Bytes of constants held inside kernels instead (convolution weights packed for the product kernel).
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

    /// The steps, in execution order.
    pub fn steps(&self) -> &[Step] {
        &self.steps
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
        if self.threads <= 1 {
            return self.run_here(inputs, profile);
        }
        let pool = match self.pool.get() {
            Some(pool) => pool,
            None => {
                let built = rayon::ThreadPoolBuilder::new()
                    .num_threads(self.threads)
                    .build()
                    .map_err(|e| CpuError::NotImplemented(format!("cannot start {} threads: {e}", self.threads)))?;
                self.pool.get_or_init(|| built)
            }
        };
        pool.install(|| self.run_here(inputs, profile))
    }

    fn run_here(&self, inputs: Vec<Tensor<'static>>, profile: bool) -> Result<RunOutput> {
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
        let ctx = Ctx { threads: self.threads.max(1) };
        let (mut live, mut peak) = (0usize, 0usize);
        let mut timings = Vec::new();
        for (i, step) in self.steps.iter().enumerate() {
            let start = profile.then(Instant::now);
            let outs = {
                let args: Vec<Option<&Tensor<'static>>> = step
                    .inputs
                    .iter()
                    .map(|s| s.and_then(|s| self.const_slots[s].as_ref().or(values[s].as_ref())))
                    .collect();
                (step.kernel)(&args, &ctx).map_err(|e| CpuError::Step {
                    node: step.name.clone(),
                    op: step.op,
                    source: Box::new(e),
                })?
            };
            if let Some(start) = start {
                timings.push((step.name.clone(), step.op, start.elapsed().as_secs_f64()));
            }
            for (slot, t) in step.outputs.iter().zip(outs) {
                if let Some(slot) = slot {
                    live += t.len() * t.dt().size_of();
                    values[*slot] = Some(t);
                }
            }
            peak = peak.max(live);
            for s in step.inputs.iter().flatten() {
                if self.last_use[*s] == i {
                    if let Some(t) = values[*s].take() {
                        live = live.saturating_sub(t.len() * t.dt().size_of());
                    }
                }
            }
        }
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
