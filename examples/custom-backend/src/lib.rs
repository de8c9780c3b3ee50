//! A third stowage backend, written only against stowage's public APIs and `docs/backends.md`: a simulated
//! discrete accelerator. Its memory is host memory kept behind the backend (reached only by counted transfers),
//! every buffer is 256-byte aligned with rows padded to 256 bytes, and it stages nothing. It has kernels for four
//! ops on f32 (MatMul of matrices, Gemm, Add with broadcasting, Relu); the planner places those on it and the rest
//! on the CPU.
//!
//! - `storage.rs`: [`SimBuffer`], the storage, declared with `#[derive(TensorStorage)]`, and its backend functions.
//! - `kernels.rs`: the four kernels, on the device's bytes.
//! - `plugin.rs`: the `sim` target kind ([`KIND`]), the opened target (the planner's `Backend`, lowering) and the
//!   executable segment.
//! - `main.rs`: `sim-stowage`, the `stowage` CLI with `sim` registered: five lines.

mod kernels;
pub mod plugin;
pub mod storage;

pub use plugin::KIND;
pub use storage::{SimBuffer, SimDevice};
