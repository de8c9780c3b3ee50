//! Values that are not tensors: ONNX's sequences of tensors and optionals (of a tensor or of a sequence), as the
//! node suite and trained models use them, and the files that hold them (`SequenceProto`, `OptionalProto`).
//!
//! stowage keeps its plans over tensors alone: a sequence or an optional lives only at import, as the tensors it
//! holds. The rules:
//! 1. **Known at import.** A sequence's length, which items it holds and whether an optional holds a value are
//!    fixed when the model is imported: by the ops that make them (`SequenceConstruct`, `SplitToSequence` with its
//!    split known, `SequenceInsert` at a known position…) or, for a graph input, by the value the caller gives
//!    ([`super::ImportConfig::input_structures`], which `stowage run` fills from the input files). Each item is a
//!    value of the graph like any other: planned, placed and copied by the same rules, so a sequence costs no copy
//!    its tensors would not.
//! 2. **Flat at the edges.** A structured graph input or output is its tensors, named by [`Structure::flat_names`]
//!    (`NAME[i]` for item `i` of a sequence, `NAME` for the tensor an optional holds); an optional without a value
//!    has none. [`flatten`] takes a caller's value apart into those inputs, [`assemble`] puts the outputs back
//!    together in the model's output order, as the graph's metadata records them
//!    ([`crate::ir::Metadata::structured_outputs`]).
//! 3. **Files as ONNX writes them.** An input file is read as the model declares the input (a `TensorProto`, a
//!    `SequenceProto` of tensors, an `OptionalProto`), bounded before it is decoded like a tensor file
//!    ([`super::wire`]); the items' element type must be the declared one. Outputs are written the same way.

use std::collections::HashMap;
use std::path::Path;

use prost::Message;
use stowage_runtime::{DatumType, Tensor};

use super::proto::{type_proto, OptionalProto, SequenceProto, TypeProto};
use super::{tensor, wire};
use crate::ir::ValueType;

/// `SequenceProto.DataType.TENSOR` and `OptionalProto.DataType`'s codes.
const TENSOR: i32 = 1;
const SEQUENCE: i32 = 3;

/// What an optional holds, or would hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A tensor.
    Tensor,
    /// A sequence of tensors.
    Sequence,
}

/// A value of ONNX's type system as stowage takes it, with leaves of `T`: a tensor, a sequence of tensors of one
/// element type, or an optional of either. `T` is a graph value at import, a flat name at the edges, a tensor in a
/// caller's hands.
#[derive(Clone, Debug, PartialEq)]
pub enum Structure<T> {
    /// One tensor.
    Tensor(T),
    /// A sequence of tensors, each of type `elem`.
    Sequence {
        /// The items' element type (an empty sequence has one too).
        elem: DatumType,
        /// The items, in order.
        items: Vec<T>,
    },
    /// An optional: `value` is `None` when it holds nothing.
    Optional {
        /// What it holds or would hold.
        kind: Kind,
        /// Its value: a tensor or a sequence.
        value: Option<Box<Structure<T>>>,
    },
}

impl<T> Structure<T> {
    /// The same structure with each leaf mapped by `f`.
    pub fn try_map<U, E>(&self, f: &mut impl FnMut(&T) -> Result<U, E>) -> Result<Structure<U>, E> {
        Ok(match self {
            Structure::Tensor(t) => Structure::Tensor(f(t)?),
            Structure::Sequence { elem, items } => {
                Structure::Sequence { elem: *elem, items: items.iter().map(&mut *f).collect::<Result<_, _>>()? }
            }
            Structure::Optional { kind, value } => Structure::Optional {
                kind: *kind,
                value: match value {
                    Some(v) => Some(Box::new(v.try_map(f)?)),
                    None => None,
                },
            },
        })
    }

    /// The same structure with each leaf mapped by `f`.
    pub fn map<U>(&self, mut f: impl FnMut(&T) -> U) -> Structure<U> {
        match self.try_map(&mut |t| Ok::<U, std::convert::Infallible>(f(t))) {
            Ok(s) => s,
            Err(never) => match never {},
        }
    }

    /// The leaves, in order.
    pub fn leaves(&self) -> Vec<&T> {
        match self {
            Structure::Tensor(t) => vec![t],
            Structure::Sequence { items, .. } => items.iter().collect(),
            Structure::Optional { value, .. } => value.as_ref().map(|v| v.leaves()).unwrap_or_default(),
        }
    }

    /// "a tensor", "a sequence", "an optional": for error lines.
    pub fn what(&self) -> &'static str {
        match self {
            Structure::Tensor(_) => "a tensor",
            Structure::Sequence { .. } => "a sequence",
            Structure::Optional { .. } => "an optional",
        }
    }

    /// The names of the flat values that hold this structure's leaves, for a value named `name` (rule 2).
    pub fn flat_names(&self, name: &str) -> Structure<String> {
        match self {
            Structure::Tensor(_) => Structure::Tensor(name.to_string()),
            Structure::Sequence { elem, items } => {
                Structure::Sequence { elem: *elem, items: (0..items.len()).map(|i| format!("{name}[{i}]")).collect() }
            }
            Structure::Optional { kind, value } => {
                Structure::Optional { kind: *kind, value: value.as_ref().map(|v| Box::new(v.flat_names(name))) }
            }
        }
    }
}

/// Whether a declared type is one of a sequence or an optional (not a tensor).
pub fn is_structured(ty: Option<&TypeProto>) -> bool {
    matches!(
        ty.and_then(|t| t.value.as_ref()),
        Some(type_proto::Value::SequenceType(_) | type_proto::Value::OptionalType(_))
    )
}

/// The element type a declared sequence type (or an optional of one) gives its items, if it gives one.
pub fn declared_elem(ty: Option<&TypeProto>) -> Option<DatumType> {
    match ty?.value.as_ref()? {
        type_proto::Value::TensorType(t) => tensor::datum_type(t.elem_type()).ok(),
        type_proto::Value::SequenceType(s) => declared_elem(s.elem_type.as_deref()),
        type_proto::Value::OptionalType(o) => declared_elem(o.elem_type.as_deref()),
        _ => None,
    }
}

/// What a declared optional holds ([`Kind`]), if the type is an optional of a tensor or a sequence.
pub fn declared_kind(ty: Option<&TypeProto>) -> Option<Kind> {
    let type_proto::Value::OptionalType(o) = ty?.value.as_ref()? else { return None };
    match o.elem_type.as_ref()?.value.as_ref()? {
        type_proto::Value::TensorType(_) => Some(Kind::Tensor),
        type_proto::Value::SequenceType(_) => Some(Kind::Sequence),
        _ => None,
    }
}

/// Reads the file of a value declared as `ty` (rule 3): a tensor, a sequence or an optional, refusing a file that
/// decoding could not bound within `limit` bytes.
pub fn read_value_within(
    path: &Path,
    ty: Option<&TypeProto>,
    limit: usize,
) -> Result<Structure<Tensor<'static>>, String> {
    if !is_structured(ty) {
        return super::read_tensor_within(path, limit).map(Structure::Tensor);
    }
    let optional = matches!(ty.and_then(|t| t.value.as_ref()), Some(type_proto::Value::OptionalType(_)));
    let msg = if optional { wire::Msg::Optional } else { wire::Msg::Sequence };
    let bytes = super::read_value_file(path, limit, msg)?;
    let fail = |m: String| format!("{}: {m}", path.display());
    let elem = declared_elem(ty);
    if optional {
        let o = OptionalProto::decode(bytes.as_slice()).map_err(|e| fail(format!("not an OptionalProto: {e}")))?;
        optional_value(&o, elem, declared_kind(ty), path.parent(), limit).map_err(fail)
    } else {
        let s = SequenceProto::decode(bytes.as_slice()).map_err(|e| fail(format!("not a SequenceProto: {e}")))?;
        sequence_value(&s, elem, path.parent(), limit).map_err(fail)
    }
}

fn sequence_value(
    s: &SequenceProto,
    declared: Option<DatumType>,
    dir: Option<&Path>,
    limit: usize,
) -> Result<Structure<Tensor<'static>>, String> {
    let others = !s.sequence_values.is_empty()
        || !s.map_values.is_empty()
        || !s.optional_values.is_empty()
        || !s.sparse_tensor_values.is_empty();
    if s.elem_type.is_some_and(|t| t != TENSOR) || others {
        return Err(
            "a sequence of sequences, maps, optionals or sparse tensors: stowage takes sequences of tensors".into()
        );
    }
    // The sequence is one value: its items share the limit (each may read external data).
    let mut left = limit;
    let mut items = Vec::with_capacity(s.tensor_values.len());
    for (i, t) in s.tensor_values.iter().enumerate() {
        let t = tensor::decode_within(t, dir, left).map_err(|e| format!("item {i}: {e} (the items together)"))?;
        left = left.saturating_sub(t.len() * t.dt().size_of());
        items.push(t);
    }
    let elem = match (declared, items.first()) {
        (Some(dt), _) => dt,
        (None, Some(t)) => t.dt(),
        (None, None) => return Err("an empty sequence whose model declares no element type".into()),
    };
    if let Some((i, t)) = items.iter().enumerate().find(|(_, t)| t.dt() != elem) {
        return Err(format!("item {i} is {}, the sequence's items are {elem}", t.dt()));
    }
    Ok(Structure::Sequence { elem, items })
}

fn optional_value(
    o: &OptionalProto,
    declared: Option<DatumType>,
    kind: Option<Kind>,
    dir: Option<&Path>,
    limit: usize,
) -> Result<Structure<Tensor<'static>>, String> {
    let value = match (o.elem_type.unwrap_or(0), &o.tensor_value, &o.sequence_value) {
        (TENSOR, Some(t), _) => {
            let t = tensor::decode_within(t, dir, limit).map_err(|e| e.to_string())?;
            if declared.is_some_and(|dt| dt != t.dt()) {
                return Err(format!("it holds a {} tensor, the model declares {}", t.dt(), declared.unwrap_or(t.dt())));
            }
            Some(Box::new(Structure::Tensor(t)))
        }
        (SEQUENCE, _, Some(s)) => Some(Box::new(sequence_value(s, declared, dir, limit)?)),
        (TENSOR | SEQUENCE, ..) => return Err("its element type is set and its value missing".into()),
        (0, None, None) if o.optional_value.is_none() && o.map_value.is_none() => None,
        _ => return Err("an optional of a map or an optional: stowage takes optionals of tensors and sequences".into()),
    };
    let held = value.as_ref().map(|v| if matches!(**v, Structure::Tensor(_)) { Kind::Tensor } else { Kind::Sequence });
    if let (Some(held), Some(kind)) = (held, kind) {
        if held != kind {
            return Err(format!("it holds a {held:?}, the model declares an optional of a {kind:?}").to_lowercase());
        }
    }
    Ok(Structure::Optional { kind: held.or(kind).unwrap_or(Kind::Tensor), value })
}

/// The bytes of a file holding `value`, named `name` (rule 3).
pub fn encode_value(value: &Structure<Tensor<'static>>, name: &str) -> Result<Vec<u8>, String> {
    fn sequence(items: &[Tensor<'static>], name: &str) -> Result<SequenceProto, String> {
        Ok(SequenceProto {
            name: Some(name.into()),
            elem_type: Some(TENSOR),
            tensor_values: items.iter().map(|t| tensor::encode(t, "")).collect::<Result<_, _>>()?,
            ..Default::default()
        })
    }
    Ok(match value {
        Structure::Tensor(t) => tensor::encode(t, name)?.encode_to_vec(),
        Structure::Sequence { items, .. } => sequence(items, name)?.encode_to_vec(),
        Structure::Optional { value, .. } => {
            let mut o = OptionalProto { name: Some(name.into()), elem_type: Some(0), ..Default::default() };
            match value.as_deref() {
                None => {}
                Some(Structure::Tensor(t)) => {
                    o.elem_type = Some(TENSOR);
                    o.tensor_value = Some(tensor::encode(t, "")?);
                }
                Some(Structure::Sequence { items, .. }) => {
                    o.elem_type = Some(SEQUENCE);
                    o.sequence_value = Some(sequence(items, "")?);
                }
                Some(Structure::Optional { .. }) => return Err("an optional of an optional".into()),
            }
            o.encode_to_vec()
        }
    })
}

/// A caller's value for the input `name` taken apart (rule 2): its form (the types of its tensors) and its tensors
/// under their flat names.
pub fn flatten(
    name: &str,
    value: &Structure<Tensor<'static>>,
) -> (Structure<ValueType>, Vec<(String, Tensor<'static>)>) {
    let form = value.map(|t| ValueType::new(t.dt(), t.shape().to_vec()));
    let names = value.flat_names(name);
    let flat = names.leaves().into_iter().cloned().zip(value.leaves().into_iter().cloned()).collect();
    (form, flat)
}

/// The model's outputs as values (rule 2): `flat`, the graph's outputs by name, put together as `forms` says (every
/// model output in order, with its flat names), or each as a tensor where `forms` is empty (no output is
/// structured).
pub fn assemble(
    flat: Vec<(String, Tensor<'static>)>,
    forms: &[(String, Structure<String>)],
) -> Result<Vec<(String, Structure<Tensor<'static>>)>, String> {
    if forms.is_empty() {
        return Ok(flat.into_iter().map(|(n, t)| (n, Structure::Tensor(t))).collect());
    }
    let by_name: HashMap<String, Tensor<'static>> = flat.into_iter().collect();
    forms
        .iter()
        .map(|(name, form)| {
            let value = form.try_map(&mut |n: &String| {
                by_name.get(n).cloned().ok_or_else(|| format!("output '{name}': its tensor '{n}' was not made"))
            })?;
            Ok((name.clone(), value))
        })
        .collect()
}
