//! The plugin surface: what a backend crate implements so that the driver lists, opens, plans for, lowers and runs
//! its targets, and what `stowage build` asks of it ahead of time. The driver never names a backend: a binary hands
//! it a [`Registry`] of [`TargetKind`]s.
//!
//! The three traits, from the outside in:
//! 1. [`TargetKind`]: a family of targets (`cpu`, `opencl`): the names it answers to, the devices it lists for
//!    `stowage targets`, and opening one target for a graph.
//! 2. [`OpenedTarget`]: one opened target. It is the planner's [`Backend`] (its descriptor, which nodes it has
//!    kernels for, the layouts they read); it lowers a segment of the plan to an [`Executable`], and may compile
//!    its segments ahead of time for `stowage build`.
//! 3. [`Executable`]: one lowered segment: runs on tensors, lists its steps, holds constant bytes, measures a peak.

use std::fmt;

use stowage_compiler::ir::Graph;
use stowage_compiler::plan::{Backend, Plan, Segment};
use stowage_runtime::{Ledger, Tensor};

use crate::error::{DriverError, Result};

/// A backend's own error, as it describes it: the driver adds the model, target and backend it came from.
pub type BackendError = Box<dyn std::error::Error + Send + Sync>;

/// A family of targets a backend provides.
pub trait TargetKind: Sync {
    /// The kind's name (`cpu`, `opencl`): what `stowage targets` and error messages call it.
    fn name(&self) -> &'static str;

    /// Where generated code finds this kind: `stowage_driver::kind_source!(KIND)` beside the static. A clash of
    /// names at registration says whose they are with it.
    fn source(&self) -> KindSource;

    /// True when `target`, one entry of a `--target` list, names a target of this kind (`opencl:1:discrete`).
    fn answers(&self, target: &str) -> bool;

    /// One line per device for `stowage targets`, each from the device's storage descriptor, or one line saying
    /// why there is none. Lists without opening anything for a model.
    fn list(&self) -> Vec<String>;

    /// Opens `target` (which [`TargetKind::answers`]) for `graph`.
    fn open(&self, target: &str, options: &OpenOptions, graph: &Graph) -> Result<Box<dyn OpenedTarget>, BackendError>;

    /// ONNX op types this kind runs as one node where the import would otherwise expand them into smaller ops
    /// ([`stowage_compiler::onnx::ImportConfig::whole`]): a target list holding this kind has them imported whole,
    /// and the planner places them on a target whose [`Backend::supports`] takes them. None by default.
    fn whole_ops(&self) -> &'static [&'static str] {
        &[]
    }
}

/// What opening a target is told.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    /// Kernel threads the caller allows.
    pub threads: usize,
    /// In built code: the kernels linked into the binary, as the backend that compiled them ahead of time tabled
    /// them ([`ObjectCode::items`]). A backend takes its own table (by downcasting) and finds every kernel its
    /// lowering asks for there instead of compiling it; a missing one is an error. Other backends ignore it.
    pub linked: Option<&'static (dyn std::any::Any + Send + Sync)>,
    /// Targets the caller opened itself, in its own way (OpenCL: a `stowage_opencl::Target` made in the caller's
    /// context with `Target::from_raw`): a kind that finds one of its own type for the target it opens takes it
    /// instead of opening another, so the session works in the caller's context. Others ignore them.
    pub adopted: Adopted,
}

/// Handles of targets a caller opened itself ([`OpenOptions::adopted`]), each downcast by the kind it is for.
#[derive(Clone, Default)]
pub struct Adopted(pub Vec<std::sync::Arc<dyn std::any::Any + Send + Sync>>);

impl fmt::Debug for Adopted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} adopted target(s)", self.0.len())
    }
}

/// One target opened for one graph.
pub trait OpenedTarget: Backend {
    /// The kind it was opened from ([`TargetKind::name`]).
    fn kind(&self) -> &'static str;

    /// Lowers `segment` of `plan` (made for `whole`) to something that runs. Constants a device needs before the
    /// first run are moved now and recorded in `setup`. An error names the node and op it could not lower.
    fn lower(
        &self,
        segment: &Segment,
        whole: &Graph,
        plan: &Plan,
        setup: &Ledger,
    ) -> Result<Box<dyn Executable>, BackendError>;

    /// The memory path this target takes, when it is not plain host memory.
    fn path(&self) -> Option<MemoryPath> {
        None
    }

    /// This opened target as another session of the same kind adopts it ([`OpenOptions::adopted`]), so that the
    /// two share the device and each holds what the other made: the parts of a model compiled in stages do. `None`
    /// (the default) when the kind adopts nothing.
    fn shared(&self) -> Option<std::sync::Arc<dyn std::any::Any + Send + Sync>> {
        None
    }

    /// The backend's own handle of this opened target (OpenCL: its `stowage_opencl::Target`), for a caller that
    /// makes memory and work beside it: downcast it to the backend's type. `None` when the backend offers none.
    fn handle(&self) -> Option<&dyn std::any::Any> {
        None
    }

    /// True when `t`'s bytes are in this target's memory now, usable by its kernels as they are: a caller's
    /// device buffer wrapped for it, an output of an earlier run here. Such an input is planned where it lives.
    fn holds(&self, _t: &Tensor<'static>) -> bool {
        false
    }

    /// `t` in this target's memory for one run, with its host reads recorded in `ledger`: a tensor the target
    /// [`holds`](OpenedTarget::holds) as a fresh handle to the same memory (no copy); anything else moved there
    /// first, that move recorded in `ledger` (what `stowage run --input-device` does with a file's tensor). An
    /// error when the target cannot hold a caller's tensor.
    fn resident(&self, _t: &Tensor<'static>, _ledger: &Ledger) -> Result<Tensor<'static>, BackendError> {
        Err(format!("the {} target does not hold a caller's tensors in its memory", self.kind()).into())
    }

    /// Waits until all work queued on the target has finished.
    fn finish(&self) -> Result<(), BackendError> {
        Ok(())
    }

    /// For `stowage build`: the kernels its lowering of `segments` will ask for, compiled now into one object file
    /// whose symbols start with `prefix`. `None` when the target compiles nothing ahead of time.
    fn compile_ahead(
        &self,
        _segments: &[&Segment],
        _whole: &Graph,
        _plan: &Plan,
        _prefix: &str,
    ) -> Result<Option<ObjectCode>, BackendError> {
        Ok(None)
    }
}

/// How a target's memory is reached, in words for the report and the built code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryPath {
    /// For the run report (`unified memory: inputs … (device name)`).
    pub report: String,
    /// For built code, with the memory space (`opencl:0: unified memory, inputs imported in place`).
    pub built: String,
    /// The same device reached another way, as a target name (a unified device's `opencl:0:discrete`): built code
    /// carries that plan too, so whichever device the executable finds, it has the plan for it.
    pub alternative: Option<String>,
}

/// Kernels compiled ahead of time into one object file.
#[derive(Clone, Debug)]
pub struct ObjectCode {
    /// The object file's bytes.
    pub bytes: Vec<u8>,
    /// Each kernel: the node it is for, the key lowering finds it by, its symbol.
    pub kernels: Vec<(String, u64, String)>,
    /// Rust items, as source, that generated code includes: declarations of the object's symbols and a
    /// `static LINKED` that tables them, of the type the backend's `open` downcasts
    /// [`OpenOptions::linked`] to. Names in it are full paths (`::stowage_cpu::jit::Precompiled`).
    pub items: String,
}

/// Where generated code finds a target kind: the package that provides it, its folder (for a path dependency),
/// the full path of its static, and the package features built code needs (built code depends on the package
/// without its default features, so a binary-only feature, like a CLI, stays out of it). Write it with
/// [`kind_source!`](crate::kind_source).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KindSource {
    /// The package (`stowage-cpu`).
    pub package: &'static str,
    /// The package's folder.
    pub manifest_dir: &'static str,
    /// The static's full path (`::stowage_cpu::driver::KIND`).
    pub path: &'static str,
    /// The package's features that built code enables (`["compile"]` for the CPU, which lowers at start-up).
    pub features: &'static [&'static str],
}

/// The [`KindSource`] of the static `$kind` defined in the module where the macro is written (which must be
/// public at that path), with the package features built code needs, if any: `kind_source!(KIND, ["compile"])`.
#[macro_export]
macro_rules! kind_source {
    ($kind:ident) => {
        $crate::kind_source!($kind, [])
    };
    ($kind:ident, [$($feature:literal),* $(,)?]) => {
        $crate::KindSource {
            package: env!("CARGO_PKG_NAME"),
            manifest_dir: env!("CARGO_MANIFEST_DIR"),
            path: concat!("::", module_path!(), "::", stringify!($kind)),
            features: &[$($feature),*],
        }
    };
}

/// A lowered segment.
pub trait Executable {
    /// Runs on `inputs` (the segment's inputs, in order), recording every copy in `ledger`. On an error every
    /// buffer the run took is released.
    fn run(&self, inputs: Vec<Tensor<'static>>, ledger: &Ledger) -> Result<Ran, BackendError>;

    /// Its steps: node and op.
    fn steps(&self) -> Vec<(String, &'static str)>;

    /// Bytes of constants it holds.
    fn const_bytes(&self) -> usize;

    /// Per `If` it runs with its branches as subgraphs (`stowage_compiler::ir::subgraph`), nested ones included:
    /// the node's name and how many times each branch ran (then, else) since it was made.
    fn branches(&self) -> Vec<(String, [u64; 2])> {
        Vec::new()
    }

    /// One more run, timed per step: `(node, op, seconds)`. `None` when the backend does not time steps.
    fn profile(&self, _inputs: Vec<Tensor<'static>>) -> Result<Option<StepTimes>, BackendError> {
        Ok(None)
    }
}

/// Per step of a profiled run: node, op, seconds.
pub type StepTimes = Vec<(String, &'static str, f64)>;

/// What one run of an [`Executable`] produced.
pub struct Ran {
    /// The segment's outputs, in order.
    pub outputs: Vec<Tensor<'static>>,
    /// Peak bytes of intermediate values measured while it ran.
    pub peak_bytes: usize,
}

/// The target kinds a binary registers, in order: a target name goes to the first kind that answers to it.
#[derive(Clone)]
pub struct Registry {
    kinds: Vec<&'static dyn TargetKind>,
}

impl Registry {
    /// A registry of `kinds`. Two kinds with one name are an error naming both.
    pub fn new(kinds: &[&'static dyn TargetKind]) -> Result<Registry> {
        for (k, a) in kinds.iter().enumerate() {
            if let Some(b) = kinds[..k].iter().find(|b| b.name() == a.name()) {
                return Err(DriverError::DuplicateKind {
                    name: a.name().to_string(),
                    first: describe(*b),
                    second: describe(*a),
                });
            }
        }
        Ok(Registry { kinds: kinds.to_vec() })
    }

    /// The kinds, in order.
    pub fn kinds(&self) -> &[&'static dyn TargetKind] {
        &self.kinds
    }

    /// The kind `target` belongs to, or an error listing the registered names.
    pub fn kind_of(&self, target: &str) -> Result<&'static dyn TargetKind> {
        self.kinds.iter().copied().find(|k| k.answers(target)).ok_or_else(|| DriverError::UnknownTarget {
            name: target.to_string(),
            registered: if self.kinds.is_empty() { "none".to_string() } else { self.names().join(", ") },
        })
    }

    /// The kinds' names.
    pub fn names(&self) -> Vec<&'static str> {
        self.kinds.iter().map(|k| k.name()).collect()
    }
}

/// A kind as an error names it: its name and the crate that provides it.
fn describe(kind: &dyn TargetKind) -> String {
    format!("'{}' of {} ({})", kind.name(), kind.source().package, kind.source().path)
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}
