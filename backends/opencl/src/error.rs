//! The OpenCL backend's errors: each names the target, the buffer or the op at fault.

use thiserror::Error;

/// What went wrong on an OpenCL target.
#[derive(Debug, Error)]
pub enum ClError {
    /// No OpenCL platform or device could be found (no ICD loader, no vendor registered, no device).
    #[error("target '{target}': no OpenCL device is available: {reason}")]
    NoDevice {
        /// The target asked for.
        target: String,
        /// What was missing.
        reason: String,
    },
    /// The target name is not an OpenCL target this backend knows.
    #[error("unknown OpenCL target '{0}' (try opencl, opencl:discrete, opencl:N or opencl:N:discrete)")]
    UnknownTarget(String),
    /// An OpenCL call failed.
    #[error("{space}: {call} failed: {code}")]
    Call {
        /// The device's memory space (`opencl:0`).
        space: String,
        /// The API call.
        call: &'static str,
        /// The OpenCL error code, by name.
        code: String,
    },
    /// An allocation the device refused.
    #[error("{space}: cannot allocate {bytes} bytes for {buffer}: {code}")]
    OutOfMemory {
        /// The device's memory space.
        space: String,
        /// The buffer (a value's name).
        buffer: String,
        /// Bytes asked for.
        bytes: usize,
        /// The OpenCL error code, by name.
        code: String,
    },
    /// A caller's input is missing or of the wrong type.
    #[error("input '{input}': {message}")]
    Input {
        /// The input's name.
        input: String,
        /// What is wrong.
        message: String,
    },
    /// Moving a value to or from the device failed.
    #[error("value '{value}': {message}")]
    Transfer {
        /// The value's name.
        value: String,
        /// What failed.
        message: String,
    },
    /// A step failed while running.
    #[error("node '{node}' ({op}): {message}")]
    Step {
        /// The node's name.
        node: String,
        /// The op.
        op: &'static str,
        /// What failed.
        message: String,
    },
    /// The OpenCL backend has no kernel for this node.
    #[error("node '{node}' ({op}): no OpenCL kernel: {reason}; a target list such as --target opencl,cpu runs it on the CPU")]
    Unsupported {
        /// The node's name.
        node: String,
        /// The op.
        op: &'static str,
        /// What is missing.
        reason: String,
    },
    /// A caller's OpenCL object (context, device, buffer) that stowage cannot take as it is.
    #[error("{what}: {message}")]
    External {
        /// The object, as the caller named it (`input 'frame'`, `a caller's context`).
        what: String,
        /// Why.
        message: String,
    },
    /// A generated kernel did not build; the log is the device compiler's.
    #[error("{space}: the OpenCL kernel for {op} did not build: {log}")]
    Build {
        /// The device's memory space.
        space: String,
        /// The op (and node) the kernel is for.
        op: String,
        /// The build log.
        log: String,
    },
}

/// The backend's result type.
pub type Result<T, E = ClError> = std::result::Result<T, E>;

/// An OpenCL error code by name (`CL_OUT_OF_RESOURCES`).
pub(crate) fn code_name(code: i32) -> String {
    format!("{} ({code})", opencl3::error_codes::error_text(code))
}

impl From<ClError> for stowage_runtime::RuntimeError {
    fn from(e: ClError) -> Self {
        let space = match &e {
            ClError::Call { space, .. } | ClError::OutOfMemory { space, .. } | ClError::Build { space, .. } => {
                space.clone()
            }
            _ => "opencl".into(),
        };
        stowage_runtime::RuntimeError::Device {
            space: stowage_runtime::MemorySpace::named(space, stowage_runtime::MemoryKind::Device),
            op: "opencl",
            tensor: "<buffer>".into(),
            bytes: 0,
            message: e.to_string(),
        }
    }
}
