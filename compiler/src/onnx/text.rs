//! The ops on strings (ONNX's `StringConcat`, `RegexFullMatch`, `StringNormalizer`, `StringSplit`) and ONNX-ML's
//! `LabelEncoder`, imported onto [`Op::Text`] (`ir/text.rs`; computed by `eval/text.rs`). The rules:
//! 1. **One node each**: `StringConcat`, `RegexFullMatch` and a `StringNormalizer` without stop words are one
//!    [`Op::Text`] node that runs on the CPU at run time (a `NONE` case change without stop words is an identity).
//!    A pattern the `regex` crate cannot read is an error naming the node and `pattern`.
//! 2. **Shapes from values**: `StringSplit`'s output is as wide as its input's longest split, and stop words change
//!    how many strings `StringNormalizer` keeps, so both need their input at compile time: folded when it is
//!    constant, else the model is cut there and the node compiled once the value is known (the driver's stages).
//! 3. **LabelEncoder**: the keys, values and default of every version (`classes_strings` of version 1, the
//!    `keys_*`/`values_*`/`default_*` lists of 2 and later, the `*_tensor` forms of 4) become three constants and
//!    one [`Text::Lookup`]; the defaults are ONNX's (`-1`, `-0.0`, `"_Unused"`). Keys and values that disagree in
//!    length are an error naming both attributes; numeric keys are converted to the input's type.

use stowage_runtime::{strings, DatumType, Tensor};

use super::expand::Ex;
use crate::consts;
use crate::error::ImportErrorKind as E;
use crate::ir::{Op, Text};

/// The op types of the default domain this file imports.
pub const TEXT_OPS: &[&str] = &["RegexFullMatch", "StringConcat", "StringNormalizer", "StringSplit"];

/// Imports the op of `ex`; its outputs.
pub(super) fn expand(ex: &mut Ex<'_, '_>) -> Result<Vec<Option<String>>, E> {
    let x = ex.input(0)?;
    if ex.ty(&x)?.dt != DatumType::Str {
        return Err(ex.fail(format!("input 0 ('{x}') is {}: {} reads strings", ex.ty(&x)?, ex.node.op_type())));
    }
    let a = ex.attrs();
    match ex.node.op_type() {
        "StringConcat" => ex.whole(Op::Text(Text::Concat), &[Some(x), Some(ex.input(1)?)], 1),
        "RegexFullMatch" => {
            let pattern = a.string("pattern").map_err(|e| ex.attr_err(e))?.unwrap_or_default();
            if let Err(e) = crate::eval::text::full_pattern(&pattern) {
                let first = e.to_string().lines().last().unwrap_or("").trim().to_string();
                return Err(
                    ex.attr_fail("pattern", format!("is {pattern:?}, which is not a regular expression: {first}"))
                );
            }
            ex.whole(Op::Text(Text::FullMatch { pattern }), &[Some(x)], 1)
        }
        "StringNormalizer" => normalizer(ex, &x),
        "StringSplit" => {
            let delimiter = a.string("delimiter").map_err(|e| ex.attr_err(e))?;
            // A negative maxsplit is no limit, as the reference's `np.char.split` reads it.
            let maxsplit = a.int("maxsplit").map_err(|e| ex.attr_err(e))?.and_then(|m| usize::try_from(m).ok());
            let t = known(ex, &x)?;
            let (parts, counts) = crate::eval::text::split(&t, delimiter.as_deref(), maxsplit, ex.limit())
                .map_err(|e| ex.fail(e.to_string()))?;
            Ok(vec![Some(ex.constant("parts", parts)), Some(ex.constant("counts", counts))])
        }
        other => Err(ex.fail(format!("'{other}' has no expansion"))),
    }
}

/// The value of `x`, which sets the output's shape (rule 2).
fn known(ex: &Ex<'_, '_>, x: &str) -> Result<Tensor<'static>, E> {
    ex.value(x).cloned().ok_or_else(|| {
        ex.needs_value(format!(
            "its output's shape depends on the strings of '{x}', which are known only at run time: give them with \
             --input-value"
        ))
    })
}

fn normalizer(ex: &mut Ex<'_, '_>, x: &str) -> Result<Vec<Option<String>>, E> {
    let a = ex.attrs();
    let err = |e| ex.attr_err(e);
    let case = match a.string("case_change_action").map_err(err)?.as_deref().unwrap_or("NONE") {
        "NONE" => None,
        "LOWER" => Some(false),
        "UPPER" => Some(true),
        other => {
            return Err(ex.attr_fail("case_change_action", format!("is {other:?}: it must be LOWER, UPPER or NONE")))
        }
    };
    let sensitive = a.bool_or("is_case_sensitive", false).map_err(err)?;
    let stopwords = a.strings("stopwords").map_err(err)?.unwrap_or_default();
    let xt = ex.ty(x)?;
    if !(xt.rank() == 1 || xt.rank() == 2 && xt.shape[0] == 1) {
        return Err(ex.fail(format!("input 0 ('{x}') is {xt}: StringNormalizer takes [C] or [1, C]")));
    }
    if stopwords.is_empty() || xt.element_count() == Some(0) {
        return match case {
            None => Ok(vec![Some(x.to_string())]),
            Some(upper) => ex.whole(Op::Text(Text::Case { upper }), &[Some(x.to_string())], 1),
        };
    }
    let t = known(ex, x)?;
    let y = crate::eval::text::normalize(&t, &stopwords, sensitive, case).map_err(|e| ex.fail(e.to_string()))?;
    Ok(vec![Some(ex.constant("normalized", y))])
}

/// `LabelEncoder` (rule 3).
pub(super) fn label_encoder(ex: &mut Ex<'_, '_>) -> Result<Vec<Option<String>>, E> {
    let x = ex.input(0)?;
    let xt = ex.ty(&x)?;
    let a = ex.attrs();
    let err = |e| ex.attr_err(e);
    let list = |names: [&'static str; 4]| -> Result<Option<(&'static str, Tensor<'static>)>, E> {
        let [tensor, strs, ints, floats] = names;
        if let Some(t) = a.tensor(tensor).map_err(err)? {
            return Ok(Some((tensor, t)));
        }
        if let Some(s) = a.strings(strs).map_err(err)? {
            let t = strings::tensor_of(&[s.len()], &s).map_err(|e| ex.fail(e.to_string()))?;
            return Ok(Some((strs, t)));
        }
        if let Some(v) = a.ints(ints).map_err(err)? {
            return Ok(Some((ints, Tensor::from_vec(&[v.len()], v).map_err(|e| ex.fail(e.to_string()))?)));
        }
        if let Some(v) = a.floats(floats).map_err(err)? {
            return Ok(Some((floats, Tensor::from_vec(&[v.len()], v).map_err(|e| ex.fail(e.to_string()))?)));
        }
        Ok(None)
    };
    let ((kname, keys), (vname, values)) = if let Some(classes) = a.strings("classes_strings").map_err(err)? {
        // Version 1: strings to their positions, or positions to strings, by the input's type.
        let n = classes.len();
        let names = strings::tensor_of(&[n], &classes).map_err(|e| ex.fail(e.to_string()))?;
        let positions =
            Tensor::from_vec(&[n], (0..n as i64).collect::<Vec<_>>()).map_err(|e| ex.fail(e.to_string()))?;
        if xt.dt == DatumType::Str {
            (("classes_strings", names), ("classes_strings", positions))
        } else {
            (("classes_strings", positions), ("classes_strings", names))
        }
    } else {
        let keys = list(["keys_tensor", "keys_strings", "keys_int64s", "keys_floats"])?;
        let values = list(["values_tensor", "values_strings", "values_int64s", "values_floats"])?;
        match (keys, values) {
            (Some(k), Some(v)) => (k, v),
            _ => {
                return Err(ex.fail(
                    "it has no keys or no values: give keys_* and values_* (strings, int64s, floats or a tensor)",
                ))
            }
        }
    };
    if keys.len() != values.len() || keys.shape().len() != 1 || values.shape().len() != 1 {
        return Err(ex.attr_fail(
            vname,
            format!("holds {:?} values, but {kname} holds {:?} keys: they run in step", values.shape(), keys.shape()),
        ));
    }
    let keys = match (keys.dt(), xt.dt) {
        (k, want) if k == want => keys,
        (k, want) if k != DatumType::Str && want != DatumType::Str => {
            // Converted only when every key keeps its value (float keys 1.5 would match an integer 1 otherwise).
            let fail = |e: stowage_runtime::RuntimeError| ex.fail(e.to_string());
            let v = consts::to_f64s(&keys).map_err(fail)?;
            let converted = consts::from_f64s(want, &[v.len()], &v).map_err(fail)?;
            if consts::to_f64s(&converted).map_err(fail)? != v {
                return Err(
                    ex.attr_fail(kname, format!("holds {k} keys that are not all {want} values, the input's type"))
                );
            }
            converted
        }
        (k, want) => return Err(ex.attr_fail(kname, format!("holds {k} keys, but the input is {want}"))),
    };
    let dt = values.dt();
    let default = match a.tensor("default_tensor").map_err(err)? {
        Some(t) => t,
        None if dt == DatumType::Str => {
            let s = a.string("default_string").map_err(err)?.unwrap_or_else(|| "_Unused".into());
            strings::tensor_of(&[1], &[s]).map_err(|e| ex.fail(e.to_string()))?
        }
        None if dt.is_float() => {
            let v = a.float_or("default_float", -0.0).map_err(err)?;
            consts::from_f64s(dt, &[1], &[f64::from(v)]).map_err(|e| ex.fail(e.to_string()))?
        }
        None => {
            let v = a.int_or("default_int64", -1).map_err(err)?;
            consts::from_i64s(dt, &[1], &[v]).map_err(|e| ex.fail(e.to_string()))?
        }
    };
    if default.dt() != dt || default.len() != 1 {
        return Err(
            ex.attr_fail("default_tensor", format!("is {}{:?}: it must be one {dt}", default.dt(), default.shape()))
        );
    }
    let (k, v, d) = (ex.constant("keys", keys), ex.constant("values", values), ex.constant("default", default));
    ex.whole(Op::Text(Text::Lookup), &[Some(x), Some(k), Some(v), Some(d)], 1)
}
