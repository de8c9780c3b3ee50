//! Sequences and optionals at import (`onnx::structure`, `onnx::sequences`): made, taken apart and read at import,
//! so the graph holds only their tensors; graph inputs and outputs of those types are their tensors under flat
//! names; positions, element types and empty optionals are checked with one-line errors naming the node; the
//! files that hold such values are written and read back as ONNX writes them.

mod common;

use std::collections::BTreeMap;

use common::build::{self, int, node, value};
use stowage_compiler::ir::print::print;
use stowage_compiler::ir::ValueType;
use stowage_compiler::onnx::proto::{attribute_proto::AttributeType, tensor_proto::DataType, type_proto};
use stowage_compiler::onnx::proto::{AttributeProto, GraphProto, TypeProto, ValueInfoProto};
use stowage_compiler::onnx::structure::{self, Kind, Structure};
use stowage_compiler::onnx::{self, ImportConfig};
use stowage_runtime::{DatumType, Tensor};

fn tensor_type(dt: DataType) -> TypeProto {
    TypeProto {
        value: Some(type_proto::Value::TensorType(type_proto::Tensor { elem_type: Some(dt as i32), shape: None })),
        ..Default::default()
    }
}

fn sequence_type(dt: DataType) -> TypeProto {
    TypeProto {
        value: Some(type_proto::Value::SequenceType(Box::new(type_proto::Sequence {
            elem_type: Some(Box::new(tensor_type(dt))),
        }))),
        ..Default::default()
    }
}

fn optional_type(inner: TypeProto) -> TypeProto {
    TypeProto {
        value: Some(type_proto::Value::OptionalType(Box::new(type_proto::Optional {
            elem_type: Some(Box::new(inner)),
        }))),
        ..Default::default()
    }
}

fn typed(name: &str, ty: TypeProto) -> ValueInfoProto {
    ValueInfoProto { name: Some(name.into()), r#type: Some(ty), ..Default::default() }
}

fn import(bytes: &[u8], config: &ImportConfig) -> Result<stowage_compiler::ir::Graph, String> {
    onnx::load_bytes(bytes, config).map_err(|e| e.to_string())
}

/// x[2,6] split along axis 1 into [2,4]; y inserted at the front; the last item erased; item 1 read; the length;
/// and every item concatenated back along a new axis 0 after a second split into equal halves.
fn round_trip_model() -> Vec<u8> {
    let nodes = vec![
        node("SplitToSequence", &["x", "lengths"], &["s"], vec![int("axis", 1)]),
        node("SequenceInsert", &["s", "y", "front"], &["s2"], vec![]),
        node("SequenceErase", &["s2"], &["s3"], vec![]),
        node("SequenceAt", &["s3", "one"], &["item"], vec![]),
        node("SequenceLength", &["s3"], &["n"], vec![]),
        node("SplitToSequence", &["x", "three"], &["halves"], vec![int("axis", 1)]),
        node("ConcatFromSequence", &["halves"], &["stacked"], vec![int("axis", 0), int("new_axis", 1)]),
    ];
    let inits = vec![
        build::int64s("lengths", &[2], &[2, 4]),
        build::int64s("front", &[], &[0]),
        build::int64s("one", &[], &[1]),
        build::int64s("three", &[], &[3]),
    ];
    let outputs = vec![
        value("item", &[2, 2]),
        build::typed_value("n", DataType::Int64, &[]),
        value("stacked", &[2, 2, 3]),
        typed("s3", sequence_type(DataType::Float)),
    ];
    build::bytes(&build::model(18, nodes, vec![value("x", &[2, 6]), value("y", &[2, 5])], outputs, inits))
}

#[test]
fn sequences_are_their_tensors_at_import() {
    let g = import(&round_trip_model(), &ImportConfig::new()).expect("imports");
    let text = print(&g);
    // Rule 3 of `sequences`: one Split per SplitToSequence, one Concat over Unsqueezes; no other node.
    let ops: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().starts_with('v'))
        .filter_map(|l| l.split(" = ").nth(1))
        .filter_map(|r| r.split('(').next())
        .collect();
    assert_eq!(ops, ["Split", "Split", "Unsqueeze", "Unsqueeze", "Concat"], "{text}");
    insta::assert_snapshot!(text);
    let form = &g.metadata.structured_outputs;
    let names: Vec<&str> = form.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["item", "n", "stacked", "s3"]);
    assert_eq!(
        form[3].1,
        Structure::Sequence { elem: DatumType::F32, items: vec!["s3[0]".to_string(), "s3[1]".to_string()] }
    );
    let outputs: Vec<&str> = g.outputs().iter().map(|o| o.name.as_str()).collect();
    assert_eq!(outputs, ["item", "n", "stacked", "s3[0]", "s3[1]"]);
    // The length is a constant, and the erased item (x's 4 columns) is gone: s3 holds y and x's first 2 columns.
    let ty = |name: &str| {
        let v = g.outputs().iter().find(|o| o.name == name).expect("output").value;
        g.ty(v).clone()
    };
    assert_eq!(ty("s3[0]"), ValueType::new(DatumType::F32, vec![2, 5]));
    assert_eq!(ty("s3[1]"), ValueType::new(DatumType::F32, vec![2, 2]));
    let n = g.outputs().iter().find(|o| o.name == "n").expect("n").value;
    assert_eq!(g.const_value(n).map(|t| t.as_slice::<i64>().expect("i64").to_vec()), Some(vec![2]));
}

/// `out = SequenceMap(s, bias) { Add(item, bias) }`, `has = OptionalHasElement(o)`, `got = OptionalGetElement(o)`,
/// over a sequence input `s` and an optional input `o` of a sequence.
fn input_model() -> Vec<u8> {
    let body = GraphProto {
        name: Some("body".into()),
        node: vec![node("Add", &["item", "b"], &["sum"], vec![])],
        input: vec![typed("item", tensor_type(DataType::Float)), typed("b", tensor_type(DataType::Float))],
        output: vec![typed("sum", tensor_type(DataType::Float))],
        ..Default::default()
    };
    let body = AttributeProto {
        name: Some("body".into()),
        r#type: Some(AttributeType::Graph as i32),
        g: Some(body),
        ..Default::default()
    };
    let nodes = vec![
        node("SequenceMap", &["s", "bias"], &["out"], vec![body]),
        node("OptionalHasElement", &["o"], &["has"], vec![]),
        node("OptionalGetElement", &["o"], &["got"], vec![]),
    ];
    let inputs = vec![
        typed("s", sequence_type(DataType::Float)),
        value("bias", &[1]),
        typed("o", optional_type(sequence_type(DataType::Float))),
    ];
    let outputs = vec![
        typed("out", sequence_type(DataType::Float)),
        build::typed_value("has", DataType::Bool, &[]),
        typed("got", sequence_type(DataType::Float)),
    ];
    build::bytes(&build::model(18, nodes, inputs, outputs, vec![]))
}

fn forms(o: Option<Vec<Vec<usize>>>) -> BTreeMap<String, Structure<ValueType>> {
    let seq = |shapes: &[Vec<usize>]| Structure::Sequence {
        elem: DatumType::F32,
        items: shapes.iter().map(|s| ValueType::new(DatumType::F32, s.clone())).collect(),
    };
    let o = Structure::Optional { kind: Kind::Sequence, value: o.map(|s| Box::new(seq(&s))) };
    BTreeMap::from([("s".to_string(), seq(&[vec![3], vec![2, 2]])), ("o".to_string(), o)])
}

#[test]
fn a_sequence_input_is_its_items_and_a_map_runs_its_body_per_item() {
    let config = ImportConfig { input_structures: forms(Some(vec![vec![4]])), ..ImportConfig::new() };
    let g = import(&input_model(), &config).expect("imports");
    let inputs: Vec<&str> = g.inputs().iter().map(|&v| g.value(v).name.as_str()).collect();
    assert_eq!(inputs, ["s[0]", "s[1]", "bias", "o[0]"]);
    let text = print(&g);
    assert_eq!(text.matches("= Add(").count(), 2, "one Add per item:\n{text}");
    let outputs: Vec<&str> = g.outputs().iter().map(|o| o.name.as_str()).collect();
    assert_eq!(outputs, ["out[0]", "out[1]", "has", "got[0]"]);

    // An optional that holds nothing: no input for it, and OptionalHasElement folds to false.
    let empty = ImportConfig { input_structures: forms(None), ..ImportConfig::new() };
    let err = import(&input_model(), &empty).expect_err("reads the element of an empty optional");
    assert!(err.contains("'OptionalGetElement_got'") && err.contains("holds none"), "{err}");
}

#[test]
fn a_structured_input_without_its_form_is_named() {
    let err = import(&input_model(), &ImportConfig::new()).expect_err("needs the sequence's form");
    assert!(err.contains("input 's'") && err.contains("a sequence") && err.contains("SequenceProto"), "{err}");
    let mut wrong = forms(None);
    wrong.insert("s".into(), Structure::Tensor(ValueType::new(DatumType::F32, vec![3])));
    let err =
        import(&input_model(), &ImportConfig { input_structures: wrong, ..ImportConfig::new() }).expect_err("a tensor");
    assert!(err.contains("input 's'") && err.contains("the given value is a tensor"), "{err}");
}

fn one_node(
    op: &str,
    inputs: &[&str],
    attrs: Vec<AttributeProto>,
    inits: Vec<stowage_compiler::onnx::proto::TensorProto>,
) -> String {
    let nodes = vec![
        node("SplitToSequence", &["x"], &["s"], vec![int("axis", 0)]),
        node(op, inputs, &["y"], attrs),
        node("ConcatFromSequence", &["y"], &["z"], vec![int("axis", 0)]),
    ];
    let m = build::model(
        18,
        nodes,
        vec![value("x", &[3, 2]), build::typed_value("i", DataType::Int32, &[2])],
        vec![value("z", &[3, 2])],
        inits,
    );
    import(&build::bytes(&m), &ImportConfig::new()).expect_err("refused")
}

#[test]
fn positions_types_and_tensor_ops_on_sequences_are_checked() {
    let err = one_node("SequenceInsert", &["s", "x", "far"], vec![], vec![build::int64s("far", &[], &[4])]);
    assert!(
        err.contains("'SequenceInsert_y'") && err.contains("position 4 is out of range for a sequence of 3"),
        "{err}"
    );
    let err = one_node("SequenceInsert", &["s", "i"], vec![], vec![]);
    assert!(err.contains("'SequenceInsert_y'") && err.contains("i32[2] tensor into a sequence of f32"), "{err}");
    let err = one_node("Relu", &["s"], vec![], vec![]);
    assert!(err.contains("'Relu_y'") && err.contains("input 0 ('s') is a sequence; Relu takes tensors"), "{err}");
    let err = one_node("SequenceErase", &["x"], vec![], vec![]);
    assert!(
        err.contains("'SequenceErase_y'") && err.contains("'x'") && err.contains("a tensor, where it takes a sequence"),
        "{err}"
    );
    let err = one_node("SplitToSequence", &["x", "bad"], vec![], vec![build::int64s("bad", &[2], &[1, 1])]);
    assert!(err.contains("does not add up to dimension 0"), "{err}");
}

/// A tensor of no bytes but a huge axis is refused before its items are listed.
#[test]
fn a_split_into_too_many_items_is_refused_before_it_is_made() {
    let nodes = vec![
        node("SplitToSequence", &["x"], &["s"], vec![]),
        node("ConcatFromSequence", &["s"], &["y"], vec![int("axis", 0)]),
    ];
    let m = build::model(18, nodes, vec![value("x", &[1 << 50, 0])], vec![value("y", &[1 << 50, 0])], vec![]);
    let err = import(&build::bytes(&m), &ImportConfig::new()).expect_err("refused");
    assert!(err.contains("'SplitToSequence_s'") && err.contains("more than stowage makes"), "{err}");
}

#[test]
fn a_position_given_at_run_time_is_an_input_that_sets_shapes() {
    let nodes = vec![node("SplitToSequence", &["x"], &["s"], vec![]), node("SequenceAt", &["s", "p"], &["y"], vec![])];
    let m = build::model(
        18,
        nodes,
        vec![value("x", &[3, 2]), build::typed_value("p", DataType::Int64, &[])],
        vec![value("y", &[1, 2])],
        vec![],
    );
    assert_eq!(onnx::value_inputs(&m), ["p"]);
    let p = Tensor::from_vec(&[], vec![-1i64]).expect("scalar");
    let g = import(&build::bytes(&m), &ImportConfig::new().input_value("p", p)).expect("imports");
    assert!(print(&g).contains("Split"), "{}", print(&g));
}

/// A value's form with each tensor's type and bytes.
fn described(v: &Structure<Tensor<'static>>) -> String {
    format!("{:?}", v.map(|t| format!("{}{:?} {:?}", t.dt(), t.shape(), t.as_bytes().expect("packed"))))
}

#[test]
fn value_files_round_trip_as_onnx_writes_them() {
    let dir = tempfile::tempdir().expect("temp dir");
    let a = Tensor::from_vec(&[2], vec![1.0f32, 2.0]).expect("a");
    let b = Tensor::from_vec(&[1, 3], vec![3.0f32, 4.0, 5.0]).expect("b");
    let values = [
        (Structure::Sequence { elem: DatumType::F32, items: vec![a.clone(), b] }, sequence_type(DataType::Float)),
        (Structure::Sequence { elem: DatumType::F32, items: vec![] }, sequence_type(DataType::Float)),
        (
            Structure::Optional { kind: Kind::Tensor, value: Some(Box::new(Structure::Tensor(a))) },
            optional_type(tensor_type(DataType::Float)),
        ),
        (Structure::Optional { kind: Kind::Sequence, value: None }, optional_type(sequence_type(DataType::Float))),
    ];
    for (k, (v, ty)) in values.iter().enumerate() {
        let path = dir.path().join(format!("v{k}.pb"));
        std::fs::write(&path, structure::encode_value(v, "v").expect("encodes")).expect("writes");
        let back = structure::read_value_within(&path, Some(ty), 1 << 20).expect("reads");
        assert_eq!(described(&back), described(v), "value {k}");
    }
    // A sequence of i64 read where the model declares f32 items is refused, naming the item.
    let path = dir.path().join("ints.pb");
    let ints =
        Structure::Sequence { elem: DatumType::I64, items: vec![Tensor::from_vec(&[1], vec![7i64]).expect("t")] };
    std::fs::write(&path, structure::encode_value(&ints, "v").expect("encodes")).expect("writes");
    let err =
        structure::read_value_within(&path, Some(&sequence_type(DataType::Float)), 1 << 20).expect_err("wrong type");
    assert!(err.contains("item 0 is i64, the sequence's items are f32"), "{err}");
    // A tensor file where a sequence is declared is not taken for an empty sequence.
    let t = dir.path().join("tensor.pb");
    let bytes = onnx::tensor::encode(&Tensor::from_vec(&[1], vec![7i64]).expect("t"), "t").expect("encodes");
    std::fs::write(&t, prost::Message::encode_to_vec(&bytes)).expect("writes");
    let err = structure::read_value_within(&t, Some(&sequence_type(DataType::Int64)), 1 << 20);
    assert!(err.is_err(), "{err:?}");
}
