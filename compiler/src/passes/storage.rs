//! A plan at `--precision fp16` or `bf16` stores the model's float values in that type: this rewrite, run on the
//! optimised graph before planning (`stowage_driver`'s `store_precision`), turns every f32 value between the
//! model's inputs and outputs into one of `dt`, so that the planner sizes, places and copies half-width values and
//! every kernel reads and writes them (arithmetic stays in f32 inside the kernels). The rules:
//!
//! 1. **Every f32 value inside is stored in `dt`.** f32 constants are converted at compile time (rounded to
//!    nearest even), a `Cast` to f32 becomes a `Cast` to `dt`, and so does a `ConstantOfShape` of an f32 value;
//!    every node's outputs then take the types inference gives from its retyped inputs, in graph order.
//! 2. **What an op reads at compile time keeps its type.** A constant read at an op's static inputs
//!    ([`Op::static_inputs`]: Resize's scales, Dropout's ratio) keeps its type there, and a constant that is a
//!    graph output keeps its type as the output; where such a constant is also read as data, those readers get a
//!    converted copy (`NAME.fp16`). A `Cast` to f32 that only graph outputs read (an integer label turned into
//!    floats) stays a cast to f32.
//! 3. **Callers see the model's types; the boundary casts are the only ones added.** Each f32 graph input is read
//!    through one `Cast` to `dt`, put first and named `INPUT.to_fp16` (its value `INPUT.fp16`), an input that is
//!    also a graph output staying that output as it is; each graph output that was f32 and is now `dt` is written
//!    by one `Cast` back to f32, put last, whose value takes the output value's name (the producer's value is
//!    renamed `NAME.fp16`), so outputs, `--read-outputs` and references read unchanged.
//! 4. **A node that cannot take `dt` is an error naming it**: inference refusing the retyped inputs (an op with
//!    no half-precision form in the IR) fails the rewrite with the node, its op and inference's reason, never a
//!    silent f32 island. Values that stay f32 whatever their inputs (an op whose attribute fixes its type) are
//!    counted in [`Stored::kept_f32`] and listed by name.
//!
//! The graph afterwards passes [`crate::ir::verify::verify`] (the caller runs it). Tests:
//! `compiler/tests/storage.rs`.

use std::collections::{HashMap, HashSet};

use stowage_runtime::DatumType;

use crate::consts;
use crate::infer::{self, Fact, InferError};
use crate::ir::{Graph, Op, ValueDef, ValueId, ValueType};

/// Why the graph cannot be stored in a type (rule 4).
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// A node refuses its retyped inputs.
    #[error("--precision {word}: node '{node}' ({op}) cannot take {dt} values: {source}")]
    Node {
        /// The precision's word (`fp16`, `bf16`).
        word: &'static str,
        /// The storage type.
        dt: DatumType,
        /// The node's name.
        node: String,
        /// Its op.
        op: &'static str,
        /// What inference says.
        source: InferError,
    },
    /// A constant cannot be converted.
    #[error("--precision {word}: constant '{value}' cannot be converted to {dt}: {message}")]
    Constant {
        /// The precision's word.
        word: &'static str,
        /// The storage type.
        dt: DatumType,
        /// The constant's name.
        value: String,
        /// Why.
        message: String,
    },
}

/// What [`run`] changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stored {
    /// Values now stored in the type (constants and node outputs).
    pub retyped: usize,
    /// Casts added at the inputs and outputs (rule 3).
    pub casts: usize,
    /// Values left in f32 inside the graph (rule 4), by name.
    pub kept_f32: Vec<String>,
}

/// The word of a storage type, as `--precision` spells it (`fp16`, `bf16`).
fn word(dt: DatumType) -> &'static str {
    if dt == DatumType::BF16 {
        "bf16"
    } else {
        "fp16"
    }
}

/// Stores every f32 value of `g` in `dt` (f16 or bf16) by the rules above.
pub fn run(g: &mut Graph, dt: DatumType) -> Result<Stored, StorageError> {
    let word = word(dt);
    let mut stored = Stored::default();
    let outputs: HashSet<ValueId> = g.outputs().iter().map(|o| o.value).collect();
    let was_f32: Vec<bool> = g.outputs().iter().map(|o| g.ty(o.value).dt == DatumType::F32).collect();
    // Rule 2: constants read as data (`computed`), and those also read where their type must stay (`kept`).
    let mut computed: HashSet<ValueId> = HashSet::new();
    let mut kept: HashSet<ValueId> = outputs.clone();
    for &n in g.order() {
        let node = g.node(n);
        let fixed = node.op.static_inputs();
        for (i, v) in node.inputs.iter().enumerate() {
            if let Some(v) = *v {
                if fixed.contains(&i) {
                    kept.insert(v);
                } else {
                    computed.insert(v);
                }
            }
        }
    }
    // Rule 1: constants, converted in place, or copied for their data readers where rule 2 keeps them.
    let constants: Vec<ValueId> = g
        .values()
        .filter(|(v, d)| matches!(d.def, ValueDef::Const(_)) && d.ty.dt == DatumType::F32 && computed.contains(v))
        .map(|(v, _)| v)
        .collect();
    for v in constants {
        let t = g.const_value(v).expect("a constant");
        let converted = consts::to_f64s(t)
            .and_then(|xs| consts::from_f64s(dt, t.shape(), &xs))
            .map_err(|e| StorageError::Constant { word, dt, value: g.value(v).name.clone(), message: e.to_string() })?;
        if kept.contains(&v) {
            let copy = g.add_const(format!("{}.{word}", g.value(v).name), converted);
            for n in g.order().to_vec() {
                let fixed = g.node(n).op.static_inputs();
                for (i, input) in g.node_mut(n).inputs.iter_mut().enumerate() {
                    if *input == Some(v) && !fixed.contains(&i) {
                        *input = Some(copy);
                    }
                }
            }
        } else {
            g.make_const(v, converted);
        }
        stored.retyped += 1;
    }
    // Rule 2: casts to f32 that only graph outputs read.
    let mut read: HashSet<ValueId> = HashSet::new();
    for &n in g.order() {
        read.extend(g.node(n).inputs.iter().flatten().copied());
    }
    // Rule 3: the inputs, each through one cast put first.
    let first = g.order().first().copied();
    for v in g.inputs().to_vec() {
        let ty = g.ty(v).clone();
        if ty.dt != DatumType::F32 {
            continue;
        }
        let name = g.value(v).name.clone();
        let cast = g.add_node(
            format!("{name}.to_{word}"),
            Op::cast(dt),
            vec![Some(v)],
            vec![Some((format!("{name}.{word}"), ValueType::new(dt, ty.shape)))],
        );
        let half = g.node(cast).outputs[0].expect("the cast's output");
        g.replace_uses(v, half);
        g.node_mut(cast).inputs[0] = Some(v);
        // An input that is also an output stays that output, in f32.
        for i in 0..g.outputs().len() {
            if g.outputs()[i].value == half {
                g.set_output_value(i, v);
            }
        }
        if let Some(first) = first {
            g.move_before(cast, first);
        }
        stored.casts += 1;
    }
    // Rule 1: every node in order takes the types its retyped inputs give.
    for n in g.order().to_vec() {
        let node = g.node(n);
        let to_outputs_only = node.outputs.iter().flatten().all(|v| !read.contains(v));
        let mut op = match &node.op {
            Op::Cast { to: DatumType::F32, .. } if to_outputs_only => node.op.clone(),
            Op::Cast { to: DatumType::F32, mode } => Op::Cast { to: dt, mode: *mode },
            Op::ConstantOfShape { value } if value.dt() == DatumType::F32 => {
                let xs = consts::to_f64s(value).and_then(|xs| consts::from_f64s(dt, value.shape(), &xs));
                match xs {
                    Ok(value) => Op::ConstantOfShape { value },
                    Err(_) => node.op.clone(),
                }
            }
            op => op.clone(),
        };
        let facts: Vec<Option<Fact<'_>>> =
            node.inputs.iter().map(|v| v.map(|v| Fact { ty: g.ty(v), value: g.const_value(v) })).collect();
        let types = infer::infer(&mut op, &facts, node.outputs.len()).map_err(|source| StorageError::Node {
            word,
            dt,
            node: node.name.clone(),
            op: node.op.name(),
            source,
        })?;
        let outs = node.outputs.clone();
        g.node_mut(n).op = op;
        for (v, ty) in outs.iter().zip(types) {
            let Some(v) = *v else { continue };
            let before = g.ty(v).dt;
            if before == DatumType::F32 && ty.dt == dt {
                stored.retyped += 1;
            } else if ty.dt == DatumType::F32 {
                stored.kept_f32.push(g.value(v).name.clone());
            }
            g.value_mut(v).ty = ty;
        }
    }
    // Rule 3: the outputs, each written by one cast put last.
    let mut cast_of: HashMap<ValueId, ValueId> = HashMap::new();
    for (i, f32_before) in was_f32.into_iter().enumerate() {
        let v = g.outputs()[i].value;
        if !f32_before || g.ty(v).dt != dt {
            continue;
        }
        let back = match cast_of.get(&v) {
            Some(&back) => back,
            None => {
                let name = g.value(v).name.clone();
                g.value_mut(v).name = format!("{name}.{word}");
                let shape = g.ty(v).shape.clone();
                let cast = g.add_node(
                    format!("{name}.to_f32"),
                    Op::cast(DatumType::F32),
                    vec![Some(v)],
                    vec![Some((name, ValueType::new(DatumType::F32, shape)))],
                );
                stored.casts += 1;
                let back = g.node(cast).outputs[0].expect("the cast's output");
                cast_of.insert(v, back);
                back
            }
        };
        g.set_output_value(i, back);
    }
    Ok(stored)
}
