//! The C expression of an elementwise node of any datum type, for `codegen::typed`.

use stowage_compiler::ir::{self, Op};
use stowage_runtime::DatumType;

use crate::codegen;

/// The C expression of an elementwise node over its inputs `@0`, `@1`… (by input position), computing in the
/// inputs' own types; `None` for types or ops it does not take.
pub(super) fn typed_expr(op: &Op, dts: &[Option<DatumType>], out: DatumType) -> Option<String> {
    let dt0 = (*dts.first()?)?;
    codegen::dt_storage(out)?;
    for d in dts.iter().flatten() {
        codegen::dt_storage(*d)?;
    }
    let float = matches!(dt0, DatumType::F32 | DatumType::F64 | DatumType::F16 | DatumType::BF16);
    let signed = matches!(dt0, DatumType::I8 | DatumType::I16 | DatumType::I32 | DatumType::I64);
    Some(match op {
        Op::Unary(u) => match (u, float) {
            (ir::Unary::Abs, false) => {
                if signed {
                    "(@0 < 0 ? -@0 : @0)".into()
                } else {
                    "@0".into()
                }
            }
            (ir::Unary::Neg, false) => "(-@0)".into(),
            (ir::Unary::Relu, false) => "(@0 < 0 ? 0 : @0)".into(),
            (ir::Unary::Sign, _) => "(@0 > 0 ? 1 : (@0 < 0 ? -1 : @0))".into(),
            (ir::Unary::Not, _) => "(!@0)".into(),
            (ir::Unary::BitNot, false) => "(~@0)".into(),
            (_, true) => {
                let f = stowage_compiler::lowering::unary_fn(*u);
                codegen::float_unary(f, "@0")
            }
            _ => return None,
        },
        Op::Binary(bop) => {
            let (x, y) = ("@0", "@1");
            match bop {
                ir::Binary::Add => format!("{x} + {y}"),
                ir::Binary::Sub => format!("{x} - {y}"),
                ir::Binary::Mul => format!("{x} * {y}"),
                ir::Binary::Div if float => format!("{x} / {y}"),
                ir::Binary::Div => format!("({y} == 0 ? 0 : {x} / {y})"),
                ir::Binary::Pow if matches!(out, DatumType::F32 | DatumType::F16 | DatumType::BF16) => {
                    format!("pow((float){x}, (float){y})")
                }
                ir::Binary::Pow => format!("pow((double){x}, (double){y})"),
                ir::Binary::And => format!("({x} && {y})"),
                ir::Binary::Or => format!("({x} || {y})"),
                ir::Binary::Equal => format!("({x} == {y})"),
                ir::Binary::Greater => format!("({x} > {y})"),
                ir::Binary::Less => format!("({x} < {y})"),
                ir::Binary::PRelu => format!("({x} < 0 ? {x} * {y} : {x})"),
                ir::Binary::Fmod if float => format!("fmod({x}, {y})"),
                // A zero remainder takes the divisor's sign, as numpy's.
                ir::Binary::Mod if float => {
                    let r = format!("fmod({x}, {y})");
                    format!("(({r} != 0 && ({r} < 0) != ({y} < 0)) ? {r} + {y} : copysign({r}, {y}))")
                }
                // x % −1 is 0, and computing it for the type's minimum traps on some devices.
                ir::Binary::Fmod if signed => format!("(({y} == 0 || {y} == -1) ? 0 : {x} % {y})"),
                ir::Binary::Fmod => format!("({y} == 0 ? 0 : {x} % {y})"),
                // The truncated remainder moved to the divisor's sign; unsigned types have no sign to move to.
                ir::Binary::Mod if signed => {
                    let r = format!("(({y} == 0 || {y} == -1) ? 0 : {x} % {y})");
                    format!("(({r} != 0 && ({r} < 0) != ({y} < 0)) ? {r} + {y} : {r})")
                }
                ir::Binary::Mod => format!("({y} == 0 ? 0 : {x} % {y})"),
                // Shifts by a negative amount (signed types) or by the width or more leave the sign's fill.
                ir::Binary::ShiftLeft if signed => {
                    format!("(({y} < 0 || {y} >= {w}) ? 0 : {x} << {y})", w = 8 * dt0.size_of())
                }
                ir::Binary::ShiftLeft => format!("({y} >= {w} ? 0 : {x} << {y})", w = 8 * dt0.size_of()),
                ir::Binary::ShiftRight if signed => {
                    format!("(({y} < 0 || {y} >= {w}) ? ({x} < 0 ? -1 : 0) : {x} >> {y})", w = 8 * dt0.size_of())
                }
                ir::Binary::ShiftRight => format!("({y} >= {w} ? 0 : {x} >> {y})", w = 8 * dt0.size_of()),
                ir::Binary::BitAnd => format!("({x} & {y})"),
                ir::Binary::BitOr => format!("({x} | {y})"),
                ir::Binary::BitXor => format!("({x} ^ {y})"),
            }
        }
        Op::Variadic(v) => {
            let n = dts.len();
            let names: Vec<String> = (0..n).map(|i| format!("@{i}")).collect();
            let fold = |f: &dyn Fn(&str, &str) -> String| names[1..].iter().fold(names[0].clone(), |acc, x| f(&acc, x));
            match v {
                ir::Variadic::Sum => names.join(" + "),
                ir::Variadic::Mean => {
                    format!("({}) / {}", names.join(" + "), if float { format!("{n}.0") } else { n.to_string() })
                }
                ir::Variadic::Max if float => {
                    fold(&|a, b| format!("((isnan({a}) || isnan({b})) ? NAN : fmax({a}, {b}))"))
                }
                ir::Variadic::Min if float => {
                    fold(&|a, b| format!("((isnan({a}) || isnan({b})) ? NAN : fmin({a}, {b}))"))
                }
                ir::Variadic::Max => fold(&|a, b| format!("max({a}, {b})")),
                ir::Variadic::Min => fold(&|a, b| format!("min({a}, {b})")),
            }
        }
        Op::Clip => {
            let mut e = "@0".to_string();
            if dts.get(1).copied().flatten().is_some() {
                e = format!("({e} < @1 ? @1 : {e})");
            }
            if dts.get(2).copied().flatten().is_some() {
                e = format!("({e} > @2 ? @2 : {e})");
            }
            e
        }
        Op::Where => "(@0 ? @1 : @2)".into(),
        Op::Cast { to, .. } => {
            let target = codegen::dt_type(*to).unwrap_or("float");
            match to {
                DatumType::Bool => "(@0 != 0)".into(),
                DatumType::F16 | DatumType::BF16 => "(float)@0".into(),
                DatumType::F32 | DatumType::F64 => format!("({target})@0"),
                _ if float => format!("convert_{target}_sat(@0)"),
                _ => format!("({target})@0"),
            }
        }
        _ => return None,
    })
}
