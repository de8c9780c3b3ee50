//! The small element types (float8, float4e2m1, int4/uint4, int2/uint2; `stowage_runtime::small_types`) at import:
//! packed initializers unpacked, casts folded with ONNX's `saturate` and `round_mode`, and one clear line for packed
//! data of the wrong length, `int32_data` entries that are not bytes, bad cast attributes and arithmetic on them.
//! The kernels' results are checked by the node suite's Cast, CastLike, QuantizeLinear and DequantizeLinear cases.

mod common;

use common::errors::{check, error_of, import};

use common::build::{self, int, node, string, typed_value};
use stowage_compiler::consts;
use stowage_compiler::onnx::proto::{tensor_proto::DataType, ModelProto, NodeProto, TensorProto};
use stowage_runtime::DatumType;

fn raw(name: &str, dt: DataType, dims: &[i64], bytes: Vec<u8>) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(dt as i32),
        raw_data: Some(bytes.into()),
        ..Default::default()
    }
}

/// One node whose inputs are all initializers, with one output `y` (its type left to inference).
fn folded(n: NodeProto, inits: Vec<TensorProto>) -> ModelProto {
    build::model(25, vec![n], vec![], vec![typed_value("y", DataType::Float, &[])], inits)
}

/// The folded output `y` of `m`: its type and its elements as f64.
fn output(m: &ModelProto) -> (DatumType, Vec<f64>) {
    let g = import(m).expect("imports");
    let v = g.outputs()[0].value;
    let t = g.const_value(v).expect("the output folds to a constant");
    (t.dt(), consts::to_f64s(t).expect("elements"))
}

#[test]
fn packed_initializers_unpack_low_bits_first_and_sign_extend() {
    // int4 1, -2, 7, -8, 3: packed low nibble first, the last byte padded.
    let codes = raw("codes", DataType::Int4, &[5], vec![0xE1, 0x87, 0x03]);
    let m = folded(node("Cast", &["codes"], &["y"], vec![int("to", 1)]), vec![codes]);
    assert_eq!(output(&m), (DatumType::F32, vec![1.0, -2.0, 7.0, -8.0, 3.0]));
    // uint2 in int32_data: four to an entry.
    let codes = TensorProto {
        name: Some("codes".into()),
        dims: vec![5],
        data_type: Some(DataType::Uint2 as i32),
        int32_data: vec![0b0011_1001, 0b01],
        ..Default::default()
    };
    let m = folded(node("Cast", &["codes"], &["y"], vec![int("to", 1)]), vec![codes]);
    assert_eq!(output(&m), (DatumType::F32, vec![1.0, 2.0, 3.0, 0.0, 1.0]));
}

#[test]
fn folded_casts_keep_onnx_saturation_and_rounding_rules() {
    let x = || TensorProto {
        name: Some("x".into()),
        dims: vec![4],
        data_type: Some(DataType::Float as i32),
        float_data: vec![1e9, -1e9, 100.0, 5.0],
        ..Default::default()
    };
    let cast = |attrs| folded(node("Cast", &["x"], &["y"], attrs), vec![x()]);
    let to = |dt: DataType| int("to", dt as i64);
    // Saturating (the default): the largest finite value; 100 is a tie between 96 and 104, to even.
    let (dt, v) = output(&cast(vec![to(DataType::Float8e4m3fn)]));
    assert_eq!((dt, v), (DatumType::F8E4M3FN, vec![448.0, -448.0, 96.0, 5.0]));
    // Without saturation: NaN for E4M3FN, infinity for E5M2.
    let (_, v) = output(&cast(vec![to(DataType::Float8e4m3fn), int("saturate", 0)]));
    assert!(v[0].is_nan() && v[1].is_nan(), "{v:?}");
    let (_, v) = output(&cast(vec![to(DataType::Float8e5m2), int("saturate", 0)]));
    assert_eq!(v[..2], [f64::INFINITY, f64::NEG_INFINITY]);
    // float8e8m0 rounds up by default, down when asked.
    let (_, v) = output(&cast(vec![to(DataType::Float8e8m0)]));
    assert_eq!(v[2..], [128.0, 8.0]);
    let (_, v) = output(&cast(vec![to(DataType::Float8e8m0), string("round_mode", "down")]));
    assert_eq!(v[2..], [64.0, 4.0]);
    // int4 truncates and keeps the low bits: 1e9 = 0x3B9ACA00 → 0, 100 = 0x64 → 4.
    let (dt, v) = output(&cast(vec![to(DataType::Int4)]));
    assert_eq!((dt, v), (DatumType::I4, vec![0.0, 0.0, 4.0, 5.0]));
}

#[test]
fn packed_data_of_the_wrong_length_and_entries_that_are_not_bytes_are_named() {
    let short = raw("codes", DataType::Int4, &[5], vec![0xE1, 0x87]);
    let err = error_of(&folded(node("Cast", &["codes"], &["y"], vec![int("to", 1)]), vec![short]));
    check(&err, &["codes", "2 bytes", "packs 5 elements of 4 bits into 3"]);
    let wide = TensorProto {
        name: Some("scales".into()),
        dims: vec![2],
        data_type: Some(DataType::Float8e4m3fn as i32),
        int32_data: vec![0x38, 300],
        ..Default::default()
    };
    let err = error_of(&folded(node("Cast", &["scales"], &["y"], vec![int("to", 1)]), vec![wide]));
    check(&err, &["scales", "int32_data[1] is 300", "one byte"]);
}

#[test]
fn bad_cast_attributes_and_arithmetic_on_small_types_are_named() {
    let x = || raw("x", DataType::Float, &[1], 1f32.to_le_bytes().to_vec());
    let bad = folded(node("Cast", &["x"], &["y"], vec![int("to", 17), int("saturate", 2)]), vec![x()]);
    check(&error_of(&bad), &["attribute 'saturate'", "is 2", "0 or 1"]);
    let bad = folded(node("Cast", &["x"], &["y"], vec![int("to", 24), string("round_mode", "sideways")]), vec![x()]);
    check(&error_of(&bad), &["attribute 'round_mode'", "'sideways'", "up, nearest or down"]);
    let add = build::model(
        21,
        vec![node("Add", &["a", "b"], &["y"], vec![])],
        vec![typed_value("a", DataType::Float8e4m3fn, &[2]), typed_value("b", DataType::Float8e4m3fn, &[2])],
        vec![typed_value("y", DataType::Float8e4m3fn, &[2])],
        vec![],
    );
    check(&error_of(&add), &["Add", "input 0", "f8e4m3fn", "Cast"]);
}
