//! A compiled graph written out and read back: what `stowage build` puts in an executable, so that it starts from
//! the optimised graph (weights folded, constants laid out) instead of importing and optimising the model again.
//!
//! Two parts: the graph's structure (values, nodes with their ops, order, inputs, outputs), encoded with bincode,
//! and its constants' bytes, packed row-major, each at a 256-byte boundary of one blob. Read from a blob that lives
//! as long as the process (an executable's image), every constant is a view of the blob: no byte is copied. The
//! constants of a node's subgraphs (an `If`'s branches, a `Loop`'s body) are written inside its op, with the
//! subgraph's own structure, and copied out when read back (`ir/subgraph.rs`, rule 5).

use cranelift_entity::{EntityRef, PrimaryMap};
use serde::{Deserialize, Serialize};
use stowage_runtime::{strings, DatumType, ExternalStorage, Layout, Tensor};

use super::graph::{Graph, GraphOutput, Metadata, NodeData, ValueData, ValueDef};
use super::{NodeId, Op, ValueId, ValueType};

/// Where each constant starts in the blob: a multiple of the alignment unified OpenCL devices import host memory
/// at (PoCL: 128 bytes; 256 covers more), so that such a device reads a built executable's constants in place.
pub const CONST_ALIGNMENT: usize = 256;

/// Lays out every constant of `graph` packed row-major at [`CONST_ALIGNMENT`], as the blob will (those already so
/// are left alone): what `stowage build` plans against, so that a plan's in-place reads of constants are the ones
/// built code makes from its image.
pub fn align_constants(graph: &mut Graph) -> Result<(), String> {
    let misplaced: Vec<(ValueId, Tensor<'static>)> = graph
        .values()
        .filter_map(|(v, data)| match &data.def {
            ValueDef::Const(t) if !t.is_empty() => {
                let at = t.storage().host_bytes().map(|b| b.as_ptr() as usize + t.layout().offset());
                let placed = at.is_some_and(|a| a.is_multiple_of(CONST_ALIGNMENT));
                (!placed || !t.is_row_major() || !t.is_whole_storage()).then(|| (v, t.clone()))
            }
            _ => None,
        })
        .collect();
    for (v, t) in misplaced {
        let layout = Layout::row_major(t.dt(), t.shape()).map_err(|e| e.to_string())?;
        let placed =
            t.to_layout(layout, CONST_ALIGNMENT).map_err(|e| format!("constant '{}': {e}", graph.value(v).name))?;
        graph.make_const(v, placed);
    }
    Ok(())
}

/// `DatumType` as its ONNX code, for serde.
pub mod datum_type {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use stowage_runtime::DatumType;

    /// Writes the ONNX code.
    pub fn serialize<S: Serializer>(dt: &DatumType, s: S) -> Result<S::Ok, S::Error> {
        (crate::onnx::tensor::onnx_type(*dt) as i32).serialize(s)
    }

    /// Reads an ONNX code.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DatumType, D::Error> {
        let code = i32::deserialize(d)?;
        crate::onnx::tensor::datum_type(code).map_err(serde::de::Error::custom)
    }
}

/// float8e8m0's rounding, as ONNX's `round_mode` string.
pub mod e8m0_rounding {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use stowage_runtime::small_types::E8M0Rounding;

    /// Writes `up`, `nearest` or `down`.
    pub fn serialize<S: Serializer>(r: &E8M0Rounding, s: S) -> Result<S::Ok, S::Error> {
        match r {
            E8M0Rounding::Up => "up",
            E8M0Rounding::Nearest => "nearest",
            E8M0Rounding::Down => "down",
        }
        .serialize(s)
    }

    /// Reads `up`, `nearest` or `down`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<E8M0Rounding, D::Error> {
        match String::deserialize(d)?.as_str() {
            "up" => Ok(E8M0Rounding::Up),
            "nearest" => Ok(E8M0Rounding::Nearest),
            "down" => Ok(E8M0Rounding::Down),
            other => Err(serde::de::Error::custom(format!("unknown round_mode '{other}'"))),
        }
    }
}

/// A small tensor held in an op's attributes (ConstantOfShape's value), for serde: type, shape and packed bytes.
pub mod tensor {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use stowage_runtime::Tensor;

    /// Writes type, shape and bytes.
    pub fn serialize<S: Serializer>(t: &Tensor<'static>, s: S) -> Result<S::Ok, S::Error> {
        let packed = t.to_row_major().map_err(serde::ser::Error::custom)?;
        let bytes = packed.as_bytes().map_err(serde::ser::Error::custom)?;
        (crate::onnx::tensor::onnx_type(t.dt()) as i32, t.shape(), bytes).serialize(s)
    }

    /// Reads type, shape and bytes.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Tensor<'static>, D::Error> {
        let (code, shape, bytes): (i32, Vec<usize>, Vec<u8>) = Deserialize::deserialize(d)?;
        let dt = crate::onnx::tensor::datum_type(code).map_err(serde::de::Error::custom)?;
        Tensor::from_bytes(dt, &shape, &bytes).map_err(serde::de::Error::custom)
    }
}

#[derive(Serialize, Deserialize)]
enum Def {
    Input(usize),
    /// Bytes `[offset, offset + len)` of the blob.
    Const {
        offset: usize,
        len: usize,
    },
    /// A string constant, as its text: handles mean nothing in another process (`strings`, rule 4).
    Strings(Vec<String>),
    Node(u32, usize),
}

#[derive(Serialize, Deserialize)]
struct Value {
    name: String,
    ty: ValueType,
    def: Def,
}

#[derive(Serialize, Deserialize)]
struct Node {
    name: String,
    op: Op,
    inputs: Vec<Option<u32>>,
    outputs: Vec<Option<u32>>,
}

#[derive(Serialize, Deserialize)]
struct Flat {
    name: String,
    opset: i64,
    producer: String,
    props: Vec<(String, String)>,
    assumed_inputs: Vec<String>,
    values: Vec<Value>,
    nodes: Vec<Node>,
    order: Vec<u32>,
    inputs: Vec<u32>,
    outputs: Vec<(String, u32)>,
}

/// A graph written out: its structure and its constants' bytes.
pub struct Encoded {
    /// The structure (bincode).
    pub graph: Vec<u8>,
    /// Every live constant, packed row-major, each at a 256-byte boundary.
    pub constants: Vec<u8>,
}

fn index<E: EntityRef>(e: E) -> u32 {
    e.index() as u32
}

/// Writes `g` out. Constants no live node or output reads are written empty.
pub fn encode(g: &Graph) -> Result<Encoded, String> {
    if let Some((name, form)) =
        g.metadata.structured_outputs.iter().find(|(_, f)| !matches!(f, crate::onnx::structure::Structure::Tensor(_)))
    {
        return Err(format!(
            "output '{name}' is {}: built code takes and makes tensors only (run the model with `stowage run`)",
            form.what()
        ));
    }
    let uses = g.use_counts();
    let mut constants = Vec::new();
    let mut values = Vec::new();
    for (v, data) in g.values() {
        let (ty, def) = match &data.def {
            ValueDef::Input(k) => (data.ty.clone(), Def::Input(*k)),
            ValueDef::Node(n, k) => (data.ty.clone(), Def::Node(index(*n), *k)),
            ValueDef::Const(_) if uses[v] == 0 => (ValueType::new(data.ty.dt, [0]), Def::Const { offset: 0, len: 0 }),
            ValueDef::Const(t) if t.dt() == DatumType::Str => {
                let handles = strings::handles(t).map_err(|e| format!("constant '{}': {e}", data.name))?;
                let text = strings::resolve_all(&handles).into_iter().map(String::from).collect();
                (data.ty.clone(), Def::Strings(text))
            }
            ValueDef::Const(t) => {
                let packed = t.to_row_major().map_err(|e| format!("constant '{}': {e}", data.name))?;
                let bytes = packed.as_bytes().map_err(|e| format!("constant '{}': {e}", data.name))?;
                constants.resize(constants.len().next_multiple_of(CONST_ALIGNMENT), 0);
                let offset = constants.len();
                constants.extend_from_slice(bytes);
                (data.ty.clone(), Def::Const { offset, len: bytes.len() })
            }
        };
        values.push(Value { name: data.name.clone(), ty, def });
    }
    let (nodes, order, inputs, outputs) = g.parts();
    let flat = Flat {
        name: g.name.clone(),
        opset: g.metadata.opset,
        producer: g.metadata.producer.clone(),
        props: g.metadata.props.clone(),
        assumed_inputs: g.metadata.assumed_inputs.clone(),
        values,
        nodes: nodes
            .values()
            .map(|n| Node {
                name: n.name.clone(),
                op: n.op.clone(),
                inputs: n.inputs.iter().map(|v| v.map(index)).collect(),
                outputs: n.outputs.iter().map(|v| v.map(index)).collect(),
            })
            .collect(),
        order: order.iter().map(|&n| index(n)).collect(),
        inputs: inputs.iter().map(|&v| index(v)).collect(),
        outputs: outputs.iter().map(|o| (o.name.clone(), index(o.value))).collect(),
    };
    let graph = bincode::serialize(&flat).map_err(|e| e.to_string())?;
    Ok(Encoded { graph, constants })
}

/// How constants are made from the blob's bytes.
enum Blob<'a> {
    /// Views of a blob that lives as long as the process.
    Static(&'static [u8]),
    /// Copies.
    Borrowed(&'a [u8]),
}

/// Reads a graph back, its constants views of `constants` (no byte copied; one not aligned for its type is copied).
pub fn decode_static(graph: &[u8], constants: &'static [u8]) -> Result<Graph, String> {
    decode_with(graph, Blob::Static(constants))
}

/// Reads a graph back, its constants copied out of `constants`.
pub fn decode(graph: &[u8], constants: &[u8]) -> Result<Graph, String> {
    decode_with(graph, Blob::Borrowed(constants))
}

fn decode_with(graph: &[u8], blob: Blob<'_>) -> Result<Graph, String> {
    let flat: Flat = bincode::deserialize(graph).map_err(|e| format!("a compiled graph that does not decode: {e}"))?;
    let (value_count, node_count) = (flat.values.len(), flat.nodes.len());
    let value_id = |k: u32| -> Result<ValueId, String> {
        ((k as usize) < value_count).then(|| ValueId::new(k as usize)).ok_or(format!("no value {k}"))
    };
    let node_id = |k: u32| -> Result<NodeId, String> {
        ((k as usize) < node_count).then(|| NodeId::new(k as usize)).ok_or(format!("no node {k}"))
    };
    let mut values = PrimaryMap::new();
    for v in flat.values {
        let def = match v.def {
            Def::Input(k) => ValueDef::Input(k),
            Def::Node(n, k) => ValueDef::Node(node_id(n)?, k),
            Def::Strings(text) => ValueDef::Const(
                strings::tensor_of(&v.ty.shape, &text).map_err(|e| format!("constant '{}': {e}", v.name))?,
            ),
            Def::Const { offset, len } => {
                let bytes = |b: &[u8]| -> Result<(), String> {
                    match offset.checked_add(len) {
                        Some(end) if end <= b.len() => Ok(()),
                        _ => Err(format!("constant '{}' lies outside the constants", v.name)),
                    }
                };
                let layout = Layout::row_major(v.ty.dt, &v.ty.shape).map_err(|e| e.to_string())?;
                let t = match blob {
                    Blob::Static(b) => {
                        bytes(b)?;
                        let slice = &b[offset..offset + len];
                        if (slice.as_ptr() as usize).is_multiple_of(v.ty.dt.size_of().max(1)) {
                            Tensor::external(v.ty.dt, &v.ty.shape, layout, ExternalStorage::borrowed(slice))
                        } else {
                            Tensor::from_bytes(v.ty.dt, &v.ty.shape, slice)
                        }
                    }
                    Blob::Borrowed(b) => {
                        bytes(b)?;
                        Tensor::from_bytes(v.ty.dt, &v.ty.shape, &b[offset..offset + len])
                    }
                }
                .map_err(|e| format!("constant '{}': {e}", v.name))?;
                ValueDef::Const(t)
            }
        };
        values.push(ValueData { name: v.name, ty: v.ty, def });
    }
    let mut nodes = PrimaryMap::new();
    for n in flat.nodes {
        let ids = |vs: Vec<Option<u32>>| -> Result<Vec<Option<ValueId>>, String> {
            vs.into_iter().map(|v| v.map(value_id).transpose()).collect()
        };
        nodes.push(NodeData { name: n.name, op: n.op, inputs: ids(n.inputs)?, outputs: ids(n.outputs)? });
    }
    let order = flat.order.into_iter().map(node_id).collect::<Result<_, _>>()?;
    let inputs = flat.inputs.into_iter().map(value_id).collect::<Result<_, _>>()?;
    let outputs = flat
        .outputs
        .into_iter()
        .map(|(name, v)| Ok(GraphOutput { name, value: value_id(v)? }))
        .collect::<Result<_, String>>()?;
    let metadata = Metadata {
        opset: flat.opset,
        producer: flat.producer,
        props: flat.props,
        assumed_inputs: flat.assumed_inputs,
        structured_outputs: Vec::new(),
    };
    Ok(Graph::from_parts(flat.name, metadata, values, nodes, order, inputs, outputs))
}
