//! Element types as Rust types: one trait for the arithmetic every numeric datum type supports, and the macros
//! that dispatch a [`DatumType`](stowage_runtime::DatumType) to generic code.

/// Arithmetic with the semantics ONNX kernels use: integers wrap, integer division by zero gives 0 (ONNX leaves it
/// undefined; a kernel must not abort), floats follow IEEE.
pub trait Arith: Copy + PartialOrd + Send + Sync + stowage_runtime::Datum + 'static {
    /// `a + b`.
    fn add(self, b: Self) -> Self;
    /// `a - b`.
    fn sub(self, b: Self) -> Self;
    /// `a * b`.
    fn mul(self, b: Self) -> Self;
    /// `a / b`; integers truncate.
    fn div(self, b: Self) -> Self;
    /// Remainder with the divisor's sign (Python's `%`); 0 for an integer division by zero.
    fn rem_floor(self, b: Self) -> Self;
    /// Remainder with the dividend's sign (C's `%` and `fmod`); 0 for an integer division by zero.
    fn rem_trunc(self, b: Self) -> Self;
    /// The bits of `a` and `b` combined by `op` (integers; NaN for floats, which ONNX does not allow).
    fn bits(self, b: Self, op: Bits) -> Self;
    /// The value as `f64`.
    fn to_f64(self) -> f64;
    /// The value from `f64` (integers truncate and saturate).
    fn from_f64(x: f64) -> Self;
    /// Zero.
    fn zero() -> Self;
    /// True for NaN.
    fn is_nan(self) -> bool {
        false
    }
}

/// An operation on the bits of integers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bits {
    /// `a << b`, wrapping; 0 when `b` is negative or at least the width.
    Left,
    /// `a >> b`, arithmetic for signed types; the sign's fill (0 or -1) when `b` is negative or at least the width.
    Right,
    /// `a & b`.
    And,
    /// `a | b`.
    Or,
    /// `a ^ b`.
    Xor,
    /// `!a` (`b` unused).
    Not,
}

macro_rules! int_arith {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            #[allow(unused_comparisons)]
            fn rem_floor(self, b: Self) -> Self {
                let r = self.rem_trunc(b);
                if r != 0 && (r < 0) != (b < 0) { r.wrapping_add(b) } else { r }
            }
            fn rem_trunc(self, b: Self) -> Self { if b == 0 { 0 } else { self.wrapping_rem(b) } }
            #[allow(unused_comparisons)]
            fn bits(self, b: Self, op: Bits) -> Self {
                // A shift by a negative amount or by the width or more leaves nothing but the sign's fill.
                let amount = u32::try_from(b).ok();
                match op {
                    Bits::Left => amount.and_then(|s| self.checked_shl(s)).unwrap_or(0),
                    Bits::Right => amount.and_then(|s| self.checked_shr(s)).unwrap_or(if self < 0 { !0 } else { 0 }),
                    Bits::And => self & b,
                    Bits::Or => self | b,
                    Bits::Xor => self ^ b,
                    Bits::Not => !self,
                }
            }
            fn add(self, b: Self) -> Self { self.wrapping_add(b) }
            fn sub(self, b: Self) -> Self { self.wrapping_sub(b) }
            fn mul(self, b: Self) -> Self { self.wrapping_mul(b) }
            fn div(self, b: Self) -> Self { if b == 0 { 0 } else { self.wrapping_div(b) } }
            fn to_f64(self) -> f64 { self as f64 }
            fn from_f64(x: f64) -> Self { x as $t }
            fn zero() -> Self { 0 }
        }
    )*};
}
int_arith!(u8, u16, u32, u64, i8, i16, i32, i64);

macro_rules! float_arith {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            fn rem_floor(self, b: Self) -> Self {
                let r = self % b;
                if r != 0.0 && (r < 0.0) != (b < 0.0) { r + b } else { r.copysign(b) }
            }
            fn rem_trunc(self, b: Self) -> Self { self % b }
            fn bits(self, _: Self, _: Bits) -> Self { <$t>::NAN }
            fn add(self, b: Self) -> Self { self + b }
            fn sub(self, b: Self) -> Self { self - b }
            fn mul(self, b: Self) -> Self { self * b }
            fn div(self, b: Self) -> Self { self / b }
            fn to_f64(self) -> f64 { self as f64 }
            fn from_f64(x: f64) -> Self { x as $t }
            fn zero() -> Self { 0.0 }
            fn is_nan(self) -> bool { <$t>::is_nan(self) }
        }
    )*};
}
float_arith!(f32, f64);

/// Runs `$body` with `$T` bound to the Rust type of a numeric datum type (not bool, f16 or bf16), else `$other`.
#[macro_export]
#[doc(hidden)]
macro_rules! numeric {
    ($dt:expr, $T:ident => $body:expr, else $other:expr) => {
        match $dt {
            stowage_runtime::DatumType::U8 => {
                type $T = u8;
                $body
            }
            stowage_runtime::DatumType::U16 => {
                type $T = u16;
                $body
            }
            stowage_runtime::DatumType::U32 => {
                type $T = u32;
                $body
            }
            stowage_runtime::DatumType::U64 => {
                type $T = u64;
                $body
            }
            stowage_runtime::DatumType::I8 => {
                type $T = i8;
                $body
            }
            stowage_runtime::DatumType::I16 => {
                type $T = i16;
                $body
            }
            stowage_runtime::DatumType::I32 => {
                type $T = i32;
                $body
            }
            stowage_runtime::DatumType::I64 => {
                type $T = i64;
                $body
            }
            stowage_runtime::DatumType::F32 => {
                type $T = f32;
                $body
            }
            stowage_runtime::DatumType::F64 => {
                type $T = f64;
                $body
            }
            _ => $other,
        }
    };
}

/// A tensor's elements and the shape they have, for an operand that is broadcast to the tensor's shape anyway: a
/// packed tensor as itself; a broadcast view (an `Expand`'s output: strides 0 along some axes, the others those of
/// the packed tensor whose shape has 1 there) as that smaller tensor, read in place where it was copied out
/// element by element to its full size (magika's one-hot `Equal` of two such views, 2048 × 257: 0.31 ms);
/// anything else copied.
pub fn broadcast_elems<'t, T: stowage_runtime::Datum>(
    t: &'t stowage_runtime::Tensor<'_>,
) -> stowage_runtime::Result<(std::borrow::Cow<'t, [T]>, Vec<usize>)> {
    if let Ok(s) = t.as_slice::<T>() {
        return Ok((std::borrow::Cow::Borrowed(s), t.shape().to_vec()));
    }
    let (shape, strides) = (t.shape(), t.layout().strides());
    let small: Vec<usize> = shape.iter().zip(strides).map(|(&d, &st)| if st == 0 { 1 } else { d }).collect();
    let mut packed = 1usize;
    let mut fits = t.dt() == T::DATUM_TYPE && strides.len() == shape.len();
    for a in (0..shape.len()).rev() {
        if small[a] != 1 {
            fits &= strides[a] == packed;
            packed = packed.saturating_mul(small[a]);
        }
    }
    if fits {
        let start = t.layout().offset();
        let size = std::mem::size_of::<T>();
        if let Some(bytes) = t.storage().materialize()?.get(start..start + packed * size) {
            if let Ok(s) = bytemuck::checked::try_cast_slice::<u8, T>(bytes) {
                return Ok((std::borrow::Cow::Borrowed(s), small));
            }
        }
    }
    Ok((std::borrow::Cow::Owned(t.to_vec::<T>()?), shape.to_vec()))
}

/// A tensor's elements: borrowed when it is packed and aligned, copied otherwise.
pub fn elems<'t, T: stowage_runtime::Datum>(
    t: &'t stowage_runtime::Tensor<'_>,
) -> stowage_runtime::Result<std::borrow::Cow<'t, [T]>> {
    match t.as_slice::<T>() {
        Ok(s) => Ok(std::borrow::Cow::Borrowed(s)),
        Err(_) => Ok(std::borrow::Cow::Owned(t.to_vec::<T>()?)),
    }
}
