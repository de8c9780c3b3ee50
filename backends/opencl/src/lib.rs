//! stowage's OpenCL backend, on the `opencl3` crate (loaded at run time, so a machine without OpenCL gets an error
//! naming the target, not a missing library).
//!
//! - `device.rs`: devices found on the machine and an opened [`Target`] (context, in-order queue, the descriptor
//!   of its memory filled from the device; `opencl:discrete` forces the discrete path).
//! - `buffer.rs`: [`ClBuffer`], the storage, written with `#[derive(TensorStorage)]` only; its backend functions
//!   (allocation, upload through a pinned staging buffer or in-place import, download, map/unmap with events).
//! - `codegen/`: OpenCL C for every kernel (elementwise chains from the CPU backend's `Loops`, a tiled GEMM,
//!   im2col, pools, softmax, layer norm), all extents as literals.
//! - `lower/` and `exec.rs`: the IR lowered to a [`ClProgram`] (one program per model); `run.rs`, its runs (inputs
//!   imported or uploaded once, values freed after their last reader, outputs lazy, every launch bound before it is
//!   enqueued); `replay.rs`, runs replayed from a recorded command buffer where asked.
//! - `driver.rs`: the `opencl` target kind as a plugin of `stowage-driver` ([`KIND`]).
//! - `program.rs`: programs built once per process and cached on disk by device and source hash; kernel arguments
//!   and launches (a run gives its last event to the buffers it touched, `run.rs`).

mod buffer;
pub mod codegen;
mod device;
pub mod driver;
mod error;
mod exec;
mod lower;
mod plan;
mod program;
mod replay;
mod run;

pub use buffer::{export_dlpack, import_dlpack, ClBuffer, Staging};
pub use device::{describe_devices, descriptor_for, devices, parse_target, DeviceInfo, Mode, Target};
pub use driver::KIND;
pub use error::{ClError, Result};
pub use exec::{Binding, ClProgram, Step, StepTime};
pub use lower::{lower, lower_planned, precision_on, unsupported_nodes};
pub use plan::PlanTarget;
pub use program::{cache_dir, keeps_on_disk, Arg, BuildStats};
