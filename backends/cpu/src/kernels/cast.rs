//! Cast between any two datum types. Floats to integers truncate toward zero and saturate; anything to bool is
//! `x != 0`; f32 to f16/bf16 rounds to nearest even; integers to floats round once (never through a wider float).
//! The small types (float8, float4, int4, int2) convert through `stowage_runtime::small_types`: read as `f32`
//! (exact), written from `f64` (one rounding) or, for the small integers from integers, by their low bits.

use half::{bf16, f16};
use stowage_runtime::small_types::{self, E8M0Rounding};
use stowage_runtime::{DatumType, Tensor};

use crate::error::Result;

/// Conversion from each "wide" source kind, with Rust's `as` semantics (saturating for floats to integers).
trait FromWide: stowage_runtime::Datum {
    fn from_f32(x: f32) -> Self;
    fn from_f64(x: f64) -> Self;
    fn from_i64(x: i64) -> Self;
    fn from_u64(x: u64) -> Self;
}

macro_rules! prim_from_wide {
    ($($t:ty),*) => {$(
        impl FromWide for $t {
            fn from_f32(x: f32) -> Self { x as $t }
            fn from_f64(x: f64) -> Self { x as $t }
            fn from_i64(x: i64) -> Self { x as $t }
            fn from_u64(x: u64) -> Self { x as $t }
        }
    )*};
}
prim_from_wide!(u8, u16, u32, u64, i8, i16, i32, i64, f32, f64);

impl FromWide for bool {
    fn from_f32(x: f32) -> Self {
        x != 0.0
    }
    fn from_f64(x: f64) -> Self {
        x != 0.0
    }
    fn from_i64(x: i64) -> Self {
        x != 0
    }
    fn from_u64(x: u64) -> Self {
        x != 0
    }
}

impl FromWide for f16 {
    fn from_f32(x: f32) -> Self {
        f16::from_f32(x)
    }
    fn from_f64(x: f64) -> Self {
        f16::from_f64(x)
    }
    fn from_i64(x: i64) -> Self {
        f16::from_f64(x as f64)
    }
    fn from_u64(x: u64) -> Self {
        f16::from_f64(x as f64)
    }
}

impl FromWide for bf16 {
    fn from_f32(x: f32) -> Self {
        bf16::from_f32(x)
    }
    fn from_f64(x: f64) -> Self {
        bf16::from_f64(x)
    }
    fn from_i64(x: i64) -> Self {
        bf16::from_f64(x as f64)
    }
    fn from_u64(x: u64) -> Self {
        bf16::from_f64(x as f64)
    }
}

fn convert<D: FromWide>(x: &Tensor<'_>) -> Result<Vec<D>> {
    Ok(match x.dt() {
        DatumType::Bool => x.to_vec::<bool>()?.into_iter().map(|b| D::from_u64(u64::from(b))).collect(),
        DatumType::U8 => x.to_vec::<u8>()?.into_iter().map(|v| D::from_u64(v.into())).collect(),
        DatumType::U16 => x.to_vec::<u16>()?.into_iter().map(|v| D::from_u64(v.into())).collect(),
        DatumType::U32 => x.to_vec::<u32>()?.into_iter().map(|v| D::from_u64(v.into())).collect(),
        DatumType::U64 => x.to_vec::<u64>()?.into_iter().map(D::from_u64).collect(),
        DatumType::I8 => x.to_vec::<i8>()?.into_iter().map(|v| D::from_i64(v.into())).collect(),
        DatumType::I16 => x.to_vec::<i16>()?.into_iter().map(|v| D::from_i64(v.into())).collect(),
        DatumType::I32 => x.to_vec::<i32>()?.into_iter().map(|v| D::from_i64(v.into())).collect(),
        DatumType::I64 => x.to_vec::<i64>()?.into_iter().map(D::from_i64).collect(),
        DatumType::F16 => x.to_vec::<f16>()?.into_iter().map(|v| D::from_f32(v.to_f32())).collect(),
        DatumType::BF16 => x.to_vec::<bf16>()?.into_iter().map(|v| D::from_f32(v.to_f32())).collect(),
        DatumType::F32 => x.to_vec::<f32>()?.into_iter().map(D::from_f32).collect(),
        DatumType::F64 => x.to_vec::<f64>()?.into_iter().map(D::from_f64).collect(),
        small => return Err(crate::error::CpuError::Unsupported { op: "Cast (through f32)", dt: small }),
    })
}

/// `x` converted to `to`, in a new packed tensor, with ONNX's default mode for the small types.
pub fn cast(x: &Tensor<'_>, to: DatumType) -> Result<Tensor<'static>> {
    cast_with(x, to, true, E8M0Rounding::Up)
}

/// `x` converted to `to` as ONNX's `Cast` with `saturate` and `round_mode` (which only the small types heed).
pub fn cast_with(x: &Tensor<'_>, to: DatumType, saturate: bool, rounding: E8M0Rounding) -> Result<Tensor<'static>> {
    let (from, shape) = (x.dt(), x.shape());
    if from.is_small() {
        let packed = x.to_row_major()?;
        let bytes = packed.as_bytes()?;
        if to.is_small() {
            let out: Vec<u8> = bytes
                .iter()
                .map(|&b| small_types::encode(to, f64::from(small_types::decode(from, b)), saturate, rounding))
                .collect();
            return Ok(crate::storage::tensor_from_bytes(to, shape, &out)?);
        }
        let wide: Vec<f32> = bytes.iter().map(|&b| small_types::decode(from, b)).collect();
        return wide_cast(&crate::storage::tensor_from_vec(shape, wide)?, to);
    }
    if !to.is_small() {
        return wide_cast(x, to);
    }
    let out: Vec<u8> = match to {
        DatumType::I4 | DatumType::U4 | DatumType::I2 | DatumType::U2 if !from.is_float() => {
            convert::<i64>(x)?.into_iter().map(|v| small_types::wrap(to, v)).collect()
        }
        _ => convert::<f64>(x)?.into_iter().map(|v| small_types::encode(to, v, saturate, rounding)).collect(),
    };
    Ok(crate::storage::tensor_from_bytes(to, shape, &out)?)
}

/// [`cast`] between two types that are not small.
fn wide_cast(x: &Tensor<'_>, to: DatumType) -> Result<Tensor<'static>> {
    let shape = x.shape();
    Ok(match to {
        DatumType::Bool => crate::storage::tensor_from_vec(shape, convert::<bool>(x)?)?,
        DatumType::U8 => crate::storage::tensor_from_vec(shape, convert::<u8>(x)?)?,
        DatumType::U16 => crate::storage::tensor_from_vec(shape, convert::<u16>(x)?)?,
        DatumType::U32 => crate::storage::tensor_from_vec(shape, convert::<u32>(x)?)?,
        DatumType::U64 => crate::storage::tensor_from_vec(shape, convert::<u64>(x)?)?,
        DatumType::I8 => crate::storage::tensor_from_vec(shape, convert::<i8>(x)?)?,
        DatumType::I16 => crate::storage::tensor_from_vec(shape, convert::<i16>(x)?)?,
        DatumType::I32 => crate::storage::tensor_from_vec(shape, convert::<i32>(x)?)?,
        DatumType::I64 => crate::storage::tensor_from_vec(shape, convert::<i64>(x)?)?,
        DatumType::F16 => crate::storage::tensor_from_vec(shape, convert::<f16>(x)?)?,
        DatumType::BF16 => crate::storage::tensor_from_vec(shape, convert::<bf16>(x)?)?,
        DatumType::F32 => crate::storage::tensor_from_vec(shape, convert::<f32>(x)?)?,
        DatumType::F64 => crate::storage::tensor_from_vec(shape, convert::<f64>(x)?)?,
        small => return Err(crate::error::CpuError::Unsupported { op: "Cast (through f32)", dt: small }),
    })
}
