//! stowage's driver: the pipeline from a model to a running plan (import, planning over the opened targets,
//! lowering, runs), what built executables and typed modules run on, and the plugin surface a backend implements
//! ([`backend`]). It names no backend: a binary hands it a [`Registry`] of the target kinds it links.

pub mod backend;
#[cfg(feature = "build")]
pub mod build;
#[cfg(feature = "cli")]
pub mod cli;
mod compile;
mod crossing;
pub mod error;
pub mod exe;
pub mod flags;
mod loops;
pub mod model;
mod options;
mod outcome;
mod prepare;
mod progress;
pub mod run;
mod session;
pub mod show;
mod stages;
mod staging;
pub mod targets;

pub use backend::{
    Adopted, BackendError, Executable, KindSource, MemoryPath, ObjectCode, OpenOptions, OpenedTarget, Ran, Registry,
    StepTimes, TargetKind,
};
pub use error::{DriverError, Result};
pub use progress::Progress;

/// The run pipeline, as one module: options, sessions, whole runs, and build preparation.
pub mod pipeline {
    pub use crate::compile::layout_of;
    pub use crate::options::{BuiltGraph, BuiltPlan, Planning, RunOptions, INPUT_ALIGNMENT};
    pub use crate::outcome::{
        check_target, plan_first_part, plan_only, run, run_bytes, run_shared, structured_inputs, Outcome,
    };
    pub use crate::prepare::{prepare_build, Prepared};
    pub use crate::session::{RunResult, Session};
}
