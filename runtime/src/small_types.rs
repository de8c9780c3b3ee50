//! ONNX's small element types: the four float8 formats, float8e8m0 (a power of two), float4e2m1, and the packed
//! integers int4/uint4 and int2/uint2. They have no Rust type; a tensor holds **one element per byte** (rule 1) and
//! the functions here convert them to and from wider values. The float conversions are written once for every
//! format, from its exponent and mantissa widths and how it spells infinity and NaN (rule 3), rather than taken from
//! the `float8` crate, which has two of the six formats and no `saturate = false`.
//!
//! The contract, each rule with its test below (and the node suite's Cast, CastLike, QuantizeLinear and
//! DequantizeLinear cases in `tests/tests/conformance.rs`):
//! 1. **One element per byte in memory.** A float format's byte is its bit pattern; an int4/int2 byte is the value
//!    sign-extended to `i8`, a uint4/uint2 byte the value; `Tensor::from_bytes` refuses other bytes ([`valid`]). Packing two or four to a byte is for files only
//!    ([`pack`], [`unpack`]): low bits first, as ONNX stores them, the last byte padded with zeros.
//! 2. **Decoding is exact**: every value of every small type is an `f32` ([`decode`]).
//! 3. **Encoding a float rounds to nearest even** from an `f64` (so an `f32` or `f16` source rounds once), then
//!    applies ONNX's table for values out of range: with `saturate`, ±infinity and values beyond the largest finite
//!    value become ±that value; without it they become NaN, or ±infinity for E5M2, the one format with infinities.
//!    Negative zero stays negative except in the FNUZ formats, which have no negative zero (their `0x80` is NaN).
//!    float4e2m1 has neither NaN nor infinity and always saturates; NaN becomes `+0`.
//! 4. **float8e8m0** is encoded from the `f32` bits as ONNX's reference does: the exponent field kept, rounded up,
//!    to nearest or down by the dropped mantissa bits ([`E8M0Rounding`]); with `saturate` the largest exponent
//!    never rounds up into NaN; the sign is ignored, NaN and infinity are NaN (`0xFF`).
//! 5. **Integers wrap**: a value becomes an int4/uint4/int2/uint2 by keeping its low bits (two's complement), a float
//!    after truncation toward zero, as for every other integer cast.

use crate::DatumType;

/// How a value is rounded to float8e8m0 (ONNX `Cast`'s `round_mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum E8M0Rounding {
    /// Up to the next power of two (ONNX's default).
    #[default]
    Up,
    /// To the nearest power of two by the dropped mantissa bits, an exact tie up (except from exponent field 0),
    /// as ONNX's reference and onnxruntime do.
    Nearest,
    /// Down: the exponent field as it is.
    Down,
}

/// One float format: widths, bias, and its special values.
#[derive(Clone, Copy)]
struct Format {
    exponent_bits: u32,
    mantissa_bits: u32,
    bias: i32,
    /// `S.11..1.00..0` is infinity (E5M2).
    infinity: bool,
    /// NaN is `0x80` and there is no negative zero (the FNUZ formats).
    fnuz: bool,
    /// `S.1111.111` is NaN, the other all-ones exponents are finite (E4M3FN).
    nan_all_ones: bool,
    /// Neither NaN nor infinity (float4e2m1).
    finite_only: bool,
}

const fn format(dt: DatumType) -> Option<Format> {
    let f = Format {
        exponent_bits: 4,
        mantissa_bits: 3,
        bias: 7,
        infinity: false,
        fnuz: false,
        nan_all_ones: false,
        finite_only: false,
    };
    Some(match dt {
        DatumType::F8E4M3FN => Format { nan_all_ones: true, ..f },
        DatumType::F8E4M3FNUZ => Format { bias: 8, fnuz: true, ..f },
        DatumType::F8E5M2 => Format { exponent_bits: 5, mantissa_bits: 2, bias: 15, infinity: true, ..f },
        DatumType::F8E5M2FNUZ => Format { exponent_bits: 5, mantissa_bits: 2, bias: 16, fnuz: true, ..f },
        DatumType::F4E2M1 => Format { exponent_bits: 2, mantissa_bits: 1, bias: 1, finite_only: true, ..f },
        _ => return None,
    })
}

impl Format {
    fn sign_bit(self) -> u8 {
        1 << (self.exponent_bits + self.mantissa_bits)
    }

    fn nan(self, negative: bool) -> u8 {
        if self.fnuz {
            0x80
        } else if self.infinity {
            // E5M2: exponent all ones, mantissa 0b10.
            let quiet = ((1u8 << self.exponent_bits) - 1) << self.mantissa_bits | 1 << (self.mantissa_bits - 1);
            quiet | if negative { self.sign_bit() } else { 0 }
        } else {
            0x7F | if negative { 0x80 } else { 0 }
        }
    }

    /// The largest finite value's bits, without sign.
    fn max_bits(self) -> u8 {
        let all = (1u8 << (self.exponent_bits + self.mantissa_bits)) - 1;
        if self.nan_all_ones {
            all - 1
        } else if self.infinity {
            all - (1 << self.mantissa_bits)
        } else {
            all
        }
    }

    fn decode(self, bits: u8) -> f32 {
        let negative = bits & self.sign_bit() != 0;
        let magnitude = bits & (self.sign_bit() - 1);
        if self.fnuz && bits == 0x80 {
            return f32::NAN;
        }
        let exponent_field = i32::from(magnitude >> self.mantissa_bits);
        let mantissa = i32::from(magnitude & ((1 << self.mantissa_bits) - 1));
        let all_ones = exponent_field == (1 << self.exponent_bits) - 1;
        let value = if self.infinity && all_ones {
            if mantissa == 0 {
                f32::INFINITY
            } else {
                f32::NAN
            }
        } else if self.nan_all_ones && magnitude == 0x7F {
            f32::NAN
        } else if exponent_field == 0 {
            mantissa as f32 * 2f32.powi(1 - self.bias - self.mantissa_bits as i32)
        } else {
            (1.0 + mantissa as f32 / (1 << self.mantissa_bits) as f32) * 2f32.powi(exponent_field - self.bias)
        };
        if negative {
            -value
        } else {
            value
        }
    }

    fn encode(self, x: f64, saturate: bool) -> u8 {
        let negative = x.is_sign_negative();
        let sign = if negative { self.sign_bit() } else { 0 };
        if x.is_nan() {
            return if self.finite_only { 0 } else { self.nan(negative) };
        }
        let max = f64::from(self.decode(self.max_bits()));
        let overflow = || {
            if saturate || self.finite_only {
                sign | self.max_bits()
            } else if self.infinity {
                sign | ((1 << self.exponent_bits) - 1) << self.mantissa_bits
            } else {
                self.nan(negative)
            }
        };
        let a = x.abs();
        if a.is_infinite() {
            return overflow();
        }
        let min_normal_exponent = 1 - self.bias;
        let exponent = if a == 0.0 { min_normal_exponent } else { (a.log2().floor() as i32).max(min_normal_exponent) };
        // `log2` may be one off near a power of two: settle the binade from the value itself.
        let exponent = if exponent > min_normal_exponent && a < 2f64.powi(exponent) {
            exponent - 1
        } else if a >= 2f64.powi(exponent + 1) {
            exponent + 1
        } else {
            exponent
        };
        let quantum = 2f64.powi(exponent - self.mantissa_bits as i32);
        let rounded = (a / quantum).round_ties_even() * quantum;
        if rounded > max {
            return overflow();
        }
        if rounded == 0.0 {
            return if self.fnuz { 0 } else { sign };
        }
        let step = 2f64.powi(min_normal_exponent - self.mantissa_bits as i32);
        let magnitude = if rounded < 2f64.powi(min_normal_exponent) {
            (rounded / step) as u8
        } else {
            let e = rounded.log2().floor() as i32;
            let e = if rounded < 2f64.powi(e) { e - 1 } else { e };
            let mantissa = (rounded / 2f64.powi(e) - 1.0) * f64::from(1u32 << self.mantissa_bits);
            (((e + self.bias) as u8) << self.mantissa_bits) | mantissa as u8
        };
        sign | magnitude
    }
}

/// True for the types of this module.
pub const fn is_small(dt: DatumType) -> bool {
    bits(dt) < 8
        || matches!(dt, DatumType::F8E4M3FN | DatumType::F8E4M3FNUZ | DatumType::F8E5M2)
        || matches!(dt, DatumType::F8E5M2FNUZ | DatumType::F8E8M0)
}

/// Bits per element as ONNX stores the type in a file: 4 for int4/uint4/float4e2m1, 2 for int2/uint2, else the
/// size in bytes times 8.
pub const fn bits(dt: DatumType) -> usize {
    match dt {
        DatumType::I4 | DatumType::U4 | DatumType::F4E2M1 => 4,
        DatumType::I2 | DatumType::U2 => 2,
        _ => dt.size_of() * 8,
    }
}

/// The value of one element's byte (rule 2). `dt` must be one of this module's types.
pub fn decode(dt: DatumType, byte: u8) -> f32 {
    match dt {
        DatumType::I4 | DatumType::I2 => f32::from(byte as i8),
        DatumType::U4 | DatumType::U2 => f32::from(byte),
        DatumType::F8E8M0 if byte == 0xFF => f32::NAN,
        DatumType::F8E8M0 => 2f32.powi(i32::from(byte) - 127),
        _ => format(dt).map_or(f32::NAN, |f| f.decode(byte)),
    }
}

/// A float as one element's byte of the float type `dt` (rules 3 and 4). For the integer types, see [`wrap`].
pub fn encode(dt: DatumType, x: f64, saturate: bool, rounding: E8M0Rounding) -> u8 {
    match dt {
        DatumType::F8E8M0 => encode_e8m0(x as f32, saturate, rounding),
        DatumType::I4 | DatumType::U4 | DatumType::I2 | DatumType::U2 => {
            wrap(dt, if x.is_nan() { 0 } else { x.trunc() as i64 })
        }
        _ => format(dt).map_or(0, |f| f.encode(x, saturate)),
    }
}

/// An integer as one element's byte of int4/uint4/int2/uint2: its low bits (rule 5).
pub fn wrap(dt: DatumType, v: i64) -> u8 {
    let width = bits(dt) as u32;
    let low = (v as u64 & ((1u64 << width) - 1)) as u8;
    match dt {
        DatumType::I4 | DatumType::I2 => ((low << (8 - width)) as i8 >> (8 - width)) as u8,
        _ => low,
    }
}

/// Whether every byte of `bytes` is an element of `dt` as rule 1 holds it (true for types outside this module): a
/// 4- or 2-bit value sign-extended or zero-extended, a float4 pattern in the low 4 bits.
pub fn valid(dt: DatumType, bytes: &[u8]) -> bool {
    match dt {
        DatumType::I4 | DatumType::I2 => bytes.iter().all(|&b| wrap(dt, i64::from(b as i8)) == b),
        DatumType::U4 | DatumType::U2 | DatumType::F4E2M1 => bytes.iter().all(|&b| usize::from(b) >> bits(dt) == 0),
        _ => true,
    }
}

/// The range of an integer small type, for clipping before a cast (`QuantizeLinear`).
pub fn int_range(dt: DatumType) -> Option<(i64, i64)> {
    match dt {
        DatumType::I4 => Some((-8, 7)),
        DatumType::U4 => Some((0, 15)),
        DatumType::I2 => Some((-2, 1)),
        DatumType::U2 => Some((0, 3)),
        _ => None,
    }
}

fn encode_e8m0(x: f32, saturate: bool, rounding: E8M0Rounding) -> u8 {
    let bits = x.to_bits();
    let exponent = (bits >> 23) & 0xFF;
    if exponent == 0xFF {
        return 0xFF;
    }
    let up = match rounding {
        E8M0Rounding::Down => false,
        E8M0Rounding::Up => bits & 0x7F_FFFF != 0,
        E8M0Rounding::Nearest => {
            let guard = bits & 0x40_0000 != 0;
            let rest = bits & 0x3F_FFFF != 0;
            guard && (rest || exponent > 0)
        }
    };
    if up && !(saturate && exponent == 0xFE) {
        (exponent + 1).min(0xFF) as u8
    } else {
        exponent as u8
    }
}

/// Elements of `dt` packed as ONNX stores them in a file (rule 1): `bytes` has one element per byte.
pub fn pack(dt: DatumType, bytes: &[u8]) -> Vec<u8> {
    let width = bits(dt);
    if width >= 8 {
        return bytes.to_vec();
    }
    let per_byte = 8 / width;
    let mask = (1u8 << width) - 1;
    bytes
        .chunks(per_byte)
        .map(|chunk| chunk.iter().enumerate().fold(0u8, |acc, (k, &b)| acc | (b & mask) << (k * width)))
        .collect()
}

/// `count` elements of `dt` from the packed bytes of a file, one per byte (rule 1), or `None` when `packed` is not
/// exactly the bytes `count` elements take.
pub fn unpack(dt: DatumType, packed: &[u8], count: usize) -> Option<Vec<u8>> {
    let width = bits(dt);
    if width >= 8 {
        return (packed.len() == count).then(|| packed.to_vec());
    }
    let per_byte = 8 / width;
    if packed.len() != count.div_ceil(per_byte) {
        return None;
    }
    let mask = (1u8 << width) - 1;
    let out = (0..count)
        .map(|k| {
            let low = (packed[k / per_byte] >> ((k % per_byte) * width)) & mask;
            match dt {
                DatumType::I4 | DatumType::I2 => wrap(dt, i64::from(low)),
                _ => low,
            }
        })
        .collect();
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLOATS: [DatumType; 5] =
        [DatumType::F8E4M3FN, DatumType::F8E4M3FNUZ, DatumType::F8E5M2, DatumType::F8E5M2FNUZ, DatumType::F4E2M1];

    /// Rules 2 and 3: every finite pattern decodes to a value that encodes back to itself.
    #[test]
    fn every_finite_pattern_round_trips() {
        for dt in FLOATS {
            for b in 0..=u8::MAX {
                if bits(dt) == 4 && b > 15 {
                    continue;
                }
                let v = decode(dt, b);
                if v.is_finite() {
                    assert_eq!(encode(dt, f64::from(v), false, E8M0Rounding::Up), b, "{dt} {b:#x} = {v}");
                }
            }
        }
    }

    /// Rule 3: the largest values, rounding to even, and ONNX's table for values out of range.
    #[test]
    fn largest_values_and_out_of_range() {
        let max = [448.0, 240.0, 57344.0, 57344.0, 6.0];
        for (dt, m) in FLOATS.into_iter().zip(max) {
            let top = encode(dt, m, true, E8M0Rounding::Up);
            assert_eq!(decode(dt, top), m as f32, "{dt}");
            assert_eq!(encode(dt, f64::INFINITY, true, E8M0Rounding::Up), top, "{dt}");
            assert_eq!(decode(dt, encode(dt, -1e9, true, E8M0Rounding::Up)), -m as f32, "{dt}");
        }
        assert!(decode(DatumType::F8E4M3FN, encode(DatumType::F8E4M3FN, 1e9, false, E8M0Rounding::Up)).is_nan());
        assert_eq!(
            decode(DatumType::F8E5M2, encode(DatumType::F8E5M2, -1e9, false, E8M0Rounding::Up)),
            f32::NEG_INFINITY
        );
        assert_eq!(encode(DatumType::F8E5M2FNUZ, f64::INFINITY, false, E8M0Rounding::Up), 0x80);
        // 100 lies between 96 and 104 in E4M3: a tie, to the even mantissa (96).
        assert_eq!(decode(DatumType::F8E4M3FN, encode(DatumType::F8E4M3FN, 100.0, true, E8M0Rounding::Up)), 96.0);
        assert_eq!(decode(DatumType::F4E2M1, encode(DatumType::F4E2M1, 0.25, true, E8M0Rounding::Up)), 0.0);
        assert_eq!(decode(DatumType::F4E2M1, encode(DatumType::F4E2M1, 0.26, true, E8M0Rounding::Up)), 0.5);
        assert_eq!(encode(DatumType::F8E4M3FN, -0.0, true, E8M0Rounding::Up), 0x80);
        assert_eq!(encode(DatumType::F8E4M3FNUZ, -0.0, true, E8M0Rounding::Up), 0);
        assert_eq!(encode(DatumType::F8E4M3FN, f64::NAN, true, E8M0Rounding::Up), 0x7F);
    }

    /// Rule 4: powers of two, the rounding modes, and saturation at the top.
    #[test]
    fn e8m0_rounds_by_its_mode() {
        let e = |x: f32, mode| encode(DatumType::F8E8M0, f64::from(x), true, mode);
        assert_eq!(e(4.0, E8M0Rounding::Up), 129);
        assert_eq!(e(5.0, E8M0Rounding::Up), 130);
        assert_eq!(e(5.0, E8M0Rounding::Down), 129);
        assert_eq!(e(5.0, E8M0Rounding::Nearest), 129);
        assert_eq!(e(7.0, E8M0Rounding::Nearest), 130);
        assert_eq!(e(f32::MAX, E8M0Rounding::Up), 0xFE);
        assert_eq!(encode(DatumType::F8E8M0, f64::from(f32::MAX), false, E8M0Rounding::Up), 0xFF);
        assert_eq!(decode(DatumType::F8E8M0, 129), 4.0);
        assert!(decode(DatumType::F8E8M0, 0xFF).is_nan());
    }

    /// Rules 1 and 5: wrapping, sign extension, and packing low bits first with the last byte padded.
    #[test]
    fn integers_wrap_and_pack_low_bits_first() {
        assert_eq!(wrap(DatumType::I4, 200) as i8, -8);
        assert_eq!(wrap(DatumType::I4, -17) as i8, -1);
        assert_eq!(wrap(DatumType::U4, -17), 15);
        assert_eq!(wrap(DatumType::I2, 3) as i8, -1);
        assert_eq!(encode(DatumType::I4, 7.9, true, E8M0Rounding::Up) as i8, 7);
        assert_eq!(encode(DatumType::I4, -100.5, true, E8M0Rounding::Up) as i8, -4);
        let values = [1u8, (-2i8) as u8, 7, (-8i8) as u8, 3];
        let packed = pack(DatumType::I4, &values);
        assert_eq!(packed, [0xE1, 0x87, 0x03]);
        assert_eq!(unpack(DatumType::I4, &packed, 5).as_deref(), Some(&values[..]));
        assert_eq!(unpack(DatumType::I4, &packed, 7), None);
        assert_eq!(pack(DatumType::U2, &[1, 2, 3, 0, 1]), [0b0011_1001, 1]);
        assert_eq!(unpack(DatumType::I2, &[0b0011_1001], 4).unwrap(), [1, (-2i8) as u8, (-1i8) as u8, 0]);
        assert!(valid(DatumType::I4, &[0xF8, 7]) && !valid(DatumType::I4, &[0x7F]) && !valid(DatumType::U2, &[4]));
    }
}
