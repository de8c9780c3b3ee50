//! ONNX nodes of the default domain to [`Op`]s, one arm per op, handling the opset differences: attributes that
//! became inputs (Clip 11, Pad 11, Slice 10, Split 13, Squeeze/Unsqueeze 13, ReduceSum 13, other reductions 18)
//! are turned into constant inputs, so the IR has one form.

use stowage_runtime::{DatumType, Tensor};

use super::attrs::{AttrError, Attrs};
use crate::consts;
use crate::ir::{
    AspectRatioPolicy, AutoPad, Binary, Conv, CoordinateTransform, Gemm, GridMode, GridPadding, NearestMode, Op,
    PadMode, Pool, PoolKind, Reduce, Resize, ResizeMode, ScatterReduction, SoftmaxKind, Unary, ValueType, Variadic,
    Window,
};

/// Where one IR input of a node comes from.
#[derive(Debug)]
pub(crate) enum Slot {
    /// The node's ONNX input number `.0` (which may be empty: an omitted optional input).
    Onnx(usize),
    /// A constant made from an attribute of an older opset.
    Const(Tensor<'static>),
}

/// A parsed node.
#[derive(Debug)]
pub(crate) enum Parsed {
    /// An op with its IR inputs.
    Op(Op, Vec<Slot>),
    /// The `Constant` op: its value.
    Constant(Tensor<'static>),
}

/// Why a node could not be parsed.
#[derive(Debug)]
pub(crate) enum ParseError {
    /// The op is not one stowage knows.
    Unknown,
    /// An attribute is missing, of the wrong type, or has a bad value.
    Attr(AttrError),
    /// Anything else.
    Other(String),
}

impl From<AttrError> for ParseError {
    fn from(e: AttrError) -> Self {
        ParseError::Attr(e)
    }
}

fn attr_err(name: &str, message: impl Into<String>) -> ParseError {
    ParseError::Attr(AttrError::new(name, message))
}

/// `Cast`'s and `CastLike`'s `saturate` (opset 19) and `round_mode` (opset 24).
fn cast_mode(a: &Attrs<'_>) -> Result<crate::ir::CastMode, ParseError> {
    use stowage_runtime::small_types::E8M0Rounding;
    let saturate = match a.int("saturate")? {
        None | Some(1) => true,
        Some(0) => false,
        Some(other) => return Err(attr_err("saturate", format!("is {other}; it must be 0 or 1"))),
    };
    let rounding = match a.string("round_mode")?.as_deref() {
        None | Some("up") => E8M0Rounding::Up,
        Some("nearest") => E8M0Rounding::Nearest,
        Some("down") => E8M0Rounding::Down,
        Some(other) => return Err(attr_err("round_mode", format!("is '{other}'; it must be up, nearest or down"))),
    };
    Ok(crate::ir::CastMode { saturate, rounding })
}

fn ints_const(v: Vec<i64>) -> Result<Slot, ParseError> {
    Tensor::from_vec(&[v.len()], v).map(Slot::Const).map_err(|e| ParseError::Other(e.to_string()))
}

fn scalar_const(dt: DatumType, x: f64) -> Result<Slot, ParseError> {
    consts::from_f64s(dt, &[], &[x]).map(Slot::Const).map_err(|e| ParseError::Other(e.to_string()))
}

/// Parses a default-domain node at `opset`. `inputs` are the types of its ONNX inputs (`None`: omitted).
pub(crate) fn parse(
    op_type: &str,
    a: &Attrs<'_>,
    opset: i64,
    inputs: &[Option<&ValueType>],
) -> Result<Parsed, ParseError> {
    let n = inputs.len();
    let all = || (0..n).map(Slot::Onnx).collect::<Vec<_>>();
    let x_dt = inputs.first().copied().flatten().map(|t| t.dt).unwrap_or(DatumType::F32);
    let op = |op: Op| Ok(Parsed::Op(op, all()));
    let unary = |u: Unary| Ok(Parsed::Op(Op::Unary(u), all()));
    let binary = |b: Binary| Ok(Parsed::Op(Op::Binary(b), all()));
    let variadic = |v: Variadic| Ok(Parsed::Op(Op::Variadic(v), all()));
    // An attribute of an older opset that is an input now: appended (or placed) as a constant.
    let moved = |mut slots: Vec<Slot>, at: usize, value: Option<Slot>| {
        if let Some(v) = value {
            while slots.len() < at {
                slots.push(Slot::Onnx(usize::MAX));
            }
            slots.insert(at, v);
        }
        slots
    };
    match op_type {
        "Abs" => unary(Unary::Abs),
        "Ceil" => unary(Unary::Ceil),
        "Cos" => unary(Unary::Cos),
        "Erf" => unary(Unary::Erf),
        "Exp" => unary(Unary::Exp),
        "Floor" => unary(Unary::Floor),
        "Log" => unary(Unary::Log),
        "Neg" => unary(Unary::Neg),
        "Not" => unary(Unary::Not),
        "Reciprocal" => unary(Unary::Reciprocal),
        "Relu" => unary(Unary::Relu),
        "Sigmoid" => unary(Unary::Sigmoid),
        "Sign" => unary(Unary::Sign),
        "Sin" => unary(Unary::Sin),
        "Sqrt" => unary(Unary::Sqrt),
        "Tanh" => unary(Unary::Tanh),
        "Softplus" => unary(Unary::Softplus),
        "HardSwish" => unary(Unary::HardSwish),
        "LeakyRelu" => unary(Unary::LeakyRelu { alpha: a.float_or("alpha", 0.01)? }),
        "HardSigmoid" => unary(Unary::HardSigmoid { alpha: a.float_or("alpha", 0.2)?, beta: a.float_or("beta", 0.5)? }),
        "Gelu" => match a.string("approximate")?.as_deref().unwrap_or("none") {
            "none" => unary(Unary::Gelu { tanh: false }),
            "tanh" => unary(Unary::Gelu { tanh: true }),
            other => Err(attr_err("approximate", format!("must be 'none' or 'tanh', found '{other}'"))),
        },
        "Add" => binary(Binary::Add),
        "Sub" => binary(Binary::Sub),
        "Mul" => binary(Binary::Mul),
        "Div" => binary(Binary::Div),
        "Pow" => binary(Binary::Pow),
        "And" => binary(Binary::And),
        "Or" => binary(Binary::Or),
        "Equal" => binary(Binary::Equal),
        "Greater" => binary(Binary::Greater),
        "Less" => binary(Binary::Less),
        "PRelu" => binary(Binary::PRelu),
        "Mod" => match a.int_or("fmod", 0)? {
            0 => binary(Binary::Mod),
            1 => binary(Binary::Fmod),
            other => Err(attr_err("fmod", format!("must be 0 or 1, found {other}"))),
        },
        "BitShift" => match a.string("direction")?.as_deref() {
            Some("LEFT") => binary(Binary::ShiftLeft),
            Some("RIGHT") => binary(Binary::ShiftRight),
            Some(other) => Err(attr_err("direction", format!("must be 'LEFT' or 'RIGHT', found '{other}'"))),
            None => Err(attr_err("direction", "is required")),
        },
        "BitwiseAnd" => binary(Binary::BitAnd),
        "BitwiseOr" => binary(Binary::BitOr),
        "BitwiseXor" => binary(Binary::BitXor),
        "BitwiseNot" => unary(Unary::BitNot),
        "Round" => unary(Unary::Round),
        "Acos" => unary(Unary::Acos),
        "Asin" => unary(Unary::Asin),
        "Atan" => unary(Unary::Atan),
        "Acosh" => unary(Unary::Acosh),
        "Asinh" => unary(Unary::Asinh),
        "Atanh" => unary(Unary::Atanh),
        "Sinh" => unary(Unary::Sinh),
        "Cosh" => unary(Unary::Cosh),

        "Max" => variadic(Variadic::Max),
        "Min" => variadic(Variadic::Min),
        "Sum" => variadic(Variadic::Sum),
        "Mean" => variadic(Variadic::Mean),
        "Where" => op(Op::Where),
        "Det" => op(Op::Det),
        "RoiAlign" => {
            let max = match a.string("mode")?.as_deref() {
                None | Some("avg") => false,
                Some("max") => true,
                Some(other) => return Err(attr_err("mode", format!("is '{other}': it must be avg or max"))),
            };
            // `half_pixel` is the default from opset 16; before it, the only behaviour was `output_half_pixel`.
            let default = if opset >= 16 { "half_pixel" } else { "output_half_pixel" };
            let half_pixel = match a.string("coordinate_transformation_mode")?.as_deref().unwrap_or(default) {
                "half_pixel" => true,
                "output_half_pixel" => false,
                other => {
                    return Err(attr_err(
                        "coordinate_transformation_mode",
                        format!("is '{other}': it must be half_pixel or output_half_pixel"),
                    ))
                }
            };
            let out = (a.count_or("output_height", 1)?, a.count_or("output_width", 1)?);
            if out.0 == 0 || out.1 == 0 {
                return Err(attr_err("output_height", "and output_width must be positive"));
            }
            let sampling_ratio = a.count_or("sampling_ratio", 0)?;
            if sampling_ratio > 1 << 12 {
                return Err(attr_err("sampling_ratio", format!("is {sampling_ratio}: at most 4096 samples a side")));
            }
            let spatial_scale = a.float_or("spatial_scale", 1.0)?;
            op(Op::RoiAlign { max, half_pixel, out, sampling_ratio, spatial_scale })
        }
        "Clip" => {
            if opset < 11 {
                let lo = scalar_const(x_dt, f64::from(a.float_or("min", f32::NEG_INFINITY)?))?;
                let hi = scalar_const(x_dt, f64::from(a.float_or("max", f32::INFINITY)?))?;
                Ok(Parsed::Op(Op::Clip, vec![Slot::Onnx(0), lo, hi]))
            } else {
                op(Op::Clip)
            }
        }
        // CastLike casts to its second input's type, known at import.
        "CastLike" => {
            let like =
                inputs.get(1).copied().flatten().ok_or_else(|| ParseError::Other("has no second input".into()))?;
            Ok(Parsed::Op(Op::Cast { to: like.dt, mode: cast_mode(a)? }, vec![Slot::Onnx(0)]))
        }
        "BitCast" => {
            let to = a.int("to")?.ok_or_else(|| attr_err("to", "is required"))?;
            let to = super::tensor::datum_type(to as i32).map_err(|m| attr_err("to", m))?;
            op(Op::BitCast { to })
        }
        "Cast" => {
            let to = a.int("to")?.ok_or_else(|| attr_err("to", "is required"))?;
            let to = super::tensor::datum_type(to as i32).map_err(|m| attr_err("to", m))?;
            op(Op::Cast { to, mode: cast_mode(a)? })
        }
        "Conv" => {
            let group = a.count_or("group", 1)?;
            if group == 0 {
                return Err(attr_err("group", "must be at least 1"));
            }
            op(Op::Conv(Conv { window: window(a, false)?, group }))
        }
        "MaxPool" | "AveragePool" => {
            let kind = if op_type == "MaxPool" {
                PoolKind::Max
            } else {
                PoolKind::Average { count_include_pad: a.bool_or("count_include_pad", false)? }
            };
            let column_major_indices = a.bool_or("storage_order", false)?;
            op(Op::Pool(Pool { kind, window: window(a, true)?, column_major_indices }))
        }
        "GlobalMaxPool" => op(Op::GlobalPool(PoolKind::Max)),
        "GlobalAveragePool" => op(Op::GlobalPool(PoolKind::Average { count_include_pad: false })),
        "LRN" => {
            let size = a.count_or("size", 0)?;
            if size == 0 {
                return Err(attr_err("size", "is required and must be at least 1"));
            }
            op(Op::Lrn {
                size,
                alpha: a.float_or("alpha", 1e-4)?,
                beta: a.float_or("beta", 0.75)?,
                bias: a.float_or("bias", 1.0)?,
            })
        }
        "BatchNormalization" => {
            if opset < 9 && !a.bool_or("spatial", true)? {
                return Err(attr_err("spatial", "spatial=0 is not supported"));
            }
            op(Op::BatchNorm {
                epsilon: a.float_or("epsilon", 1e-5)?,
                momentum: a.float_or("momentum", 0.9)?,
                training: a.bool_or("training_mode", false)?,
            })
        }
        "LayerNormalization" => {
            let stash =
                super::tensor::datum_type(a.int_or("stash_type", 1)? as i32).map_err(|m| attr_err("stash_type", m))?;
            op(Op::LayerNorm { axis: a.int_or("axis", -1)?, epsilon: a.float_or("epsilon", 1e-5)?, stash })
        }
        "Gemm" => op(Op::Gemm(Gemm {
            alpha: a.float_or("alpha", 1.0)?,
            beta: a.float_or("beta", 1.0)?,
            trans_a: a.bool_or("transA", false)?,
            trans_b: a.bool_or("transB", false)?,
        })),
        "MatMul" => op(Op::MatMul),
        "Softmax" | "LogSoftmax" => {
            let kind = if op_type == "Softmax" { SoftmaxKind::Softmax } else { SoftmaxKind::LogSoftmax };
            let flatten = opset < 13;
            op(Op::Softmax { kind, axis: a.int_or("axis", if flatten { 1 } else { -1 })?, flatten })
        }
        "ReduceMax" | "ReduceMean" | "ReduceMin" | "ReduceProd" | "ReduceSum" => {
            let kind = match op_type {
                "ReduceMax" => Reduce::Max,
                "ReduceMean" => Reduce::Mean,
                "ReduceMin" => Reduce::Min,
                "ReduceProd" => Reduce::Prod,
                _ => Reduce::Sum,
            };
            let axes_are_input = if kind == Reduce::Sum { opset >= 13 } else { opset >= 18 };
            let reduce = Op::Reduce {
                kind,
                keepdims: a.bool_or("keepdims", true)?,
                noop_with_empty_axes: a.bool_or("noop_with_empty_axes", false)?,
            };
            if axes_are_input {
                op(reduce)
            } else {
                let axes = a.ints("axes")?.map(ints_const).transpose()?;
                Ok(Parsed::Op(reduce, moved(vec![Slot::Onnx(0)], 1, axes)))
            }
        }
        "ArgMax" | "ArgMin" => op(Op::ArgMax {
            axis: a.int_or("axis", 0)?,
            keepdims: a.bool_or("keepdims", true)?,
            select_last_index: a.bool_or("select_last_index", false)?,
            min: op_type == "ArgMin",
        }),
        "GridSample" => {
            let mode = match (a.string("mode")?.as_deref(), opset) {
                (None, _) | (Some("bilinear"), ..20) | (Some("linear"), 20..) => GridMode::Linear,
                (Some("nearest"), _) => GridMode::Nearest,
                (Some("bicubic"), ..20) | (Some("cubic"), 20..) => GridMode::Cubic,
                (Some(other), _) => {
                    let names = if opset < 20 {
                        "'bilinear', 'nearest' or 'bicubic'"
                    } else {
                        "'linear', 'nearest' or 'cubic'"
                    };
                    return Err(attr_err("mode", format!("must be {names} at opset {opset}, found '{other}'")));
                }
            };
            let padding = match a.string("padding_mode")?.as_deref() {
                None | Some("zeros") => GridPadding::Zeros,
                Some("border") => GridPadding::Border,
                Some("reflection") => GridPadding::Reflection,
                Some(other) => {
                    return Err(attr_err(
                        "padding_mode",
                        format!("must be 'zeros', 'border' or 'reflection', found '{other}'"),
                    ))
                }
            };
            op(Op::GridSample { mode, padding, align_corners: a.bool_or("align_corners", false)? })
        }
        "TopK" => {
            let topk = Op::TopK { axis: a.int_or("axis", -1)?, largest: a.bool_or("largest", true)? };
            if opset < 10 {
                let k =
                    a.int("k")?.ok_or_else(|| ParseError::Other("attribute 'k' is required before opset 10".into()))?;
                Ok(Parsed::Op(topk, moved(vec![Slot::Onnx(0)], 1, Some(ints_const(vec![k])?))))
            } else {
                op(topk)
            }
        }
        "Shape" => op(Op::Shape { start: a.int_or("start", 0)?, end: a.int("end")? }),
        // Every shape is static, so a Size is its input's element count.
        "Size" => {
            let t = inputs.first().copied().flatten().ok_or_else(|| ParseError::Other("has no input".into()))?;
            let n = t.element_count().ok_or_else(|| ParseError::Other(format!("its input {t} has no size")))?;
            Tensor::from_vec(&[], vec![n as i64]).map(Parsed::Constant).map_err(|e| ParseError::Other(e.to_string()))
        }
        "ConstantOfShape" => {
            let value = match a.tensor("value")? {
                Some(t) if t.len() == 1 => t,
                Some(t) => return Err(attr_err("value", format!("must hold one element, holds {}", t.len()))),
                None => Tensor::from_vec(&[1], vec![0f32]).map_err(|e| ParseError::Other(e.to_string()))?,
            };
            op(Op::ConstantOfShape { value })
        }
        "Constant" => constant(a).map(Parsed::Constant),
        "Reshape" => op(Op::Reshape { allowzero: a.bool_or("allowzero", false)? }),
        "Flatten" => op(Op::Flatten { axis: a.int_or("axis", 1)? }),
        "Squeeze" | "Unsqueeze" => {
            let o = if op_type == "Squeeze" { Op::Squeeze } else { Op::Unsqueeze };
            if opset >= 13 {
                return op(o);
            }
            let axes = a.ints("axes")?.map(ints_const).transpose()?;
            if axes.is_none() && op_type == "Unsqueeze" {
                return Err(attr_err("axes", "is required"));
            }
            Ok(Parsed::Op(o, moved(vec![Slot::Onnx(0)], 1, axes)))
        }
        "Transpose" => {
            let perm = a.ints("perm")?;
            let perm = perm
                .map(|p| {
                    p.into_iter()
                        .map(|x| usize::try_from(x).map_err(|_| attr_err("perm", format!("has a negative axis {x}"))))
                        .collect()
                })
                .transpose()?;
            op(Op::Transpose { perm })
        }
        "Concat" => {
            let axis = a.int("axis")?.ok_or_else(|| attr_err("axis", "is required"))?;
            op(Op::Concat { axis })
        }
        "Split" => {
            let axis = a.int_or("axis", 0)?;
            let num_outputs = a
                .int("num_outputs")?
                .map(|v| usize::try_from(v).map_err(|_| attr_err("num_outputs", "must not be negative")))
                .transpose()?;
            let split = Op::Split { axis, num_outputs };
            if opset >= 13 {
                return op(split);
            }
            let sizes = a.ints("split")?.map(ints_const).transpose()?;
            Ok(Parsed::Op(split, moved(vec![Slot::Onnx(0)], 1, sizes)))
        }
        "Slice" => {
            if opset >= 10 {
                return op(Op::Slice);
            }
            let starts = a.ints("starts")?.ok_or_else(|| attr_err("starts", "is required"))?;
            let ends = a.ints("ends")?.ok_or_else(|| attr_err("ends", "is required"))?;
            let mut slots = vec![Slot::Onnx(0), ints_const(starts)?, ints_const(ends)?];
            if let Some(axes) = a.ints("axes")? {
                slots.push(ints_const(axes)?);
            }
            Ok(Parsed::Op(Op::Slice, slots))
        }
        "Gather" => op(Op::Gather { axis: a.int_or("axis", 0)? }),
        "GatherElements" => op(Op::GatherElements { axis: a.int_or("axis", 0)? }),
        "ScatterElements" | "Scatter" | "ScatterND" => {
            let reduction = match a.string("reduction")?.as_deref().unwrap_or("none") {
                "none" => ScatterReduction::None,
                "add" => ScatterReduction::Add,
                "mul" => ScatterReduction::Mul,
                "max" => ScatterReduction::Max,
                "min" => ScatterReduction::Min,
                other => {
                    return Err(attr_err("reduction", format!("must be none, add, mul, max or min, found '{other}'")))
                }
            };
            let axis = if op_type == "ScatterND" { None } else { Some(a.int_or("axis", 0)?) };
            op(Op::Scatter { axis, reduction })
        }
        "GatherND" => {
            let b = a.int_or("batch_dims", 0)?;
            let batch_dims =
                usize::try_from(b).map_err(|_| attr_err("batch_dims", format!("is {b}: it must be at least 0")))?;
            op(Op::GatherNd { batch_dims })
        }
        "CumSum" | "CumProd" => op(Op::Cumulative {
            product: op_type == "CumProd",
            exclusive: a.bool_or("exclusive", false)?,
            reverse: a.bool_or("reverse", false)?,
        }),
        "Expand" => op(Op::Expand),
        "Tile" => op(Op::Tile),
        "Pad" => {
            let mode = match a.string("mode")?.as_deref().unwrap_or("constant") {
                "constant" => PadMode::Constant,
                "reflect" => PadMode::Reflect,
                "edge" => PadMode::Edge,
                "wrap" => PadMode::Wrap,
                other => return Err(attr_err("mode", format!("unknown pad mode '{other}'"))),
            };
            if opset >= 11 {
                return op(Op::Pad { mode });
            }
            let pads = a.ints("pads")?.ok_or_else(|| attr_err("pads", "is required"))?;
            let value = scalar_const(x_dt, f64::from(a.float_or("value", 0.0)?))?;
            Ok(Parsed::Op(Op::Pad { mode }, vec![Slot::Onnx(0), ints_const(pads)?, value]))
        }
        "Range" => op(Op::Range),
        "Resize" => resize(a, opset, n),
        "Dropout" => {
            let seed = a.int("seed")?;
            if opset < 12 {
                let ratio = a.float_or("ratio", 0.5)?;
                return Ok(Parsed::Op(
                    Op::Dropout { seed },
                    vec![Slot::Onnx(0), scalar_const(DatumType::F32, f64::from(ratio))?],
                ));
            }
            op(Op::Dropout { seed })
        }
        "Identity" => op(Op::Identity),
        _ => Err(ParseError::Unknown),
    }
}

fn window(a: &Attrs<'_>, pooling: bool) -> Result<Window, ParseError> {
    let kernel = a.counts("kernel_shape")?;
    if pooling && kernel.is_empty() {
        return Err(attr_err("kernel_shape", "is required"));
    }
    let auto_pad = match a.string("auto_pad")?.as_deref().unwrap_or("NOTSET") {
        "NOTSET" | "" => AutoPad::NotSet,
        "SAME_UPPER" => AutoPad::SameUpper,
        "SAME_LOWER" => AutoPad::SameLower,
        "VALID" => AutoPad::Valid,
        other => return Err(attr_err("auto_pad", format!("unknown value '{other}'"))),
    };
    Ok(Window {
        kernel,
        strides: a.counts("strides")?,
        dilations: a.counts("dilations")?,
        pads: a.counts("pads")?,
        auto_pad,
        ceil_mode: pooling && a.bool_or("ceil_mode", false)?,
    })
}

fn constant(a: &Attrs<'_>) -> Result<Tensor<'static>, ParseError> {
    let other = |e: stowage_runtime::RuntimeError| ParseError::Other(e.to_string());
    if let Some(t) = a.tensor("value")? {
        return Ok(t);
    }
    if let Some(f) = a.has("value_float").then(|| a.float_or("value_float", 0.0)).transpose()? {
        return Tensor::from_vec(&[], vec![f]).map_err(other);
    }
    if let Some(v) = a.floats("value_floats")? {
        return Tensor::from_vec(&[v.len()], v).map_err(other);
    }
    if let Some(i) = a.int("value_int")? {
        return Tensor::from_vec(&[], vec![i]).map_err(other);
    }
    if let Some(v) = a.ints("value_ints")? {
        return Tensor::from_vec(&[v.len()], v).map_err(other);
    }
    for unsupported in ["sparse_value", "value_string", "value_strings"] {
        if a.has(unsupported) {
            return Err(attr_err(unsupported, "is not supported"));
        }
    }
    Err(attr_err("value", "a Constant needs one of value, value_float(s), value_int(s)"))
}

fn resize(a: &Attrs<'_>, opset: i64, n: usize) -> Result<Parsed, ParseError> {
    let mode = match a.string("mode")?.as_deref().unwrap_or("nearest") {
        "nearest" => ResizeMode::Nearest,
        "linear" => ResizeMode::Linear,
        "cubic" => ResizeMode::Cubic,
        other => return Err(attr_err("mode", format!("unknown mode '{other}'"))),
    };
    let default_ct = if opset < 11 { "asymmetric" } else { "half_pixel" };
    let coordinate_transform = match a.string("coordinate_transformation_mode")?.as_deref().unwrap_or(default_ct) {
        "half_pixel" => CoordinateTransform::HalfPixel,
        "half_pixel_symmetric" => CoordinateTransform::HalfPixelSymmetric,
        "pytorch_half_pixel" => CoordinateTransform::PytorchHalfPixel,
        "align_corners" => CoordinateTransform::AlignCorners,
        "asymmetric" => CoordinateTransform::Asymmetric,
        "tf_crop_and_resize" => CoordinateTransform::TfCropAndResize,
        other => return Err(attr_err("coordinate_transformation_mode", format!("unknown value '{other}'"))),
    };
    let default_nearest = if opset < 11 { "floor" } else { "round_prefer_floor" };
    let nearest_mode = match a.string("nearest_mode")?.as_deref().unwrap_or(default_nearest) {
        "round_prefer_floor" => NearestMode::RoundPreferFloor,
        "round_prefer_ceil" => NearestMode::RoundPreferCeil,
        "floor" => NearestMode::Floor,
        "ceil" => NearestMode::Ceil,
        other => return Err(attr_err("nearest_mode", format!("unknown value '{other}'"))),
    };
    let aspect_ratio = match a.string("keep_aspect_ratio_policy")?.as_deref().unwrap_or("stretch") {
        "stretch" => AspectRatioPolicy::Stretch,
        "not_larger" => AspectRatioPolicy::NotLarger,
        "not_smaller" => AspectRatioPolicy::NotSmaller,
        other => return Err(attr_err("keep_aspect_ratio_policy", format!("unknown value '{other}'"))),
    };
    let op = Op::Resize(Resize {
        mode,
        coordinate_transform,
        nearest_mode,
        antialias: a.bool_or("antialias", false)?,
        axes: a.ints("axes")?,
        aspect_ratio,
        extrapolation_value: a.float_or("extrapolation_value", 0.0)?,
        cubic_coeff_a: a.float_or("cubic_coeff_a", -0.75)?,
        exclude_outside: a.bool_or("exclude_outside", false)?,
        scales: Vec::new(),
    });
    // Opset 10 had inputs X, scales; from 11 on X, roi, scales, sizes.
    let slots = if opset < 11 {
        vec![Slot::Onnx(0), Slot::Onnx(usize::MAX), Slot::Onnx(1)]
    } else {
        (0..n).map(Slot::Onnx).collect()
    };
    Ok(Parsed::Op(op, slots))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::proto::NodeProto;

    /// Every op of [`crate::onnx::SUPPORTED_OPS`] is one `parse` knows (with or without its required attributes) or
    /// one of the expansions (or `If`, imported by `branch`), and a made-up one is not.
    #[test]
    fn the_supported_list_matches_the_parser() {
        let node = NodeProto::default();
        for op in crate::onnx::SUPPORTED_OPS {
            let known = !matches!(parse(op, &Attrs(&node), 18, &[]), Err(ParseError::Unknown))
                || crate::onnx::expand::is_expanded(op)
                || *op == "If";
            assert!(known, "{op} is listed as supported but the parser does not know it");
        }
        assert!(matches!(parse("Frobnicate", &Attrs(&node), 18, &[]), Err(ParseError::Unknown)));
    }
}
