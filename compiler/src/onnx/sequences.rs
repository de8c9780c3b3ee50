//! The sequence and optional ops at import ([`super::expand`]): each makes, takes apart or reads a sequence or an
//! optional whose form is known at import ([`super::structure`], rule 1), so it writes no node of its own beyond
//! the tensor ops it needs (`Split`, `Concat`, `Unsqueeze`, a `SequenceMap` body per item). The rules:
//! 1. **Positions are known at import.** `SequenceAt`, `SequenceInsert` and `SequenceErase` take a constant
//!    position (a graph input is fixed by `stowage run`, which counts it among the inputs that set shapes); so does
//!    `SplitToSequence`'s split. A position known only at run time is a value the driver waits for
//!    (`NeedsValue`); one out of range is an error naming the node, the position and the length.
//! 2. **One element type.** The items of a sequence share one element type: `SequenceConstruct`, `SequenceInsert`
//!    and `SequenceMap`'s outputs refuse a tensor of another type, naming it.
//! 3. **Items are values, not copies.** Constructing, inserting, erasing, reading an item and `Identity` name the
//!    graph values the items already are: no node, no copy. `SplitToSequence` is one `Split`, `ConcatFromSequence`
//!    one `Concat` (over `Unsqueeze`d items for `new_axis`), `SequenceMap` its body imported once per item
//!    ([`super::unroll::iteration`]), bounded like a loop's ([`super::expand::MAX_STEPS`], `spend`).
//! 4. **Optionals hold or do not, at import.** `Optional` with an input holds it, without one holds nothing (its
//!    `type` attribute says of what); `OptionalHasElement` is a constant; `OptionalGetElement` of an empty optional
//!    is an error naming the node.

use stowage_runtime::{DatumType, Tensor};

use super::expand::{int, Ex, MAX_STEPS};
use super::structure::{self, Kind, Structure};
use crate::error::ImportErrorKind as E;

/// The op types this file imports.
pub const SEQUENCE_OPS: &[&str] = &[
    "ConcatFromSequence",
    "Optional",
    "OptionalGetElement",
    "OptionalHasElement",
    "SequenceAt",
    "SequenceConstruct",
    "SequenceEmpty",
    "SequenceErase",
    "SequenceInsert",
    "SequenceLength",
    "SequenceMap",
    "SplitToSequence",
];

/// The inputs of `op` whose values must be known at import (rule 1), for [`super::value_inputs`].
pub fn static_inputs(op: &str) -> &'static [usize] {
    match op {
        "SequenceAt" | "SequenceErase" | "SplitToSequence" => &[1],
        "SequenceInsert" => &[2],
        _ => &[],
    }
}

/// Imports the node of `ex`, one of [`SEQUENCE_OPS`]; the names of its outputs.
pub(super) fn expand(ex: &mut Ex<'_, '_>) -> Result<Vec<Option<String>>, E> {
    let op = ex.node.op_type().to_string();
    let one = |ex: &mut Ex<'_, '_>, hint: &str, value: Structure<crate::ir::ValueId>| {
        Ok(vec![Some(ex.name_bound(hint, value))])
    };
    match op.as_str() {
        "SequenceEmpty" => {
            let code = ex.attrs().int("dtype").map_err(|e| ex.attr_err(e))?.unwrap_or(1);
            let elem = super::tensor::datum_type(code as i32).map_err(|m| ex.attr_fail("dtype", m))?;
            one(ex, "sequence", Structure::Sequence { elem, items: Vec::new() })
        }
        "SequenceConstruct" => {
            let mut items = Vec::new();
            for i in 0..ex.node.input.len() {
                items.push(tensor(ex, &ex.input(i)?)?);
            }
            let first = *items.first().ok_or_else(|| ex.fail("makes a sequence of no tensor (SequenceEmpty does)"))?;
            let elem = ex.value_type(first).dt;
            check_items(ex, elem, &items)?;
            one(ex, "sequence", Structure::Sequence { elem, items })
        }
        "SequenceLength" => {
            let (_, items) = sequence(ex, 0)?;
            let n = Tensor::from_vec(&[], vec![items.len() as i64]).map_err(|e| ex.fail(e.to_string()))?;
            Ok(vec![Some(ex.constant("length", n))])
        }
        "SequenceAt" => {
            let (_, items) = sequence(ex, 0)?;
            let at = position(ex, 1, items.len(), false)?.ok_or_else(|| ex.fail("input 1 (position) is required"))?;
            one(ex, "item", Structure::Tensor(items[at]))
        }
        "SequenceInsert" => {
            let (elem, mut items) = sequence(ex, 0)?;
            let t = tensor(ex, &ex.input(1)?)?;
            check_items(ex, elem, &[t])?;
            let at = position(ex, 2, items.len(), true)?.unwrap_or(items.len());
            items.insert(at, t);
            one(ex, "sequence", Structure::Sequence { elem, items })
        }
        "SequenceErase" => {
            let (elem, mut items) = sequence(ex, 0)?;
            if items.is_empty() {
                return Err(ex.fail("erases from an empty sequence"));
            }
            let at = position(ex, 1, items.len(), false)?.unwrap_or(items.len() - 1);
            items.remove(at);
            one(ex, "sequence", Structure::Sequence { elem, items })
        }
        "SplitToSequence" => split_to_sequence(ex),
        "ConcatFromSequence" => concat_from_sequence(ex),
        "SequenceMap" => sequence_map(ex),
        "Optional" => {
            let value = match ex.optional(0) {
                Some(v) => ex.bound(&v)?,
                None => {
                    let tp = ex.node.attribute.iter().find(|a| a.name() == "type").and_then(|a| a.tp.as_ref());
                    let kind = match tp.and_then(|t| t.value.as_ref()) {
                        Some(super::proto::type_proto::Value::TensorType(_)) => Kind::Tensor,
                        Some(super::proto::type_proto::Value::SequenceType(_)) => Kind::Sequence,
                        _ => {
                            return Err(
                                ex.attr_fail("type", "must be a tensor or sequence type when the node has no input")
                            )
                        }
                    };
                    return one(ex, "optional", Structure::Optional { kind, value: None });
                }
            };
            let kind = match value {
                Structure::Tensor(_) => Kind::Tensor,
                Structure::Sequence { .. } => Kind::Sequence,
                Structure::Optional { .. } => return Err(ex.fail("makes an optional of an optional")),
            };
            one(ex, "optional", Structure::Optional { kind, value: Some(Box::new(value)) })
        }
        "OptionalHasElement" => {
            let has = match ex.optional(0) {
                None => false,
                Some(v) => !matches!(ex.bound(&v)?, Structure::Optional { value: None, .. }),
            };
            let t = Tensor::from_vec(&[], vec![has]).map_err(|e| ex.fail(e.to_string()))?;
            Ok(vec![Some(ex.constant("has_element", t))])
        }
        "OptionalGetElement" => {
            let v = ex.input(0)?;
            match ex.bound(&v)? {
                Structure::Optional { value: Some(inner), .. } => one(ex, "element", *inner),
                Structure::Optional { value: None, .. } => {
                    Err(ex.fail(format!("reads the element of '{v}', an optional that holds none")))
                }
                other => one(ex, "element", other),
            }
        }
        other => Err(ex.fail(format!("'{other}' is not a sequence op"))),
    }
}

/// The graph value of the tensor named `v`.
fn tensor(ex: &Ex<'_, '_>, v: &str) -> Result<crate::ir::ValueId, E> {
    match ex.bound(v)? {
        Structure::Tensor(t) => Ok(t),
        other => Err(ex.fail(format!("reads '{v}', which is {}, where it takes a tensor", other.what()))),
    }
}

/// Input `i` as a sequence: its element type and items.
fn sequence(ex: &Ex<'_, '_>, i: usize) -> Result<(DatumType, Vec<crate::ir::ValueId>), E> {
    let v = ex.input(i)?;
    match ex.bound(&v)? {
        Structure::Sequence { elem, items } => Ok((elem, items)),
        other => {
            Err(ex.fail(format!("reads '{v}' as its input {i}, which is {}, where it takes a sequence", other.what())))
        }
    }
}

/// Rule 2: every one of `items` has element type `elem`.
fn check_items(ex: &Ex<'_, '_>, elem: DatumType, items: &[crate::ir::ValueId]) -> Result<(), E> {
    match items.iter().map(|&v| ex.value_type(v)).find(|t| t.dt != elem) {
        Some(t) => Err(ex.fail(format!("puts a {t} tensor into a sequence of {elem} tensors"))),
        None => Ok(()),
    }
}

/// Input `i`, a position in a sequence of `len` items (rule 1), as an index from the front; `None` when the input
/// is not given. `end`: the position may be `len` (inserting at the back).
fn position(ex: &Ex<'_, '_>, i: usize, len: usize, end: bool) -> Result<Option<usize>, E> {
    let Some(p) = ex.optional(i) else { return Ok(None) };
    let t = ex.value(&p).ok_or_else(|| {
        ex.needs_value(format!("its position '{p}' is known only at run time: fix it with --input-value"))
    })?;
    let v = match crate::consts::to_i64s(t).ok().as_deref() {
        Some([v]) => *v,
        _ => return Err(ex.fail(format!("its position '{p}' is {}{:?}, not one integer", t.dt(), t.shape()))),
    };
    let n = len as i64;
    let top = if end { n } else { n - 1 };
    if v < -n || v > top {
        return Err(ex.fail(format!("position {v} is out of range for a sequence of {len} items")));
    }
    Ok(Some(if v < 0 { v + n } else { v } as usize))
}

fn split_to_sequence(ex: &mut Ex<'_, '_>) -> Result<Vec<Option<String>>, E> {
    let x = ex.input(0)?;
    let ty = ex.ty(&x)?;
    let r = ty.rank() as i64;
    let axis = ex.attrs().int_or("axis", 0).map_err(|e| ex.attr_err(e))?;
    let keepdims = ex.attrs().int_or("keepdims", 1).map_err(|e| ex.attr_err(e))? != 0;
    if !(-r..r).contains(&axis) {
        return Err(ex.attr_fail("axis", format!("{axis} is out of range for {ty}")));
    }
    let a = if axis < 0 { axis + r } else { axis } as usize;
    let dim = ty.shape[a];
    // Bounded before any list is made (a [10¹⁵, 0] input has no bytes and 10¹⁵ items along axis 0).
    let too_many =
        |ex: &Ex<'_, '_>, n: usize| ex.fail(format!("it would make {n} items, more than stowage makes ({MAX_STEPS})"));
    let lengths: Vec<usize> = match ex.optional(1) {
        None if dim > MAX_STEPS => return Err(too_many(ex, dim)),
        None => vec![1; dim],
        Some(s) => {
            let t = ex.value(&s).ok_or_else(|| {
                ex.needs_value(format!("its split '{s}' is known only at run time: fix it with --input-value"))
            })?;
            let v = crate::consts::to_i64s(t).map_err(|e| ex.fail(e.to_string()))?;
            if v.iter().any(|&l| l < 0) || (t.shape().is_empty() && v[0] == 0) {
                return Err(ex.fail(format!("its split {v:?} has a negative length (or a chunk of 0)")));
            }
            if t.shape().is_empty() {
                let c = v[0] as usize;
                if dim.div_ceil(c) > MAX_STEPS {
                    return Err(too_many(ex, dim.div_ceil(c)));
                }
                (0..dim.div_ceil(c)).map(|k| c.min(dim - k * c)).collect()
            } else {
                let lengths: Vec<usize> = v.iter().map(|&l| l as usize).collect();
                let total = lengths.iter().try_fold(0usize, |a, &l| a.checked_add(l));
                if total != Some(dim) {
                    return Err(ex.fail(format!("its split {v:?} does not add up to dimension {a} of {ty}")));
                }
                lengths
            }
        }
    };
    if lengths.len() > MAX_STEPS {
        return Err(too_many(ex, lengths.len()));
    }
    let squeeze = ex.optional(1).is_none() && !keepdims;
    let mut items = Vec::with_capacity(lengths.len());
    if !lengths.is_empty() {
        let sizes: Vec<i64> = lengths.iter().map(|&l| l as i64).collect();
        let sizes = ex.ints(&sizes)?;
        let parts = ex.op_n("Split", &[&x, &sizes], lengths.len(), vec![int("axis", a as i64)])?;
        let axes = ex.ints(&[a as i64])?;
        for p in parts {
            let p = if squeeze { ex.op("Squeeze", &[&p, &axes], vec![])? } else { p };
            items.push(tensor(ex, &p)?);
        }
    }
    Ok(vec![Some(ex.name_bound("sequence", Structure::Sequence { elem: ty.dt, items }))])
}

fn concat_from_sequence(ex: &mut Ex<'_, '_>) -> Result<Vec<Option<String>>, E> {
    let (_, items) = sequence(ex, 0)?;
    let axis =
        ex.attrs().int("axis").map_err(|e| ex.attr_err(e))?.ok_or_else(|| ex.attr_fail("axis", "is required"))?;
    let new_axis = ex.attrs().int_or("new_axis", 0).map_err(|e| ex.attr_err(e))? != 0;
    let first = *items.first().ok_or_else(|| ex.fail("concatenates an empty sequence"))?;
    let r = ex.value_type(first).rank() as i64 + i64::from(new_axis);
    if !(-r..r).contains(&axis) {
        return Err(
            ex.attr_fail("axis", format!("{axis} is out of range for items of rank {}", r - i64::from(new_axis)))
        );
    }
    let a = if axis < 0 { axis + r } else { axis };
    let mut parts = Vec::with_capacity(items.len());
    let axes = if new_axis { Some(ex.ints(&[a])?) } else { None };
    for v in items {
        let n = ex.name_bound("item", Structure::Tensor(v));
        parts.push(match &axes {
            Some(axes) => ex.op("Unsqueeze", &[&n, axes], vec![])?,
            None => n,
        });
    }
    let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
    Ok(vec![Some(ex.op("Concat", &refs, vec![int("axis", a)])?)])
}

fn sequence_map(ex: &mut Ex<'_, '_>) -> Result<Vec<Option<String>>, E> {
    let g = ex
        .node
        .attribute
        .iter()
        .find(|a| a.name() == "body")
        .and_then(|a| a.g.as_ref())
        .ok_or_else(|| ex.attr_fail("body", "is missing (a graph is required)"))?;
    let inputs: Vec<String> = ex.node.input.clone();
    if g.input.len() != inputs.len() || g.output.len() != ex.node.output.len() {
        return Err(ex.fail(format!(
            "its body takes {} inputs and makes {} outputs; the node has {} and {}",
            g.input.len(),
            g.output.len(),
            inputs.len(),
            ex.node.output.len()
        )));
    }
    let (_, first) = sequence(ex, 0)?;
    let n = first.len();
    let mut each: Vec<Structure<crate::ir::ValueId>> = Vec::with_capacity(inputs.len());
    for (i, v) in inputs.iter().enumerate() {
        let b = ex.bound(v)?;
        if let Structure::Sequence { items, .. } = &b {
            if items.len() != n {
                return Err(ex.fail(format!("its input {i} has {} items, its input 0 has {n}", items.len())));
            }
        }
        each.push(b);
    }
    if n > MAX_STEPS {
        return Err(ex.fail(format!("a map over {n} items is not unrolled (stowage unrolls at most {MAX_STEPS})")));
    }
    ex.spend(n.saturating_mul(g.node.len() + 1))?;
    let inits = super::unroll::initializers(ex, g)?;
    let mut outs: Vec<Vec<crate::ir::ValueId>> = vec![Vec::new(); g.output.len()];
    for it in 0..n {
        let mut names = Vec::with_capacity(each.len());
        for b in &each {
            let item = match b {
                Structure::Sequence { items, .. } => Structure::Tensor(items[it]),
                other => other.clone(),
            };
            names.push(ex.name_bound("in", item));
        }
        let produced = super::unroll::iteration(ex, g, it, &names, &inits)?;
        for (k, p) in produced.iter().enumerate() {
            outs[k].push(tensor(ex, p)?);
        }
    }
    let mut result = Vec::with_capacity(outs.len());
    for (k, items) in outs.into_iter().enumerate() {
        let elem = match items.first() {
            Some(&v) => ex.value_type(v).dt,
            None => structure::declared_elem(g.output[k].r#type.as_ref())
                .ok_or_else(|| ex.fail(format!("its body's output {k} declares no element type")))?,
        };
        check_items(ex, elem, &items)?;
        result.push(Some(ex.name_bound("sequence", Structure::Sequence { elem, items })));
    }
    Ok(result)
}
