//! Elementwise ops with broadcasting, for every datum type ONNX allows them on. f16 and bf16 compute in f32.
//! Inputs are packed row-major tensors of any shape; outputs are new packed tensors.

use stowage_runtime::{DatumType, Tensor};

use super::broadcast;
use super::cast::cast;
use super::dtype::{broadcast_elems, Arith, Bits};
use crate::error::{CpuError, Result};
use crate::numeric;

pub use stowage_kir::{BinaryFn, UnaryFn};

fn is_half(dt: DatumType) -> bool {
    matches!(dt, DatumType::F16 | DatumType::BF16)
}

fn float_unary<T: Copy>(f: UnaryFn, x: f64) -> f64 {
    let _ = std::marker::PhantomData::<T>;
    match f {
        UnaryFn::Abs => x.abs(),
        UnaryFn::Ceil => x.ceil(),
        UnaryFn::Cos => x.cos(),
        UnaryFn::Erf => libm::erf(x),
        UnaryFn::Exp => x.exp(),
        UnaryFn::Floor => x.floor(),
        UnaryFn::Log => x.ln(),
        UnaryFn::Neg => -x,
        UnaryFn::Not => f64::from(u8::from(x == 0.0)),
        UnaryFn::Reciprocal => 1.0 / x,
        UnaryFn::Relu => {
            if x < 0.0 {
                0.0
            } else {
                x
            }
        }
        UnaryFn::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        UnaryFn::Sign => {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                x
            }
        }
        UnaryFn::Sin => x.sin(),
        UnaryFn::Sqrt => x.sqrt(),
        UnaryFn::Tanh => x.tanh(),
        UnaryFn::Softplus => {
            if x > 0.0 {
                x + (-x).exp().ln_1p()
            } else {
                x.exp().ln_1p()
            }
        }
        UnaryFn::LeakyRelu(a) => {
            if x >= 0.0 {
                x
            } else {
                x * f64::from(a)
            }
        }
        UnaryFn::HardSigmoid(a, b) => (f64::from(a) * x + f64::from(b)).clamp(0.0, 1.0),
        UnaryFn::HardSwish => x * (x / 6.0 + 0.5).clamp(0.0, 1.0),
        UnaryFn::Gelu(false) => 0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2)),
        UnaryFn::Gelu(true) => {
            let c = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
        }
        UnaryFn::Round => x.round_ties_even(),
        UnaryFn::BitNot => f64::NAN,
        UnaryFn::Acos => x.acos(),
        UnaryFn::Asin => x.asin(),
        UnaryFn::Atan => x.atan(),
        UnaryFn::Acosh => x.acosh(),
        UnaryFn::Asinh => x.asinh(),
        UnaryFn::Atanh => x.atanh(),
        UnaryFn::Sinh => x.sinh(),
        UnaryFn::Cosh => x.cosh(),
    }
}

/// Applies a one-input function.
pub fn unary(f: UnaryFn, x: &Tensor<'_>) -> Result<Tensor<'static>> {
    let dt = x.dt();
    let shape = x.shape();
    if is_half(dt) {
        return cast(&unary(f, &cast(x, DatumType::F32)?)?, dt);
    }
    if f == UnaryFn::Not {
        let v: Vec<bool> = x.to_vec::<bool>()?.into_iter().map(|b| !b).collect();
        return Ok(crate::storage::tensor_from_vec(shape, v)?);
    }
    match dt {
        DatumType::F32 => Ok(crate::storage::tensor_from_vec(
            shape,
            x.to_vec::<f32>()?.into_iter().map(|v| crate::jit::unary_scalar(f, v)).collect::<Vec<_>>(),
        )?),
        DatumType::F64 => Ok(crate::storage::tensor_from_vec(
            shape,
            x.to_vec::<f64>()?.into_iter().map(|v| float_unary::<f64>(f, v)).collect::<Vec<_>>(),
        )?),
        _ => numeric!(dt, T => {
            let g: fn(T) -> T = match f {
                UnaryFn::Abs => |v| if v < T::zero() { T::zero().sub(v) } else { v },
                UnaryFn::Neg => |v| T::zero().sub(v),
                UnaryFn::Relu => |v| if v < T::zero() { T::zero() } else { v },
                UnaryFn::Sign => |v| T::from_f64(if v > T::zero() { 1.0 } else if v < T::zero() { -1.0 } else { 0.0 }),
                UnaryFn::BitNot => |v| v.bits(v, Bits::Not),
                _ => return Err(CpuError::Unsupported { op: "this elementwise function", dt }),
            };
            Ok(crate::storage::tensor_from_vec(shape, x.to_vec::<T>()?.into_iter().map(g).collect::<Vec<_>>())?)
        }, else Err(CpuError::Unsupported { op: "elementwise", dt })),
    }
}

fn pow_f64(a: f64, b: f64) -> f64 {
    a.powf(b)
}

/// Applies a two-input function, broadcasting both inputs to `out`.
pub fn binary(f: BinaryFn, a: &Tensor<'_>, b: &Tensor<'_>, out: &[usize]) -> Result<Tensor<'static>> {
    let dt = a.dt();
    if is_half(dt) && f != BinaryFn::And && f != BinaryFn::Or {
        let a32 = cast(a, DatumType::F32)?;
        let b32 = cast(b, DatumType::F32)?;
        let r = binary(f, &a32, &b32, out)?;
        return if r.dt() == DatumType::Bool { Ok(r) } else { cast(&r, dt) };
    }
    if matches!(f, BinaryFn::And | BinaryFn::Or) {
        let (x, y) = (a.to_vec::<bool>()?, b.to_vec::<bool>()?);
        let r = if f == BinaryFn::And {
            broadcast::zip(&x, a.shape(), &y, b.shape(), out, |p, q| p && q)
        } else {
            broadcast::zip(&x, a.shape(), &y, b.shape(), out, |p, q| p || q)
        };
        return Ok(crate::storage::tensor_from_vec(out, r)?);
    }
    if f == BinaryFn::Pow && b.dt() != dt {
        // The exponent may have its own type: bring it to the base's.
        let e = cast(b, if dt.is_float() { dt } else { DatumType::F64 })?;
        if !dt.is_float() {
            let base = cast(a, DatumType::F64)?;
            return cast(&binary(f, &base, &e, out)?, dt);
        }
        return binary(f, a, &e, out);
    }
    if dt == DatumType::Bool && f == BinaryFn::Equal {
        let (x, y) = (a.to_vec::<bool>()?, b.to_vec::<bool>()?);
        return Ok(crate::storage::tensor_from_vec(
            out,
            broadcast::zip(&x, a.shape(), &y, b.shape(), out, |p, q| p == q),
        )?);
    }
    numeric!(dt, T => {
        let ((x, ash), (y, bsh)) = (broadcast_elems::<T>(a)?, broadcast_elems::<T>(b)?);
        let (ash, bsh) = (ash.as_slice(), bsh.as_slice());
        // One `zip` per function (a macro, not a function pointer), so that each row loop inlines its function.
        macro_rules! cmp {
            ($g:expr) => {{
                // Written as bytes of 0 and 1 straight into the output's buffer.
                let g = $g;
                let mut buf = crate::storage::HostBuffer::for_overwrite(DatumType::Bool, out)?;
                let dst = stowage_runtime::TensorStorage::host_bytes_mut(&mut buf)?;
                broadcast::zip_into(&x, ash, &y, bsh, out, dst, |p, q| u8::from(g(p, q)));
                Ok(buf.into_tensor()?)
            }};
        }
        macro_rules! num {
            ($g:expr) => {{
                let r: Vec<T> = broadcast::zip(&x, ash, &y, bsh, out, $g);
                Ok(crate::storage::tensor_from_vec(out, r)?)
            }};
        }
        match f {
            BinaryFn::Add => num!(T::add),
            BinaryFn::Sub => num!(T::sub),
            BinaryFn::Mul => num!(T::mul),
            BinaryFn::Div => num!(T::div),
            BinaryFn::Pow => num!(|p, q| T::from_f64(pow_f64(p.to_f64(), q.to_f64()))),
            BinaryFn::Equal => cmp!(|p, q| p == q),
            BinaryFn::Greater => cmp!(|p, q| p > q),
            BinaryFn::Less => cmp!(|p, q| p < q),
            BinaryFn::PRelu => num!(|p, q| if p < T::zero() { p.mul(q) } else { p }),
            BinaryFn::Mod => num!(T::rem_floor),
            BinaryFn::Fmod => num!(T::rem_trunc),
            BinaryFn::ShiftLeft => num!(|p, q| p.bits(q, Bits::Left)),
            BinaryFn::ShiftRight => num!(|p, q| p.bits(q, Bits::Right)),
            BinaryFn::BitAnd => num!(|p, q| p.bits(q, Bits::And)),
            BinaryFn::BitOr => num!(|p, q| p.bits(q, Bits::Or)),
            BinaryFn::BitXor => num!(|p, q| p.bits(q, Bits::Xor)),
            BinaryFn::Max => num!(|p, q| if p.is_nan() || q.is_nan() { T::from_f64(f64::NAN) } else if q > p { q } else { p }),
            BinaryFn::Min => num!(|p, q| if p.is_nan() || q.is_nan() { T::from_f64(f64::NAN) } else if q < p { q } else { p }),
            BinaryFn::And | BinaryFn::Or => unreachable!("handled above"),
        }
    }, else Err(CpuError::Unsupported { op: "elementwise", dt }))
}

/// Sum, Max, Min or Mean of any number of inputs, broadcast to `out`.
pub fn variadic(f: BinaryFn, mean: bool, xs: &[&Tensor<'_>], out: &[usize]) -> Result<Tensor<'static>> {
    let first = xs.first().ok_or_else(|| CpuError::NotImplemented("a variadic op needs an input".into()))?;
    let mut acc = if first.shape() == out { first.to_row_major()? } else { expand(first, out)? };
    for x in &xs[1..] {
        acc = binary(f, &acc, x, out)?;
    }
    if mean {
        let n = crate::storage::tensor_from_vec(&[], vec![xs.len() as f64])?;
        let n = cast(&n, acc.dt())?;
        acc = binary(BinaryFn::Div, &acc, &n, out)?;
    }
    Ok(acc)
}

/// `x` broadcast to `out`, materialised.
pub fn expand(x: &Tensor<'_>, out: &[usize]) -> Result<Tensor<'static>> {
    super::movement::expand(x, out)
}

/// Clamps `x` to `[min, max]` (either may be absent).
pub fn clip(x: &Tensor<'_>, min: Option<&Tensor<'_>>, max: Option<&Tensor<'_>>) -> Result<Tensor<'static>> {
    let mut r = x.to_row_major()?;
    let shape = x.shape().to_vec();
    if let Some(lo) = min {
        r = binary(BinaryFn::Max, &r, lo, &shape)?;
    }
    if let Some(hi) = max {
        r = binary(BinaryFn::Min, &r, hi, &shape)?;
    }
    Ok(r)
}

/// `cond ? x : y`, broadcast to `out`.
pub fn select(cond: &Tensor<'_>, x: &Tensor<'_>, y: &Tensor<'_>, out: &[usize]) -> Result<Tensor<'static>> {
    let c = cond.to_vec::<bool>()?;
    let size = x.dt().size_of();
    let (xb, yb) = (x.to_row_major()?, y.to_row_major()?);
    let (xs, ys) = (xb.as_bytes()?, yb.as_bytes()?);
    let count: usize = out.iter().product();
    let mut r = Vec::with_capacity(count * size);
    broadcast::for_each_offset(out, &[cond.shape(), x.shape(), y.shape()], |_, o| {
        let src = if c[o[0]] { &xs[o[1] * size..(o[1] + 1) * size] } else { &ys[o[2] * size..(o[2] + 1) * size] };
        r.extend_from_slice(src);
    });
    Ok(crate::storage::tensor_from_bytes(x.dt(), out, &r)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use stowage_runtime::{Layout, PlainStorage};

    /// A broadcast view (strides 0, an offset into its storage) is read in place as its smaller source, and gives
    /// what its packed copy gives; so does a comparison written into its output's buffer.
    #[test]
    fn broadcast_views_are_read_as_their_source() {
        let floats: Vec<f32> = (0..8).map(|i| i as f32 * 0.5 - 1.0).collect();
        let bytes: Vec<u8> = floats.iter().flat_map(|v| v.to_le_bytes()).collect();
        // [2, 4, 3] over elements 2..8 as [2, 1, 3]: strides 3, 0, 1, 8 bytes in.
        let storage = PlainStorage::copy_from(&bytes).unwrap();
        let view =
            Tensor::from_storage(DatumType::F32, &[2, 4, 3], Layout::strided(vec![3, 0, 1], 8), storage).unwrap();
        let (source, shape) = broadcast_elems::<f32>(&view).unwrap();
        assert!(matches!(source, std::borrow::Cow::Borrowed(_)), "read in place");
        assert_eq!((&source[..], shape.as_slice()), (&floats[2..8], &[2, 1, 3][..]));
        let packed = crate::storage::tensor_from(&[2, 4, 3], &view.to_vec::<f32>().unwrap()).unwrap();
        let other = crate::storage::tensor_from(&[3], &[0.5f32, -0.5, 1.0]).unwrap();
        for f in [BinaryFn::Add, BinaryFn::Equal, BinaryFn::Less] {
            let got = binary(f, &view, &other, &[2, 4, 3]).unwrap();
            let want = binary(f, &packed, &other, &[2, 4, 3]).unwrap();
            assert_eq!(got.dt(), want.dt(), "{f:?}");
            assert_eq!(got.as_bytes().unwrap(), want.as_bytes().unwrap(), "{f:?}");
        }
        let eq = binary(BinaryFn::Equal, &packed, &other, &[2, 4, 3]).unwrap().to_vec::<bool>().unwrap();
        let want: Vec<bool> = (0..24).map(|i| floats[2 + (i / 12) * 3 + i % 3] == [0.5, -0.5, 1.0][i % 3]).collect();
        assert_eq!(eq, want);
    }
}
