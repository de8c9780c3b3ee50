//! ONNX import: protobuf decoding, initializers and external data, and the translation of the default domain's ops
//! (opsets 7 to 28) to the IR, with shapes inferred and shape computations folded on the way.
//!
//! ```no_run
//! use stowage_compiler::onnx::{self, ImportConfig};
//! let config = ImportConfig::new().input_shape("data", [1, 3, 224, 224]);
//! let graph = onnx::load("model.onnx", &config)?;
//! println!("{}", stowage_compiler::ir::print::print(&graph));
//! # Ok::<(), stowage_compiler::ImportError>(())
//! ```

mod attrs;
pub mod external;
mod import;
mod ops;
pub mod proto;
pub mod tensor;

use std::collections::BTreeMap;
use std::path::Path;

use prost::Message;
use stowage_runtime::Tensor;

pub use import::value_inputs;

use crate::error::{ImportError, ImportErrorKind};
use crate::ir::Graph;

/// The ONNX op types of the default domain that stowage imports (this round's op set).
pub const SUPPORTED_OPS: &[&str] = &[
    "Abs",
    "Add",
    "And",
    "ArgMax",
    "AveragePool",
    "BatchNormalization",
    "Cast",
    "Ceil",
    "Clip",
    "Concat",
    "Constant",
    "ConstantOfShape",
    "Conv",
    "Cos",
    "Div",
    "Dropout",
    "Equal",
    "Erf",
    "Exp",
    "Expand",
    "Flatten",
    "Floor",
    "Gather",
    "Gelu",
    "Gemm",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "Greater",
    "HardSigmoid",
    "HardSwish",
    "Identity",
    "LayerNormalization",
    "LeakyRelu",
    "Less",
    "Log",
    "LogSoftmax",
    "LRN",
    "MatMul",
    "Max",
    "MaxPool",
    "Mean",
    "Min",
    "Mul",
    "Neg",
    "Not",
    "Or",
    "Pad",
    "Pow",
    "PRelu",
    "Range",
    "Reciprocal",
    "ReduceMax",
    "ReduceMean",
    "ReduceMin",
    "ReduceSum",
    "Relu",
    "Reshape",
    "Resize",
    "Shape",
    "Sigmoid",
    "Sign",
    "Sin",
    "Slice",
    "Softmax",
    "Softplus",
    "Split",
    "Sqrt",
    "Squeeze",
    "Sub",
    "Sum",
    "Tanh",
    "Tile",
    "Transpose",
    "Unsqueeze",
    "Where",
];

/// Lowest default-domain opset stowage imports.
pub const MIN_OPSET: i64 = 7;
/// Highest default-domain opset stowage imports (that of the pinned ONNX release, 1.23.2).
pub const MAX_OPSET: i64 = 28;

/// What the caller tells the importer about the model's inputs.
#[derive(Clone, Debug, Default)]
pub struct ImportConfig {
    /// Full shapes for inputs, fixing symbolic dimensions (`--input-shape NAME=1,3,224,224`).
    pub input_shapes: BTreeMap<String, Vec<usize>>,
    /// Values for inputs, folded as constants (`--input-value NAME=FILE.pb`).
    pub input_values: BTreeMap<String, Tensor<'static>>,
    /// The most bytes one value (a node's output, a graph input) may have; `None`: [`DEFAULT_MAX_VALUE_BYTES`]
    /// (`--max-value-bytes`). Checked as each node is imported, before anything of that size is made.
    pub max_value_bytes: Option<usize>,
}

/// What a TensorProto file holds beside its data (name, dims, type), at most, as the size limit counts it: generous,
/// for names of any sane length.
pub const TENSOR_HEADER_BYTES: u64 = 1 << 16;

/// The default limit on one value's bytes: 16 GiB. Every value of a static graph has its size known at import, and
/// every allocation a model or its inputs make (a kernel's output, a folded constant, an arena region, an input
/// read from a file) is one such value or a part of one, so the limit bounds them all, each checked before it
/// is made.
pub const DEFAULT_MAX_VALUE_BYTES: usize =
    if usize::MAX as u64 >= 16 << 30 { (16u64 << 30) as usize } else { usize::MAX };

impl ImportConfig {
    /// No shapes or values fixed.
    pub fn new() -> Self {
        Self::default()
    }

    /// Fixes the shape of input `name`.
    ///
    /// ```
    /// let c = stowage_compiler::onnx::ImportConfig::new().input_shape("x", [1, 3, 224, 224]);
    /// assert_eq!(c.input_shapes["x"], [1, 3, 224, 224]);
    /// ```
    pub fn input_shape(mut self, name: impl Into<String>, shape: impl Into<Vec<usize>>) -> Self {
        self.input_shapes.insert(name.into(), shape.into());
        self
    }

    /// The limit on one value's bytes in force: [`ImportConfig::max_value_bytes`] or the default.
    pub fn value_limit(&self) -> usize {
        self.max_value_bytes.unwrap_or(DEFAULT_MAX_VALUE_BYTES)
    }

    /// Sets the limit on one value's bytes.
    pub fn max_value_bytes(mut self, bytes: usize) -> Self {
        self.max_value_bytes = Some(bytes);
        self
    }

    /// Fixes the value of input `name`: it becomes a constant, and the graph records the assumption.
    pub fn input_value(mut self, name: impl Into<String>, value: Tensor<'static>) -> Self {
        self.input_values.insert(name.into(), value);
        self
    }
}

/// Decodes a `ModelProto`.
pub fn decode(bytes: &[u8]) -> Result<proto::ModelProto, ImportErrorKind> {
    proto::ModelProto::decode(bytes).map_err(|e| ImportErrorKind::Decode(e.to_string()))
}

/// Loads and imports the model at `path`; external data is looked up beside it.
pub fn load(path: impl AsRef<Path>, config: &ImportConfig) -> Result<Graph, ImportError> {
    let path = path.as_ref();
    let at = |k: ImportErrorKind| k.at(Some(path.to_path_buf()));
    let bytes = std::fs::read(path).map_err(|e| at(e.into()))?;
    let model = decode(&bytes).map_err(at)?;
    import::import(&model, path.parent(), config).map_err(at)
}

/// Imports a model from bytes (external data is an error: there is no folder to look in).
pub fn load_bytes(bytes: &[u8], config: &ImportConfig) -> Result<Graph, ImportError> {
    let model = decode(bytes).map_err(|k| k.at(None))?;
    import::import(&model, None, config).map_err(|k| k.at(None))
}

/// Imports a decoded model. `dir` is where external data files are looked up.
pub fn import(model: &proto::ModelProto, dir: Option<&Path>, config: &ImportConfig) -> Result<Graph, ImportError> {
    import::import(model, dir, config).map_err(|k| k.at(None))
}

/// Reads a `TensorProto` file (the ONNX test-data format used for `--input` and `--input-value`).
pub fn read_tensor(path: impl AsRef<Path>) -> Result<Tensor<'static>, String> {
    read_tensor_within(path, DEFAULT_MAX_VALUE_BYTES)
}

/// [`read_tensor`], refusing a file larger than a value of `limit` bytes (and a TensorProto's header) may be before
/// reading it.
pub fn read_tensor_within(path: impl AsRef<Path>, limit: usize) -> Result<Tensor<'static>, String> {
    let path = path.as_ref();
    let len = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?.len();
    if len > (limit as u64).saturating_add(TENSOR_HEADER_BYTES) {
        return Err(format!(
            "{}: the file is {len} bytes, more than the {limit}-byte limit on one value (raise it with \
             --max-value-bytes)",
            path.display()
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let t = proto::TensorProto::decode(bytes.as_slice())
        .map_err(|e| format!("{}: not a TensorProto: {e}", path.display()))?;
    tensor::decode(&t, path.parent()).map_err(|e| format!("{}: {e}", path.display()))
}
