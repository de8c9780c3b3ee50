//! A model's graph inputs, read without its weights: what `stowage run` needs to match `--input` files to inputs
//! before it compiles. A `ModelProto` decoded whole copies every initializer's data; these messages declare only
//! the fields they keep (the graph's inputs and its initializers' names), and prost steps over the rest of the
//! bytes without copying them.

use super::proto::{TypeProto, ValueInfoProto};

/// `ModelProto` with only its graph (field 7).
#[derive(Clone, PartialEq, prost::Message)]
struct ModelHead {
    #[prost(message, optional, tag = "7")]
    graph: Option<GraphHead>,
}

/// `GraphProto` with only its initializers (field 5, names only) and inputs (field 11).
#[derive(Clone, PartialEq, prost::Message)]
struct GraphHead {
    #[prost(message, repeated, tag = "5")]
    initializer: Vec<Named>,
    #[prost(message, repeated, tag = "11")]
    input: Vec<ValueInfoProto>,
}

/// `TensorProto` with only its name (field 8).
#[derive(Clone, PartialEq, prost::Message)]
struct Named {
    #[prost(string, optional, tag = "8")]
    name: Option<String>,
}

/// The names and declared types of the graph's inputs that are not initializers, in order; `None` where the
/// bytes are not a model with a graph (the whole decode, [`super::decode_within`], then says what is wrong).
pub fn graph_inputs(bytes: &[u8]) -> Option<(Vec<String>, Vec<Option<TypeProto>>)> {
    let graph = <ModelHead as prost::Message>::decode(bytes).ok()?.graph?;
    let initializers: Vec<&str> = graph.initializer.iter().filter_map(|t| t.name.as_deref()).collect();
    Some(
        graph
            .input
            .into_iter()
            .filter(|i| !initializers.contains(&i.name()))
            .map(|i| (i.name().to_string(), i.r#type))
            .unzip(),
    )
}

#[cfg(test)]
mod tests {
    use prost::Message as _;

    use super::super::proto::{GraphProto, ModelProto, TensorProto, ValueInfoProto};

    /// The inputs read without the weights are those of the whole decode, initializers left out, types kept;
    /// bytes that are no model give none.
    #[test]
    fn graph_inputs_match_the_whole_model() {
        let input = |name: &str| ValueInfoProto { name: Some(name.into()), ..Default::default() };
        let weight = TensorProto {
            name: Some("w".into()),
            dims: vec![3],
            data_type: Some(1),
            raw_data: Some(vec![0; 12].into()),
            ..Default::default()
        };
        let model = ModelProto {
            graph: Some(GraphProto {
                input: vec![input("x"), input("w"), input("y")],
                initializer: vec![weight],
                ..Default::default()
            }),
            ..Default::default()
        };
        let bytes = model.encode_to_vec();
        let (names, types) = super::graph_inputs(&bytes).expect("a model");
        assert_eq!(names, ["x", "y"]);
        assert_eq!(types.len(), 2);
        assert!(super::graph_inputs(&bytes[..bytes.len() - 3]).is_none(), "truncated");
        assert!(super::graph_inputs(&ModelProto::default().encode_to_vec()).is_none(), "no graph");
    }

    /// `decode_shared` takes the weights' bytes from the buffer it is given, not copies; the limit still holds.
    #[test]
    fn shared_decoding_keeps_weights_in_the_buffer() {
        let weight = TensorProto {
            name: Some("w".into()),
            dims: vec![1024],
            data_type: Some(1),
            raw_data: Some(vec![7; 4096].into()),
            ..Default::default()
        };
        let graph = GraphProto { initializer: vec![weight], ..Default::default() };
        let bytes = prost::bytes::Bytes::from(ModelProto { graph: Some(graph), ..Default::default() }.encode_to_vec());
        let model = super::super::decode_shared(&bytes, 1 << 20).expect("decodes");
        let raw = model.graph.expect("graph").initializer[0].raw_data.clone().expect("raw data");
        let within = bytes.as_ptr_range();
        assert!(within.contains(&raw.as_ptr()) && raw.len() == 4096 && raw.iter().all(|&b| b == 7));
        let tight = super::super::decode_shared(&bytes, 0);
        assert!(tight.is_ok(), "the floor allows a small model");
    }
}
