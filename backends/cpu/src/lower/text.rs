//! The CPU's kernels for strings: the ops that read text (`Op::Text`), `Equal` of strings, and `Cast` to and from
//! strings, each computed by `stowage_compiler::eval::text` (the same code folding runs). Every other op a string
//! reaches moves or selects its 4-byte handles as it moves any other element.

use stowage_compiler::eval::text::{self, Table, TextError};
use stowage_compiler::ir::{Binary, Graph, Op, Text, ValueId};
use stowage_runtime::DatumType;

use super::{arg, one};
use crate::error::{CpuError, Result};
use crate::program::Kernel;

impl From<TextError> for CpuError {
    fn from(e: TextError) -> Self {
        match e {
            TextError::Runtime(r) => CpuError::Runtime(r),
            other => CpuError::Value(other.to_string()),
        }
    }
}

/// The kernel for `op` when it reads strings or makes them; `None` when the op only moves them (the usual kernel).
pub(super) fn kernel(graph: &Graph, op: &Op, inputs: &[Option<ValueId>], out: &[usize]) -> Result<Option<Kernel>> {
    let out = out.to_vec();
    let input_dt = |i: usize| inputs.get(i).copied().flatten().map(|v| graph.ty(v).dt);
    Ok(Some(match op {
        Op::Text(Text::Concat) => Box::new(move |a, _| one(text::concat(arg(a, 0)?, arg(a, 1)?, &out)?)),
        Op::Text(Text::FullMatch { pattern }) => {
            let re = text::full_pattern(pattern).map_err(|e| CpuError::NotImplemented(e.to_string()))?;
            Box::new(move |a, _| one(text::full_match(&re, arg(a, 0)?)?))
        }
        Op::Text(Text::Case { upper }) => {
            let upper = *upper;
            Box::new(move |a, _| one(text::change_case(arg(a, 0)?, upper)?))
        }
        Op::Text(Text::Lookup) => {
            let constant = |i: usize| {
                inputs
                    .get(i)
                    .copied()
                    .flatten()
                    .and_then(|v| graph.const_value(v))
                    .ok_or_else(|| CpuError::NotImplemented(format!("LabelEncoder's input {i} must be a constant")))
            };
            let table = Table::new(constant(1)?, constant(2)?, constant(3)?)?;
            Box::new(move |a, _| one(table.apply(arg(a, 0)?)?))
        }
        Op::Binary(Binary::Equal) => Box::new(move |a, _| one(text::equal(arg(a, 0)?, arg(a, 1)?, &out)?)),
        Op::Cast { to, .. } if input_dt(0) == Some(DatumType::Str) && *to == DatumType::Str => {
            Box::new(|a, _| one(arg(a, 0)?.to_row_major()?))
        }
        Op::Cast { to, .. } if input_dt(0) == Some(DatumType::Str) => {
            let to = *to;
            Box::new(move |a, _| one(text::parse(arg(a, 0)?, to)?))
        }
        Op::Cast { to: DatumType::Str, .. } => Box::new(|a, _| one(text::print(arg(a, 0)?)?)),
        _ => return Ok(None),
    }))
}
