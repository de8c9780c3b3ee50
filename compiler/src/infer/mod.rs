//! Shape and type inference: the output types of one node from its inputs' types and constant values.
//!
//! [`infer`] also normalises attributes in place (negative axes become non-negative, `auto_pad` becomes explicit
//! pads, Resize's scales are resolved, Transpose's default perm is filled in), so that backends never redo it.
//! Inputs listed in [`Op::static_inputs`] must be constants; inference says which one when it is not.

mod elementwise;
mod nn;
mod shape_ops;
mod subgraphs;

use stowage_runtime::{DatumType, Tensor};

use crate::ir::{Op, ValueType};

pub use nn::matmul_shape;
pub use shape_ops::{reshape, slice_bounds, slice_len};

/// What inference knows about one input.
#[derive(Clone, Copy, Debug)]
pub struct Fact<'a> {
    /// The input's type.
    pub ty: &'a ValueType,
    /// Its value, when it is a constant.
    pub value: Option<&'a Tensor<'static>>,
}

/// Largest number of elements a value may have (2^40): shapes past it are an error, not an allocation.
pub const MAX_ELEMENTS: usize = 1 << 40;

/// Why inference failed, without the node (the caller adds it).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InferError {
    /// Shapes cannot broadcast together.
    #[error("shapes {a:?} and {b:?} cannot broadcast")]
    Broadcast {
        /// One shape.
        a: Vec<usize>,
        /// The other.
        b: Vec<usize>,
    },
    /// An input has a datum type the op does not take.
    #[error("input {input} has datum type {found}, expected {expected}")]
    DatumType {
        /// Input position.
        input: usize,
        /// What the op takes.
        expected: String,
        /// What it got.
        found: DatumType,
    },
    /// A shape-setting input is not a constant.
    #[error("input {input} sets the output shape and must be known at compile time (a constant, or an input fixed with --input-value)")]
    NotConstant {
        /// Input position.
        input: usize,
    },
    /// A required input is missing.
    #[error("input {input} is required")]
    MissingInput {
        /// Input position.
        input: usize,
    },
    /// Anything else wrong with attributes or shapes, said in words.
    #[error("{0}")]
    Invalid(String),
}

/// Shorthand for an [`InferError::Invalid`].
pub(crate) fn invalid<T>(msg: impl Into<String>) -> Result<T, InferError> {
    Err(InferError::Invalid(msg.into()))
}

/// Output types of a node applying `op` to `inputs`, with `outputs` declared outputs. May normalise `op`.
pub fn infer(op: &mut Op, inputs: &[Option<Fact<'_>>], outputs: usize) -> Result<Vec<ValueType>, InferError> {
    let (min, max) = op.arity();
    if inputs.len() > max {
        return invalid(format!("takes at most {max} inputs, got {}", inputs.len()));
    }
    for i in 0..min {
        if inputs.get(i).copied().flatten().is_none() {
            return Err(InferError::MissingInput { input: i });
        }
    }
    for &i in op.static_inputs() {
        if let Some(Some(Fact { value: None, .. })) = inputs.get(i) {
            return Err(InferError::NotConstant { input: i });
        }
    }
    // The small types (float8, float4, int4, int2) have no arithmetic here: they are cast, quantized and dequantized
    // (as casts) and moved, and every other op refuses them by name.
    let moves = casts_or_reshapes(op);
    if !moves {
        for (input, fact) in inputs.iter().enumerate() {
            if let Some(f) = fact.filter(|f| f.ty.dt.is_small()) {
                return Err(InferError::DatumType {
                    input,
                    expected: "a type with arithmetic: stowage takes float8, float4, int4 and int2 in Cast, \
                               CastLike, QuantizeLinear, DequantizeLinear and reshapes"
                        .into(),
                    found: f.ty.dt,
                });
            }
        }
    }
    strings_allowed(op, inputs)?;
    let ins = Inputs(inputs);
    let types = match op {
        Op::Unary(_)
        | Op::Binary(_)
        | Op::Variadic(_)
        | Op::Clip
        | Op::Where
        | Op::Cast { .. }
        | Op::BitCast { .. }
        | Op::Identity
        | Op::Dropout { .. } => elementwise::infer(op, ins, outputs)?,
        Op::Conv(_)
        | Op::Pool(_)
        | Op::GlobalPool(_)
        | Op::Lrn { .. }
        | Op::BatchNorm { .. }
        | Op::LayerNorm { .. }
        | Op::Gemm(_)
        | Op::MatMul
        | Op::Softmax { .. }
        | Op::Reduce { .. }
        | Op::ArgMax { .. }
        | Op::TopK { .. }
        | Op::GridSample { .. }
        | Op::Resize(_) => nn::infer(op, ins, outputs)?,
        Op::TfIdf(t) => {
            ins.expect_dt(0, |d| matches!(d, DatumType::I32 | DatumType::I64), "int32 or int64 tokens")?;
            let x = ins.ty(0)?;
            match x.rank() {
                1 => vec![ValueType::new(DatumType::F32, vec![t.columns])],
                2 => vec![ValueType::new(DatumType::F32, vec![x.shape[0], t.columns])],
                _ => return invalid(format!("X is {x}: TfIdfVectorizer takes [C] or [N, C]")),
            }
        }
        Op::Det => {
            ins.expect_dt(0, DatumType::is_float, "a float type")?;
            let x = ins.ty(0)?;
            let r = x.rank();
            if r < 2 || x.shape[r - 1] != x.shape[r - 2] {
                return invalid(format!("X is {x}: Det takes square matrices in its last two axes"));
            }
            vec![ValueType::new(x.dt, x.shape[..r - 2].to_vec())]
        }
        Op::RoiAlign { out, .. } => {
            ins.expect_dt(0, DatumType::is_float, "a float type")?;
            let (x, rois, idx) = (ins.ty(0)?, ins.ty(1)?, ins.ty(2)?);
            if x.rank() != 4 {
                return invalid(format!("X is {x}: RoiAlign takes [N, C, H, W]"));
            }
            if rois.dt != x.dt || rois.rank() != 2 || rois.shape[1] != 4 {
                return invalid(format!("rois is {rois}: it must be [R, 4] of X's type ({})", x.dt));
            }
            if !matches!(idx.dt, DatumType::I64 | DatumType::I32) || idx.shape != [rois.shape[0]] {
                return invalid(format!("batch_indices is {idx}: it must be [{}] of int64", rois.shape[0]));
            }
            vec![ValueType::new(x.dt, vec![rois.shape[0], x.shape[1], out.0, out.1])]
        }
        Op::TreeEnsemble(t) => {
            ins.expect_dt(0, |d| matches!(d, DatumType::F32 | DatumType::F64), "f32 or f64")?;
            let x = ins.ty(0)?;
            if x.rank() != 2 {
                return invalid(format!("X is {x}: a tree ensemble reads [N, features]"));
            }
            if t.features() > x.shape[1] {
                return invalid(format!("X is {x}, but a tree reads feature {}", t.features() - 1));
            }
            vec![ValueType::new(x.dt, vec![x.shape[0], t.targets])]
        }
        Op::Text(t) => text(t, ins)?,
        Op::If(b) => subgraphs::branches(b, ins, outputs)?,
        Op::Loop(l) => subgraphs::body(l, ins, outputs)?,
        Op::Scan(s) => subgraphs::scan(s, ins, outputs)?,
        Op::Lstm(l) => {
            let types: Vec<Option<&ValueType>> = inputs.iter().map(|f| f.map(|f| f.ty)).collect();
            l.output_types(&types).map_err(InferError::Invalid)?
        }
        _ => shape_ops::infer(op, ins, outputs)?,
    };
    // Strings come only from the ops that make them (Cast, the string ops) or move them (from a string input).
    let makes_strings = matches!(op, Op::Cast { .. } | Op::Text(_) | Op::If(_) | Op::Loop(_) | Op::Scan(_))
        || inputs.iter().flatten().any(|f| f.ty.dt == DatumType::Str);
    if let Some(k) = types.iter().position(|t| t.dt == DatumType::Str).filter(|_| !makes_strings) {
        return invalid(format!("output {k} would be string, which {} does not make from these inputs", op.name()));
    }
    for t in &types {
        match t.element_count() {
            Some(n) if n <= MAX_ELEMENTS => {}
            _ => return invalid(format!("output shape {:?} has more than 2^40 elements", t.shape)),
        }
    }
    Ok(types)
}

/// `Cast`, and the ops that keep every element and only relabel the shape (and `Shape`, which reads none): what
/// the small types and strings go through; and `If`, `Loop` and `Scan`, whose subgraphs' own nodes check what they read.
fn casts_or_reshapes(op: &Op) -> bool {
    matches!(
        op,
        Op::Cast { .. }
            | Op::Identity
            | Op::Reshape { .. }
            | Op::Flatten { .. }
            | Op::Squeeze
            | Op::Unsqueeze
            | Op::Shape { .. }
            | Op::If(_)
            | Op::Loop(_)
            | Op::Scan(_)
    )
}

/// Strings (handles into the string table, `stowage_runtime::strings`) go only where an op moves, selects or
/// compares elements, or reads text: every other op refuses them by name.
fn strings_allowed(op: &Op, inputs: &[Option<Fact<'_>>]) -> Result<(), InferError> {
    use crate::ir::Binary;
    let takes = casts_or_reshapes(op)
        || matches!(
            op,
            Op::Transpose { .. }
                | Op::Concat { .. }
                | Op::Split { .. }
                | Op::Slice
                | Op::Gather { .. }
                | Op::GatherElements { .. }
                | Op::GatherNd { .. }
                | Op::Expand
                | Op::Tile
                | Op::Where
                | Op::Binary(Binary::Equal)
                | Op::Text(_)
        );
    match inputs.iter().enumerate().find(|(_, f)| f.is_some_and(|f| f.ty.dt == DatumType::Str)) {
        Some((input, _)) if !takes => Err(InferError::DatumType {
            input,
            expected: format!(
                "a type {} computes with: strings go to the ops that move, select or compare elements, Cast, \
                 and the string ops",
                op.name()
            ),
            found: DatumType::Str,
        }),
        _ => Ok(()),
    }
}

/// The output types of the ops on strings and `LabelEncoder`.
fn text(t: &crate::ir::Text, ins: Inputs<'_>) -> Result<Vec<ValueType>, InferError> {
    use crate::ir::Text;
    let x = ins.ty(0)?;
    let strings = |i: usize| ins.expect_dt(i, |d| d == DatumType::Str, "string");
    Ok(match t {
        Text::Concat => {
            strings(0)?;
            strings(1)?;
            vec![ValueType::new(DatumType::Str, broadcast(&x.shape, ins.shape(1)?)?)]
        }
        Text::FullMatch { .. } => {
            strings(0)?;
            vec![ValueType::new(DatumType::Bool, x.shape.clone())]
        }
        Text::Case { .. } => {
            strings(0)?;
            vec![x.clone()]
        }
        Text::Lookup => {
            let (keys, values, default) = (ins.ty(1)?, ins.ty(2)?, ins.ty(3)?);
            if keys.dt != x.dt {
                return Err(InferError::DatumType { input: 1, expected: format!("{}, like X", x.dt), found: keys.dt });
            }
            if values.dt != default.dt {
                return Err(InferError::DatumType {
                    input: 3,
                    expected: format!("{}, like the values", values.dt),
                    found: default.dt,
                });
            }
            if keys.rank() != 1 || values.shape != keys.shape {
                return invalid(format!("keys are {keys} and values {values}: one value per key, in 1-D lists"));
            }
            if default.element_count() != Some(1) {
                return invalid(format!("the default is {default}: it must be one value"));
            }
            vec![ValueType::new(values.dt, x.shape.clone())]
        }
    })
}

/// The inputs of one node, with accessors that produce the right errors.
#[derive(Clone, Copy)]
pub(crate) struct Inputs<'a>(&'a [Option<Fact<'a>>]);

impl<'a> Inputs<'a> {
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    pub(crate) fn get(&self, i: usize) -> Option<Fact<'a>> {
        self.0.get(i).copied().flatten()
    }

    pub(crate) fn ty(&self, i: usize) -> Result<&'a ValueType, InferError> {
        self.get(i).map(|f| f.ty).ok_or(InferError::MissingInput { input: i })
    }

    pub(crate) fn shape(&self, i: usize) -> Result<&'a [usize], InferError> {
        Ok(&self.ty(i)?.shape)
    }

    pub(crate) fn dt(&self, i: usize) -> Result<DatumType, InferError> {
        Ok(self.ty(i)?.dt)
    }

    /// The constant value of optional input `i` as i64s: `Ok(None)` when the input is absent.
    pub(crate) fn ints(&self, i: usize) -> Result<Option<Vec<i64>>, InferError> {
        match self.get(i) {
            None => Ok(None),
            Some(Fact { value: Some(t), .. }) => {
                if t.dt().is_float() {
                    return Err(InferError::DatumType { input: i, expected: "an integer type".into(), found: t.dt() });
                }
                crate::consts::to_i64s(t).map(Some).map_err(|e| InferError::Invalid(e.to_string()))
            }
            Some(_) => Err(InferError::NotConstant { input: i }),
        }
    }

    /// The constant value of optional input `i` as f64s.
    pub(crate) fn floats(&self, i: usize) -> Result<Option<Vec<f64>>, InferError> {
        match self.get(i) {
            None => Ok(None),
            Some(Fact { value: Some(t), .. }) => {
                crate::consts::to_f64s(t).map(Some).map_err(|e| InferError::Invalid(e.to_string()))
            }
            Some(_) => Err(InferError::NotConstant { input: i }),
        }
    }

    pub(crate) fn expect_dt(&self, i: usize, ok: impl Fn(DatumType) -> bool, what: &str) -> Result<(), InferError> {
        let dt = self.dt(i)?;
        if ok(dt) {
            Ok(())
        } else {
            Err(InferError::DatumType { input: i, expected: what.into(), found: dt })
        }
    }

    /// Checks that input `i` has the same datum type as input 0.
    pub(crate) fn same_dt(&self, i: usize) -> Result<(), InferError> {
        let want = self.dt(0)?;
        let found = self.dt(i)?;
        if want == found {
            Ok(())
        } else {
            Err(InferError::DatumType { input: i, expected: format!("{want}, like input 0"), found })
        }
    }
}

/// Multidirectional (numpy) broadcasting of two shapes.
pub fn broadcast(a: &[usize], b: &[usize]) -> Result<Vec<usize>, InferError> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for (i, o) in out.iter_mut().enumerate() {
        let da = if i + a.len() >= rank { a[i + a.len() - rank] } else { 1 };
        let db = if i + b.len() >= rank { b[i + b.len() - rank] } else { 1 };
        *o = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return Err(InferError::Broadcast { a: a.to_vec(), b: b.to_vec() }),
        };
    }
    Ok(out)
}

/// An axis in `-rank..rank` as `0..rank`.
pub fn normalize_axis(axis: i64, rank: usize) -> Result<usize, InferError> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        return invalid(format!("axis {axis} is out of range for rank {rank}"));
    }
    Ok(if axis < 0 { (axis + r) as usize } else { axis as usize })
}

/// Non-negative dimensions from i64s, with a named error for negatives.
pub(crate) fn dims(values: &[i64], what: &str) -> Result<Vec<usize>, InferError> {
    values
        .iter()
        .map(|&d| usize::try_from(d).or_else(|_| invalid(format!("{what} has a negative dimension {d}"))))
        .collect()
}
