//! The runtime of an executable made by `stowage build`. Its generated `main.rs` describes what was built (the
//! model, the target, the planning options, every planned copy and the kernels linked in) as a [`Built`] and calls
//! [`main`], which takes `stowage run`'s run-time flags and runs through the very code `stowage run` does, so the
//! two give the same outputs, report and ledger.
//!
//! At start-up the executable reads its compiled-in optimised graph (constants folded and laid out row-major at
//! 256-byte boundaries, used in place from the executable's image) and the plan it was built with (for OpenCL built
//! on a unified device, the staging plan too, which a discrete device takes), and runs that plan: nothing is placed,
//! laid out or planned at start-up, and inputs in another layout than the plan's are refused, naming the input. The targets are
//! opened with the kernels linked in ([`OpenOptions::linked`](crate::OpenOptions::linked)), which a backend's
//! lowering takes instead of compiling: nothing is imported, optimised or compiled at start-up. The executable
//! links the driver and the backends it was built for, not the CLI: its flags are parsed without clap.

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use prost::Message;
use stowage_compiler::onnx::{self, proto::TensorProto, ImportConfig};

use crate::flags::{RunFlags, EXE_USAGE};
use crate::pipeline::{BuiltGraph, BuiltPlan, Planning, RunOptions};
use crate::{Registry, TargetKind};

/// What `stowage build` compiled into an executable.
pub struct Built {
    /// The model's file name, for messages.
    pub model_name: &'static str,
    /// The optimised graph's structure (`stowage_compiler::ir::serial`).
    pub graph: &'static [u8],
    /// Its constants: a page-aligned blob.
    pub constants: fn() -> &'static [u8],
    /// The model's declared inputs, those fixed by `--input-value` included.
    pub inputs: &'static [&'static str],
    /// The target list it was planned for.
    pub target: &'static str,
    /// `--input-shape` given at build time.
    pub input_shapes: &'static [(&'static str, &'static [usize])],
    /// `--input-value` given at build time: name and TensorProto bytes.
    pub input_values: &'static [(&'static str, &'static [u8])],
    /// `--input-layout` given at build time.
    pub input_layouts: &'static [(&'static str, &'static str)],
    /// `--state` given at build time.
    pub states: &'static [(&'static str, &'static str)],
    /// `--max-copies`.
    pub max_copies: Option<usize>,
    /// `--max-copy-bytes`.
    pub max_copy_bytes: Option<usize>,
    /// The memory path of the plan built on the build machine's device, in words.
    pub path: &'static str,
    /// The plan's copies, one line each ([`stowage_compiler::plan::PlannedCopy`]'s `Display`), as the source shows them.
    pub copies: &'static [&'static str],
    /// The plan, written out ([`stowage_compiler::plan::serial`]).
    pub plan: &'static [u8],
    /// For an OpenCL target built on a unified device: the staging plan a discrete device takes: its path, copies
    /// and the plan written out. At start-up the device opened picks the plan.
    pub other: Option<(&'static str, &'static [&'static str], &'static [u8])>,
    /// The kinds of the targets it was built for, in the target list's order.
    pub kinds: &'static [&'static dyn TargetKind],
    /// The kernels linked in, as the backend that compiled them ahead of time tables them
    /// ([`crate::ObjectCode::items`]); `None` when no target compiled any.
    pub linked: Option<&'static (dyn std::any::Any + Send + Sync)>,
    /// For a model compiled in stages (docs/compiler.md): what compiles at run time. `graph` and `plan` are then
    /// the part before the innermost cut.
    pub staged: Option<Staged>,
}

/// What built code of a model compiled in stages carries beside its first part (`stages.rs`, rule 5).
#[derive(Clone, Copy, Debug)]
pub struct Staged {
    /// The model as ONNX, less the initializers only the first part reads: the later parts are cut from it and
    /// compiled as the runs reach them.
    pub model: &'static [u8],
    /// The cuts the build made, outermost first ([`RunOptions::built_cuts`]).
    pub cuts: &'static [usize],
}

impl Built {
    /// The run options this executable was built with, and `args`'s.
    pub(crate) fn options(&self, threads: usize, repeat: usize, read_outputs: bool) -> Result<RunOptions, String> {
        let mut config = ImportConfig::new();
        for (name, shape) in self.input_shapes {
            config = config.input_shape(*name, shape.to_vec());
        }
        for (name, bytes) in self.input_values {
            let proto = TensorProto::decode(*bytes).map_err(|e| format!("built-in value of '{name}': {e}"))?;
            let value = onnx::tensor::decode(&proto, None).map_err(|e| format!("built-in value of '{name}': {e}"))?;
            config = config.input_value(*name, value);
        }
        let pairs = |p: &[(&str, &str)]| p.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
        let registry = Registry::new(self.kinds).map_err(|e| e.to_string())?;
        Ok(RunOptions {
            registry,
            linked: self.linked,
            built_cuts: self.staged.map_or(&[], |s| s.cuts),
            target: self.target.to_string(),
            threads,
            repeat,
            config,
            planning: Planning {
                input_layouts: pairs(self.input_layouts),
                states: pairs(self.states),
                // The built plan says where each input lives.
                input_devices: Vec::new(),
                pins: Vec::new(),
                max_copies: self.max_copies,
                max_copy_bytes: self.max_copy_bytes,
                // The built plan says what precision each target was asked (and the targets opened answer again).
                precision: None,
                target_precisions: Vec::new(),
            },
            read_outputs,
            adopted: Default::default(),
            built_graph: Some(BuiltGraph { graph: self.graph, constants: (self.constants)(), inputs: self.inputs }),
            built_plans: std::iter::once(BuiltPlan { path: self.path, plan: self.plan })
                .chain(self.other.map(|(path, _, plan)| BuiltPlan { path, plan }))
                .collect(),
        })
    }
}

/// The `main` of a built executable: exit 0 with `stowage run`'s summary, 1 with one `error:` line, 2 on a usage
/// error.
pub fn main(built: &'static Built) -> ExitCode {
    let start = Instant::now();
    let run = match RunFlags::parse_exe(std::env::args_os().skip(1)) {
        Ok(Some(flags)) => flags,
        Ok(None) => {
            println!(
                "{}: a model compiled by stowage build. Takes the run-time flags of `stowage run`.",
                crate::run::shown(built.model_name)
            );
            println!("{EXE_USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("error: {e}\n{EXE_USAGE}");
            return ExitCode::from(2);
        }
    };
    let result = built
        .options(run.threads as usize, run.repeat as usize, run.output_dir.is_some())
        .and_then(|options| {
            let bytes = prost::bytes::Bytes::from_static(built.staged.map_or(&[][..], |s| s.model));
            crate::run::run_model_shared(&bytes, Path::new(built.model_name), &run, &options, start)
        })
        .map_err(|e| crate::run::one_line(&e));
    crate::run::finish(result)
}
