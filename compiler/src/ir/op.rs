//! Ops: a Rust enum with typed attributes, one variant per op family.
//!
//! Attributes are stored in their modern form whatever the model's opset: where an old opset had an attribute
//! that later became an input (Slice's `starts`, Squeeze's `axes`, Clip's `min`…), the importer turns it into a
//! constant input, so every pass and backend sees one form. Inputs that set a shape ([`Op::static_inputs`]) must
//! be constants once the import is done; the verifier checks it.

use std::fmt;

use stowage_runtime::small_types::E8M0Rounding;
use stowage_runtime::{DatumType, Tensor};

/// Elementwise ops of one input.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Unary {
    /// `|x|`.
    Abs,
    /// Round up.
    Ceil,
    /// Cosine.
    Cos,
    /// Gauss error function.
    Erf,
    /// `e^x`.
    Exp,
    /// Round down.
    Floor,
    /// Natural logarithm.
    Log,
    /// `-x`.
    Neg,
    /// Logical not (bool).
    Not,
    /// `1/x`.
    Reciprocal,
    /// `max(x, 0)`.
    Relu,
    /// `1/(1+e^-x)`.
    Sigmoid,
    /// -1, 0 or 1.
    Sign,
    /// Sine.
    Sin,
    /// Square root.
    Sqrt,
    /// Hyperbolic tangent.
    Tanh,
    /// `ln(1+e^x)`.
    Softplus,
    /// `x` if positive else `alpha*x`.
    LeakyRelu {
        /// Slope for negative inputs.
        alpha: f32,
    },
    /// `max(0, min(1, alpha*x+beta))`.
    HardSigmoid {
        /// Slope.
        alpha: f32,
        /// Offset.
        beta: f32,
    },
    /// `x * max(0, min(1, x/6+1/2))`.
    HardSwish,
    /// Gaussian error linear unit.
    Gelu {
        /// The tanh approximation instead of erf.
        tanh: bool,
    },
    /// Round to the nearest integer, halves to even.
    Round,
    /// Bitwise not (integers).
    BitNot,
    /// Arccosine.
    Acos,
    /// Arcsine.
    Asin,
    /// Arctangent.
    Atan,
    /// Inverse hyperbolic cosine.
    Acosh,
    /// Inverse hyperbolic sine.
    Asinh,
    /// Inverse hyperbolic tangent.
    Atanh,
    /// Hyperbolic sine.
    Sinh,
    /// Hyperbolic cosine.
    Cosh,
}

/// Elementwise ops of two inputs with multidirectional broadcasting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Binary {
    /// `a+b`.
    Add,
    /// `a-b`.
    Sub,
    /// `a*b`.
    Mul,
    /// `a/b` (integer division truncates).
    Div,
    /// `a^b`; the exponent may have another datum type.
    Pow,
    /// Logical and (bool).
    And,
    /// Logical or (bool).
    Or,
    /// `a==b`, bool result.
    Equal,
    /// `a>b`, bool result.
    Greater,
    /// `a<b`, bool result.
    Less,
    /// `x` if positive else `slope*x`; slope broadcasts to x (one direction).
    PRelu,
    /// Remainder with the divisor's sign (Python's `%`, ONNX `Mod` with `fmod=0`; a zero takes the divisor's sign).
    Mod,
    /// Remainder with the dividend's sign (C's `fmod`, ONNX `Mod` with `fmod=1`).
    Fmod,
    /// `a << b` (integers, wrapping; 0 when `b` is negative or at least the width).
    ShiftLeft,
    /// `a >> b` (integers, arithmetic for signed ones; the sign's fill when `b` is negative or at least the width).
    ShiftRight,
    /// Bitwise and (integers).
    BitAnd,
    /// Bitwise or (integers).
    BitOr,
    /// Bitwise exclusive or (integers).
    BitXor,
}

impl Binary {
    /// True for the comparisons, whose result is bool.
    pub fn is_comparison(self) -> bool {
        matches!(self, Binary::Equal | Binary::Greater | Binary::Less)
    }

    /// True for the ops on integer bits (shifts and the bitwise ops).
    pub fn is_bitwise(self) -> bool {
        matches!(self, Binary::ShiftLeft | Binary::ShiftRight | Binary::BitAnd | Binary::BitOr | Binary::BitXor)
    }
}

/// How `ScatterElements` and `ScatterND` combine an update with the element it lands on (`reduction`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ScatterReduction {
    /// Replace it.
    None,
    /// Sum.
    Add,
    /// Product.
    Mul,
    /// Maximum.
    Max,
    /// Minimum.
    Min,
}

/// Elementwise ops of any number of inputs with multidirectional broadcasting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Variadic {
    /// Elementwise maximum.
    Max,
    /// Elementwise minimum.
    Min,
    /// Elementwise sum.
    Sum,
    /// Elementwise mean.
    Mean,
}

/// The window of a convolution or pooling op, with padding resolved to explicit numbers.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Window {
    /// Kernel size per spatial axis.
    pub kernel: Vec<usize>,
    /// Stride per spatial axis.
    pub strides: Vec<usize>,
    /// Dilation per spatial axis.
    pub dilations: Vec<usize>,
    /// Padding at the start of each spatial axis, then at the end of each.
    pub pads: Vec<usize>,
    /// How `auto_pad` asked for padding; resolved into `pads` by shape inference.
    pub auto_pad: AutoPad,
    /// Output size rounds up (pooling only).
    pub ceil_mode: bool,
}

/// ONNX's `auto_pad`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum AutoPad {
    /// Explicit `pads` (also what `auto_pad` becomes once resolved).
    NotSet,
    /// Pad so that output = ceil(input/stride), extra padding at the end.
    SameUpper,
    /// Same, extra padding at the start.
    SameLower,
    /// No padding.
    Valid,
}

/// Convolution: inputs X, W, optional B.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Conv {
    /// Window; `kernel` is empty until inferred from W.
    pub window: Window,
    /// Channel groups.
    pub group: usize,
}

/// Which pooling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum PoolKind {
    /// Maximum over the window.
    Max,
    /// Mean over the window.
    Average {
        /// Padding counts as zeros in the mean.
        count_include_pad: bool,
    },
}

/// Windowed pooling: input X; MaxPool may have a second output, the argmax indices.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Pool {
    /// Max or average.
    pub kind: PoolKind,
    /// Window.
    pub window: Window,
    /// Indices output in column-major order (MaxPool's `storage_order=1`).
    pub column_major_indices: bool,
}

/// Gemm: `alpha * A' * B' + beta * C`.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Gemm {
    /// Scale of the product.
    pub alpha: f32,
    /// Scale of C.
    pub beta: f32,
    /// A is transposed.
    pub trans_a: bool,
    /// B is transposed.
    pub trans_b: bool,
}

/// Which reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Reduce {
    /// Maximum.
    Max,
    /// Mean.
    Mean,
    /// Minimum.
    Min,
    /// Sum.
    Sum,
    /// Product.
    Prod,
}

/// Softmax or its logarithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum SoftmaxKind {
    /// `exp(x)/sum(exp(x))`.
    Softmax,
    /// `x - log(sum(exp(x)))`.
    LogSoftmax,
}

pub use stowage_kir::grid::{GridMode, GridPadding};

/// Pad modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum PadMode {
    /// Fill with a constant.
    Constant,
    /// Mirror without repeating the edge.
    Reflect,
    /// Repeat the edge.
    Edge,
    /// Wrap around.
    Wrap,
}

/// Resize interpolation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ResizeMode {
    /// Nearest neighbour.
    Nearest,
    /// (Multi)linear.
    Linear,
    /// (Multi)cubic, with `cubic_coeff_a` and `exclude_outside` from [`Resize`].
    Cubic,
}

/// How output coordinates map back to input coordinates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CoordinateTransform {
    /// `(x+0.5)/scale-0.5`.
    HalfPixel,
    /// Like half_pixel, symmetric about the centre (opset 19).
    HalfPixelSymmetric,
    /// half_pixel, but 0 where the output length is 1.
    PytorchHalfPixel,
    /// `x*(in-1)/(out-1)`.
    AlignCorners,
    /// `x/scale`.
    Asymmetric,
    /// Crop and resize by `roi`.
    TfCropAndResize,
}

/// Rounding for nearest mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum NearestMode {
    /// Round half down.
    RoundPreferFloor,
    /// Round half up.
    RoundPreferCeil,
    /// Floor.
    Floor,
    /// Ceil.
    Ceil,
}

/// How `sizes` with `axes` keeps the aspect ratio.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum AspectRatioPolicy {
    /// Sizes are taken as given.
    Stretch,
    /// One scale, the smallest, so the result fits in sizes.
    NotLarger,
    /// One scale, the largest, so the result covers sizes.
    NotSmaller,
}

/// Resize: inputs X, roi?, scales?, sizes?.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Resize {
    /// Interpolation.
    pub mode: ResizeMode,
    /// Coordinate transformation.
    pub coordinate_transform: CoordinateTransform,
    /// Rounding in nearest mode.
    pub nearest_mode: NearestMode,
    /// Antialiasing when downscaling (linear mode).
    pub antialias: bool,
    /// Axes that scales/sizes refer to; all axes when `None`.
    pub axes: Option<Vec<i64>>,
    /// Aspect ratio policy for `sizes`.
    pub aspect_ratio: AspectRatioPolicy,
    /// Value for samples outside the input (tf_crop_and_resize).
    pub extrapolation_value: f32,
    /// The `a` of the cubic kernel.
    pub cubic_coeff_a: f32,
    /// Cubic weights outside the input are dropped and the rest renormalised.
    pub exclude_outside: bool,
    /// Output shape's scale per axis, resolved by shape inference (what the kernel uses).
    pub scales: Vec<f32>,
}

/// ONNX `Cast`'s `saturate` and `round_mode`: they matter only for the small float types
/// ([`stowage_runtime::small_types`], rules 3 and 4); the default is ONNX's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CastMode {
    /// Values beyond a small float type's range become its largest value (else NaN, or infinity for E5M2).
    pub saturate: bool,
    /// How a value rounds to float8e8m0.
    #[serde(with = "super::serial::e8m0_rounding")]
    pub rounding: E8M0Rounding,
}

impl Default for CastMode {
    fn default() -> Self {
        CastMode { saturate: true, rounding: E8M0Rounding::Up }
    }
}

impl Op {
    /// A `Cast` to `to` with ONNX's default mode.
    pub fn cast(to: DatumType) -> Op {
        Op::Cast { to, mode: CastMode::default() }
    }
}

/// An op with its attributes. Inputs are listed on each variant as the node holds them; `?` marks optional ones.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub enum Op {
    /// One-input elementwise op: X.
    Unary(Unary),
    /// Two-input elementwise op: A, B.
    Binary(Binary),
    /// Many-input elementwise op: X0, X1, ….
    Variadic(Variadic),
    /// Clamp: X, min?, max?.
    Clip,
    /// `cond ? x : y`: cond, X, Y.
    Where,
    /// Datum type conversion: X.
    Cast {
        /// Target type.
        #[serde(with = "super::serial::datum_type")]
        to: DatumType,
        /// What a small float type does with values out of its range, and how float8e8m0 rounds.
        #[serde(default)]
        mode: CastMode,
    },
    /// The same bits read as another datum type of the same width: X.
    BitCast {
        /// Target type.
        #[serde(with = "super::serial::datum_type")]
        to: DatumType,
    },
    /// Convolution: X, W, B?.
    Conv(Conv),
    /// Max or average pooling over a window: X.
    Pool(Pool),
    /// Pooling over all spatial axes: X.
    GlobalPool(PoolKind),
    /// Local response normalisation across channels: X.
    Lrn {
        /// Channels summed over.
        size: usize,
        /// Scale.
        alpha: f32,
        /// Exponent.
        beta: f32,
        /// Offset.
        bias: f32,
    },
    /// Batch normalisation: X, scale, B, mean, var. Outputs Y, and in training mode running_mean?, running_var?.
    BatchNorm {
        /// Added to the variance.
        epsilon: f32,
        /// Weight of the old running statistics (training mode).
        momentum: f32,
        /// Normalise with the batch's own statistics (opset 14's `training_mode`).
        training: bool,
    },
    /// Layer normalisation over axes `axis..`: X, scale, B?. Outputs Y, Mean?, InvStdDev?.
    LayerNorm {
        /// First normalised axis (non-negative once inferred).
        axis: i64,
        /// Added to the variance.
        epsilon: f32,
        /// Datum type of the statistics outputs.
        #[serde(with = "super::serial::datum_type")]
        stash: DatumType,
    },
    /// `alpha * A' * B' + beta * C`: A, B, C?.
    Gemm(Gemm),
    /// numpy-style matrix product with batch broadcasting: A, B.
    MatMul,
    /// Softmax or LogSoftmax: X.
    Softmax {
        /// Which.
        kind: SoftmaxKind,
        /// Axis (non-negative once inferred).
        axis: i64,
        /// Before opset 13: normalise over all axes from `axis` on, as one flattened row.
        flatten: bool,
    },
    /// Reduction: data, axes?.
    Reduce {
        /// Which.
        kind: Reduce,
        /// Keep reduced axes as size 1.
        keepdims: bool,
        /// No axes means identity rather than all axes.
        noop_with_empty_axes: bool,
    },
    /// Index of the maximum (ArgMax) or minimum (ArgMin) along an axis: data. Output i64.
    ArgMax {
        /// Axis (non-negative once inferred).
        axis: i64,
        /// Keep the axis as size 1.
        keepdims: bool,
        /// Among equal extremes take the last.
        select_last_index: bool,
        /// The minimum (ONNX `ArgMin`) instead of the maximum.
        min: bool,
    },
    /// The `k` largest (or smallest) elements along an axis, and their i64 indices: X, K (a one-element i64
    /// tensor, static). Outputs are always sorted (ONNX leaves the order free when `sorted` is 0); equal elements
    /// come in index order, and NaN counts as larger than every number, as in onnxruntime.
    TopK {
        /// Axis (non-negative once inferred).
        axis: i64,
        /// The largest elements (else the smallest).
        largest: bool,
    },
    /// Samples X `[N, C, D1…Dr]` at the points of grid `[N, H1…Hr, r]` (normalised coordinates in [−1, 1], the
    /// innermost axis first): X, grid. Output `[N, C, H1…Hr]`.
    GridSample {
        /// Interpolation.
        mode: GridMode,
        /// Reads outside the input.
        padding: GridPadding,
        /// −1 and 1 are the centres of the corner pixels (else their outer edges).
        align_corners: bool,
    },
    /// The shape of the input as i64: data.
    Shape {
        /// First axis.
        start: i64,
        /// One past the last axis; the rank when `None`.
        end: Option<i64>,
    },
    /// A tensor of `value` with a given shape: shape.
    ConstantOfShape {
        /// One-element tensor giving value and datum type.
        #[serde(with = "super::serial::tensor")]
        value: Tensor<'static>,
    },
    /// Reshape: data, shape.
    Reshape {
        /// A 0 in shape means size 0, not "copy the input's dimension".
        allowzero: bool,
    },
    /// Reshape to 2-D at an axis: data.
    Flatten {
        /// Split point (non-negative once inferred).
        axis: i64,
    },
    /// Remove size-1 axes: data, axes?.
    Squeeze,
    /// Insert size-1 axes: data, axes.
    Unsqueeze,
    /// Permute axes: data.
    Transpose {
        /// New order of axes; reversed when `None` (filled in by shape inference).
        perm: Option<Vec<usize>>,
    },
    /// Join along an axis: X0, X1, ….
    Concat {
        /// Axis (non-negative once inferred).
        axis: i64,
    },
    /// Cut along an axis: data, split?. One output per part.
    Split {
        /// Axis (non-negative once inferred).
        axis: i64,
        /// Number of equal parts (opset 18), when `split` is not given.
        num_outputs: Option<usize>,
    },
    /// Strided slice: data, starts, ends, axes?, steps?.
    Slice,
    /// Gather along an axis: data, indices.
    Gather {
        /// Axis (non-negative once inferred).
        axis: i64,
    },
    /// One element per index, from data at the index's own position but along `axis`: data, indices (of data's
    /// rank). The output has the indices' shape.
    GatherElements {
        /// Axis (non-negative once inferred).
        axis: i64,
    },
    /// Updates written into a copy of data at indexed places: data, indices, updates. Along `axis` one element per
    /// index (`ScatterElements`, `Scatter`), or, without an axis, one slice per index tuple (`ScatterND`).
    Scatter {
        /// The indexed axis of `ScatterElements` (non-negative once inferred); `None` for `ScatterND`.
        axis: Option<i64>,
        /// How an update meets its element.
        reduction: ScatterReduction,
    },
    /// Slices of data at index tuples (the last axis of indices), within each of the first `batch_dims` axes: data,
    /// indices.
    GatherNd {
        /// Leading axes data and indices share.
        batch_dims: usize,
    },
    /// Running sums (`CumSum`) or products (`CumProd`) along an axis: x, axis (a one-element integer tensor, read
    /// at run time where it is not a constant).
    Cumulative {
        /// Products instead of sums.
        product: bool,
        /// Each element gets the total of those before it.
        exclusive: bool,
        /// From the end of the axis.
        reverse: bool,
    },
    /// Broadcast to a shape: data, shape.
    Expand,
    /// Repeat: data, repeats.
    Tile,
    /// Pad: data, pads, constant_value?, axes?.
    Pad {
        /// Fill mode.
        mode: PadMode,
    },
    /// `start, start+delta, …` below limit: start, limit, delta.
    Range,
    /// Resize: X, roi?, scales?, sizes?.
    Resize(Resize),
    /// ONNX `LSTM` as one node (`ir/recurrent.rs`): kept whole only where the targets run it so.
    Lstm(super::Lstm),
    /// `TfIdfVectorizer` with its pool resolved (`ir/tfidf.rs`): X int tokens `[C]` or `[N, C]` → f32 counts.
    TfIdf(Box<super::tfidf::TfIdf>),
    /// The determinant of each square matrix of the last two axes: X.
    Det,
    /// Regions of interest pooled to a fixed grid of bilinear samples: X `[N, C, H, W]`, rois `[R, 4]`,
    /// batch_indices `[R]`.
    RoiAlign {
        /// Maximum instead of average.
        max: bool,
        /// `half_pixel` coordinates (else the legacy `output_half_pixel`).
        half_pixel: bool,
        /// Output bins: height, width.
        out: (usize, usize),
        /// Samples per bin side (0: adaptive).
        sampling_ratio: usize,
        /// Input coordinates per region coordinate.
        spatial_scale: f32,
    },
    /// The decision trees of ONNX-ML's tree ensembles (`ir/trees.rs`): X `[N, F]` → votes `[N, targets]`.
    TreeEnsemble(Box<super::trees::Trees>),
    /// Dropout: data, ratio?, training_mode?. Outputs output, mask?. Identity unless training.
    Dropout {
        /// Random seed.
        seed: Option<i64>,
    },
    /// An op that reads strings, or `LabelEncoder`'s lookup (`ir/text.rs`).
    Text(super::Text),
    /// `If` whose condition is known only at run time, its branches kept as subgraphs (`ir/subgraph.rs`): the
    /// condition, then the values the branches read from around the node, in the branches' input order.
    If(Box<super::subgraph::Branches>),
    /// `Loop` iterated at run time, its body a subgraph (`ir/subgraph.rs`, rule 6): trip count?, condition?, the
    /// carried values, then the values the body reads from around the node.
    Loop(Box<super::subgraph::LoopBody>),
    /// `Scan` too long to unroll, its body a subgraph (`ir/subgraph.rs`, rule 7): the states, the scan inputs, then
    /// the values the body reads from around the node.
    Scan(Box<super::subgraph::ScanBody>),
    /// Copy: input.
    Identity,
}

impl Op {
    /// The ONNX name of this op.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Unary(u) => match u {
                Unary::Abs => "Abs",
                Unary::Ceil => "Ceil",
                Unary::Cos => "Cos",
                Unary::Erf => "Erf",
                Unary::Exp => "Exp",
                Unary::Floor => "Floor",
                Unary::Log => "Log",
                Unary::Neg => "Neg",
                Unary::Not => "Not",
                Unary::Reciprocal => "Reciprocal",
                Unary::Relu => "Relu",
                Unary::Sigmoid => "Sigmoid",
                Unary::Sign => "Sign",
                Unary::Sin => "Sin",
                Unary::Sqrt => "Sqrt",
                Unary::Tanh => "Tanh",
                Unary::Softplus => "Softplus",
                Unary::LeakyRelu { .. } => "LeakyRelu",
                Unary::HardSigmoid { .. } => "HardSigmoid",
                Unary::HardSwish => "HardSwish",
                Unary::Gelu { .. } => "Gelu",
                Unary::Round => "Round",
                Unary::BitNot => "BitwiseNot",
                Unary::Acos => "Acos",
                Unary::Asin => "Asin",
                Unary::Atan => "Atan",
                Unary::Acosh => "Acosh",
                Unary::Asinh => "Asinh",
                Unary::Atanh => "Atanh",
                Unary::Sinh => "Sinh",
                Unary::Cosh => "Cosh",
            },
            Op::Binary(b) => match b {
                Binary::Add => "Add",
                Binary::Sub => "Sub",
                Binary::Mul => "Mul",
                Binary::Div => "Div",
                Binary::Pow => "Pow",
                Binary::And => "And",
                Binary::Or => "Or",
                Binary::Equal => "Equal",
                Binary::Greater => "Greater",
                Binary::Less => "Less",
                Binary::PRelu => "PRelu",
                Binary::Mod | Binary::Fmod => "Mod",
                Binary::ShiftLeft | Binary::ShiftRight => "BitShift",
                Binary::BitAnd => "BitwiseAnd",
                Binary::BitOr => "BitwiseOr",
                Binary::BitXor => "BitwiseXor",
            },
            Op::Variadic(v) => match v {
                Variadic::Max => "Max",
                Variadic::Min => "Min",
                Variadic::Sum => "Sum",
                Variadic::Mean => "Mean",
            },
            Op::Clip => "Clip",
            Op::Where => "Where",
            Op::Cast { .. } => "Cast",
            Op::BitCast { .. } => "BitCast",
            Op::Conv(_) => "Conv",
            Op::Pool(p) => match p.kind {
                PoolKind::Max => "MaxPool",
                PoolKind::Average { .. } => "AveragePool",
            },
            Op::GlobalPool(PoolKind::Max) => "GlobalMaxPool",
            Op::GlobalPool(PoolKind::Average { .. }) => "GlobalAveragePool",
            Op::Lrn { .. } => "LRN",
            Op::BatchNorm { .. } => "BatchNormalization",
            Op::LayerNorm { .. } => "LayerNormalization",
            Op::Gemm(_) => "Gemm",
            Op::MatMul => "MatMul",
            Op::Softmax { kind: SoftmaxKind::Softmax, .. } => "Softmax",
            Op::Softmax { kind: SoftmaxKind::LogSoftmax, .. } => "LogSoftmax",
            Op::Reduce { kind, .. } => match kind {
                Reduce::Max => "ReduceMax",
                Reduce::Mean => "ReduceMean",
                Reduce::Min => "ReduceMin",
                Reduce::Sum => "ReduceSum",
                Reduce::Prod => "ReduceProd",
            },
            Op::ArgMax { min: false, .. } => "ArgMax",
            Op::ArgMax { min: true, .. } => "ArgMin",
            Op::TopK { .. } => "TopK",
            Op::GridSample { .. } => "GridSample",
            Op::Shape { .. } => "Shape",
            Op::ConstantOfShape { .. } => "ConstantOfShape",
            Op::Reshape { .. } => "Reshape",
            Op::Flatten { .. } => "Flatten",
            Op::Squeeze => "Squeeze",
            Op::Unsqueeze => "Unsqueeze",
            Op::Transpose { .. } => "Transpose",
            Op::Concat { .. } => "Concat",
            Op::Split { .. } => "Split",
            Op::Lstm(_) => "LSTM",
            Op::TreeEnsemble(_) => "TreeEnsemble",
            Op::Det => "Det",
            Op::TfIdf(_) => "TfIdfVectorizer",
            Op::RoiAlign { .. } => "RoiAlign",
            Op::Slice => "Slice",
            Op::Gather { .. } => "Gather",
            Op::GatherElements { .. } => "GatherElements",
            Op::Scatter { axis: Some(_), .. } => "ScatterElements",
            Op::Scatter { axis: None, .. } => "ScatterND",
            Op::GatherNd { .. } => "GatherND",
            Op::Cumulative { product: false, .. } => "CumSum",
            Op::Cumulative { product: true, .. } => "CumProd",
            Op::Expand => "Expand",
            Op::Tile => "Tile",
            Op::Pad { .. } => "Pad",
            Op::Range => "Range",
            Op::Resize(_) => "Resize",
            Op::Dropout { .. } => "Dropout",
            Op::Identity => "Identity",
            Op::Text(t) => t.name(),
            Op::If(_) => "If",
            Op::Loop(_) => "Loop",
            Op::Scan(_) => "Scan",
        }
    }

    /// How many inputs the op takes: at least `.0`, at most `.1` (`usize::MAX` for variadic ops).
    pub fn arity(&self) -> (usize, usize) {
        match self {
            Op::Unary(_)
            | Op::Cast { .. }
            | Op::BitCast { .. }
            | Op::Pool(_)
            | Op::GlobalPool(_)
            | Op::Lrn { .. }
            | Op::Softmax { .. }
            | Op::ArgMax { .. }
            | Op::Shape { .. }
            | Op::ConstantOfShape { .. }
            | Op::Flatten { .. }
            | Op::Transpose { .. }
            | Op::Identity => (1, 1),
            Op::Binary(_)
            | Op::MatMul
            | Op::Reshape { .. }
            | Op::Unsqueeze
            | Op::Gather { .. }
            | Op::GatherElements { .. }
            | Op::Cumulative { .. }
            | Op::GatherNd { .. }
            | Op::TopK { .. }
            | Op::GridSample { .. }
            | Op::Expand
            | Op::Tile => (2, 2),
            Op::Variadic(_) | Op::Concat { .. } | Op::If(_) | Op::Scan(_) => (1, usize::MAX),
            Op::Loop(_) => (0, usize::MAX),
            Op::Clip => (1, 3),
            Op::Where | Op::Range | Op::Scatter { .. } => (3, 3),
            Op::Lstm(_) => (3, 8),
            Op::TreeEnsemble(_) | Op::Det | Op::TfIdf(_) => (1, 1),
            Op::RoiAlign { .. } => (3, 3),
            Op::Conv(_) | Op::Gemm(_) => (2, 3),
            Op::LayerNorm { .. } => (2, 3),
            Op::BatchNorm { .. } => (5, 5),
            Op::Reduce { .. } | Op::Squeeze | Op::Split { .. } => (1, 2),
            Op::Slice => (3, 5),
            Op::Pad { .. } => (2, 4),
            Op::Resize(_) => (1, 4),
            Op::Dropout { .. } => (1, 3),
            Op::Text(t) => t.arity(),
        }
    }

    /// Inputs whose values set the output's shape or meaning, so they must be constants at compile time.
    pub fn static_inputs(&self) -> &'static [usize] {
        match self {
            Op::Reshape { .. } | Op::Expand | Op::Tile | Op::Unsqueeze | Op::Squeeze | Op::Split { .. } => &[1],
            Op::Reduce { .. } | Op::TopK { .. } | Op::Cumulative { .. } => &[1],
            Op::ConstantOfShape { .. } => &[0],
            Op::Range => &[0, 1, 2],
            Op::Slice => &[1, 2, 3, 4],
            Op::Pad { .. } => &[1, 3],
            Op::Resize(_) => &[1, 2, 3],
            Op::Dropout { .. } => &[1, 2],
            Op::Text(t) => t.static_inputs(),
            _ => &[],
        }
    }

    /// The op's subgraphs, each with what the text form calls it (`then`, `else`, `body`).
    pub fn subgraphs(&self) -> Vec<(&'static str, &super::Graph)> {
        match self {
            Op::If(b) => vec![("then", &b.then), ("else", &b.otherwise)],
            Op::Loop(l) => vec![("body", &l.body)],
            Op::Scan(s) => vec![("body", &s.body)],
            _ => Vec::new(),
        }
    }

    /// The op's subgraphs, mutably.
    pub fn subgraphs_mut(&mut self) -> Vec<(&'static str, &mut super::Graph)> {
        match self {
            Op::If(b) => vec![("then", &mut b.then), ("else", &mut b.otherwise)],
            Op::Loop(l) => vec![("body", &mut l.body)],
            Op::Scan(s) => vec![("body", &mut s.body)],
            _ => Vec::new(),
        }
    }

    /// True for ops computed element by element with broadcasting (the ones fusion chains).
    pub fn is_elementwise(&self) -> bool {
        matches!(self, Op::Unary(_) | Op::Binary(_) | Op::Variadic(_) | Op::Clip | Op::Where | Op::Cast { .. })
    }
}

struct List<'a, T>(&'a [T]);

impl<T: fmt::Display> fmt::Display for List<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, x) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{x}")?;
        }
        f.write_str("]")
    }
}

impl Window {
    fn fmt_attrs(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "kernel={} strides={} pads={}", List(&self.kernel), List(&self.strides), List(&self.pads))?;
        if self.dilations.iter().any(|&d| d != 1) {
            write!(f, " dilations={}", List(&self.dilations))?;
        }
        if self.auto_pad != AutoPad::NotSet {
            write!(f, " auto_pad={:?}", self.auto_pad)?;
        }
        if self.ceil_mode {
            f.write_str(" ceil_mode")?;
        }
        Ok(())
    }
}

/// Prints the op's attributes as ` {key=value …}`, or nothing when it has none. Stable: used by snapshots.
pub struct OpAttrs<'a>(pub &'a Op);

impl fmt::Display for OpAttrs<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut body = String::new();
        {
            use fmt::Write;
            let w = &mut body;
            let window = |w: &mut String, win: &Window| -> fmt::Result { write!(w, "{}", WindowAttrs(win)) };
            match self.0 {
                Op::Unary(Unary::LeakyRelu { alpha }) => write!(w, "alpha={alpha}")?,
                Op::Unary(Unary::HardSigmoid { alpha, beta }) => write!(w, "alpha={alpha} beta={beta}")?,
                Op::Unary(Unary::Gelu { tanh: true }) => write!(w, "approximate=tanh")?,
                Op::Cast { to, mode } => {
                    write!(w, "to={to}")?;
                    if !mode.saturate {
                        write!(w, " saturate=0")?;
                    }
                    if mode.rounding != E8M0Rounding::Up {
                        write!(w, " round_mode={:?}", mode.rounding)?;
                    }
                }
                Op::BitCast { to } => write!(w, "to={to}")?,
                Op::Conv(c) => {
                    window(w, &c.window)?;
                    if c.group != 1 {
                        write!(w, " group={}", c.group)?;
                    }
                }
                Op::Pool(p) => {
                    window(w, &p.window)?;
                    if let PoolKind::Average { count_include_pad: true } = p.kind {
                        write!(w, " count_include_pad")?;
                    }
                    if p.column_major_indices {
                        write!(w, " storage_order=1")?;
                    }
                }
                Op::Lrn { size, alpha, beta, bias } => write!(w, "size={size} alpha={alpha} beta={beta} bias={bias}")?,
                Op::BatchNorm { epsilon, momentum, training } => {
                    write!(w, "epsilon={epsilon}")?;
                    if *training {
                        write!(w, " momentum={momentum} training")?;
                    }
                }
                Op::LayerNorm { axis, epsilon, stash } => write!(w, "axis={axis} epsilon={epsilon} stash={stash}")?,
                Op::Gemm(g) => {
                    write!(w, "alpha={} beta={}", g.alpha, g.beta)?;
                    if g.trans_a {
                        write!(w, " trans_a")?;
                    }
                    if g.trans_b {
                        write!(w, " trans_b")?;
                    }
                }
                Op::Softmax { axis, flatten, .. } => {
                    write!(w, "axis={axis}")?;
                    if *flatten {
                        write!(w, " flatten")?;
                    }
                }
                Op::Reduce { keepdims, noop_with_empty_axes, .. } => {
                    write!(w, "keepdims={}", u8::from(*keepdims))?;
                    if *noop_with_empty_axes {
                        write!(w, " noop_with_empty_axes")?;
                    }
                }
                Op::ArgMax { axis, keepdims, select_last_index, .. } => {
                    write!(w, "axis={axis} keepdims={}", u8::from(*keepdims))?;
                    if *select_last_index {
                        write!(w, " select_last_index")?;
                    }
                }
                Op::TopK { axis, largest } => write!(w, "axis={axis} largest={}", u8::from(*largest))?,
                Op::GridSample { mode, padding, align_corners } => {
                    write!(w, "mode={mode:?} padding={padding:?}")?;
                    if *align_corners {
                        write!(w, " align_corners")?;
                    }
                }
                Op::Shape { start, end } => {
                    if *start != 0 || end.is_some() {
                        write!(w, "start={start}")?;
                    }
                    if let Some(end) = end {
                        write!(w, " end={end}")?;
                    }
                }
                Op::ConstantOfShape { value } => write!(w, "value={}", crate::ir::print::Scalar(value))?,
                Op::Reshape { allowzero: true } => write!(w, "allowzero")?,
                Op::Flatten { axis } | Op::Concat { axis } | Op::Gather { axis } | Op::GatherElements { axis } => {
                    write!(w, "axis={axis}")?
                }
                Op::Transpose { perm: Some(perm) } => write!(w, "perm={}", List(perm))?,
                Op::Scatter { axis, reduction } => {
                    if let Some(axis) = axis {
                        write!(w, "axis={axis} ")?;
                    }
                    write!(w, "reduction={reduction:?}")?
                }
                Op::GatherNd { batch_dims } => write!(w, "batch_dims={batch_dims}")?,
                Op::Cumulative { exclusive, reverse, .. } => {
                    write!(w, "exclusive={} reverse={}", u8::from(*exclusive), u8::from(*reverse))?
                }
                Op::Split { axis, num_outputs } => {
                    write!(w, "axis={axis}")?;
                    if let Some(n) = num_outputs {
                        write!(w, " num_outputs={n}")?;
                    }
                }
                Op::Pad { mode } => write!(w, "mode={mode:?}")?,
                Op::Resize(r) => {
                    write!(w, "mode={:?} coordinates={:?}", r.mode, r.coordinate_transform)?;
                    if r.mode == ResizeMode::Nearest {
                        write!(w, " nearest={:?}", r.nearest_mode)?;
                    }
                    if r.mode == ResizeMode::Cubic {
                        write!(w, " cubic_coeff_a={}", r.cubic_coeff_a)?;
                        if r.exclude_outside {
                            write!(w, " exclude_outside")?;
                        }
                    }
                    if r.antialias {
                        write!(w, " antialias")?;
                    }
                    if !r.scales.is_empty() {
                        write!(w, " scales={}", List(&r.scales))?;
                    }
                }
                Op::Dropout { seed: Some(seed) } => write!(w, "seed={seed}")?,
                Op::Text(t) => write!(w, "{t}")?,
                Op::TfIdf(t) => write!(
                    w,
                    "mode={:?} grams={}..{} skip={} pooled={} columns={}",
                    t.mode,
                    t.min,
                    t.max,
                    t.max_skip,
                    t.grams.len(),
                    t.columns
                )?,
                Op::RoiAlign { max, half_pixel, out, sampling_ratio, spatial_scale } => write!(
                    w,
                    "mode={} coordinates={} output={}x{} sampling_ratio={sampling_ratio} spatial_scale={spatial_scale}",
                    if *max { "max" } else { "avg" },
                    if *half_pixel { "half_pixel" } else { "output_half_pixel" },
                    out.0,
                    out.1
                )?,
                Op::TreeEnsemble(t) => write!(
                    w,
                    "trees={} nodes={} leaves={} targets={} aggregate={:?}",
                    t.roots.len(),
                    t.nodes.len(),
                    t.leaves.len(),
                    t.targets,
                    t.aggregate
                )?,
                Op::Loop(l) => write!(w, "carried={}", l.carried)?,
                Op::Scan(sc) => {
                    let axes = |v: &[(usize, bool)]| {
                        let each: Vec<String> =
                            v.iter().map(|(a, r)| format!("{a}{}", if *r { " reverse" } else { "" })).collect();
                        each.join(",")
                    };
                    write!(w, "states={} inputs=[{}] outputs=[{}]", sc.states, axes(&sc.inputs), axes(&sc.outputs))?
                }
                Op::Lstm(l) => {
                    let dirs: Vec<&str> = l.reverse.iter().map(|&r| if r { "reverse" } else { "forward" }).collect();
                    let acts: Vec<String> = l.activations.iter().map(|a| a.text()).collect();
                    write!(w, "hidden={} directions={} activations={}", l.hidden, dirs.join(","), acts.join(","))?;
                    if let Some(c) = l.clip {
                        write!(w, " clip={c}")?;
                    }
                    if l.input_forget {
                        write!(w, " input_forget")?;
                    }
                    if l.batch_major {
                        write!(w, " layout=1")?;
                    }
                }
                _ => {}
            }
        }
        if body.is_empty() {
            Ok(())
        } else {
            write!(f, " {{{}}}", body.trim_start())
        }
    }
}

struct WindowAttrs<'a>(&'a Window);

impl fmt::Display for WindowAttrs<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt_attrs(f)
    }
}
