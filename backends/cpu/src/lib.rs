//! stowage's CPU backend: kernels for every op of the IR on packed row-major host tensors, and (feature
//! `compile`) the lowering of a compiled graph to a [`Program`] that runs them.

mod affinity;
pub mod arena;
#[cfg(feature = "compile")]
pub mod driver;
mod error;
pub mod jit;
pub mod kernels;
#[cfg(feature = "compile")]
pub use driver::KIND;
#[cfg(feature = "compile")]
pub mod layouts;
#[cfg(feature = "compile")]
pub use layouts::CpuTarget;
mod inline;
#[cfg(feature = "compile")]
pub mod lower;
pub mod program;
pub mod storage;
mod warm;

pub use error::{CpuError, Result};
#[cfg(feature = "compile")]
pub use lower::{kernel_specs, lower, lower_with, LowerOptions};
pub use program::{Program, RunOutput};
pub use storage::HostBuffer;
