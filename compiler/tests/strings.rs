//! Strings at import (`onnx/text.rs`, `eval/text.rs`, `stowage_runtime::strings`): string tensors fold through the
//! ops that move them and the ops that read them, survive being written into built code, and every bad string,
//! pattern or list is one line naming the node, the attribute or the tensor. Results at run time are the node
//! suite's string cases (conformance) and `compiler/cli/tests/strings.rs`.

mod common;

use common::build::{self, int, node, string, strings, typed_value};
use common::errors::{check, error_of, import};
use stowage_compiler::ir::{serial, Graph};
use stowage_compiler::onnx::proto::{tensor_proto::DataType, ModelProto, OperatorSetIdProto, TensorProto};
use stowage_runtime::strings as table;

fn texts(t: &[&str], name: &str) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: vec![t.len() as i64],
        data_type: Some(DataType::String as i32),
        string_data: t.iter().map(|s| s.as_bytes().to_vec()).collect(),
        ..Default::default()
    }
}

fn string_value(name: &str, dims: &[i64]) -> stowage_compiler::onnx::proto::ValueInfoProto {
    typed_value(name, DataType::String, dims)
}

/// The text of output `k` of a graph folded to constants.
fn folded(g: &Graph, k: usize) -> Vec<&'static str> {
    let t = g.const_value(g.outputs()[k].value).expect("the output is a constant");
    table::resolve_all(&table::handles(t).expect("strings"))
}

/// `s = ["ab", "Cd"]`: StringConcat(s, s), in upper case, its second element, and whether each of s is `"ab"`.
fn folding_model() -> ModelProto {
    build::model(
        20,
        vec![
            node("StringConcat", &["s", "s"], &["twice"], vec![]),
            node("StringNormalizer", &["twice"], &["upper"], vec![string("case_change_action", "UPPER")]),
            node("Gather", &["upper", "one"], &["y"], vec![int("axis", 0)]),
            node("Equal", &["s", "ab"], &["is_ab"], vec![]),
        ],
        vec![],
        vec![string_value("y", &[1]), typed_value("is_ab", DataType::Bool, &[2])],
        vec![texts(&["ab", "Cd"], "s"), texts(&["ab"], "ab"), build::int64s("one", &[1], &[1])],
    )
}

#[test]
fn strings_fold_through_the_ops_that_move_them_and_those_that_read_them() {
    let mut ctx = stowage_compiler::Context::new(import(&folding_model()).expect("imports"));
    ctx.optimize().expect("optimizes");
    let g = &ctx.graph;
    assert_eq!(folded(g, 0), ["CDCD"]);
    let is_ab = g.const_value(g.outputs()[1].value).expect("folded");
    assert_eq!(is_ab.to_vec::<bool>().unwrap(), [true, false]);
}

#[test]
fn string_constants_are_written_into_built_code_as_text() {
    let m = build::model(
        20,
        vec![node("Equal", &["x", "keys"], &["y"], vec![])],
        vec![string_value("x", &[2])],
        vec![typed_value("y", DataType::Bool, &[2])],
        vec![texts(&["déjà vu", ""], "keys")],
    );
    let g = import(&m).expect("imports");
    let encoded = serial::encode(&g).expect("encodes");
    // The blob holds no handle: the text travels in the structure, and is interned again when read.
    assert!(encoded.constants.is_empty());
    let back = serial::decode(&encoded.graph, &encoded.constants).expect("decodes");
    let keys = back.values().find(|(_, d)| d.name == "keys").map(|(v, _)| v).expect("keys");
    let t = back.const_value(keys).expect("a constant");
    assert_eq!(table::resolve_all(&table::handles(t).unwrap()), ["déjà vu", ""]);
}

#[test]
fn a_string_reaches_only_the_ops_that_take_strings() {
    let m = build::model(
        20,
        vec![node("Add", &["x", "x"], &["y"], vec![])],
        vec![string_value("x", &[2])],
        vec![string_value("y", &[2])],
        vec![],
    );
    check(&error_of(&m), &["node 'Add_y' (Add)", "input 0", "string", "the ops that move, select or compare"]);
}

#[test]
fn no_op_makes_strings_out_of_numbers_but_cast() {
    let mut cast = node("BitCast", &["x"], &["y"], vec![int("to", DataType::String as i64)]);
    cast.name = Some("reinterpret".into());
    let m = build::model(
        26,
        vec![cast],
        vec![typed_value("x", DataType::Float, &[2])],
        vec![string_value("y", &[2])],
        vec![],
    );
    check(&error_of(&m), &["node 'reinterpret' (BitCast)", "output 0 would be string"]);
}

#[test]
fn strings_that_are_not_utf8_are_refused_naming_the_tensor_or_the_attribute() {
    let mut bad = texts(&["ok", "x"], "keys");
    bad.string_data[1] = b"caf\xe9".to_vec();
    let m = build::model(
        20,
        vec![node("Equal", &["x", "keys"], &["y"], vec![])],
        vec![string_value("x", &[2])],
        vec![typed_value("y", DataType::Bool, &[2])],
        vec![bad],
    );
    check(&error_of(&m), &["'keys'", "string_data[1] is not UTF-8"]);

    let mut words = strings("stopwords", &["monday"]);
    words.strings.push(b"\xff".to_vec());
    let m = build::model(
        10,
        vec![node("StringNormalizer", &["x"], &["y"], vec![words])],
        vec![string_value("x", &[2])],
        vec![string_value("y", &[-1])],
        vec![],
    );
    check(&error_of(&m), &["StringNormalizer", "'stopwords'", "not UTF-8"]);
}

#[test]
fn a_pattern_that_is_not_a_regular_expression_names_node_and_attribute() {
    let m = build::model(
        20,
        vec![node("RegexFullMatch", &["x"], &["y"], vec![string("pattern", "a(b")])],
        vec![string_value("x", &[2])],
        vec![typed_value("y", DataType::Bool, &[2])],
        vec![],
    );
    check(
        &error_of(&m),
        &["node 'RegexFullMatch_y' (RegexFullMatch)", "attribute 'pattern'", "\"a(b\"", "not a regular"],
    );
}

#[test]
fn a_split_of_strings_known_only_at_run_time_asks_for_their_value() {
    let m = build::model(
        20,
        vec![node("StringSplit", &["x"], &["parts", "counts"], vec![])],
        vec![string_value("x", &[2])],
        vec![string_value("parts", &[2, -1]), typed_value("counts", DataType::Int64, &[2])],
        vec![],
    );
    check(&error_of(&m), &["StringSplit", "strings of 'x'", "--input-value"]);
}

/// A `LabelEncoder` of `version` with `attrs`, from `x` (of `from`) to `y` (of `to`).
fn encoder(
    version: i64,
    from: DataType,
    to: DataType,
    attrs: Vec<stowage_compiler::onnx::proto::AttributeProto>,
) -> ModelProto {
    let mut n = node("LabelEncoder", &["x"], &["y"], attrs);
    n.domain = Some("ai.onnx.ml".into());
    let mut m = build::model(20, vec![n], vec![typed_value("x", from, &[3])], vec![typed_value("y", to, &[3])], vec![]);
    m.opset_import.push(OperatorSetIdProto { domain: Some("ai.onnx.ml".into()), version: Some(version) });
    m
}

#[test]
fn label_encoder_lists_that_disagree_in_length_are_named_together() {
    let m = encoder(
        2,
        DataType::String,
        DataType::Int64,
        vec![strings("keys_strings", &["a", "b", "c"]), build::ints("values_int64s", &[1, 2])],
    );
    check(&error_of(&m), &["LabelEncoder", "attribute 'values_int64s'", "[2] values", "keys_strings holds [3] keys"]);
    // Keys of another kind than the input.
    let m = encoder(
        2,
        DataType::Int64,
        DataType::Int64,
        vec![strings("keys_strings", &["a"]), build::ints("values_int64s", &[1])],
    );
    check(&error_of(&m), &["attribute 'keys_strings'", "string keys", "the input is i64"]);
}

#[test]
fn label_encoder_of_version_1_maps_both_ways_and_is_one_lookup() {
    for (from, to) in [(DataType::String, DataType::Int64), (DataType::Int64, DataType::String)] {
        let g = import(&encoder(1, from, to, vec![strings("classes_strings", &["cat", "dog"])])).expect("imports");
        let ops: Vec<&str> = g.order().iter().map(|&n| g.node(n).op.name()).collect();
        assert_eq!(ops, ["LabelEncoder"]);
    }
}
