//! Reading and building the constant tensors the compiler folds: elements as `f64` or `i64`, whatever the datum type.
//!
//! Folding computes floats in `f64` and rounds once to the target type (exact for +, -, *, / of f32 and narrower),
//! and integers in wrapping `i64` (two's complement, so truncating back gives each type's own wrapping result).

use half::{bf16, f16};
use stowage_runtime::{small_types, DatumType, Result, Tensor};

/// The elements as `f64`, in row-major order.
pub fn to_f64s(t: &Tensor<'_>) -> Result<Vec<f64>> {
    Ok(match t.dt() {
        DatumType::Bool => t.to_vec::<bool>()?.into_iter().map(|b| f64::from(u8::from(b))).collect(),
        DatumType::U8 => t.to_vec::<u8>()?.into_iter().map(f64::from).collect(),
        DatumType::U16 => t.to_vec::<u16>()?.into_iter().map(f64::from).collect(),
        DatumType::U32 => t.to_vec::<u32>()?.into_iter().map(f64::from).collect(),
        DatumType::U64 => t.to_vec::<u64>()?.into_iter().map(|x| x as f64).collect(),
        DatumType::I8 => t.to_vec::<i8>()?.into_iter().map(f64::from).collect(),
        DatumType::I16 => t.to_vec::<i16>()?.into_iter().map(f64::from).collect(),
        DatumType::I32 => t.to_vec::<i32>()?.into_iter().map(f64::from).collect(),
        DatumType::I64 => t.to_vec::<i64>()?.into_iter().map(|x| x as f64).collect(),
        DatumType::F16 => t.to_vec::<f16>()?.into_iter().map(f64::from).collect(),
        DatumType::BF16 => t.to_vec::<bf16>()?.into_iter().map(f64::from).collect(),
        DatumType::F32 => t.to_vec::<f32>()?.into_iter().map(f64::from).collect(),
        DatumType::F64 => t.to_vec::<f64>()?,
        DatumType::Str => return Err(not_numbers(t.name_or_unnamed(), DatumType::F64)),
        small => {
            let bytes = t.to_row_major()?;
            bytes.as_bytes()?.iter().map(|&b| f64::from(small_types::decode(small, b))).collect()
        }
    })
}

/// The elements as `i64`, in row-major order: integers wrap (u64 above `i64::MAX`), floats truncate toward zero
/// and saturate.
pub fn to_i64s(t: &Tensor<'_>) -> Result<Vec<i64>> {
    Ok(match t.dt() {
        DatumType::Bool => t.to_vec::<bool>()?.into_iter().map(i64::from).collect(),
        DatumType::U8 => t.to_vec::<u8>()?.into_iter().map(i64::from).collect(),
        DatumType::U16 => t.to_vec::<u16>()?.into_iter().map(i64::from).collect(),
        DatumType::U32 => t.to_vec::<u32>()?.into_iter().map(i64::from).collect(),
        DatumType::U64 => t.to_vec::<u64>()?.into_iter().map(|x| x as i64).collect(),
        DatumType::I8 => t.to_vec::<i8>()?.into_iter().map(i64::from).collect(),
        DatumType::I16 => t.to_vec::<i16>()?.into_iter().map(i64::from).collect(),
        DatumType::I32 => t.to_vec::<i32>()?.into_iter().map(i64::from).collect(),
        DatumType::I64 => t.to_vec::<i64>()?,
        DatumType::I4 | DatumType::I2 => t.to_row_major()?.as_bytes()?.iter().map(|&b| i64::from(b as i8)).collect(),
        DatumType::U4 | DatumType::U2 => t.to_row_major()?.as_bytes()?.iter().map(|&b| i64::from(b)).collect(),
        _ => to_f64s(t)?.into_iter().map(|x| x as i64).collect(),
    })
}

/// Strings are not numbers: reading one as a number, or numbers as strings, is this error (`Cast` parses and
/// prints them instead).
fn not_numbers(tensor: &str, expected: DatumType) -> stowage_runtime::RuntimeError {
    let found = if expected == DatumType::Str { DatumType::F64 } else { DatumType::Str };
    stowage_runtime::RuntimeError::DatumType { tensor: tensor.to_string(), expected, found }
}

/// A packed tensor of `dt` from `f64` elements: floats round to nearest, integers truncate and saturate,
/// bool is `x != 0`.
pub fn from_f64s(dt: DatumType, shape: &[usize], xs: &[f64]) -> Result<Tensor<'static>> {
    match dt {
        DatumType::Bool => Tensor::from_vec(shape, xs.iter().map(|&x| x != 0.0).collect::<Vec<bool>>()),
        DatumType::U8 => Tensor::from_vec(shape, xs.iter().map(|&x| x as u8).collect::<Vec<_>>()),
        DatumType::U16 => Tensor::from_vec(shape, xs.iter().map(|&x| x as u16).collect::<Vec<_>>()),
        DatumType::U32 => Tensor::from_vec(shape, xs.iter().map(|&x| x as u32).collect::<Vec<_>>()),
        DatumType::U64 => Tensor::from_vec(shape, xs.iter().map(|&x| x as u64).collect::<Vec<_>>()),
        DatumType::I8 => Tensor::from_vec(shape, xs.iter().map(|&x| x as i8).collect::<Vec<_>>()),
        DatumType::I16 => Tensor::from_vec(shape, xs.iter().map(|&x| x as i16).collect::<Vec<_>>()),
        DatumType::I32 => Tensor::from_vec(shape, xs.iter().map(|&x| x as i32).collect::<Vec<_>>()),
        DatumType::I64 => Tensor::from_vec(shape, xs.iter().map(|&x| x as i64).collect::<Vec<_>>()),
        DatumType::F16 => Tensor::from_vec(shape, xs.iter().map(|&x| f16::from_f64(x)).collect::<Vec<_>>()),
        DatumType::BF16 => Tensor::from_vec(shape, xs.iter().map(|&x| bf16::from_f64(x)).collect::<Vec<_>>()),
        DatumType::F32 => Tensor::from_vec(shape, xs.iter().map(|&x| x as f32).collect::<Vec<_>>()),
        DatumType::F64 => Tensor::from_slice(shape, xs),
        DatumType::Str => Err(not_numbers("<numbers>", DatumType::Str)),
        small => {
            let bytes: Vec<u8> =
                xs.iter().map(|&x| small_types::encode(small, x, true, small_types::E8M0Rounding::Up)).collect();
            Tensor::from_bytes(small, shape, &bytes)
        }
    }
}

/// A packed tensor of `dt` from `i64` elements: integers wrap to the type's width, bool is `x != 0`.
pub fn from_i64s(dt: DatumType, shape: &[usize], xs: &[i64]) -> Result<Tensor<'static>> {
    match dt {
        DatumType::Bool => Tensor::from_vec(shape, xs.iter().map(|&x| x != 0).collect::<Vec<bool>>()),
        DatumType::U8 => Tensor::from_vec(shape, xs.iter().map(|&x| x as u8).collect::<Vec<_>>()),
        DatumType::U16 => Tensor::from_vec(shape, xs.iter().map(|&x| x as u16).collect::<Vec<_>>()),
        DatumType::U32 => Tensor::from_vec(shape, xs.iter().map(|&x| x as u32).collect::<Vec<_>>()),
        DatumType::U64 => Tensor::from_vec(shape, xs.iter().map(|&x| x as u64).collect::<Vec<_>>()),
        DatumType::I8 => Tensor::from_vec(shape, xs.iter().map(|&x| x as i8).collect::<Vec<_>>()),
        DatumType::I16 => Tensor::from_vec(shape, xs.iter().map(|&x| x as i16).collect::<Vec<_>>()),
        DatumType::I32 => Tensor::from_vec(shape, xs.iter().map(|&x| x as i32).collect::<Vec<_>>()),
        DatumType::I64 => Tensor::from_slice(shape, xs),
        DatumType::I4 | DatumType::U4 | DatumType::I2 | DatumType::U2 => {
            Tensor::from_bytes(dt, shape, &xs.iter().map(|&x| small_types::wrap(dt, x)).collect::<Vec<_>>())
        }
        _ => from_f64s(dt, shape, &xs.iter().map(|&x| x as f64).collect::<Vec<_>>()),
    }
}

/// A tensor filled with one value (the element of `value`, a one-element tensor) of `shape`.
pub fn splat(value: &Tensor<'_>, shape: &[usize]) -> Result<Tensor<'static>> {
    let count = shape.iter().product::<usize>();
    Tensor::from_bytes(value.dt(), shape, &value.as_bytes()?.repeat(count))
}

/// True if every element has the same bytes (a tensor made by `ConstantOfShape`, for instance).
pub fn is_splat(t: &Tensor<'_>) -> bool {
    let size = t.dt().size_of();
    match t.as_bytes() {
        Ok(bytes) if bytes.len() >= size => bytes.chunks_exact(size).all(|c| c == &bytes[..size]),
        _ => false,
    }
}

/// Row-major strides, in elements, of a packed tensor of `shape`.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut st = vec![1; shape.len()];
    for a in (0..shape.len().saturating_sub(1)).rev() {
        st[a] = st[a + 1] * shape[a + 1];
    }
    st
}
