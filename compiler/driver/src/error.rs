//! What the driver returns when it cannot go on: [`DriverError`].

use thiserror::Error;

/// Why a target list, a model, its inputs, planning, lowering or a run failed. Each variant's message is one line
/// that names what is at fault.
#[derive(Debug, Error)]
pub enum DriverError {
    /// A target name no registered backend answers to.
    #[error("unknown target '{name}' (registered backends: {registered}; `stowage targets` lists the devices)")]
    UnknownTarget {
        /// The name as given.
        name: String,
        /// The registered kinds' names, comma-separated.
        registered: String,
    },
    /// A target listed twice.
    #[error("target '{name}' is listed twice in '{list}'")]
    TargetTwice {
        /// The target.
        name: String,
        /// The whole list.
        list: String,
    },
    /// Two targets of a list that open the same device.
    #[error("targets of '{list}': two of them are the same device ({space})")]
    SameDevice {
        /// The whole list.
        list: String,
        /// The memory space both open.
        space: String,
    },
    /// Two registered backends that claim one name.
    #[error("two backends registered as '{name}': {first} and {second}")]
    DuplicateKind {
        /// The name both claim.
        name: String,
        /// The first one's description.
        first: String,
        /// The second one's description.
        second: String,
    },
    /// A target whose memory space is not named for its storage descriptor (`opencl:0` for `opencl`).
    #[error("target '{target}': its memory space '{space}' is not that of its storage descriptor, {descriptor}")]
    SpaceMismatch {
        /// The target.
        target: String,
        /// The space the target reports.
        space: String,
        /// The descriptor's memory space name.
        descriptor: String,
    },
    /// More kernel threads than a run takes ([`crate::flags::MAX_THREADS`]).
    #[error("{threads} kernel threads asked for: at most {max} are taken")]
    TooManyThreads {
        /// The number asked for.
        threads: usize,
        /// The most taken.
        max: u32,
    },
    /// A backend could not open a target.
    #[error("{message}")]
    Open {
        /// The target.
        target: String,
        /// The backend's reason.
        message: String,
    },
    /// A backend could not lower a segment the planner gave it.
    #[error("{model}: {message} (the {backend} backend could not lower what the plan gave it)")]
    Lower {
        /// The model (file name), for messages.
        model: String,
        /// The backend's kind name.
        backend: &'static str,
        /// The backend's reason: its own error, which names the node and op.
        message: String,
    },
    /// A segment failed while it ran.
    #[error("{message}")]
    Run {
        /// The backend's kind name.
        backend: &'static str,
        /// The backend's reason.
        message: String,
    },
    /// The model cannot be read, imported or optimised.
    #[error("{0}")]
    Model(String),
    /// Importing the model stopped at its top-level node `index`, which needs a value known only at run time: a
    /// model compiled in stages is cut there (`stages.rs`); elsewhere this is the import's error.
    #[error("{message}")]
    AtRunTime {
        /// The node's position in the graph's node list.
        index: usize,
        /// The import's error line, with the model's path.
        message: String,
    },
    /// An input, given or missing, does not fit the model.
    #[error("{0}")]
    Input(String),
    /// The caller's planning options, or the plan they make.
    #[error("{0}")]
    Plan(String),
    /// Built code whose plan is not the one made now.
    #[error("{0}")]
    Built(String),
}

impl From<DriverError> for String {
    fn from(e: DriverError) -> String {
        e.to_string()
    }
}

/// The driver's results.
pub type Result<T, E = DriverError> = std::result::Result<T, E>;
