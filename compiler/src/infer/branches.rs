//! Types of an [`Op::If`](crate::ir::Op::If) with its branches as subgraphs (`ir/subgraph.rs`, rules 1 and 2): the
//! condition is one bool, every input after it has the type of the branches' input at its place, and both
//! branches make the node's outputs with the same types, which are the node's.

use stowage_runtime::DatumType;

use super::{invalid, InferError, Inputs};
use crate::ir::{Branches, ValueType};

/// The output types of an `If` whose inputs are `ins` and which declares `outputs` outputs.
pub(super) fn infer(b: &Branches, ins: Inputs<'_>, outputs: usize) -> Result<Vec<ValueType>, InferError> {
    let cond = ins.ty(0)?;
    if cond.dt != DatumType::Bool || cond.element_count() != Some(1) {
        return invalid(format!("its condition is {cond}, not one bool"));
    }
    let mut types: Option<Vec<ValueType>> = None;
    for (which, g) in [("then", &b.then), ("else", &b.otherwise)] {
        if g.inputs().len() + 1 != ins.len() {
            return invalid(format!(
                "its {which} branch reads {} values from around it, the node passes {}",
                g.inputs().len(),
                ins.len() - 1
            ));
        }
        for (k, &v) in g.inputs().iter().enumerate() {
            let given = ins.ty(k + 1)?;
            if given != g.ty(v) {
                return invalid(format!(
                    "input {} is {given}, but its {which} branch reads {} there ('{}')",
                    k + 1,
                    g.ty(v),
                    g.value(v).name
                ));
            }
        }
        if g.outputs().len() != outputs {
            return invalid(format!("its {which} branch makes {} outputs, the node has {outputs}", g.outputs().len()));
        }
        let made: Vec<ValueType> = g.outputs().iter().map(|o| g.ty(o.value).clone()).collect();
        match &types {
            None => types = Some(made),
            Some(then) => {
                if let Some(k) = (0..outputs).find(|&k| then[k] != made[k]) {
                    return invalid(format!(
                        "its branches make different types for output {k} ({} and {})",
                        then[k], made[k]
                    ));
                }
            }
        }
    }
    Ok(types.unwrap_or_default())
}
