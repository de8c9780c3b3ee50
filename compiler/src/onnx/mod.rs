//! ONNX import: protobuf decoding, initializers and external data, and the translation of the default domain's ops
//! (opsets 1 to 28; 1 to 6 through their opset-7 forms) to the IR, with shapes inferred and shape computations folded on the way.
//!
//! ```no_run
//! use stowage_compiler::onnx::{self, ImportConfig};
//! let config = ImportConfig::new().input_shape("data", [1, 3, 224, 224]);
//! let graph = onnx::load("model.onnx", &config)?;
//! println!("{}", stowage_compiler::ir::print::print(&graph));
//! # Ok::<(), stowage_compiler::ImportError>(())
//! ```

mod attention;
mod attrs;
mod branch;
mod conv_phases;
mod conv_transpose;
mod deform_conv;
mod einsum;
mod expand;
pub mod external;
pub mod flex_attention;
mod functions;
mod heads;
pub use heads::graph_inputs;
mod images;
mod import;
mod iterated;
pub use iterated::scalar_shape;
mod legacy;
mod linear_attention;
mod losses;
mod lp_pool;
mod masks;
pub mod ml;
mod movement;
mod norms;
mod ops;
pub mod proto;
mod quant;
mod rnn;
mod rotary;
mod scope;
mod selection;
pub mod sequences;
mod spectral;
pub mod split;
mod state;
pub mod structure;
pub mod tensor;
mod text;
pub mod tfidf;
pub mod training;
mod unroll;
mod windows;
pub mod wire;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use prost::Message;
use stowage_runtime::Tensor;

pub use branch::outer_inputs;
pub use import::{is_other_domain_op, node_name, value_inputs};

use crate::error::{ImportError, ImportErrorKind};
use crate::ir::Graph;

/// The ONNX op types of the default domain that stowage imports (this round's op set); those of
/// [`expand::EXPANDED_OPS`], [`functions::FUNCTION_OPS`], [`masks::MASK_OPS`], [`norms::NORM_OPS`], [`losses::LOSS_OPS`], [`attention::ATTENTION_OPS`] [`lp_pool::LP_POOL_OPS`], [`windows::WINDOW_OPS`], [`quant::QUANT_OPS`], [`einsum::EINSUM_OPS`], [`spectral::SPECTRAL_OPS`], [`images::IMAGE_OPS`], [`rotary::ROTARY_OPS`], [`movement::MOVEMENT_OPS`], [`state::STATE_OPS`], [`linear_attention::LINEAR_ATTENTION_OPS`] and [`selection::SELECTION_OPS`] are imported as small graphs of the others.
pub const SUPPORTED_OPS: &[&str] = &[
    "Abs",
    "Acos",
    "Acosh",
    "Add",
    "AffineGrid",
    "And",
    "ArgMax",
    "ArgMin",
    "Asin",
    "Asinh",
    "Atan",
    "Atanh",
    "Attention",
    "AveragePool",
    "BatchNormalization",
    "BitCast",
    "BitShift",
    "BitwiseAnd",
    "BitwiseNot",
    "BitwiseOr",
    "BitwiseXor",
    "BlackmanWindow",
    "Cast",
    "CastLike",
    "CausalConvWithState",
    "Ceil",
    "Celu",
    "CenterCropPad",
    "Clip",
    "Col2Im",
    "Compress",
    "Concat",
    "ConcatFromSequence",
    "Constant",
    "ConstantOfShape",
    "Conv",
    "ConvInteger",
    "ConvTranspose",
    "Cos",
    "Cosh",
    "CumProd",
    "CumSum",
    "DeformConv",
    "DepthToSpace",
    "Det",
    "DequantizeLinear",
    "DFT",
    "Div",
    "Dropout",
    "DynamicQuantizeLinear",
    "Einsum",
    "Elu",
    "Equal",
    "Erf",
    "Exp",
    "Expand",
    "EyeLike",
    "Flatten",
    "Floor",
    "Gather",
    "GatherElements",
    "GatherND",
    "Gelu",
    "Gemm",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "Greater",
    "GreaterOrEqual",
    "GridSample",
    "GroupNormalization",
    "GRU",
    "HammingWindow",
    "HannWindow",
    "Hardmax",
    "HardSigmoid",
    "HardSwish",
    "Identity",
    "If",
    "InstanceNormalization",
    "IsInf",
    "IsNaN",
    "LayerNormalization",
    "LeakyRelu",
    "Less",
    "LessOrEqual",
    "LinearAttention",
    "Log",
    "LogSoftmax",
    "Loop",
    "LpNormalization",
    "LpPool",
    "LRN",
    "LSTM",
    "MatMul",
    "MatMulInteger",
    "Max",
    "MaxPool",
    "MaxUnpool",
    "Mean",
    "MelWeightMatrix",
    "MeanVarianceNormalization",
    "Min",
    "Mish",
    "Mod",
    "Mul",
    "Neg",
    "NegativeLogLikelihoodLoss",
    "NonMaxSuppression",
    "NonZero",
    "Not",
    "OneHot",
    "Optional",
    "OptionalGetElement",
    "OptionalHasElement",
    "Or",
    "Pad",
    "Pow",
    "PRelu",
    "QLinearConv",
    "QLinearMatMul",
    "QuantizeLinear",
    "Range",
    "Reciprocal",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceMax",
    "ReduceMean",
    "ReduceMin",
    "ReduceProd",
    "ReduceSum",
    "ReduceSumSquare",
    "RegexFullMatch",
    "Relu",
    "Reshape",
    "Resize",
    "ReverseSequence",
    "RMSNormalization",
    "RNN",
    "RoiAlign",
    "RotaryEmbedding",
    "Round",
    "Scan",
    "Scatter",
    "ScatterElements",
    "ScatterND",
    "Selu",
    "SequenceAt",
    "SequenceConstruct",
    "SequenceEmpty",
    "SequenceErase",
    "SequenceInsert",
    "SequenceLength",
    "SequenceMap",
    "Shape",
    "Shrink",
    "Sigmoid",
    "Sign",
    "Sin",
    "Sinh",
    "Size",
    "Slice",
    "Softmax",
    "SoftmaxCrossEntropyLoss",
    "Softplus",
    "Softsign",
    "SpaceToDepth",
    "Split",
    "SplitToSequence",
    "Sqrt",
    "Squeeze",
    "STFT",
    "StringConcat",
    "StringNormalizer",
    "StringSplit",
    "Sub",
    "Sum",
    "SwiGLU",
    "Swish",
    "Tan",
    "Tanh",
    "TensorScatter",
    "TfIdfVectorizer",
    "ThresholdedRelu",
    "Tile",
    "TopK",
    "Transpose",
    "Trilu",
    "Unique",
    "Unsqueeze",
    "Upsample",
    "Where",
    "Xor",
];

/// Lowest default-domain opset stowage imports.
pub const MIN_OPSET: i64 = 1;
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
    /// ONNX op types imported as one node where stowage would otherwise expand them into smaller ops, because a
    /// target of the run executes them whole (the driver fills this from the targets' kinds: the CPU's `LSTM`).
    /// Only forms the whole op covers are kept (f32 `LSTM`); the others are expanded as without it.
    pub whole: BTreeSet<String>,
    /// A top-level `If` whose condition is known only at run time asks for it (`ImportErrorKind::NeedsValue`)
    /// instead of importing both branches behind `Where`: the driver, which compiles such a model in stages, sets
    /// it, so that only the branch taken runs (`onnx/branch.rs`, rule 2).
    pub branch_at_run_time: bool,
    /// With [`Self::branch_at_run_time`]: a top-level `If` whose condition is known only at run time is kept as one
    /// [`Op::If`](crate::ir::Op::If) with its branches as subgraphs, where it can be (both branches import as they
    /// are and agree in type), instead of asking for its condition; one that cannot be kept asks for it as before.
    /// The driver sets it when every target of the run executes an `If` whole (`whole` holds "If" for each: the
    /// CPU), so the branch taken runs inside the run's program, with no stage between (`onnx/branch.rs`, rule 2).
    pub keep_top_level_if: bool,
    /// The inputs that are sequences or optionals, each with the form of the value a caller gives (how many items,
    /// which are present, their types): fixed at import, their tensors graph inputs of their flat names
    /// ([`structure`], rules 1 and 2). `stowage run` fills it from the input files.
    pub input_structures: BTreeMap<String, structure::Structure<crate::ir::ValueType>>,
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

    /// Imports `op_type` as one node where its form allows ([`ImportConfig::whole`]).
    ///
    /// ```
    /// let c = stowage_compiler::onnx::ImportConfig::new().keep_whole("LSTM");
    /// assert!(c.whole.contains("LSTM"));
    /// ```
    pub fn keep_whole(mut self, op_type: impl Into<String>) -> Self {
        self.whole.insert(op_type.into());
        self
    }

    /// Fixes the value of input `name`: it becomes a constant, and the graph records the assumption.
    pub fn input_value(mut self, name: impl Into<String>, value: Tensor<'static>) -> Self {
        self.input_values.insert(name.into(), value);
        self
    }
}

/// The op types of the model's graph that stowage does not know, each with its count of nodes and the first one,
/// in the order they first appear (what `stowage import --check` lists); empty when every op is known. Branches of
/// an `If` are checked when the branch is imported.
pub fn unsupported_ops(model: &proto::ModelProto) -> Vec<crate::UnsupportedOp> {
    model.graph.as_ref().map(|g| import::unsupported_ops(&g.node)).unwrap_or_default()
}

/// Decodes a `ModelProto`, refusing one whose decoding would take more than [`DEFAULT_MAX_VALUE_BYTES`].
pub fn decode(bytes: &[u8]) -> Result<proto::ModelProto, ImportErrorKind> {
    decode_within(bytes, DEFAULT_MAX_VALUE_BYTES)
}

/// Decodes a `ModelProto`, first bounding the memory that takes from the bytes ([`wire::decoded_bytes`]): a model
/// whose bound is over `limit` (or [`wire::DECODE_FLOOR`], when that is larger) is
/// [`ImportErrorKind::DecodesTooLarge`], before anything is allocated.
pub fn decode_within(bytes: &[u8], limit: usize) -> Result<proto::ModelProto, ImportErrorKind> {
    let limit = limit.max(wire::DECODE_FLOOR);
    // Bytes that are not well-formed are bounded on the part prost decodes before it says what is wrong there.
    let bound = wire::decoded_prefix_bytes(bytes);
    if bound > limit {
        return Err(ImportErrorKind::DecodesTooLarge { bytes: bound, limit });
    }
    proto::ModelProto::decode(bytes).map_err(|e| ImportErrorKind::Decode(e.to_string()))
}

/// [`decode_within`] of bytes held in a shared buffer: the initializers' `raw_data` are slices of `bytes`, not
/// copies (prost takes a `Bytes` field from a `Bytes` input by reference), so a model's weights are in memory once
/// until the import copies them into tensors (VGG-19: 548 MB fewer copied and held).
pub fn decode_shared(bytes: &prost::bytes::Bytes, limit: usize) -> Result<proto::ModelProto, ImportErrorKind> {
    let limit = limit.max(wire::DECODE_FLOOR);
    let bound = wire::decoded_prefix_bytes(bytes);
    if bound > limit {
        return Err(ImportErrorKind::DecodesTooLarge { bytes: bound, limit });
    }
    proto::ModelProto::decode(bytes.clone()).map_err(|e| ImportErrorKind::Decode(e.to_string()))
}

/// Loads and imports the model at `path`; external data is looked up beside it.
pub fn load(path: impl AsRef<Path>, config: &ImportConfig) -> Result<Graph, ImportError> {
    let path = path.as_ref();
    let at = |k: ImportErrorKind| k.at(Some(path.to_path_buf()));
    let bytes = prost::bytes::Bytes::from(std::fs::read(path).map_err(|e| at(e.into()))?);
    let model = decode_shared(&bytes, config.value_limit()).map_err(at)?;
    // The model's initializers are slices of `bytes`: the buffer goes when `model` does, after the import.
    drop(bytes);
    import::import(&model, path.parent(), config).map_err(at)
}

/// Imports a model from bytes (external data is an error: there is no folder to look in).
pub fn load_bytes(bytes: &[u8], config: &ImportConfig) -> Result<Graph, ImportError> {
    let model = decode_within(bytes, config.value_limit()).map_err(|k| k.at(None))?;
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

/// The bytes of a value file that holds a `msg` (a tensor, a sequence, an optional), refused before it is read when
/// it is larger than a value of `limit` bytes (and a header) may be, and before it is decoded when decoding it could
/// take more ([`wire`]).
pub(crate) fn read_value_file(path: &Path, limit: usize, msg: wire::Msg) -> Result<Vec<u8>, String> {
    let len = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?.len();
    if len > (limit as u64).saturating_add(TENSOR_HEADER_BYTES) {
        return Err(format!(
            "{}: the file is {len} bytes, more than the {limit}-byte limit on one value (raise it with \
             --max-value-bytes)",
            path.display()
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let bound = wire::decoded_value_bytes(msg, &bytes);
    let most = limit.saturating_add(TENSOR_HEADER_BYTES as usize).max(wire::DECODE_FLOOR);
    if bound > most {
        return Err(format!(
            "{}: decoding it would take up to {bound} bytes: more than the {limit}-byte limit on one value (raise \
             it with --max-value-bytes)",
            path.display()
        ));
    }
    Ok(bytes)
}

/// [`read_tensor`], refusing a file larger than a value of `limit` bytes (and a TensorProto's header) may be before
/// reading it.
pub fn read_tensor_within(path: impl AsRef<Path>, limit: usize) -> Result<Tensor<'static>, String> {
    let path = path.as_ref();
    // The file's bytes go before the tensor is made from the message: two copies at most, not three.
    let t = {
        let bytes = read_value_file(path, limit, wire::Msg::Tensor)?;
        proto::TensorProto::decode(bytes.as_slice())
            .map_err(|e| format!("{}: not a TensorProto: {e}", path.display()))?
    };
    // Protobuf decodes many files that are not tensors (an empty one, most short ones) as a message without fields.
    if t.data_type.unwrap_or(0) == 0 {
        return Err(format!("{}: not a TensorProto: it has no element type", path.display()));
    }
    tensor::decode_within(&t, path.parent(), limit).map_err(|e| format!("{}: {e}", path.display()))
}
