//! The `stowage` command's library: option parsing and the run pipeline, shared with the workspace's test suites.

pub mod build;
pub mod exe;
pub mod options;
pub mod run;
pub mod session;
pub mod show;
pub mod targets;
