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
}

impl DatumType {
    /// Every datum type, in a fixed order.
    pub const ALL: [DatumType; 13] = [
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
    ];

    /// Size of one element in bytes.
    pub const fn size_of(self) -> usize {
        match self {
            DatumType::Bool | DatumType::U8 | DatumType::I8 => 1,
            DatumType::U16 | DatumType::I16 | DatumType::F16 | DatumType::BF16 => 2,
            DatumType::U32 | DatumType::I32 | DatumType::F32 => 4,
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
        }
    }

    /// True for the floating-point types.
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
