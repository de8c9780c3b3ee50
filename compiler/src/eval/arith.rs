//! Elementwise arithmetic on constants, with broadcasting: floats in `f64`, integers in wrapping `i64`.

use stowage_runtime::{DatumType, Tensor};

use super::broadcast_strides;
use crate::consts;
use crate::ir::{Binary, Op, Unary, ValueType, Variadic};

/// Evaluates an elementwise op; `None` for what folding leaves to run time.
pub(super) fn elementwise(op: &Op, inputs: &[Option<&Tensor<'static>>], out: &ValueType) -> Option<Tensor<'static>> {
    let x = inputs.first().copied().flatten()?;
    let float = x.dt().is_float();
    let count = out.element_count()?;
    // Each input's elements, read at the output's indices through broadcasting.
    let read = |t: &Tensor<'static>| -> Option<Vec<f64>> {
        let vals = consts::to_f64s(t).ok()?;
        Some(broadcast_read(&vals, t.shape(), &out.shape, count))
    };
    let read_int = |t: &Tensor<'static>| -> Option<Vec<i64>> {
        let vals = consts::to_i64s(t).ok()?;
        Some(broadcast_read(&vals, t.shape(), &out.shape, count))
    };
    match op {
        Op::Unary(u) => {
            if !float {
                let v = consts::to_i64s(x).ok()?;
                let r: Vec<i64> = match u {
                    Unary::Abs => v.iter().map(|a| a.wrapping_abs()).collect(),
                    Unary::Neg => v.iter().map(|a| a.wrapping_neg()).collect(),
                    Unary::Sign => v.iter().map(|a| a.signum()).collect(),
                    Unary::Relu => v.iter().map(|&a| a.max(0)).collect(),
                    Unary::Not => v.iter().map(|&a| i64::from(a == 0)).collect(),
                    Unary::BitNot => v.iter().map(|&a| !a).collect(),
                    _ => return None,
                };
                return consts::from_i64s(out.dt, &out.shape, &r).ok();
            }
            let f: fn(f64) -> f64 = match u {
                Unary::Abs => f64::abs,
                Unary::Ceil => f64::ceil,
                Unary::Cos => f64::cos,
                Unary::Exp => f64::exp,
                Unary::Floor => f64::floor,
                Unary::Log => f64::ln,
                Unary::Neg => |a| -a,
                Unary::Reciprocal => f64::recip,
                Unary::Relu => |a| a.max(0.0),
                Unary::Sigmoid => |a| 1.0 / (1.0 + (-a).exp()),
                Unary::Sign => |a| if a == 0.0 { 0.0 } else { a.signum() },
                Unary::Sin => f64::sin,
                Unary::Sqrt => f64::sqrt,
                Unary::Tanh => f64::tanh,
                Unary::Round => f64::round_ties_even,
                Unary::Acos => f64::acos,
                Unary::Asin => f64::asin,
                Unary::Atan => f64::atan,
                Unary::Acosh => f64::acosh,
                Unary::Asinh => f64::asinh,
                Unary::Atanh => f64::atanh,
                Unary::Sinh => f64::sinh,
                Unary::Cosh => f64::cosh,

                _ => return None,
            };
            let r: Vec<f64> = consts::to_f64s(x).ok()?.into_iter().map(f).collect();
            consts::from_f64s(out.dt, &out.shape, &r).ok()
        }
        Op::Binary(b) => {
            let y = inputs.get(1).copied().flatten()?;
            if *b == Binary::Pow && !(float && y.dt().is_float()) {
                return None;
            }
            if float || b.is_comparison() && y.dt().is_float() {
                let (p, q) = (read(x)?, read(y)?);
                let f: fn(f64, f64) -> f64 = match b {
                    Binary::Add => |a, b| a + b,
                    Binary::Sub => |a, b| a - b,
                    Binary::Mul => |a, b| a * b,
                    Binary::Div => |a, b| a / b,
                    Binary::Pow => f64::powf,
                    Binary::Fmod => |a, b| a % b,
                    Binary::Mod => |a, b| {
                        let r = a % b;
                        if r != 0.0 && (r < 0.0) != (b < 0.0) {
                            r + b
                        } else {
                            r.copysign(b)
                        }
                    },
                    Binary::Equal => |a, b| f64::from(u8::from(a == b)),
                    Binary::Greater => |a, b| f64::from(u8::from(a > b)),
                    Binary::Less => |a, b| f64::from(u8::from(a < b)),
                    _ => return None,
                };
                let r: Vec<f64> = p.iter().zip(&q).map(|(&a, &b)| f(a, b)).collect();
                return consts::from_f64s(out.dt, &out.shape, &r).ok();
            }
            if x.dt() == DatumType::U64
                && matches!(b, Binary::Div | Binary::Greater | Binary::Less | Binary::Mod | Binary::Fmod)
            {
                return None;
            }
            let width = 8 * x.dt().size_of() as i64;
            let signed = matches!(x.dt(), DatumType::I8 | DatumType::I16 | DatumType::I32 | DatumType::I64);
            let (p, q) = (read_int(x)?, read_int(y)?);
            let mut r = Vec::with_capacity(count);
            for (&a, &c) in p.iter().zip(&q) {
                r.push(match b {
                    Binary::Add => a.wrapping_add(c),
                    Binary::Sub => a.wrapping_sub(c),
                    Binary::Mul => a.wrapping_mul(c),
                    Binary::Div => a.checked_div(c)?,
                    Binary::Equal => i64::from(a == c),
                    Binary::Greater => i64::from(a > c),
                    Binary::Less => i64::from(a < c),
                    Binary::And => i64::from(a != 0 && c != 0),
                    Binary::Or => i64::from(a != 0 || c != 0),
                    Binary::Fmod => a.checked_rem(c)?,
                    Binary::Mod => {
                        let r = a.checked_rem(c)?;
                        if r != 0 && (r < 0) != (c < 0) {
                            r + c
                        } else {
                            r
                        }
                    }
                    // Shifts by a negative amount or the width or more leave the sign's fill; unsigned values shift
                    // their bits as u64 (a u64 above i64::MAX is negative here).
                    Binary::ShiftLeft if (0..width).contains(&c) => ((a as u64) << c) as i64,
                    Binary::ShiftRight if (0..width).contains(&c) && signed => a >> c,
                    Binary::ShiftRight if (0..width).contains(&c) => ((a as u64) >> c) as i64,
                    Binary::ShiftRight if signed && a < 0 => -1,
                    Binary::ShiftLeft | Binary::ShiftRight => 0,
                    Binary::BitAnd => a & c,
                    Binary::BitOr => a | c,
                    Binary::BitXor => a ^ c,
                    _ => return None,
                });
            }
            consts::from_i64s(out.dt, &out.shape, &r).ok()
        }
        Op::Variadic(v) => {
            if !float {
                if *v == Variadic::Mean || x.dt() == DatumType::U64 {
                    return None;
                }
                let all: Vec<Vec<i64>> = inputs.iter().map(|t| read_int(t.as_ref()?)).collect::<Option<_>>()?;
                let r: Vec<i64> = (0..count)
                    .map(|i| {
                        let it = all.iter().map(|a| a[i]);
                        match v {
                            Variadic::Max => it.max().unwrap_or(0),
                            Variadic::Min => it.min().unwrap_or(0),
                            _ => it.fold(0i64, i64::wrapping_add),
                        }
                    })
                    .collect();
                return consts::from_i64s(out.dt, &out.shape, &r).ok();
            }
            let all: Vec<Vec<f64>> = inputs.iter().map(|t| read(t.as_ref()?)).collect::<Option<_>>()?;
            let r: Vec<f64> = (0..count)
                .map(|i| {
                    let it = all.iter().map(|a| a[i]);
                    match v {
                        Variadic::Max => it.fold(f64::NEG_INFINITY, f64::max),
                        Variadic::Min => it.fold(f64::INFINITY, f64::min),
                        Variadic::Sum => it.sum(),
                        Variadic::Mean => it.sum::<f64>() / all.len() as f64,
                    }
                })
                .collect();
            consts::from_f64s(out.dt, &out.shape, &r).ok()
        }
        Op::Where => {
            let c = read_int(x)?;
            let (a, b) = (inputs.get(1).copied().flatten()?, inputs.get(2).copied().flatten()?);
            if a.dt().is_float() {
                let (p, q) = (read(a)?, read(b)?);
                let r: Vec<f64> = (0..count).map(|i| if c[i] != 0 { p[i] } else { q[i] }).collect();
                consts::from_f64s(out.dt, &out.shape, &r).ok()
            } else {
                let (p, q) = (read_int(a)?, read_int(b)?);
                let r: Vec<i64> = (0..count).map(|i| if c[i] != 0 { p[i] } else { q[i] }).collect();
                consts::from_i64s(out.dt, &out.shape, &r).ok()
            }
        }
        _ => None,
    }
}

/// `vals` (of `shape`) read at every index of `out`, broadcasting.
pub(super) fn broadcast_read<T: Copy>(vals: &[T], shape: &[usize], out: &[usize], count: usize) -> Vec<T> {
    if shape == out {
        return vals.to_vec();
    }
    let st = broadcast_strides(shape, out);
    let mut idx = vec![0usize; out.len()];
    let mut r = Vec::with_capacity(count);
    for _ in 0..count {
        let at: usize = idx.iter().zip(&st).map(|(&i, &s)| i * s).sum();
        r.push(vals[at]);
        for a in (0..out.len()).rev() {
            idx[a] += 1;
            if idx[a] < out[a] {
                break;
            }
            idx[a] = 0;
        }
    }
    r
}
