//! Sequences and optionals that cross the cuts of a model compiled in stages (`stages.rs`; docs/compiler.md,
//! "Sequences and optionals"). A part's graph holds tensors only; a sequence or an optional one part makes and
//! another reads travels as its tensors. The rules:
//!
//! 1. **Made: its tensors and its form.** A part whose output is a sequence or an optional gives its tensors under
//!    their flat names (`NAME[i]`, `onnx::structure` rule 2) and its form, the flat names put together
//!    (`Metadata::structured_outputs`); a cut gathers the forms of its parts' outputs ([`Forms`]), the model's
//!    structured inputs' forms first.
//! 2. **Read: declared as what it is.** A later part that reads one is compiled with that input declared a
//!    sequence or an optional (`split::Part::typed_as`) of the form that came (`ImportConfig::input_structures`)
//!    and given its tensors under their flat names, as a structured graph input is: how many items it holds and
//!    their types and shapes are known when the part compiles, as any input's shape is. The form is part of the
//!    key the part's versions are kept under, so a sequence of another length compiles another version.
//! 3. **A model's output**: its tensors, with the forms of every model output in order, as a model compiled whole
//!    gives them (`Outcome::structured_outputs`), so the files written are the same.

use std::collections::BTreeMap;

use stowage_compiler::ir::ValueType;
use stowage_compiler::onnx::structure::{self, Structure};
use stowage_runtime::{DatumType, Tensor};

use crate::error::{DriverError, Result};
use crate::stages::Key;

/// The forms of the sequences and optionals among a cut's values: name and flat names (rule 1).
pub(crate) type Forms = Vec<(String, Structure<String>)>;

/// The forms of the model's structured inputs, as the caller gave them (rule 1).
pub(crate) fn input_forms(structures: &BTreeMap<String, Structure<ValueType>>) -> Forms {
    structures.iter().map(|(n, f)| (n.clone(), f.flat_names(n))).collect()
}

/// The structured forms among `forms` (a session's `structured_outputs` lists its tensors too).
pub(crate) fn structured(forms: &[(String, Structure<String>)]) -> Forms {
    forms.iter().filter(|(_, f)| !matches!(f, Structure::Tensor(_))).cloned().collect()
}

/// What a part reading `names` is given (rule 2): the tensors, a structured value's under its flat names, and the
/// forms of its structured inputs.
pub(crate) struct Gathered {
    pub args: Vec<(String, Tensor<'static>)>,
    pub structures: BTreeMap<String, Structure<ValueType>>,
    /// Each input's form with its leaves' types and shapes, in `names`' order: how the part is declared.
    pub typed: Vec<Structure<(DatumType, Vec<usize>)>>,
}

/// The values named `names`, each the last of that name in `values`, a structured one (a form in `forms`) as its
/// tensors (rule 2).
pub(crate) fn gather(values: &[(String, Tensor<'static>)], forms: &Forms, names: &[String]) -> Result<Gathered> {
    let mut gathered = Gathered { args: Vec::new(), structures: BTreeMap::new(), typed: Vec::new() };
    for name in names {
        let Some((_, form)) = forms.iter().rev().find(|(n, _)| n == name) else {
            let t = find(values, name)?;
            gathered.typed.push(Structure::Tensor((t.dt(), t.shape().to_vec())));
            gathered.args.push((name.clone(), t));
            continue;
        };
        let value = form.try_map(&mut |flat: &String| find(values, flat))?;
        let (types, flat) = structure::flatten(name, &value);
        gathered.typed.push(types.map(|t| (t.dt, t.shape.clone())));
        gathered.structures.insert(name.clone(), types);
        gathered.args.extend(flat);
    }
    Ok(gathered)
}

/// The model's outputs `names` as a cut gives them (rule 3): the tensors, flat, and every output's form when one
/// is structured (none otherwise).
pub(crate) fn outputs(
    values: &[(String, Tensor<'static>)],
    forms: &Forms,
    names: &[String],
) -> Result<(Vec<(String, Tensor<'static>)>, Forms)> {
    let gathered = gather(values, forms, names)?;
    if gathered.structures.is_empty() {
        return Ok((gathered.args, Vec::new()));
    }
    let all = names
        .iter()
        .map(|n| match forms.iter().rev().find(|(m, _)| m == n) {
            Some((_, f)) => (n.clone(), f.clone()),
            None => (n.clone(), Structure::Tensor(n.clone())),
        })
        .collect();
    Ok((gathered.args, all))
}

/// The key entries of a part's structured inputs (rule 2), which come before its tensors'.
pub(crate) fn key_entries(structures: &BTreeMap<String, Structure<ValueType>>) -> Key {
    structures.iter().map(|(n, f)| (DatumType::U8, Vec::new(), Some(format!("{n}: {f:?}").into_bytes()))).collect()
}

/// The tensor named `name`, the last of that name in `values`.
fn find(values: &[(String, Tensor<'static>)], name: &str) -> Result<Tensor<'static>> {
    let found = values.iter().rev().find(|(m, _)| m == name).map(|(_, t)| t.clone());
    found.ok_or_else(|| {
        DriverError::Plan(format!("value '{name}' was not made by an earlier part of the model (a staging bug)"))
    })
}
