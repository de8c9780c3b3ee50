//! Types of the ops with subgraphs (`ir/subgraph.rs`). An [`Op::If`](crate::ir::Op::If) (rules 1 and 2): the
//! condition is one bool, every input after it has the type of the branches' input at its place, and both
//! branches make the node's outputs with the same types, which are the node's. An
//! [`Op::Loop`](crate::ir::Op::Loop) (rule 6): the trip count is one int64 and the condition one bool where
//! given, the body takes the iteration number, the condition and the node's other inputs in order, and makes the
//! next condition and the carried values with the types they came in, which are the node's outputs. An
//! [`Op::Scan`](crate::ir::Op::Scan) (rule 7): the scan inputs agree in length along their axes (the steps), the
//! body takes the states, a slice of each scan input and the values read from around it, and makes the states
//! with their types and a slice of each scan output, stacked into the node's outputs.

use stowage_runtime::DatumType;

use super::{invalid, InferError, Inputs};
use crate::ir::{Branches, LoopBody, ScanBody, ValueType};

/// The output types of an `If` whose inputs are `ins` and which declares `outputs` outputs.
pub(super) fn branches(b: &Branches, ins: Inputs<'_>, outputs: usize) -> Result<Vec<ValueType>, InferError> {
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

/// The output types of a `Loop` whose body is `l` and whose inputs are `ins`.
pub(super) fn body(l: &LoopBody, ins: Inputs<'_>, outputs: usize) -> Result<Vec<ValueType>, InferError> {
    let one = |k: usize, dt: DatumType, what: &str| match ins.get(k) {
        Some(f) if f.ty.dt != dt || f.ty.element_count() != Some(1) => {
            invalid(format!("its {what} is {}, not one {dt}", f.ty))
        }
        _ => Ok(()),
    };
    one(0, DatumType::I64, "trip count")?;
    one(1, DatumType::Bool, "condition")?;
    let g = &l.body;
    // Omitted inputs at the end are not listed (a loop of a trip count alone has one).
    let listed = ins.len().max(2);
    if listed < 2 + l.carried || g.inputs().len() != listed {
        return invalid(format!(
            "its body takes {} inputs; with {} carried values and {} read from around it, it must take {}",
            g.inputs().len(),
            l.carried,
            listed.saturating_sub(2 + l.carried),
            listed.max(2 + l.carried)
        ));
    }
    for (k, &v) in g.inputs().iter().enumerate() {
        let ty = g.ty(v);
        if k < 2 {
            let dt = if k == 0 { DatumType::I64 } else { DatumType::Bool };
            if ty.dt != dt || ty.element_count() != Some(1) {
                return invalid(format!("its body reads {ty} as input {k}, where it is given one {dt}"));
            }
            continue;
        }
        let given = ins.ty(k)?;
        if given != ty {
            return invalid(format!(
                "its body reads {} as input {k} ('{}'), where it is given {given}",
                g.ty(v),
                g.value(v).name
            ));
        }
    }
    if g.outputs().len() != 1 + l.carried || outputs != l.carried {
        return invalid(format!(
            "its body makes {} outputs and the node {outputs}; with {} carried values (and no scan outputs) they must \
             make {} and {}",
            g.outputs().len(),
            l.carried,
            1 + l.carried,
            l.carried
        ));
    }
    let made = |k: usize| g.ty(g.outputs()[k].value);
    if made(0).dt != DatumType::Bool || made(0).element_count() != Some(1) {
        return invalid(format!("its body's condition output is {}, not one bool", made(0)));
    }
    let mut types = Vec::with_capacity(l.carried);
    for k in 0..l.carried {
        let (came, goes) = (ins.ty(2 + k)?, made(1 + k));
        if came != goes {
            return invalid(format!("carried value {k} comes in as {came} and its body makes {goes}"));
        }
        types.push(came.clone());
    }
    Ok(types)
}

/// The output types of a `Scan` whose body is `s` and whose inputs are `ins`.
pub(super) fn scan(s: &ScanBody, ins: Inputs<'_>, outputs: usize) -> Result<Vec<ValueType>, InferError> {
    let g = &s.body;
    let (n, m, k) = (s.states, s.inputs.len(), s.outputs.len());
    if ins.len() < n + m || g.inputs().len() != ins.len() || g.outputs().len() != n + k || outputs != n + k {
        return invalid(format!(
            "its body takes {} inputs and makes {} outputs, the node has {} inputs and {outputs} outputs; with {n} \
             states, {m} scan inputs and {k} scan outputs they must agree",
            g.inputs().len(),
            g.outputs().len(),
            ins.len()
        ));
    }
    let mut steps = None;
    for (j, &(axis, _)) in s.inputs.iter().enumerate() {
        let t = ins.ty(n + j)?;
        let Some(&len) = t.shape.get(axis) else {
            return invalid(format!("scan input {j} is {t}, which has no axis {axis}"));
        };
        if steps.is_some_and(|s| s != len) || len == 0 {
            return invalid(format!("scan input {j} is {t}: the scan inputs must agree in length, at least 1"));
        }
        steps = Some(len);
    }
    let steps = steps.unwrap_or(0);
    for (k, &v) in g.inputs().iter().enumerate() {
        let given = ins.ty(k)?;
        let want = match k.checked_sub(n).filter(|&j| j < m) {
            Some(j) => {
                let mut shape = given.shape.clone();
                shape.remove(s.inputs[j].0);
                ValueType::new(given.dt, shape)
            }
            None => given.clone(),
        };
        if &want != g.ty(v) {
            return invalid(format!(
                "its body reads {} as input {k} ('{}'), where it is given {want}",
                g.ty(v),
                g.value(v).name
            ));
        }
    }
    let mut types = Vec::with_capacity(n + k);
    for i in 0..n {
        let made = g.ty(g.outputs()[i].value);
        if made != ins.ty(i)? {
            return invalid(format!("state {i} comes in as {} and its body makes {made}", ins.ty(i)?));
        }
        types.push(made.clone());
    }
    for (j, &(axis, _)) in s.outputs.iter().enumerate() {
        let slice = g.ty(g.outputs()[n + j].value);
        if axis > slice.rank() {
            return invalid(format!("scan output {j} is stacked along axis {axis}, past its slices' {slice}"));
        }
        let mut shape = slice.shape.clone();
        shape.insert(axis, steps);
        types.push(ValueType::new(slice.dt, shape));
    }
    Ok(types)
}
