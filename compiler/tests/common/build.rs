//! A few lines to build small ONNX models in tests, with prost's message types.

use prost::Message;
use stowage_compiler::onnx::proto::{
    attribute_proto::AttributeType, tensor_proto::DataType, tensor_shape_proto::dimension::Value as Dim,
    tensor_shape_proto::Dimension, type_proto, AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto,
    TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
};

/// A graph-valued attribute (an `If`'s branch, a `Loop`'s or `Scan`'s body).
pub fn graph_attr(name: &str, g: GraphProto) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Graph as i32),
        g: Some(g),
        ..Default::default()
    }
}

/// A node of the default domain.
pub fn node(op: &str, inputs: &[&str], outputs: &[&str], attrs: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        op_type: Some(op.into()),
        name: Some(format!("{op}_{}", outputs.first().unwrap_or(&""))),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        attribute: attrs,
        ..NodeProto::default()
    }
}

/// An int attribute.
pub fn int(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        i: Some(v),
        r#type: Some(AttributeType::Int as i32),
        ..Default::default()
    }
}

/// A float attribute.
pub fn float(name: &str, v: f32) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        f: Some(v),
        r#type: Some(AttributeType::Float as i32),
        ..Default::default()
    }
}

/// An ints attribute.
pub fn ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        ints: v.to_vec(),
        r#type: Some(AttributeType::Ints as i32),
        ..Default::default()
    }
}

/// A string attribute.
pub fn string(name: &str, v: &str) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        s: Some(v.as_bytes().to_vec()),
        r#type: Some(AttributeType::String as i32),
        ..Default::default()
    }
}

/// A strings attribute.
pub fn strings(name: &str, v: &[&str]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        strings: v.iter().map(|s| s.as_bytes().to_vec()).collect(),
        r#type: Some(AttributeType::Strings as i32),
        ..Default::default()
    }
}

/// A tensor input or output of f32 with fixed dims; a negative dim is symbolic, named `N`.
pub fn value(name: &str, dims: &[i64]) -> ValueInfoProto {
    typed_value(name, DataType::Float, dims)
}

/// A tensor input or output with fixed dims; a negative dim is symbolic, named `N`.
pub fn typed_value(name: &str, dt: DataType, dims: &[i64]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|&d| Dimension {
            value: Some(if d < 0 { Dim::DimParam("N".into()) } else { Dim::DimValue(d) }),
            ..Default::default()
        })
        .collect();
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(dt as i32),
                shape: Some(TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// An f32 initializer.
pub fn floats(name: &str, dims: &[i64], data: &[f32]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(DataType::Float as i32),
        float_data: data.to_vec(),
        ..Default::default()
    }
}

/// An i64 initializer.
pub fn int64s(name: &str, dims: &[i64], data: &[i64]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(DataType::Int64 as i32),
        int64_data: data.to_vec(),
        ..Default::default()
    }
}

/// A model of one graph at `opset`.
pub fn model(
    opset: i64,
    nodes: Vec<NodeProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
    initializers: Vec<TensorProto>,
) -> ModelProto {
    ModelProto {
        ir_version: Some(8),
        producer_name: Some("stowage-tests".into()),
        opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(opset) }],
        graph: Some(GraphProto {
            name: Some("test".into()),
            node: nodes,
            input: inputs,
            output: outputs,
            initializer: initializers,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The model's bytes.
pub fn bytes(m: &ModelProto) -> Vec<u8> {
    m.encode_to_vec()
}
