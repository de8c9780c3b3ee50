//! The CPU backend's errors.

use stowage_runtime::{DatumType, RuntimeError};

/// Why a kernel or a program could not run.
#[derive(Debug, thiserror::Error)]
pub enum CpuError {
    /// The kernel has no implementation for this datum type.
    #[error("{op} does not support datum type {dt} on the CPU")]
    Unsupported {
        /// The op.
        op: &'static str,
        /// The datum type.
        dt: DatumType,
    },
    /// An op or attribute combination the CPU backend does not implement.
    #[error("{0}")]
    NotImplemented(String),
    /// An input's values are outside what the op computes (a string that is not a number).
    #[error("{0}")]
    Value(String),
    /// A caller's input is wrong (missing, extra, wrong dtype or shape).
    #[error("input '{input}': {message}")]
    Input {
        /// Input name.
        input: String,
        /// What is wrong.
        message: String,
    },
    /// A step failed; names the node.
    #[error("node '{node}' ({op}): {source}")]
    Step {
        /// Node name.
        node: String,
        /// Op name.
        op: &'static str,
        /// Why.
        source: Box<CpuError>,
    },
    /// A generated kernel's description is invalid.
    #[error(transparent)]
    Kernel(#[from] stowage_kir::KirError),
    /// The runtime refused a tensor operation.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

/// Results of the CPU backend.
pub type Result<T> = std::result::Result<T, CpuError>;
