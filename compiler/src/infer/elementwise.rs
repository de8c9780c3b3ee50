//! Inference for elementwise ops (broadcasting), Cast, Identity and Dropout.

use stowage_runtime::DatumType;

use super::{broadcast, invalid, InferError, Inputs};
use crate::ir::{Binary, Op, Unary, ValueType};

fn is_integer(d: DatumType) -> bool {
    !d.is_float() && d != DatumType::Bool
}

pub(super) fn infer(op: &mut Op, ins: Inputs<'_>, outputs: usize) -> Result<Vec<ValueType>, InferError> {
    let x = ins.ty(0)?;
    Ok(match op {
        Op::Unary(u) => {
            match u {
                Unary::Not => ins.expect_dt(0, |d| d == DatumType::Bool, "bool")?,
                Unary::Abs | Unary::Neg | Unary::Sign | Unary::Relu => {
                    ins.expect_dt(0, |d| d != DatumType::Bool, "a numeric type")?
                }
                Unary::BitNot => ins.expect_dt(0, is_integer, "an integer type")?,
                _ => ins.expect_dt(0, DatumType::is_float, "a float type")?,
            }
            vec![x.clone()]
        }
        Op::Binary(b) => {
            let shape = broadcast(&x.shape, ins.shape(1)?)?;
            match b {
                Binary::Pow => {
                    ins.expect_dt(1, |d| d != DatumType::Bool, "a numeric type")?;
                    vec![ValueType::new(x.dt, shape)]
                }
                Binary::And | Binary::Or => {
                    ins.expect_dt(0, |d| d == DatumType::Bool, "bool")?;
                    ins.same_dt(1)?;
                    vec![ValueType::new(DatumType::Bool, shape)]
                }
                Binary::Mod | Binary::Fmod => {
                    ins.expect_dt(0, |d| d != DatumType::Bool, "a numeric type")?;
                    ins.same_dt(1)?;
                    vec![ValueType::new(x.dt, shape)]
                }
                Binary::ShiftLeft | Binary::ShiftRight => {
                    ins.expect_dt(0, is_integer, "an integer type")?;
                    ins.same_dt(1)?;
                    vec![ValueType::new(x.dt, shape)]
                }
                Binary::BitAnd | Binary::BitOr | Binary::BitXor => {
                    ins.expect_dt(0, is_integer, "an integer type")?;
                    ins.same_dt(1)?;
                    vec![ValueType::new(x.dt, shape)]
                }
                Binary::PRelu => {
                    ins.same_dt(1)?;
                    if shape != x.shape {
                        return Err(InferError::Broadcast { a: x.shape.clone(), b: ins.shape(1)?.to_vec() });
                    }
                    vec![x.clone()]
                }
                b if b.is_comparison() => {
                    ins.same_dt(1)?;
                    vec![ValueType::new(DatumType::Bool, shape)]
                }
                _ => {
                    ins.same_dt(1)?;
                    vec![ValueType::new(x.dt, shape)]
                }
            }
        }
        Op::Variadic(_) => {
            let mut shape = x.shape.clone();
            for i in 1..ins.len() {
                ins.same_dt(i)?;
                shape = broadcast(&shape, ins.shape(i)?)?;
            }
            vec![ValueType::new(x.dt, shape)]
        }
        Op::Clip => {
            for i in 1..ins.len() {
                if let Some(bound) = ins.get(i) {
                    ins.same_dt(i)?;
                    if bound.ty.element_count() != Some(1) {
                        return invalid(format!(
                            "input {i} (a bound) must be a scalar, got shape {:?}",
                            bound.ty.shape
                        ));
                    }
                }
            }
            vec![x.clone()]
        }
        Op::Where => {
            ins.expect_dt(0, |d| d == DatumType::Bool, "bool")?;
            let y = ins.ty(2)?;
            if ins.dt(1)? != y.dt {
                return Err(InferError::DatumType {
                    input: 2,
                    expected: format!("{}, like input 1", ins.dt(1)?),
                    found: y.dt,
                });
            }
            let shape = broadcast(&broadcast(&x.shape, ins.shape(1)?)?, &y.shape)?;
            vec![ValueType::new(y.dt, shape)]
        }
        Op::Cast { to, .. } => vec![ValueType::new(*to, x.shape.clone())],
        // ONNX asks for the same bit width: the same shape, each element's bits read as `to`. A bool holds only 0
        // and 1, so nothing is read as one.
        Op::BitCast { to } if to.size_of() != x.dt.size_of() || *to == DatumType::Bool => {
            let (to_bits, x_bits) = (8 * to.size_of(), 8 * x.dt.size_of());
            return invalid(if *to == DatumType::Bool {
                "to is bool, whose bytes hold only 0 or 1: BitCast cannot make one".to_string()
            } else {
                format!(
                    "to is {to}, {to_bits} bits wide; the input is {}, {x_bits} bits: BitCast keeps the width",
                    x.dt
                )
            });
        }
        Op::BitCast { to } => vec![ValueType::new(*to, x.shape.clone())],
        Op::Identity => vec![x.clone()],
        Op::Dropout { .. } => {
            ins.ints(2)?; // training_mode must be a constant: it decides what the op computes.
            let mut out = vec![x.clone()];
            if outputs > 1 {
                out.push(ValueType::new(DatumType::Bool, x.shape.clone()));
            }
            out
        }
        _ => unreachable!("elementwise::infer called for {}", op.name()),
    })
}
