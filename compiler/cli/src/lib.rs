//! The `stowage` command's library: option parsing and the run pipeline, shared with the workspace's test suites.

pub mod options;
pub mod session;
pub mod targets;
