//! The `stowage` command's library: option parsing and the run pipeline, shared with the workspace's test suites.

pub mod build;
pub mod exe;
pub mod model;
pub mod options;
pub mod run;
pub mod session;
pub mod show;
pub mod targets;

pub use build::{compile_model, Build, BuildError};
