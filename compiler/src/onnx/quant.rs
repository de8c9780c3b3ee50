//! The quantization ops, imported as graphs of casts, arithmetic and the float products ([`super::expand`]):
//! `QuantizeLinear`, `DequantizeLinear`, `DynamicQuantizeLinear` (its ONNX function body), the integer products
//! `MatMulInteger` and `ConvInteger`, and the requantizing products `QLinearMatMul` and `QLinearConv`. A model in
//! ONNX Runtime's "QDQ" form (pairs of `QuantizeLinear`/`DequantizeLinear` around float ops) and one in its
//! "QOperator" form both import. The rules:
//! 1. **Exact integer products.** An integer product (`MatMulInteger`, `ConvInteger`, and the accumulator of the
//!    `QLinear` ops) is the float product of its operands minus their zero points. Each operand is at most 255 in
//!    magnitude (8-bit values minus 8-bit zero points), so every partial sum of a reduction of length `K` is at most
//!    `K · 255²`: the product runs in f32 while that stays below 2^24 (`K ≤ 258`, [`exact_type`]) and in f64 otherwise
//!    (exact below 2^53). Either way the int32 result is ONNX's, bit for bit, and runs on the fast float kernels.
//! 2. **Rounding and saturation.** A float becomes an integer by `Round` (half to even, as ONNX's `rint`), then
//!    `Clip` to the output type's range, then `Cast`; a quantized value never wraps.
//! 3. **Scales and zero points** are per tensor (one element), per axis (1-D, along `axis`) or blocked (the input's
//!    rank, `block_size` elements of `axis` per scale: widened with a `Gather` of `i / block_size`). Any other shape
//!    is an error naming the input, its type and the axis.
//! 4. **Requantization as the reference does it.** The `QLinear` ops' multiplier `a_scale · b_scale / y_scale` is
//!    computed in the scales' own type, then applied to the accumulator in f64, then rounded (rule 2).
//! 5. **Types.** Quantized values are 8- or 16-bit integers, int4/uint4, int2/uint2, the float8 types or float4e2m1;
//!    a zero point's type must be the quantized input's, and `QuantizeLinear`'s output type is its zero point's,
//!    else `output_dtype`, else uint8. Zero points and scales are cast to the working float type before they are
//!    shaped to broadcast (rule 3), so the small types meet nothing but casts.
//! 6. **Small float outputs** are not rounded to integers: `x / scale` is cast to float8 with the node's `saturate`
//!    (ONNX ignores a float8 zero point, which must be zero), and to float4e2m1 after adding the zero point
//!    (float4 always saturates): the cast's own round-to-nearest-even is the only rounding
//!    (`stowage_runtime::small_types`).

use stowage_runtime::DatumType;

use super::expand::{int, Ex};
use crate::error::ImportErrorKind as E;
use crate::ir::ValueType;

/// The op types this file expands.
pub const QUANT_OPS: &[&str] = &[
    "ConvInteger",
    "DequantizeLinear",
    "DynamicQuantizeLinear",
    "MatMulInteger",
    "QLinearConv",
    "QLinearMatMul",
    "QuantizeLinear",
];

/// Expands the op of `ex`; its outputs.
pub(super) fn expand(ex: &mut Ex<'_, '_>) -> Result<Vec<Option<String>>, E> {
    Ok(match ex.node.op_type() {
        "QuantizeLinear" => {
            let (x, s, zp) = (ex.input(0)?, ex.input(1)?, ex.optional(2));
            vec![Some(quantize(ex, &x, &s, zp.as_deref())?)]
        }
        "DequantizeLinear" => vec![Some(dequantize(ex)?)],
        "DynamicQuantizeLinear" => dynamic(ex)?,
        "MatMulInteger" => vec![Some(integer_product(ex, false)?)],
        "ConvInteger" => vec![Some(integer_product(ex, true)?)],
        "QLinearMatMul" => vec![Some(qlinear(ex, false)?)],
        "QLinearConv" => vec![Some(qlinear(ex, true)?)],
        other => return Err(ex.fail(format!("'{other}' has no expansion"))),
    })
}

/// The ONNX type code of `dt`, for a written `Cast`.
fn code(dt: DatumType) -> i64 {
    i64::from(super::tensor::onnx_type(dt) as i32)
}

/// `x` cast to `to`, unless it has that type already.
fn cast(ex: &mut Ex<'_, '_>, x: &str, to: DatumType) -> Result<String, E> {
    if ex.ty(x)?.dt == to {
        return Ok(x.to_string());
    }
    ex.op("Cast", &[x], vec![int("to", code(to))])
}

/// The range of a quantized type (rule 5), or an error naming `what`.
fn range(ex: &Ex<'_, '_>, dt: DatumType, what: &str) -> Result<(f64, f64), E> {
    Ok(match dt {
        DatumType::U8 => (0.0, 255.0),
        DatumType::I8 => (-128.0, 127.0),
        DatumType::U16 => (0.0, 65535.0),
        DatumType::I16 => (-32768.0, 32767.0),
        small if stowage_runtime::small_types::int_range(small).is_some() => {
            let (lo, hi) = stowage_runtime::small_types::int_range(small).unwrap_or_default();
            (lo as f64, hi as f64)
        }
        other => {
            return Err(ex.fail(format!(
                "{what} is {other}: quantized values must be int8, uint8, int16, uint16, int4, uint4, int2, uint2, \
                 a float8 type or float4e2m1"
            )))
        }
    })
}

/// The float type a quantized value is computed in: f64 when `dt` is, else f32.
fn work_type(dt: DatumType) -> DatumType {
    if dt == DatumType::F64 {
        DatumType::F64
    } else {
        DatumType::F32
    }
}

/// The float type in which an integer product over `k` terms is exact (rule 1).
pub(super) fn exact_type(k: usize) -> DatumType {
    if k.saturating_mul(255 * 255) < 1 << 24 {
        DatumType::F32
    } else {
        DatumType::F64
    }
}

/// `axis` of a rank-`rank` input, normalised, or an error naming the attribute (asked only where a scale is per
/// axis or blocked: a per-tensor scale ignores it).
fn axis(ex: &Ex<'_, '_>, rank: usize) -> Result<usize, E> {
    let a = ex.attrs().int_or("axis", 1).map_err(|e| ex.attr_err(e))?;
    let r = rank as i64;
    match a {
        a if (-r..r).contains(&a) => Ok(if a < 0 { a + r } else { a } as usize),
        a => Err(ex.attr_fail("axis", format!("is {a}: it must be in [-{r}, {r}) for an input of rank {rank}"))),
    }
}

/// The scale or zero point `p` (ONNX input `what`) shaped to broadcast against `x` of type `xt` (rule 3).
fn aligned(ex: &mut Ex<'_, '_>, p: &str, what: &str, xt: &ValueType, block: i64) -> Result<String, E> {
    let pt = ex.ty(p)?;
    let n = pt.element_count().unwrap_or(0);
    if pt.rank() == 0 {
        return Ok(p.to_string());
    }
    if block == 0 && n == 1 {
        let scalar = ex.ints(&[])?;
        return ex.op("Reshape", &[p, &scalar], vec![]);
    }
    let axis = axis(ex, xt.rank())?;
    if block == 0 {
        let d = xt.shape.get(axis).copied().unwrap_or(1);
        if pt.rank() != 1 || pt.shape[0] != d {
            return Err(ex.fail(format!(
                "{what} is {pt}: per-axis quantization along axis {axis} of {xt} needs {d} elements (one per index)"
            )));
        }
        let mut shape = vec![1i64; xt.rank() - axis];
        shape[0] = d as i64;
        let shape = ex.ints(&shape)?;
        return ex.op("Reshape", &[p, &shape], vec![]);
    }
    let b = block as usize;
    let fits = pt.rank() == xt.rank()
        && (0..xt.rank()).all(|i| {
            if i == axis {
                pt.shape[i] == xt.shape[i].div_ceil(b)
            } else {
                pt.shape[i] == xt.shape[i]
            }
        });
    if !fits {
        return Err(ex.fail(format!(
            "{what} is {pt}: blocked quantization of {xt} in blocks of {b} along axis {axis} needs the input's shape \
             with {} along that axis",
            xt.shape.get(axis).map_or(0, |d| d.div_ceil(b))
        )));
    }
    let idx: Vec<i64> = (0..xt.shape[axis] as i64).map(|i| i / block).collect();
    let idx = ex.ints(&idx)?;
    ex.op("Gather", &[p, &idx], vec![int("axis", axis as i64)])
}

/// Zero point `z` shaped to broadcast against `x` of type `xt` and cast to `wt`: a small type is cast first, so that
/// only casts take it (rule 5).
fn zero_point(
    ex: &mut Ex<'_, '_>,
    z: &str,
    what: &str,
    xt: &ValueType,
    block: i64,
    wt: DatumType,
) -> Result<String, E> {
    if ex.ty(z)?.dt.is_small() {
        let zf = cast(ex, z, wt)?;
        aligned(ex, &zf, what, xt, block)
    } else {
        let z = aligned(ex, z, what, xt, block)?;
        cast(ex, &z, wt)
    }
}

/// `block_size` (0: none), checked.
fn block_size(ex: &Ex<'_, '_>) -> Result<i64, E> {
    let b = ex.attrs().int_or("block_size", 0).map_err(|e| ex.attr_err(e))?;
    if b < 0 {
        return Err(ex.attr_fail("block_size", format!("is {b}: it must be 0 (none) or positive")));
    }
    Ok(b)
}

/// Rounds `v` half to even, saturates it to `dt`'s range and casts it (rule 2).
fn saturate(ex: &mut Ex<'_, '_>, v: &str, dt: DatumType, what: &str) -> Result<String, E> {
    let (lo, hi) = range(ex, dt, what)?;
    let wt = ex.ty(v)?.dt;
    let r = ex.op("Round", &[v], vec![])?;
    let (lo, hi) = (ex.scalar(wt, lo)?, ex.scalar(wt, hi)?);
    let c = ex.op("Clip", &[&r, &lo, &hi], vec![])?;
    cast(ex, &c, dt)
}

/// `QuantizeLinear(x, scale, zero_point)`: `saturate(round(x / scale) + zero_point)` (rules 2, 3, 5).
fn quantize(ex: &mut Ex<'_, '_>, x: &str, s: &str, zp: Option<&str>) -> Result<String, E> {
    let xt = ex.ty(x)?;
    if !xt.dt.is_float() {
        return Err(ex.fail(format!("x is {xt}: it must be a float tensor")));
    }
    let declared = ex.attrs().int_or("output_dtype", 0).map_err(|e| ex.attr_err(e))?;
    let declared = match declared {
        0 => None,
        c => Some(super::tensor::datum_type(c as i32).map_err(|m| ex.attr_fail("output_dtype", m))?),
    };
    let out = match (zp.map(|z| ex.ty(z)).transpose()?, declared) {
        (Some(zt), Some(d)) if zt.dt != d => {
            return Err(ex.attr_fail("output_dtype", format!("is {d}, but y_zero_point is {zt}")));
        }
        (Some(zt), _) => zt.dt,
        (None, Some(d)) => d,
        (None, None) => DatumType::U8,
    };
    let small_float = out.is_small() && stowage_runtime::small_types::int_range(out).is_none();
    if !small_float {
        range(ex, out, "the output")?;
    }
    let block = block_size(ex)?;
    let wt = work_type(xt.dt);
    let xf = cast(ex, x, wt)?;
    let s = aligned(ex, s, "y_scale", &xt, block)?;
    let sf = cast(ex, &s, wt)?;
    let q = ex.op("Div", &[&xf, &sf], vec![])?;
    if small_float {
        // Rule 6.
        let q = match zp {
            Some(z) if out == DatumType::F4E2M1 => {
                let zf = zero_point(ex, z, "y_zero_point", &xt, block, wt)?;
                ex.op("Add", &[&q, &zf], vec![])?
            }
            _ => q,
        };
        let keep = ex.attrs().int_or("saturate", 1).map_err(|e| ex.attr_err(e))?;
        return ex.op("Cast", &[&q], vec![int("to", code(out)), int("saturate", keep)]);
    }
    let q = ex.op("Round", &[&q], vec![])?;
    let q = match zp {
        Some(z) => {
            let zf = zero_point(ex, z, "y_zero_point", &xt, block, wt)?;
            ex.op("Add", &[&q, &zf], vec![])?
        }
        None => q,
    };
    saturate(ex, &q, out, "the output")
}

/// `DequantizeLinear(x, scale, zero_point)`: `(x − zero_point) · scale`, in the scale's type (rules 3, 5).
fn dequantize(ex: &mut Ex<'_, '_>) -> Result<String, E> {
    let (x, s, zp) = (ex.input(0)?, ex.input(1)?, ex.optional(2));
    let (xt, st) = (ex.ty(&x)?, ex.ty(&s)?);
    if !st.dt.is_float() {
        return Err(ex.fail(format!("x_scale is {st}: it must be a float tensor")));
    }
    if xt.dt != DatumType::I32 && !xt.dt.is_small() {
        range(ex, xt.dt, "x")?;
    }
    let declared = ex.attrs().int_or("output_dtype", 0).map_err(|e| ex.attr_err(e))?;
    let out = match declared {
        0 => st.dt,
        c => super::tensor::datum_type(c as i32).map_err(|m| ex.attr_fail("output_dtype", m))?,
    };
    let block = block_size(ex)?;
    let wt = if xt.dt == DatumType::I32 { DatumType::F64 } else { work_type(st.dt) };
    let mut v = cast(ex, &x, wt)?;
    if let Some(z) = zp {
        let zt = ex.ty(&z)?;
        if zt.dt != xt.dt {
            return Err(ex.fail(format!("x_zero_point is {zt}, but x is {xt}: they must have one type")));
        }
        let zf = zero_point(ex, &z, "x_zero_point", &xt, block, wt)?;
        v = ex.op("Sub", &[&v, &zf], vec![])?;
    }
    let s = aligned(ex, &s, "x_scale", &xt, block)?;
    let sf = cast(ex, &s, wt)?;
    let y = ex.op("Mul", &[&v, &sf], vec![])?;
    cast(ex, &y, out)
}

/// `DynamicQuantizeLinear(x)`: the scale and zero point that map `[min(x, 0), max(x, 0)]` onto uint8, and `x`
/// quantized with them (ONNX's function body).
fn dynamic(ex: &mut Ex<'_, '_>) -> Result<Vec<Option<String>>, E> {
    let x = ex.input(0)?;
    let xt = ex.ty(&x)?;
    if xt.dt != DatumType::F32 {
        return Err(ex.fail(format!("x is {xt}: it must be f32")));
    }
    let (qmin, qmax) = (ex.scalar(DatumType::F32, 0.0)?, ex.scalar(DatumType::F32, 255.0)?);
    let keep = vec![int("keepdims", 0)];
    let lo = ex.op("ReduceMin", &[&x], keep.clone())?;
    let lo = ex.op("Min", &[&lo, &qmin], vec![])?;
    let hi = ex.op("ReduceMax", &[&x], keep)?;
    let hi = ex.op("Max", &[&hi, &qmin], vec![])?;
    let span = ex.op("Sub", &[&hi, &lo], vec![])?;
    let scale = ex.op("Div", &[&span, &qmax], vec![])?;
    let scaled = ex.op("Div", &[&lo, &scale], vec![])?;
    let zp = ex.op("Sub", &[&qmin, &scaled], vec![])?;
    let zp = ex.op("Clip", &[&zp, &qmin, &qmax], vec![])?;
    let zp = ex.op("Round", &[&zp], vec![])?;
    let zp = cast(ex, &zp, DatumType::U8)?;
    let y = quantize(ex, &x, &scale, Some(&zp))?;
    Ok(vec![Some(y), Some(scale), Some(zp)])
}

/// An 8-bit operand minus its zero point, in `wt`; `zp_shape` reshapes a per-row or per-channel zero point.
fn centred(
    ex: &mut Ex<'_, '_>,
    v: &str,
    zp: Option<String>,
    what: &str,
    wt: DatumType,
    zp_shape: impl Fn(&ValueType) -> Option<Vec<i64>>,
) -> Result<String, E> {
    let vt = ex.ty(v)?;
    if !matches!(vt.dt, DatumType::U8 | DatumType::I8) {
        return Err(ex.fail(format!("{what} is {vt}: it must be int8 or uint8")));
    }
    let vf = cast(ex, v, wt)?;
    let Some(z) = zp else { return Ok(vf) };
    let zt = ex.ty(&z)?;
    if zt.dt != vt.dt {
        return Err(ex.fail(format!("{what}'s zero point is {zt}, but {what} is {vt}: they must have one type")));
    }
    let z = match zp_shape(&zt) {
        Some(shape) => {
            let shape = ex.ints(&shape)?;
            ex.op("Reshape", &[&z, &shape], vec![])?
        }
        None => z,
    };
    let zf = cast(ex, &z, wt)?;
    ex.op("Sub", &[&vf, &zf], vec![])
}

/// The exact product of the two centred operands, in the float type of rule 1, and that type. `x`, `w`: ONNX input
/// indices of the operands; `xz`, `wz`: of their zero points.
fn accumulate(ex: &mut Ex<'_, '_>, conv: bool, [x, xz, w, wz]: [usize; 4]) -> Result<(String, DatumType), E> {
    let (a, b) = (ex.input(x)?, ex.input(w)?);
    let (at, bt) = (ex.ty(&a)?, ex.ty(&b)?);
    let k = if conv { bt.shape.iter().skip(1).product::<usize>() } else { at.shape.last().copied().unwrap_or(1) };
    let wt = exact_type(k);
    let rank_a = at.rank();
    // A per-row zero point of A ([M]) becomes [M, 1]; a per-channel one of a convolution's weights ([M]) becomes
    // [M, 1, …]; per-tensor and already-broadcastable ones stay.
    let a_zp = move |zt: &ValueType| {
        (!conv && zt.rank() == 1 && zt.shape[0] > 1 && rank_a >= 2).then(|| vec![zt.shape[0] as i64, 1])
    };
    let rank_b = bt.rank();
    let b_zp = move |zt: &ValueType| {
        (conv && zt.rank() == 1).then(|| {
            let mut s = vec![1i64; rank_b];
            s[0] = zt.shape[0] as i64;
            s
        })
    };
    let (az, bz) = (ex.optional(xz), ex.optional(wz));
    let ac = centred(ex, &a, az, if conv { "x" } else { "A" }, wt, a_zp)?;
    let bc = centred(ex, &b, bz, if conv { "w" } else { "B" }, wt, b_zp)?;
    let y = if conv {
        let attrs = ex.node.attribute.clone();
        ex.op("Conv", &[&ac, &bc], attrs)?
    } else {
        ex.op("MatMul", &[&ac, &bc], vec![])?
    };
    Ok((y, wt))
}

/// `MatMulInteger` or `ConvInteger`: the int32 product of the operands minus their zero points (rule 1).
fn integer_product(ex: &mut Ex<'_, '_>, conv: bool) -> Result<String, E> {
    let (y, _) = accumulate(ex, conv, [0, 2, 1, 3])?;
    cast(ex, &y, DatumType::I32)
}

/// `QLinearMatMul` or `QLinearConv`: the integer product (plus the int32 bias of a convolution), requantized with
/// `a_scale · b_scale / y_scale` and the output's zero point (rules 1, 2, 4).
fn qlinear(ex: &mut Ex<'_, '_>, conv: bool) -> Result<String, E> {
    // Inputs: a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point[, bias (Conv)].
    let (acc, wt) = accumulate(ex, conv, [0, 2, 3, 5])?;
    let acc = match ex.optional(8).filter(|_| conv) {
        Some(bias) => {
            let bt = ex.ty(&bias)?;
            if bt.dt != DatumType::I32 || bt.rank() != 1 {
                return Err(ex.fail(format!("B is {bt}: it must be a 1-D int32 tensor, one per output channel")));
            }
            let out_rank = ex.ty(&acc)?.rank();
            let mut shape = vec![1i64; out_rank - 1];
            shape[0] = bt.shape[0] as i64;
            let shape = ex.ints(&shape)?;
            let b = ex.op("Reshape", &[&bias, &shape], vec![])?;
            let b = cast(ex, &b, wt)?;
            ex.op("Add", &[&acc, &b], vec![])?
        }
        None => acc,
    };
    let (sa, sb, sy, zy) = (ex.input(1)?, ex.input(4)?, ex.input(6)?, ex.optional(7));
    let st = ex.ty(&sa)?;
    if !st.dt.is_float() {
        return Err(ex.fail(format!("the scales are {st}: they must be float tensors")));
    }
    // The multiplier in the scales' type (rule 4); a convolution's per-channel weight scale lines up with the
    // output's channel axis.
    let m = ex.op("Mul", &[&sa, &sb], vec![])?;
    let m = ex.op("Div", &[&m, &sy], vec![])?;
    let mt = ex.ty(&m)?;
    let m = if conv && mt.rank() == 1 && mt.shape[0] > 1 {
        let mut shape = vec![1i64; ex.ty(&acc)?.rank() - 1];
        shape[0] = mt.shape[0] as i64;
        let shape = ex.ints(&shape)?;
        ex.op("Reshape", &[&m, &shape], vec![])?
    } else {
        m
    };
    let m = cast(ex, &m, DatumType::F64)?;
    let acc = cast(ex, &acc, DatumType::F64)?;
    let y = ex.op("Mul", &[&acc, &m], vec![])?;
    let a = ex.input(0)?;
    let a_dt = ex.ty(&a)?.dt;
    let (y, out) = match zy {
        Some(z) => {
            let zt = ex.ty(&z)?;
            let zf = cast(ex, &z, DatumType::F64)?;
            (ex.op("Add", &[&y, &zf], vec![])?, zt.dt)
        }
        None => (y, a_dt),
    };
    saturate(ex, &y, out, "y_zero_point")
}
