//! The kernel-level IR: what a backend's generated kernels compute, written once for every backend.
//!
//! Fusion (`stowage_compiler::fuse`) turns runs of elementwise IR nodes into a [`Chain`] over a [`Loops`] nest; the
//! CPU backend compiles a `Loops` to machine code with Cranelift, the OpenCL backend to OpenCL C, and a backend
//! from outside may generate its own. Relayout copies (Transpose, Concat, Split, Expand, a caller's strides) are
//! `Loops` with a copy body. [`resize`] holds the interpolation tables both backends' Resize kernels read.
//!
//! The crate depends on the runtime only (for `DatumType`), and on serde's derive: a backend's kernels, and the
//! executables built from them, take it without the compiler.
//!
//! - [`func`]: the elementwise functions and their scalar f32 semantics (the reference generated code is tested
//!   against);
//! - [`chain`]: a fused chain, SSA over f32;
//! - [`loops`]: a loop nest over byte-strided operands with a chain or a copy as body, its simplification, its
//!   checks and its stable key;
//! - [`resize`]: Resize's per-axis tables;
//! - [`recurrent`]: the activations of the recurrent layers.

pub mod chain;
pub mod func;
pub mod grid;
pub mod loops;
pub mod recurrent;
pub mod resize;

pub use chain::{Chain, Inst};
pub use func::{binary_scalar, fusable_binary, fusable_unary, unary_scalar, BinaryFn, UnaryFn};
pub use loops::{broadcast_strides, packed_strides, strides_for, Body, Elem, Loops, Operand};

/// Why a kernel description is not one a generator can take.
#[derive(Debug, thiserror::Error)]
pub enum KirError {
    /// A [`Loops`] breaks one of the rules [`Loops::check`] lists.
    #[error("generated kernel: {0}")]
    Invalid(String),
}

/// Results of this crate.
pub type Result<T> = std::result::Result<T, KirError>;
