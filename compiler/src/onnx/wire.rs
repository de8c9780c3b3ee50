//! What decoding a model will take, read from its protobuf bytes before anything is decoded.
//!
//! prost's decoding allocates as the message says and cannot fail softly: a packed `int64_data` turns each byte of
//! the file into up to 8, every two-byte empty `NodeProto` becomes a struct of a few hundred bytes, every empty
//! string a 24-byte header. A crafted file of a few hundred megabytes could ask for more memory than the machine has,
//! and the process would abort. [`decoded_bytes`] walks the wire format once, without allocating, and bounds that
//! memory; [`super::decode_within`] refuses a model whose bound is over the limit on one value, or over
//! [`DECODE_FLOOR`] where the limit is lower (every model needs some room to be read).
//!
//! The bound, rule by rule:
//! 1. **Messages.** Every message the importer's types hold (model, graph, node, attribute, tensor, sparse tensor,
//!    value info, type, shape, dimension, function, training info, string pairs, opset ids…) costs the size of its
//!    Rust struct ([`message_bytes`]), plus what its fields cost.
//! 2. **Strings and bytes** cost a header (`HEADER`) and their length, at least 8 (what an allocation takes).
//! 3. **Numbers in repeated fields** cost their decoded width each (8 for `int64`, `uint64`, `double`; 4 for `int32`,
//!    `float`): for a packed field, the count of varints (bytes with the high bit clear) or fixed values in it.
//! 4. **Everything else** (scalars, enums, fields this version of ONNX does not define) costs nothing beyond its
//!    message: prost stores scalars inline and skips unknown fields.
//! 5. **Spare capacity.** The first element of each field of a message costs 4 (the room a vector's first push
//!    makes), and the total is doubled: a vector grown by pushing holds up to twice what it uses.
//!
//! Malformed bytes end the walk; the bound then covers the well-formed part before them, which is what prost decodes
//! (and allocates) before it reports what is wrong ([`decoded_prefix_bytes`]).

/// What decoding may always take, however low the limit on one value is set.
pub const DECODE_FLOOR: usize = 64 << 20;
/// Bytes charged for each string or byte string's header (rule 2).
pub const HEADER: usize = 24;
/// The least a string's bytes take once allocated (rule 2).
const MIN_STRING: usize = 8;
/// How many elements the first push into a vector makes room for (rule 5).
const FIRST: usize = 4;
/// How deep messages may nest (prost's own limit).
const DEPTH: usize = 100;

/// The message types the walk knows (rule 1).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[allow(missing_docs)]
pub enum Msg {
    Model,
    Graph,
    Node,
    Attribute,
    Tensor,
    Segment,
    Sparse,
    ValueInfo,
    Type,
    TypeTensor,
    TypeNested,
    TypeMap,
    TypeOpaque,
    Shape,
    Dimension,
    Function,
    Training,
    Pair,
    Opset,
    Annotation,
    DeviceConfig,
    NodeDeviceConfig,
    Sharding,
    ShardedDim,
    SimpleSharded,
    IntIntList,
    /// `SequenceProto` (a value file, not part of a model).
    Sequence,
    /// `OptionalProto` (a value file).
    Optional,
    /// `MapProto` (inside a value file).
    Map,
}

/// Bytes charged for one decoded `msg` (rule 1): its struct's size.
pub fn message_bytes(msg: Msg) -> usize {
    use super::proto as p;
    use std::mem::size_of;
    use Msg::*;
    match msg {
        Model => size_of::<p::ModelProto>(),
        Graph => size_of::<p::GraphProto>(),
        Node => size_of::<p::NodeProto>(),
        Attribute => size_of::<p::AttributeProto>(),
        Tensor => size_of::<p::TensorProto>(),
        Segment => size_of::<p::tensor_proto::Segment>(),
        Sparse => size_of::<p::SparseTensorProto>(),
        ValueInfo => size_of::<p::ValueInfoProto>(),
        Type => size_of::<p::TypeProto>(),
        TypeTensor => size_of::<p::type_proto::Tensor>().max(size_of::<p::type_proto::SparseTensor>()),
        TypeNested => size_of::<p::type_proto::Sequence>().max(size_of::<p::type_proto::Optional>()),
        TypeMap => size_of::<p::type_proto::Map>(),
        TypeOpaque => size_of::<p::type_proto::Opaque>(),
        Shape => size_of::<p::TensorShapeProto>(),
        Dimension => size_of::<p::tensor_shape_proto::Dimension>(),
        Function => size_of::<p::FunctionProto>(),
        Training => size_of::<p::TrainingInfoProto>(),
        Pair => size_of::<p::StringStringEntryProto>(),
        Opset => size_of::<p::OperatorSetIdProto>(),
        Annotation => size_of::<p::TensorAnnotation>(),
        DeviceConfig => size_of::<p::DeviceConfigurationProto>(),
        NodeDeviceConfig => size_of::<p::NodeDeviceConfigurationProto>(),
        Sharding => size_of::<p::ShardingSpecProto>(),
        ShardedDim => size_of::<p::ShardedDimProto>(),
        SimpleSharded => size_of::<p::SimpleShardedDimProto>(),
        IntIntList => size_of::<p::IntIntListEntryProto>(),
        Sequence => size_of::<p::SequenceProto>(),
        Optional => size_of::<p::OptionalProto>(),
        Map => size_of::<p::MapProto>(),
    }
}

/// What a field of a message holds.
#[derive(Clone, Copy)]
enum Field {
    Message(Msg),
    Bytes,
    /// A number of this decoded width, as a varint.
    Varint(usize),
    /// A number of this width, fixed on the wire (and in memory).
    Fixed(usize),
    Scalar,
}

fn field(msg: Msg, number: u32) -> Field {
    use Field::{Bytes, Fixed, Message as M, Scalar, Varint};
    use Msg::*;
    match (msg, number) {
        (Model, 7) => M(Graph),
        (Model, 8) => M(Opset),
        (Model, 14) => M(Pair),
        (Model, 20) => M(Training),
        (Model, 25) => M(Function),
        (Model, 26) => M(DeviceConfig),
        (Model, 2 | 3 | 4 | 6) => Bytes,
        (Graph, 1) => M(Node),
        (Graph, 5) => M(Tensor),
        (Graph, 15) => M(Sparse),
        (Graph, 11..=13) => M(ValueInfo),
        (Graph, 14) => M(Annotation),
        (Graph, 16) => M(Pair),
        (Graph, 2 | 10) => Bytes,
        (Node, 5) => M(Attribute),
        (Node, 9) => M(Pair),
        (Node, 10) => M(NodeDeviceConfig),
        (Node, 1..=4 | 6..=8) => Bytes,
        (Attribute, 5 | 10) => M(Tensor),
        (Attribute, 6 | 11) => M(Graph),
        (Attribute, 22 | 23) => M(Sparse),
        (Attribute, 14 | 15) => M(Type),
        (Attribute, 7) => Fixed(4),
        (Attribute, 8) => Varint(8),
        (Attribute, 1 | 4 | 9 | 13 | 21) => Bytes,
        (Tensor, 1 | 7) => Varint(8),
        (Tensor, 11) => Varint(8),
        (Tensor, 5) => Varint(4),
        (Tensor, 4) => Fixed(4),
        (Tensor, 10) => Fixed(8),
        (Tensor, 3) => M(Segment),
        (Tensor, 13 | 16) => M(Pair),
        (Tensor, 6 | 8 | 9 | 12) => Bytes,
        (Sparse, 1 | 2) => M(Tensor),
        (Sparse, 3) => Varint(8),
        (ValueInfo, 2) => M(Type),
        (ValueInfo, 4) => M(Pair),
        (ValueInfo, 1 | 3) => Bytes,
        (Type, 1 | 8) => M(TypeTensor),
        (Type, 4 | 9) => M(TypeNested),
        (Type, 5) => M(TypeMap),
        (Type, 7) => M(TypeOpaque),
        (Type, 6) => Bytes,
        (TypeTensor, 2) => M(Shape),
        (TypeNested, 1) | (TypeMap, 2) => M(Type),
        (TypeOpaque, 1 | 2) => Bytes,
        (Shape, 1) => M(Dimension),
        (Dimension, 2 | 3) => Bytes,
        (Function, 7) => M(Node),
        (Function, 11) => M(Attribute),
        (Function, 9) => M(Opset),
        (Function, 12) => M(ValueInfo),
        (Function, 14) => M(Pair),
        (Function, 1 | 4..=6 | 8 | 10 | 13) => Bytes,
        (Training, 1 | 2) => M(Graph),
        (Training, 3 | 4) => M(Pair),
        (Pair, 1 | 2) | (Opset, 1) => Bytes,
        (Annotation, 1) => Bytes,
        (Annotation, 2) => M(Pair),
        (DeviceConfig, 1 | 3) => Bytes,
        (NodeDeviceConfig, 1) => Bytes,
        (NodeDeviceConfig, 2) => M(Sharding),
        (Sharding, 1) => Bytes,
        (Sharding, 2) => Varint(8),
        (Sharding, 3) => M(IntIntList),
        (Sharding, 4) => M(ShardedDim),
        (ShardedDim, 2) => M(SimpleSharded),
        (SimpleSharded, 2) => Bytes,
        (IntIntList, 2) => Varint(8),
        (Sequence, 3) | (Optional, 3) => M(Tensor),
        (Sequence, 4) | (Optional, 4) => M(Sparse),
        (Sequence, 5) | (Optional, 5) | (Map, 5) => M(Sequence),
        (Sequence, 6) | (Optional, 6) => M(Map),
        (Sequence, 7) | (Optional, 7) => M(Optional),
        (Sequence, 1) | (Optional, 1) | (Map, 1 | 4) => Bytes,
        (Map, 3) => Varint(8),
        _ => Scalar,
    }
}

/// A protobuf varint at the start of `bytes`, and its length.
fn varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (i, &b) in bytes.iter().take(10).enumerate() {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// The element a field's vector holds, and its cost (rules 1 to 3) for a field whose wire body is `body`.
fn cost(f: Field, body: Option<&[u8]>) -> (usize, usize) {
    match (f, body) {
        (Field::Message(inner), _) => (message_bytes(inner), message_bytes(inner)),
        (Field::Bytes, body) => (HEADER, HEADER + body.map_or(0, |b| b.len().max(MIN_STRING))),
        // Packed: every varint ends at a byte with its high bit clear.
        (Field::Varint(width), Some(body)) => (width, body.iter().filter(|b| *b & 0x80 == 0).count() * width),
        (Field::Varint(width) | Field::Fixed(width), None) => (width, width),
        (Field::Fixed(width), Some(body)) => (width, body.len().div_ceil(width) * width),
        (Field::Scalar, _) => (0, 0),
    }
}

/// Adds to `total` the memory the fields in `bytes` of a `msg` message take once decoded, beyond the message
/// itself; `group`: the field number of the group these fields are inside (which prost skips: nothing in it is
/// charged), whose end closes the walk. Returns the bytes after the message or group, or `None` at bytes that are not
/// well-formed, with `total` then holding what the well-formed part before them costs (what prost allocates before
/// it fails there).
fn walk<'b>(msg: Msg, mut bytes: &'b [u8], depth: usize, group: Option<u32>, total: &mut usize) -> Option<&'b [u8]> {
    if depth > DEPTH {
        return None;
    }
    // The fields met so far: the first element of a vector costs `FIRST` elements (rule 5).
    let mut seen: Vec<u32> = Vec::new();
    while !bytes.is_empty() {
        let (key, n) = varint(bytes)?;
        bytes = &bytes[n..];
        let number = u32::try_from(key >> 3).ok()?;
        let f = if group.is_some() { Field::Scalar } else { field(msg, number) };
        let mut body = None;
        match key & 7 {
            3 => bytes = walk(msg, bytes, depth + 1, Some(number), total)?,
            4 => return (group == Some(number)).then_some(bytes),
            0 => bytes = &bytes[varint(bytes)?.1..],
            1 => bytes = bytes.get(8..)?,
            5 => bytes = bytes.get(4..)?,
            2 => {
                let (len, n) = varint(bytes)?;
                let end = n.checked_add(usize::try_from(len).ok()?)?;
                body = Some(bytes.get(n..end)?);
                bytes = &bytes[end..];
            }
            _ => return None,
        }
        let (element, mut charged) = cost(f, body);
        if element > 0 && !seen.contains(&number) {
            seen.push(number);
            charged = charged.saturating_add((FIRST - 1) * element);
        }
        *total = total.saturating_add(charged);
        if let (Field::Message(inner), Some(body)) = (f, body) {
            if !walk(inner, body, depth + 1, None, total)?.is_empty() {
                return None;
            }
        }
    }
    group.is_none().then_some(bytes)
}

/// An upper bound on the memory decoding `bytes` as a `msg` takes (the rules above), and whether the bytes are
/// well-formed protobuf; for bytes that are not, the bound covers the well-formed part prost decodes before it
/// fails.
fn bound(msg: Msg, bytes: &[u8]) -> (usize, bool) {
    let mut total = message_bytes(msg);
    let ok = walk(msg, bytes, 0, None, &mut total).is_some();
    (total.saturating_mul(2), ok)
}

/// An upper bound on the memory decoding `bytes` as a `ModelProto` takes (the rules above); `None` when the bytes
/// are not well-formed protobuf (then [`decoded_prefix_bytes`] bounds what prost allocates before failing).
pub fn decoded_bytes(bytes: &[u8]) -> Option<usize> {
    let (total, ok) = bound(Msg::Model, bytes);
    ok.then_some(total)
}

/// An upper bound on the memory decoding `bytes` as a `ModelProto` takes, whether or not they are well-formed: for
/// bytes that are not, what prost allocates for the fields before the first bad one.
pub fn decoded_prefix_bytes(bytes: &[u8]) -> usize {
    bound(Msg::Model, bytes).0
}

/// [`decoded_prefix_bytes`] for a `TensorProto` (an input file).
pub fn decoded_tensor_bytes(bytes: &[u8]) -> usize {
    bound(Msg::Tensor, bytes).0
}

/// An upper bound on the memory decoding `bytes` as a value file of `msg` takes (`Sequence` or `Optional`), well-formed
/// or not (as [`decoded_prefix_bytes`]).
pub fn decoded_value_bytes(msg: Msg, bytes: &[u8]) -> usize {
    bound(msg, bytes).0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::proto;
    use prost::Message;

    fn tensor(int64s: usize) -> proto::TensorProto {
        proto::TensorProto {
            dims: vec![int64s as i64],
            data_type: Some(7),
            int64_data: vec![1; int64s],
            name: Some("t".into()),
            ..Default::default()
        }
    }

    fn model(graph: proto::GraphProto) -> Vec<u8> {
        proto::ModelProto { ir_version: Some(8), graph: Some(graph), ..Default::default() }.encode_to_vec()
    }

    #[test]
    fn packed_integers_are_counted_at_their_decoded_width() {
        let bytes = model(proto::GraphProto { initializer: vec![tensor(100_000)], ..Default::default() });
        let bound = decoded_bytes(&bytes).expect("well formed");
        // 100,000 one-byte varints decode to 800,000 bytes; the file holds about 100,000.
        assert!(bytes.len() < 100_100, "{}", bytes.len());
        assert!((1_600_000..1_700_000).contains(&bound), "{bound}");
    }

    #[test]
    fn empty_nodes_are_counted_as_whole_messages() {
        let graph = proto::GraphProto { node: vec![proto::NodeProto::default(); 10_000], ..Default::default() };
        let bytes = model(graph);
        let bound = decoded_bytes(&bytes).expect("well formed");
        assert!(bytes.len() < 20_100, "{}", bytes.len());
        let node = message_bytes(Msg::Node);
        assert!(bound >= 2 * 10_000 * node && node >= 200, "{bound}");
    }

    #[test]
    fn a_light_model_is_bounded_near_its_size() {
        let graph = proto::GraphProto {
            initializer: vec![proto::TensorProto {
                dims: vec![1 << 20],
                data_type: Some(1),
                raw_data: Some(vec![0; 4 << 20].into()),
                ..Default::default()
            }],
            ..Default::default()
        };
        let bytes = model(graph);
        let bound = decoded_bytes(&bytes).expect("well formed");
        assert!(bound < 2 * bytes.len() + 16_384, "{bound} for {} bytes", bytes.len());
    }

    #[test]
    fn a_malformed_tail_does_not_hide_what_comes_before_it() {
        let mut bytes = model(proto::GraphProto { initializer: vec![tensor(100_000)], ..Default::default() });
        let whole = decoded_bytes(&bytes).expect("well formed");
        bytes.push(0x0f); // field 1, wire type 7: prost decodes the graph, then fails here
        assert_eq!(decoded_bytes(&bytes), None);
        assert!(decoded_prefix_bytes(&bytes) >= whole, "{} < {whole}", decoded_prefix_bytes(&bytes));
    }

    #[test]
    fn a_tensor_file_is_bounded_too() {
        let bytes = tensor(100_000).encode_to_vec();
        assert!(decoded_tensor_bytes(&bytes) >= 1_600_000, "{}", decoded_tensor_bytes(&bytes));
    }

    #[test]
    fn malformed_bytes_have_no_bound() {
        let model = 2 * message_bytes(Msg::Model);
        assert_eq!(decoded_bytes(&[0x3a, 0xff, 0xff, 0x01]), None, "a length past the end");
        assert_eq!(decoded_bytes(&[0x0b]), None, "a group that does not end");
        // A group of an unknown field (50, which prost skips) holding a field, then ir_version: nothing charged but
        // the model.
        assert_eq!(decoded_bytes(&[0x93, 0x03, 0x10, 0x05, 0x94, 0x03, 0x08, 0x07]), Some(model));
        assert_eq!(decoded_bytes(&[]), Some(model));
    }
}
