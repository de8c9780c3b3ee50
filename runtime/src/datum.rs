//! Datum types: what one element of a tensor is.

use std::fmt;

use bytemuck::{CheckedBitPattern, NoUninit};

/// The element type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DatumType {
    /// Boolean, one byte, 0 or 1.
    Bool,
    /// Unsigned 8-bit integer.
    U8,
    /// Unsigned 16-bit integer.
    U16,
    /// Unsigned 32-bit integer.
    U32,
    /// Unsigned 64-bit integer.
    U64,
    /// Signed 8-bit integer.
    I8,
    /// Signed 16-bit integer.
    I16,
    /// Signed 32-bit integer.
    I32,
    /// Signed 64-bit integer.
    I64,
    /// IEEE 754 half precision.
    F16,
    /// bfloat16.
    BF16,
    /// IEEE 754 single precision.
    F32,
    /// IEEE 754 double precision.
    F64,
    /// float8 E4M3, finite and NaN only (ONNX `FLOAT8E4M3FN`); one byte, its bit pattern.
    F8E4M3FN,
    /// float8 E4M3, no negative zero, NaN `0x80` (ONNX `FLOAT8E4M3FNUZ`).
    F8E4M3FNUZ,
    /// float8 E5M2, with infinities (ONNX `FLOAT8E5M2`).
    F8E5M2,
    /// float8 E5M2, no negative zero, NaN `0x80` (ONNX `FLOAT8E5M2FNUZ`).
    F8E5M2FNUZ,
    /// float8 E8M0, a power of two (ONNX `FLOAT8E8M0`).
    F8E8M0,
    /// float4 E2M1, finite only (ONNX `FLOAT4E2M1`); one element per byte in memory, two per byte in files.
    F4E2M1,
    /// Signed 4-bit integer, one per byte sign-extended in memory, two per byte in files.
    I4,
    /// Unsigned 4-bit integer, one per byte in memory, two per byte in files.
    U4,
    /// Signed 2-bit integer, one per byte sign-extended in memory, four per byte in files.
    I2,
    /// Unsigned 2-bit integer, one per byte in memory, four per byte in files.
    U2,
    /// A UTF-8 string (ONNX `STRING`), held as a 4-byte handle into the process's string table
    /// ([`crate::strings`]): equal strings have equal handles, so moving, comparing and selecting them is moving,
    /// comparing and selecting handles.
    Str,
}

impl DatumType {
    /// Every datum type, in a fixed order.
    pub const ALL: [DatumType; 24] = [
        DatumType::Bool,
        DatumType::U8,
        DatumType::U16,
        DatumType::U32,
        DatumType::U64,
        DatumType::I8,
        DatumType::I16,
        DatumType::I32,
        DatumType::I64,
        DatumType::F16,
        DatumType::BF16,
        DatumType::F32,
        DatumType::F64,
        DatumType::F8E4M3FN,
        DatumType::F8E4M3FNUZ,
        DatumType::F8E5M2,
        DatumType::F8E5M2FNUZ,
        DatumType::F8E8M0,
        DatumType::F4E2M1,
        DatumType::I4,
        DatumType::U4,
        DatumType::I2,
        DatumType::U2,
        DatumType::Str,
    ];

    /// Size of one element in bytes.
    pub const fn size_of(self) -> usize {
        match self {
            DatumType::Bool | DatumType::U8 | DatumType::I8 => 1,
            DatumType::F8E4M3FN
            | DatumType::F8E4M3FNUZ
            | DatumType::F8E5M2
            | DatumType::F8E5M2FNUZ
            | DatumType::F8E8M0
            | DatumType::F4E2M1
            | DatumType::I4
            | DatumType::U4
            | DatumType::I2
            | DatumType::U2 => 1,
            DatumType::U16 | DatumType::I16 | DatumType::F16 | DatumType::BF16 => 2,
            DatumType::U32 | DatumType::I32 | DatumType::F32 | DatumType::Str => 4,
            DatumType::U64 | DatumType::I64 | DatumType::F64 => 8,
        }
    }

    /// The lower-case name used in errors, plans and reports (`f32`, `bf16`, `bool`).
    pub const fn name(self) -> &'static str {
        match self {
            DatumType::Bool => "bool",
            DatumType::U8 => "u8",
            DatumType::U16 => "u16",
            DatumType::U32 => "u32",
            DatumType::U64 => "u64",
            DatumType::I8 => "i8",
            DatumType::I16 => "i16",
            DatumType::I32 => "i32",
            DatumType::I64 => "i64",
            DatumType::F16 => "f16",
            DatumType::BF16 => "bf16",
            DatumType::F32 => "f32",
            DatumType::F64 => "f64",
            DatumType::F8E4M3FN => "f8e4m3fn",
            DatumType::F8E4M3FNUZ => "f8e4m3fnuz",
            DatumType::F8E5M2 => "f8e5m2",
            DatumType::F8E5M2FNUZ => "f8e5m2fnuz",
            DatumType::F8E8M0 => "f8e8m0fnu",
            DatumType::F4E2M1 => "f4e2m1fn",
            DatumType::I4 => "i4",
            DatumType::U4 => "u4",
            DatumType::I2 => "i2",
            DatumType::U2 => "u2",
            DatumType::Str => "string",
        }
    }

    /// True for the small types of [`crate::small_types`] (float8, float4, int4, int2): stored one element per
    /// byte, with no Rust type; kernels take them only through `Cast` and the quantization ops.
    pub const fn is_small(self) -> bool {
        crate::small_types::is_small(self)
    }

    /// True for the floating-point types the kernels compute in (not the small float types: see
    /// [`DatumType::is_small`]).
    pub const fn is_float(self) -> bool {
        matches!(self, DatumType::F16 | DatumType::BF16 | DatumType::F32 | DatumType::F64)
    }
}

impl fmt::Display for DatumType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A Rust type that is the element of a tensor of one [`DatumType`].
///
/// Typed access (`Tensor::as_slice::<f32>()`) checks the tensor's datum type against
/// `T::DATUM_TYPE` and reinterprets the bytes with `bytemuck`, so no `unsafe` is needed
/// and a byte that is not a valid `bool` is an error rather than undefined behaviour.
pub trait Datum: CheckedBitPattern + NoUninit + Copy + Send + Sync + fmt::Debug + 'static {
    /// The datum type of a tensor whose elements are `Self`.
    const DATUM_TYPE: DatumType;
}

macro_rules! datum {
    ($($t:ty => $dt:ident),* $(,)?) => {
        $(impl Datum for $t { const DATUM_TYPE: DatumType = DatumType::$dt; })*
    };
}

datum! {
    bool => Bool, u8 => U8, u16 => U16, u32 => U32, u64 => U64,
    i8 => I8, i16 => I16, i32 => I32, i64 => I64,
    half::f16 => F16, half::bf16 => BF16, f32 => F32, f64 => F64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_match_the_rust_types() {
        fn check<T: Datum>() {
            assert_eq!(T::DATUM_TYPE.size_of(), std::mem::size_of::<T>(), "{}", T::DATUM_TYPE);
        }
        check::<bool>();
        check::<u8>();
        check::<u16>();
        check::<u32>();
        check::<u64>();
        check::<i8>();
        check::<i16>();
        check::<i32>();
        check::<i64>();
        check::<half::f16>();
        check::<half::bf16>();
        check::<f32>();
        check::<f64>();
    }
}
