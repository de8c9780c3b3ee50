//! Ops that ONNX defines as functions of other ops, imported as those ops ([`super::expand`]): the activations
//! (`Elu`, `Celu`, `Selu`, `ThresholdedRelu`, `Softsign`, `Mish`, `Shrink`, `Swish`, `SwiGLU`), tests on floats (`IsNaN`, `IsInf`),
//! `Xor`, `Tan`, the reductions made of a sum (`ReduceL1`, `ReduceL2`, `ReduceSumSquare`, `ReduceLogSum`,
//! `ReduceLogSumExp`), the normalisations (`InstanceNormalization`, `MeanVarianceNormalization`,
//! `LpNormalization`), and data movement (`DepthToSpace`, `SpaceToDepth`). Each is written as the function body of
//! the ONNX specification, or an equivalent with the same value everywhere, NaN included (a `Where` on a `Less`
//! passes a NaN through, as the bodies do).

use stowage_runtime::DatumType;

use super::expand::{int, ints, Ex};
use crate::error::ImportErrorKind as E;

/// The op types this file expands.
pub const FUNCTION_OPS: &[&str] = &[
    "Celu",
    "DepthToSpace",
    "Elu",
    "InstanceNormalization",
    "IsInf",
    "IsNaN",
    "LpNormalization",
    "MeanVarianceNormalization",
    "Mish",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceSumSquare",
    "Selu",
    "Shrink",
    "Softsign",
    "SpaceToDepth",
    "SwiGLU",
    "Swish",
    "Tan",
    "ThresholdedRelu",
    "Xor",
];

fn f(ex: &Ex<'_, '_>, attr: &str, default: f32) -> Result<f32, E> {
    ex.attrs().float_or(attr, default).map_err(|e| ex.attr_err(e))
}

/// ONNX's type number for the half-precision types.
fn onnx_type(dt: DatumType) -> i64 {
    if dt == DatumType::BF16 {
        16
    } else {
        10
    }
}

/// `alpha · (exp(x) − 1)` where `x < 0`, else `x` (Elu's body; Celu's with `x / alpha` inside).
pub(super) fn elu(ex: &mut Ex<'_, '_>, x: &str, dt: DatumType, alpha: f32, celu: bool) -> Result<String, E> {
    let a = ex.scalar(dt, f64::from(alpha))?;
    let inner = if celu { ex.op("Div", &[x, &a], vec![])? } else { x.to_string() };
    let e = ex.op("Exp", &[&inner], vec![])?;
    let one = ex.scalar(dt, 1.0)?;
    let em1 = ex.op("Sub", &[&e, &one], vec![])?;
    let neg = ex.op("Mul", &[&a, &em1], vec![])?;
    let zero = ex.scalar(dt, 0.0)?;
    let below = ex.op("Less", &[x, &zero], vec![])?;
    ex.op("Where", &[&below, &neg, x], vec![])
}

/// `ReduceSum` of `x` over the node's axes (its attribute before opset 18, its second input from 18), with its
/// `keepdims` and `noop_with_empty_axes`.
fn reduce_sum(ex: &mut Ex<'_, '_>, x: &str) -> Result<String, E> {
    reduce(ex, "ReduceSum", x, None)
}

/// `op` (a reduction) of `x` over the node's axes, as [`reduce_sum`]; `keepdims` overrides the node's.
fn reduce(ex: &mut Ex<'_, '_>, op: &str, x: &str, keepdims: Option<i64>) -> Result<String, E> {
    let a = ex.attrs();
    let keep = match keepdims {
        Some(k) => k,
        None => a.int_or("keepdims", 1).map_err(|e| ex.attr_err(e))?,
    };
    let noop = a.int_or("noop_with_empty_axes", 0).map_err(|e| ex.attr_err(e))?;
    let axes = if ex.opset() >= 18 {
        ex.optional(1)
    } else {
        match a.ints("axes").map_err(|e| ex.attr_err(e))? {
            Some(v) => Some(ex.ints(&v)?),
            None => None,
        }
    };
    let mut inputs = vec![x];
    if let Some(ax) = &axes {
        inputs.push(ax);
    }
    ex.op(op, &inputs, vec![int("keepdims", keep), int("noop_with_empty_axes", noop)])
}

/// `ReduceMean` over `axes`, dimensions kept.
fn mean(ex: &mut Ex<'_, '_>, x: &str, axes: &[i64]) -> Result<String, E> {
    let ax = ex.ints(axes)?;
    ex.op("ReduceMean", &[x, &ax], vec![int("keepdims", 1)])
}

/// `(x − E[x]) / √(E[(x − E[x])²] + eps)` over `axes`.
fn normalize(ex: &mut Ex<'_, '_>, x: &str, dt: DatumType, axes: &[i64], eps: f64) -> Result<String, E> {
    let m = mean(ex, x, axes)?;
    let d = ex.op("Sub", &[x, &m], vec![])?;
    let sq = ex.op("Mul", &[&d, &d], vec![])?;
    let var = mean(ex, &sq, axes)?;
    let e = ex.scalar(dt, eps)?;
    let ve = ex.op("Add", &[&var, &e], vec![])?;
    let sd = ex.op("Sqrt", &[&ve], vec![])?;
    ex.op("Div", &[&d, &sd], vec![])
}

/// The inputs of an expanded op that set its output's shape (as [`crate::ir::Op::static_inputs`] does for the
/// others): the axes of the reductions (inputs from opset 18), a window's length, the one-hot depth.
pub(super) fn static_inputs(op: &str, opset: i64) -> &'static [usize] {
    match op {
        "ReduceL1" | "ReduceL2" | "ReduceLogSum" | "ReduceLogSumExp" | "ReduceSumSquare" if opset >= 18 => &[1],
        // The window's length and the one-hot depth set the output's shape (`windows.rs`, `masks.rs`).
        "HannWindow" | "HammingWindow" | "BlackmanWindow" => &[0],
        "OneHot" => &[1],
        // Lengths, axes and shapes of the spectral and image expansions (`spectral.rs`, `images.rs`).
        "DFT" if opset >= 20 => &[1, 2],
        "DFT" => &[1],
        "STFT" => &[1, 3],
        "CenterCropPad" => &[1],
        "Col2Im" => &[1, 2],
        "AffineGrid" => &[1],
        "MaxUnpool" => &[2],
        // Values that set the shape of `Compress` and `NonZero` (`movement.rs`).
        "Compress" => &[1],
        "NonZero" => &[0],
        "NonMaxSuppression" => &[0, 1, 2, 3, 4],
        "Unique" => &[0],
        // A split's width comes from its strings (`text.rs`, rule 2).
        "StringSplit" => &[0],
        "Upsample" => &[1],
        "MelWeightMatrix" => &[0, 1, 2, 3, 4],
        _ => &[],
    }
}

/// Expands the function op of `ex`; its outputs.
pub(super) fn expand(ex: &mut Ex<'_, '_>) -> Result<Vec<Option<String>>, E> {
    let x = ex.input(0)?;
    let xt = ex.ty(&x)?;
    // Half-precision activations are computed in f32 and rounded once, as a fused kernel would (each written node
    // would otherwise round its own result).
    let narrow = matches!(xt.dt, DatumType::F16 | DatumType::BF16)
        && matches!(
            ex.node.op_type(),
            "Elu" | "Celu" | "Selu" | "ThresholdedRelu" | "Softsign" | "Mish" | "Shrink" | "Tan" | "Swish" | "SwiGLU"
        );
    let (x, dt) = if narrow { (ex.op("Cast", &[&x], vec![int("to", 1)])?, DatumType::F32) } else { (x, xt.dt) };
    let y = match ex.node.op_type() {
        "Elu" => {
            let alpha = f(ex, "alpha", 1.0)?;
            elu(ex, &x, dt, alpha, false)?
        }
        "Celu" => {
            let alpha = f(ex, "alpha", 1.0)?;
            elu(ex, &x, dt, alpha, true)?
        }
        "Selu" => {
            let (alpha, gamma) = (f(ex, "alpha", 1.673_263_2)?, f(ex, "gamma", 1.050_701)?);
            let e = elu(ex, &x, dt, alpha, false)?;
            let g = ex.scalar(dt, f64::from(gamma))?;
            ex.op("Mul", &[&e, &g], vec![])?
        }
        "ThresholdedRelu" => {
            let a = ex.scalar(dt, f64::from(f(ex, "alpha", 1.0)?))?;
            let zero = ex.scalar(dt, 0.0)?;
            // x where x > alpha, else 0; a NaN is not above alpha and gives 0, as the body's Where does.
            let above = ex.op("Greater", &[&x, &a], vec![])?;
            ex.op("Where", &[&above, &x, &zero], vec![])?
        }
        "Swish" => {
            let a = ex.scalar(dt, f64::from(f(ex, "alpha", 1.0)?))?;
            let ax = ex.op("Mul", &[&a, &x], vec![])?;
            let s = ex.op("Sigmoid", &[&ax], vec![])?;
            ex.op("Mul", &[&x, &s], vec![])?
        }
        // `Swish(a) · b` of two inputs of one shape (no broadcasting).
        "SwiGLU" => {
            let b = ex.input(1)?;
            let bt = ex.ty(&b)?;
            if bt != xt {
                return Err(ex.fail(format!("B is {bt}: it must have A's type and shape, {xt}")));
            }
            let b = if narrow { ex.op("Cast", &[&b], vec![int("to", 1)])? } else { b };
            let a = ex.scalar(dt, f64::from(f(ex, "alpha", 1.0)?))?;
            let ax = ex.op("Mul", &[&a, &x], vec![])?;
            let s = ex.op("Sigmoid", &[&ax], vec![])?;
            let sw = ex.op("Mul", &[&x, &s], vec![])?;
            ex.op("Mul", &[&sw, &b], vec![])?
        }
        "Softsign" => {
            let abs = ex.op("Abs", &[&x], vec![])?;
            let one = ex.scalar(dt, 1.0)?;
            let den = ex.op("Add", &[&abs, &one], vec![])?;
            ex.op("Div", &[&x, &den], vec![])?
        }
        "Mish" => {
            let sp = ex.op("Softplus", &[&x], vec![])?;
            let t = ex.op("Tanh", &[&sp], vec![])?;
            ex.op("Mul", &[&x, &t], vec![])?
        }
        "Shrink" => {
            let (bias, lambd) = (f(ex, "bias", 0.0)?, f(ex, "lambd", 0.5)?);
            let (b, l, nl) =
                (ex.scalar(dt, f64::from(bias))?, ex.scalar(dt, f64::from(lambd))?, ex.scalar(dt, -f64::from(lambd))?);
            let zero = ex.scalar(dt, 0.0)?;
            let low = ex.op("Less", &[&x, &nl], vec![])?;
            let high = ex.op("Greater", &[&x, &l], vec![])?;
            let plus = ex.op("Add", &[&x, &b], vec![])?;
            let minus = ex.op("Sub", &[&x, &b], vec![])?;
            let hi = ex.op("Where", &[&high, &minus, &zero], vec![])?;
            ex.op("Where", &[&low, &plus, &hi], vec![])?
        }
        "IsNaN" => {
            let eq = ex.op("Equal", &[&x, &x], vec![])?;
            ex.op("Not", &[&eq], vec![])?
        }
        "IsInf" => {
            let a = ex.attrs();
            let pos = a.bool_or("detect_positive", true).map_err(|e| ex.attr_err(e))?;
            let neg = a.bool_or("detect_negative", true).map_err(|e| ex.attr_err(e))?;
            let mut tests = Vec::new();
            for (on, v) in [(pos, f64::INFINITY), (neg, f64::NEG_INFINITY)] {
                if on {
                    let inf = ex.scalar(dt, v)?;
                    tests.push(ex.op("Equal", &[&x, &inf], vec![])?);
                }
            }
            match tests.len() {
                2 => ex.op("Or", &[&tests[0], &tests[1]], vec![])?,
                1 => tests.remove(0),
                _ => {
                    let inf = ex.scalar(dt, f64::INFINITY)?;
                    let t = ex.op("Equal", &[&x, &inf], vec![])?;
                    let no = ex.op("Not", &[&t], vec![])?;
                    ex.op("And", &[&t, &no], vec![])?
                }
            }
        }
        "Xor" => {
            let b = ex.input(1)?;
            let both = ex.op("Equal", &[&x, &b], vec![])?;
            ex.op("Not", &[&both], vec![])?
        }
        "Tan" => {
            let (s, c) = (ex.op("Sin", &[&x], vec![])?, ex.op("Cos", &[&x], vec![])?);
            ex.op("Div", &[&s, &c], vec![])?
        }
        "ReduceL1" => {
            let abs = ex.op("Abs", &[&x], vec![])?;
            reduce_sum(ex, &abs)?
        }
        "ReduceL2" => {
            let sq = ex.op("Mul", &[&x, &x], vec![])?;
            let s = reduce_sum(ex, &sq)?;
            ex.op("Sqrt", &[&s], vec![])?
        }
        "ReduceSumSquare" => {
            let sq = ex.op("Mul", &[&x, &x], vec![])?;
            reduce_sum(ex, &sq)?
        }
        "ReduceLogSum" => {
            let s = reduce_sum(ex, &x)?;
            ex.op("Log", &[&s], vec![])?
        }
        "ReduceLogSumExp" => {
            // log Σ exp(x − m) + m with m the maximum, so that large inputs do not overflow (ONNX's body computes
            // in double for the same reason); dimensions kept, then reshaped to the node's keepdims.
            let m = reduce(ex, "ReduceMax", &x, Some(1))?;
            let d = ex.op("Sub", &[&x, &m], vec![])?;
            let e = ex.op("Exp", &[&d], vec![])?;
            let s = reduce(ex, "ReduceSum", &e, Some(1))?;
            let l = ex.op("Log", &[&s], vec![])?;
            let kept = ex.op("Add", &[&l, &m], vec![])?;
            let reduced = reduce_sum(ex, &x)?;
            let shape = ex.ty(&reduced)?.shape;
            let shape = ex.ints(&shape.iter().map(|&d| d as i64).collect::<Vec<_>>())?;
            ex.op("Reshape", &[&kept, &shape], vec![])?
        }
        "InstanceNormalization" => {
            let (scale, bias) = (ex.input(1)?, ex.input(2)?);
            if xt.rank() < 3 {
                return Err(ex.fail(format!("X is {xt}: it needs a batch, channels and at least one spatial axis")));
            }
            let eps = f64::from(f(ex, "epsilon", 1e-5)?);
            let axes: Vec<i64> = (2..xt.rank() as i64).collect();
            let n = normalize(ex, &x, dt, &axes, eps)?;
            // scale and bias [C] along axis 1.
            let per_channel: Vec<i64> = (1..xt.rank() as i64 - 1).collect();
            let ax = ex.ints(&per_channel)?;
            let s = ex.op("Unsqueeze", &[&scale, &ax], vec![])?;
            let b = ex.op("Unsqueeze", &[&bias, &ax], vec![])?;
            let m = ex.op("Mul", &[&n, &s], vec![])?;
            ex.op("Add", &[&m, &b], vec![])?
        }
        "MeanVarianceNormalization" => {
            let axes = ex.attrs().ints("axes").map_err(|e| ex.attr_err(e))?.unwrap_or_else(|| vec![0, 2, 3]);
            // The body's form: (x − E[x]) / (√(E[x²] − E[x]²) + 1e-9).
            let m = mean(ex, &x, &axes)?;
            let m2 = ex.op("Mul", &[&m, &m], vec![])?;
            let sq = ex.op("Mul", &[&x, &x], vec![])?;
            let e2 = mean(ex, &sq, &axes)?;
            let var = ex.op("Sub", &[&e2, &m2], vec![])?;
            let sd = ex.op("Sqrt", &[&var], vec![])?;
            let eps = ex.scalar(dt, 1e-9)?;
            let den = ex.op("Add", &[&sd, &eps], vec![])?;
            let d = ex.op("Sub", &[&x, &m], vec![])?;
            ex.op("Div", &[&d, &den], vec![])?
        }
        "LpNormalization" => {
            let a = ex.attrs();
            let axis = a.int_or("axis", -1).map_err(|e| ex.attr_err(e))?;
            let p = a.int_or("p", 2).map_err(|e| ex.attr_err(e))?;
            let ax = ex.ints(&[axis])?;
            let norm = match p {
                1 => {
                    let abs = ex.op("Abs", &[&x], vec![])?;
                    ex.op("ReduceSum", &[&abs, &ax], vec![int("keepdims", 1)])?
                }
                2 => {
                    let sq = ex.op("Mul", &[&x, &x], vec![])?;
                    let s = ex.op("ReduceSum", &[&sq, &ax], vec![int("keepdims", 1)])?;
                    ex.op("Sqrt", &[&s], vec![])?
                }
                other => return Err(ex.attr_fail("p", format!("must be 1 or 2, found {other}"))),
            };
            // A zero norm gives zeros, as onnxruntime and the node suite's cases do, not 0 / 0.
            let q = ex.op("Div", &[&x, &norm], vec![])?;
            let zero = ex.scalar(dt, 0.0)?;
            let none = ex.op("Equal", &[&norm, &zero], vec![])?;
            ex.op("Where", &[&none, &zero, &q], vec![])?
        }
        "DepthToSpace" | "SpaceToDepth" => {
            let a = ex.attrs();
            let b = a
                .int("blocksize")
                .map_err(|e| ex.attr_err(e))?
                .ok_or_else(|| ex.attr_fail("blocksize", "is required"))?;
            let crd = match a.string("mode").map_err(|e| ex.attr_err(e))?.as_deref().unwrap_or("DCR") {
                "DCR" => false,
                "CRD" => true,
                other => return Err(ex.attr_fail("mode", format!("must be DCR or CRD, found '{other}'"))),
            };
            if xt.rank() != 4 || !(1..=i64::from(i32::MAX)).contains(&b) {
                return Err(ex.fail(format!("X is {xt} and blocksize {b}: X must be 4-D and blocksize positive")));
            }
            let big = |ex: &Ex<'_, '_>| ex.fail(format!("X is {xt} and blocksize {b}: the output's sizes overflow"));
            let [n, c, h, w] = [xt.shape[0], xt.shape[1], xt.shape[2], xt.shape[3]].map(|d| d as i64);
            if [h, w, c].iter().any(|&d| d.checked_mul(b).and_then(|v| v.checked_mul(b)).is_none()) {
                return Err(big(ex));
            }
            let (split, perm, merged) = if ex.node.op_type() == "DepthToSpace" {
                if c % (b * b) != 0 {
                    return Err(ex.attr_fail("blocksize", format!("{b}² does not divide X's {c} channels")));
                }
                let cc = c / (b * b);
                if crd {
                    (vec![n, cc, b, b, h, w], vec![0, 1, 4, 2, 5, 3], vec![n, cc, h * b, w * b])
                } else {
                    (vec![n, b, b, cc, h, w], vec![0, 3, 4, 1, 5, 2], vec![n, cc, h * b, w * b])
                }
            } else {
                if h % b != 0 || w % b != 0 {
                    return Err(ex.attr_fail("blocksize", format!("{b} does not divide X's {h} × {w}")));
                }
                let perm = if crd { vec![0, 1, 3, 5, 2, 4] } else { vec![0, 3, 5, 1, 2, 4] };
                (vec![n, c, h / b, b, w / b, b], perm, vec![n, c * b * b, h / b, w / b])
            };
            let s = ex.ints(&split)?;
            let r = ex.op("Reshape", &[&x, &s], vec![])?;
            let t = ex.op("Transpose", &[&r], vec![ints("perm", perm)])?;
            let m = ex.ints(&merged)?;
            ex.op("Reshape", &[&t, &m], vec![])?
        }
        other => return Err(ex.fail(format!("'{other}' has no expansion"))),
    };
    let y = if narrow { ex.op("Cast", &[&y], vec![int("to", onnx_type(xt.dt))])? } else { y };
    Ok(vec![Some(y)])
}
