//! ONNX `TensorProto` to a runtime tensor: typed fields, `raw_data`, and `external_data` files beside the model.

use std::path::Path;

use half::{bf16, f16};
use stowage_runtime::{small_types, strings, DatumType, Tensor};

use super::external::ExternalDataError;
use super::proto::{tensor_proto::DataLocation, tensor_proto::DataType, TensorProto};
use crate::infer::MAX_ELEMENTS;

/// The datum type of an ONNX element type code, or the ONNX name of a type stowage does not take.
pub fn datum_type(code: i32) -> Result<DatumType, String> {
    let dt = DataType::try_from(code).map_err(|_| format!("unknown element type {code}"))?;
    Ok(match dt {
        DataType::Float => DatumType::F32,
        DataType::Uint8 => DatumType::U8,
        DataType::Int8 => DatumType::I8,
        DataType::Uint16 => DatumType::U16,
        DataType::Int16 => DatumType::I16,
        DataType::Int32 => DatumType::I32,
        DataType::Int64 => DatumType::I64,
        DataType::Bool => DatumType::Bool,
        DataType::Float16 => DatumType::F16,
        DataType::Double => DatumType::F64,
        DataType::Uint32 => DatumType::U32,
        DataType::Uint64 => DatumType::U64,
        DataType::Bfloat16 => DatumType::BF16,
        DataType::Float8e4m3fn => DatumType::F8E4M3FN,
        DataType::Float8e4m3fnuz => DatumType::F8E4M3FNUZ,
        DataType::Float8e5m2 => DatumType::F8E5M2,
        DataType::Float8e5m2fnuz => DatumType::F8E5M2FNUZ,
        DataType::Float8e8m0 => DatumType::F8E8M0,
        DataType::Float4e2m1 => DatumType::F4E2M1,
        DataType::Int4 => DatumType::I4,
        DataType::Uint4 => DatumType::U4,
        DataType::Int2 => DatumType::I2,
        DataType::Uint2 => DatumType::U2,
        DataType::String => DatumType::Str,
        other => return Err(format!("element type {} is not supported", other.as_str_name())),
    })
}

/// The ONNX element type code of a datum type.
pub fn onnx_type(dt: DatumType) -> DataType {
    match dt {
        DatumType::F32 => DataType::Float,
        DatumType::U8 => DataType::Uint8,
        DatumType::I8 => DataType::Int8,
        DatumType::U16 => DataType::Uint16,
        DatumType::I16 => DataType::Int16,
        DatumType::I32 => DataType::Int32,
        DatumType::I64 => DataType::Int64,
        DatumType::Bool => DataType::Bool,
        DatumType::F16 => DataType::Float16,
        DatumType::F64 => DataType::Double,
        DatumType::U32 => DataType::Uint32,
        DatumType::U64 => DataType::Uint64,
        DatumType::BF16 => DataType::Bfloat16,
        DatumType::F8E4M3FN => DataType::Float8e4m3fn,
        DatumType::F8E4M3FNUZ => DataType::Float8e4m3fnuz,
        DatumType::F8E5M2 => DataType::Float8e5m2,
        DatumType::F8E5M2FNUZ => DataType::Float8e5m2fnuz,
        DatumType::F8E8M0 => DataType::Float8e8m0,
        DatumType::F4E2M1 => DataType::Float4e2m1,
        DatumType::I4 => DataType::Int4,
        DatumType::U4 => DataType::Uint4,
        DatumType::I2 => DataType::Int2,
        DatumType::U2 => DataType::Uint2,
        DatumType::Str => DataType::String,
    }
}

/// Why a `TensorProto` could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum TensorError {
    /// Its type, shape or data do not make a tensor stowage takes.
    #[error("{0}")]
    Data(String),
    /// Its external data cannot be read.
    #[error(transparent)]
    External(#[from] ExternalDataError),
    /// It would be larger than one value may be: refused before its data is read or made.
    #[error(
        "it is {dt}{shape:?}, {bytes} bytes: more than the {limit}-byte limit on one value (raise it with \
         --max-value-bytes)"
    )]
    TooLarge {
        /// Its element type.
        dt: DatumType,
        /// Its shape.
        shape: Vec<usize>,
        /// Its bytes.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
}

impl From<String> for TensorError {
    fn from(message: String) -> Self {
        TensorError::Data(message)
    }
}

/// The size from which a tensor's `raw_data` is kept where it was decoded rather than copied (4 KiB): smaller
/// ones (shapes, indices, scales) are read by the import's passes, which take them aligned.
const SHARED_AT_LEAST: usize = 4 << 10;

/// Decodes a tensor. `dir` is the model's folder, where external data files are looked up
/// ([`super::external`]). A tensor larger than [`super::DEFAULT_MAX_VALUE_BYTES`] is refused.
pub fn decode(t: &TensorProto, dir: Option<&Path>) -> Result<Tensor<'static>, TensorError> {
    decode_within(t, dir, super::DEFAULT_MAX_VALUE_BYTES)
}

/// [`decode`], refusing a tensor of more than `limit` bytes before its external data is read or its bytes made.
pub fn decode_within(t: &TensorProto, dir: Option<&Path>, limit: usize) -> Result<Tensor<'static>, TensorError> {
    let dt = datum_type(t.data_type())?;
    let shape: Vec<usize> = t
        .dims
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("negative dimension {d}")))
        .collect::<Result<_, _>>()?;
    let count = shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .filter(|&n| n <= MAX_ELEMENTS)
        .ok_or_else(|| format!("shape {shape:?} is too large"))?;
    let bytes = count * dt.size_of();
    if bytes > limit {
        return Err(TensorError::TooLarge { dt, shape, bytes, limit });
    }
    if dt == DatumType::Str {
        return strings(t, &shape, count);
    }
    let stored = (count * small_types::bits(dt)).div_ceil(8);
    // A large tensor's `raw_data` shares the buffer the model was decoded from (the file's mapping: `decode_shared`)
    // and is read in place by what packs it; it is copied only if something reads it aligned.
    match &t.raw_data {
        Some(raw)
            if raw.len() >= SHARED_AT_LEAST
                && small_types::bits(dt) >= 8
                && t.data_location() != DataLocation::External =>
        {
            if raw.len() != bytes {
                return Err(format!("holds {} bytes of data, {dt}{shape:?} needs {bytes}", raw.len()).into());
            }
            let owner: stowage_runtime::Owner = std::sync::Arc::new(raw.clone());
            return Ok(Tensor::from_shared_bytes(dt, &shape, owner, 0..bytes).map_err(|e| e.to_string())?);
        }
        _ => {}
    }
    let bytes: std::borrow::Cow<'_, [u8]> = if t.data_location() == super::proto::tensor_proto::DataLocation::External {
        super::external::read(t, dir, stored)?.into()
    } else if let Some(raw) = &t.raw_data {
        raw[..].into()
    } else {
        typed_fields(t, dt, count)?.into()
    };
    let bytes = if small_types::bits(dt) < 8 {
        let unpacked = small_types::unpack(dt, &bytes, count).ok_or_else(|| {
            format!(
                "holds {} bytes of data, {dt}{shape:?} packs {count} elements of {} bits into {stored}",
                bytes.len(),
                small_types::bits(dt)
            )
        })?;
        unpacked.into()
    } else {
        bytes
    };
    let expected = count * dt.size_of();
    if bytes.len() != expected {
        return Err(format!("holds {} bytes of data, {dt}{shape:?} needs {expected}", bytes.len()).into());
    }
    Ok(Tensor::from_bytes(dt, &shape, &bytes).map_err(|e| e.to_string())?)
}

/// A string tensor from its `string_data`, each entry interned (`stowage_runtime::strings`); strings have no
/// `raw_data` or external form in ONNX.
fn strings(t: &TensorProto, shape: &[usize], count: usize) -> Result<Tensor<'static>, TensorError> {
    if t.raw_data.is_some() || t.data_location() == super::proto::tensor_proto::DataLocation::External {
        return Err("is a string tensor with raw or external data: ONNX keeps strings in string_data"
            .to_string()
            .into());
    }
    if t.string_data.len() != count {
        return Err(format!("holds {} strings, its shape {shape:?} needs {count}", t.string_data.len()).into());
    }
    let handles = t
        .string_data
        .iter()
        .enumerate()
        .map(|(k, s)| {
            strings::intern_bytes(s)
                .map_err(|e| format!("string_data[{k}] is not UTF-8 (byte {} is not)", e.valid_up_to()))
        })
        .collect::<Result<Vec<u32>, String>>()?;
    Ok(Tensor::from_bytes(DatumType::Str, shape, bytemuck::cast_slice(&handles)).map_err(|e| e.to_string())?)
}

fn typed_fields(t: &TensorProto, dt: DatumType, count: usize) -> Result<Vec<u8>, String> {
    // 4- and 2-bit elements are packed into the `int32_data` entries as into bytes, one byte per entry.
    let per_entry = 8 / small_types::bits(dt).min(8);
    let found = match dt {
        DatumType::F32 => t.float_data.len(),
        DatumType::F64 => t.double_data.len(),
        DatumType::I64 => t.int64_data.len(),
        DatumType::U32 | DatumType::U64 => t.uint64_data.len(),
        _ => t.int32_data.len(),
    };
    if per_entry > 1 && found != count.div_ceil(per_entry) {
        return Err(format!(
            "holds {found} int32_data entries of {per_entry} packed {dt} each, its shape needs {count}"
        ));
    }
    if per_entry == 1 && found != count {
        return Err(format!("holds {found} elements, its shape needs {count}"));
    }
    if dt.is_small() {
        if let Some((k, x)) = t.int32_data.iter().enumerate().find(|(_, x)| !(0..=255).contains(*x)) {
            let what =
                if per_entry > 1 { format!("{per_entry} packed {dt} values") } else { format!("one {dt} value") };
            return Err(format!("int32_data[{k}] is {x}: each entry holds one byte ({what})"));
        }
    }
    let mut out = Vec::with_capacity(count.div_ceil(per_entry) * dt.size_of());
    match dt {
        DatumType::F32 => t.float_data.iter().for_each(|x| out.extend(x.to_le_bytes())),
        DatumType::F64 => t.double_data.iter().for_each(|x| out.extend(x.to_le_bytes())),
        DatumType::I64 => t.int64_data.iter().for_each(|x| out.extend(x.to_le_bytes())),
        DatumType::U32 => t.uint64_data.iter().for_each(|&x| out.extend((x as u32).to_le_bytes())),
        DatumType::U64 => t.uint64_data.iter().for_each(|x| out.extend(x.to_le_bytes())),
        DatumType::I32 => t.int32_data.iter().for_each(|x| out.extend(x.to_le_bytes())),
        DatumType::I16 => t.int32_data.iter().for_each(|&x| out.extend((x as i16).to_le_bytes())),
        DatumType::U16 => t.int32_data.iter().for_each(|&x| out.extend((x as u16).to_le_bytes())),
        DatumType::I8 => t.int32_data.iter().for_each(|&x| out.push(x as i8 as u8)),
        DatumType::U8 => t.int32_data.iter().for_each(|&x| out.push(x as u8)),
        DatumType::Bool => t.int32_data.iter().for_each(|&x| out.push(u8::from(x != 0))),
        DatumType::F16 => t.int32_data.iter().for_each(|&x| out.extend(f16::from_bits(x as u16).to_le_bytes())),
        DatumType::BF16 => t.int32_data.iter().for_each(|&x| out.extend(bf16::from_bits(x as u16).to_le_bytes())),
        // The small types: one byte per entry, packed for the 4- and 2-bit ones (unpacked by the caller).
        _ => t.int32_data.iter().for_each(|&x| out.push(x as u8)),
    }
    Ok(out)
}

/// Encodes a tensor as a `TensorProto` with `raw_data` (for writing outputs and test data).
pub fn encode(t: &Tensor<'_>, name: &str) -> Result<TensorProto, String> {
    let packed = t.to_row_major().map_err(|e| e.to_string())?;
    let bytes = packed.as_bytes().map_err(|e| e.to_string())?;
    if t.dt() == DatumType::Str {
        // Strings leave as their text, in `string_data` (`strings`, rule 4).
        let handles: Vec<u32> = bytes.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        return Ok(TensorProto {
            dims: t.shape().iter().map(|&d| d as i64).collect(),
            data_type: Some(DataType::String as i32),
            name: Some(name.to_string()),
            string_data: strings::resolve_all(&handles).into_iter().map(|s| s.as_bytes().to_vec()).collect(),
            ..TensorProto::default()
        });
    }
    Ok(TensorProto {
        dims: t.shape().iter().map(|&d| d as i64).collect(),
        data_type: Some(onnx_type(t.dt()) as i32),
        name: Some(name.to_string()),
        raw_data: Some(small_types::pack(t.dt(), bytes).into()),
        ..TensorProto::default()
    })
}
