//! The runtime's one error type.
//!
//! Every variant names the tensor (or buffer) at fault and what was expected, so that a
//! caller can print it as one line. The runtime never panics on bad input: shapes,
//! byte lengths and datum types are checked and reported here.

use crate::{DatumType, MemorySpace};

/// What went wrong in the runtime.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// Typed access asked for a datum type the tensor does not hold.
    #[error("tensor {tensor}: expected datum type {expected}, found {found}")]
    DatumType {
        /// The tensor's name, or `<unnamed>`.
        tensor: String,
        /// What the caller asked for.
        expected: DatumType,
        /// What the tensor holds.
        found: DatumType,
    },
    /// The bytes given do not match what shape, datum type and layout need.
    #[error("tensor {tensor}: {dt} {shape:?} with this layout needs {expected} bytes, got {found}")]
    ByteLength {
        /// The tensor's name, or `<unnamed>`.
        tensor: String,
        /// Its datum type.
        dt: DatumType,
        /// Its shape.
        shape: Vec<usize>,
        /// Bytes the layout needs.
        expected: usize,
        /// Bytes available.
        found: usize,
    },
    /// The element count or byte size of a shape does not fit in `usize`.
    #[error("tensor {tensor}: {dt} {shape:?} is too large (its size in bytes overflows)")]
    TooLarge {
        /// The tensor's name, or `<unnamed>`.
        tensor: String,
        /// Its datum type.
        dt: DatumType,
        /// The offending shape.
        shape: Vec<usize>,
    },
    /// A layout that cannot describe the shape (wrong rank, bad pitch, bad alignment).
    #[error("tensor {tensor}: invalid layout: {reason}")]
    Layout {
        /// The tensor's name, or `<unnamed>`.
        tensor: String,
        /// Why the layout is refused.
        reason: String,
    },
    /// A view operation with arguments that do not fit the tensor.
    #[error("tensor {tensor}: {op}: {reason}")]
    View {
        /// The tensor's name, or `<unnamed>`.
        tensor: String,
        /// The operation (`slice`, `reshape`, `permute`).
        op: &'static str,
        /// What is wrong with its arguments.
        reason: String,
    },
    /// Typed slice access on a tensor whose elements are not packed in row-major order.
    #[error("tensor {tensor}: {op} needs packed row-major elements, but the layout is {layout}")]
    NotContiguous {
        /// The tensor's name, or `<unnamed>`.
        tensor: String,
        /// The operation that needed it.
        op: &'static str,
        /// The layout the tensor has.
        layout: String,
    },
    /// A byte in a `bool` tensor is neither 0 nor 1.
    #[error("tensor {tensor}: bytes are not valid {dt} values")]
    InvalidBits {
        /// The tensor's name, or `<unnamed>`.
        tensor: String,
        /// The datum type whose bit patterns were checked.
        dt: DatumType,
    },
    /// Memory whose address does not suit the element type (typed access to caller memory).
    #[error("tensor {tensor}: bytes at address {address:#x} are misaligned for {alignment}-byte aligned elements")]
    Misaligned {
        /// The tensor's name, or `<unnamed>`.
        tensor: String,
        /// The alignment the elements need.
        alignment: usize,
        /// The address of the first element.
        address: usize,
    },
    /// A device tensor that cannot cross the model boundary as it is.
    #[error("tensor {tensor}: {reason}")]
    Boundary {
        /// The tensor's name, or `<unnamed>`.
        tensor: String,
        /// Why it cannot.
        reason: String,
    },
    /// A DLPack tensor that cannot cross as it is (`dlpack.rs`).
    #[error("DLPack tensor {tensor}: {reason}")]
    Dlpack {
        /// The tensor's name, or `<unnamed>`.
        tensor: String,
        /// Why.
        reason: String,
    },
    /// An allocation the system refused.
    #[error("tensor {tensor}: cannot allocate {bytes} bytes")]
    OutOfMemory {
        /// The tensor's name, or `<unnamed>`.
        tensor: String,
        /// Bytes asked for.
        bytes: usize,
    },
    /// A backend call failed.
    #[error("{space}: {op} of {bytes} bytes for {tensor} failed: {message}")]
    Device {
        /// The memory space of the device.
        space: MemorySpace,
        /// The operation (`download`, `upload`, `map`, `wait`, …).
        op: &'static str,
        /// The tensor or buffer involved.
        tensor: String,
        /// Bytes involved.
        bytes: usize,
        /// The backend's message.
        message: String,
    },
}

/// The runtime's result type.
pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;
