//! The compiler's errors. [`ImportError`]s are about the user's model or options and name the file, node, input
//! or attribute at fault; [`crate::ir::verify::VerifierError`]s are stowage bugs.

use std::path::PathBuf;

use crate::infer::InferError;

/// An ONNX model that could not be imported, with the file it came from.
#[derive(Debug, thiserror::Error)]
#[error("{}{kind}", path.as_ref().map(|p| format!("{}: ", p.display())).unwrap_or_default())]
pub struct ImportError {
    /// The model file, when loaded from one.
    pub path: Option<PathBuf>,
    /// What went wrong.
    pub kind: Box<ImportErrorKind>,
}

/// An op type a model uses that stowage does not know: `ImportErrorKind::Unsupported`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsupportedOp {
    /// The op type.
    pub op: String,
    /// Its domain (`ai.onnx` for the default one).
    pub domain: String,
    /// How many nodes use it.
    pub nodes: usize,
    /// The first of them, by name.
    pub first: String,
}

fn unsupported_text(ops: &[UnsupportedOp]) -> String {
    let each: Vec<String> = ops
        .iter()
        .map(|o| {
            let domain = if o.domain == "ai.onnx" { String::new() } else { format!(" in domain '{}'", o.domain) };
            let nodes = if o.nodes == 1 { "1 node".to_string() } else { format!("{} nodes", o.nodes) };
            format!("{}{domain} ({nodes}, first '{}')", o.op, o.first)
        })
        .collect();
    let (n, types) = (ops.len(), if ops.len() == 1 { "op type is" } else { "op types are" });
    format!("{n} {types} not supported: {}", each.join(", "))
}

/// What went wrong in an import. Every variant is a problem with the model or the options, not a bug.
#[derive(Debug, thiserror::Error)]
pub enum ImportErrorKind {
    /// The file could not be read.
    #[error("cannot read the model: {0}")]
    Io(#[from] std::io::Error),
    /// The bytes are not a protobuf `ModelProto`.
    #[error("not an ONNX model: {0}")]
    Decode(String),
    /// Decoding the bytes would take more memory than one value may (packed integers, many empty messages): refused
    /// before anything is decoded.
    #[error(
        "decoding it would take up to {bytes} bytes (its tensors' typed data, nodes and names as stored): more than \
         the {limit}-byte limit on one value (raise it with --max-value-bytes)"
    )]
    DecodesTooLarge {
        /// The bound on what decoding takes.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// A well-formed protobuf message that is not a usable model.
    #[error("not an ONNX model: {0}")]
    NotAModel(String),
    /// The model's default-domain opset is outside the supported range.
    #[error("opset {version} of domain '{domain}' is not supported (stowage supports versions {min} to {max} of it)")]
    Opset {
        /// Domain.
        domain: String,
        /// Version the model imports.
        version: i64,
        /// Lowest supported.
        min: i64,
        /// Highest supported.
        max: i64,
    },
    /// Op types stowage does not know, every one the graph has, in the order they first appear.
    #[error("{}", unsupported_text(ops))]
    Unsupported {
        /// Each op type with its domain, its count of nodes and the first one's name.
        ops: Vec<UnsupportedOp>,
    },
    /// An op stowage does not know.
    #[error("node '{node}': unknown op '{op}' in domain '{domain}'")]
    UnknownOp {
        /// Node name.
        node: String,
        /// Op type.
        op: String,
        /// Domain (`ai.onnx` for the default one).
        domain: String,
    },
    /// A bad attribute.
    #[error("node '{node}' ({op}): attribute '{attr}' {message}")]
    Attribute {
        /// Node name.
        node: String,
        /// Op type.
        op: String,
        /// Attribute name.
        attr: String,
        /// What is wrong.
        message: String,
    },
    /// Shape or type inference failed on a node.
    #[error("node '{node}' ({op}): {source}")]
    Infer {
        /// Node name.
        node: String,
        /// Op type.
        op: String,
        /// Why.
        source: InferError,
    },
    /// A node needs at compile time a value that is known only at run time (it sets an output's shape or a trip
    /// count): the driver runs what comes before and compiles the node once that value is known.
    #[error("node '{node}' ({op}): {message}")]
    NeedsValue {
        /// Node name.
        node: String,
        /// Op type.
        op: String,
        /// What it needs, and how to give it.
        message: String,
    },
    /// [`ImportErrorKind::NeedsValue`] (or a shape-setting input inference found not constant), at the top-level
    /// node `index` of the graph (the node itself, or the `If`, `Loop` or expansion that holds it).
    #[error("{source}")]
    AtRunTime {
        /// The position of the top-level node in the graph's node list.
        index: usize,
        /// The error.
        source: Box<ImportErrorKind>,
    },
    /// Anything else wrong with one node.
    #[error("node '{node}' ({op}): {message}")]
    Node {
        /// Node name.
        node: String,
        /// Op type.
        op: String,
        /// What is wrong.
        message: String,
    },
    /// A value a node makes, or a graph input, is larger than one allocation may be.
    #[error(
        "{what} would be {ty}, {bytes} bytes: more than the {limit}-byte limit on one value (raise it with \
         --max-value-bytes)"
    )]
    TooLarge {
        /// What makes it: `node 'N' (Op): output 'y'`, or `input 'x'`.
        what: String,
        /// Its type.
        ty: String,
        /// Its bytes (`usize::MAX` past the address space).
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// A node reads a name nothing defines.
    #[error(
        "node '{node}': input '{input}' is not defined (no initializer, graph input or node output has that name)"
    )]
    Undefined {
        /// Node name.
        node: String,
        /// The undefined name.
        input: String,
    },
    /// Nodes depend on each other in a cycle.
    #[error("node '{node}' is part of a cycle")]
    Cycle {
        /// One node on the cycle.
        node: String,
    },
    /// Two nodes or initializers define one name.
    #[error("'{name}' is defined more than once")]
    Duplicate {
        /// The name.
        name: String,
    },
    /// An initializer could not be decoded.
    #[error("initializer '{name}': {message}")]
    Initializer {
        /// Initializer name.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// An initializer's external data cannot be read: missing, short, outside the model's folder, not a regular
    /// file.
    #[error("initializer '{name}': {source}")]
    ExternalData {
        /// Initializer name.
        name: String,
        /// Why.
        source: crate::onnx::external::ExternalDataError,
    },
    /// A graph input's declared type is unusable or needs the caller's help.
    #[error("input '{input}': {message}")]
    Input {
        /// Input name.
        input: String,
        /// What is wrong.
        message: String,
    },
    /// A graph output that nothing defines.
    #[error("graph output '{output}' is not defined by any node, input or initializer")]
    Output {
        /// Output name.
        output: String,
    },
    /// An option names something the model does not have, or disagrees with it.
    #[error("{0}")]
    Option(String),
}

impl ImportErrorKind {
    /// Whether the error is a value known only at run time that a node needs at compile time.
    pub fn needs_value(&self) -> bool {
        match self {
            ImportErrorKind::NeedsValue { .. } | ImportErrorKind::AtRunTime { .. } => true,
            ImportErrorKind::Infer { source, .. } => matches!(source, InferError::NotConstant { .. }),
            _ => false,
        }
    }

    /// Attaches the model's path.
    pub fn at(self, path: Option<PathBuf>) -> ImportError {
        ImportError { path, kind: Box::new(self) }
    }
}
