//! `passes::storage`: an fp16 or bf16 plan's graph, each rule of the pass checked on a small graph (the IR before
//! and after as a snapshot), and the node it cannot store named.

mod common;

use common::build::{self, node, typed_value, value};
use stowage_compiler::ir::{Graph, Op, ValueDef};
use stowage_compiler::onnx::proto::tensor_proto::DataType;
use stowage_compiler::onnx::{self, ImportConfig};
use stowage_compiler::passes::storage::Stored;
use stowage_compiler::Context;
use stowage_runtime::DatumType;

/// `y = Dropout(Relu(x · w) + Cast(n), 0.25)`, the MatMul's result also an output `m`.
fn context() -> Context {
    let m = build::model(
        13,
        vec![
            node("MatMul", &["x", "w"], &["m"], vec![]),
            node("Relu", &["m"], &["r"], vec![]),
            node("Cast", &["n"], &["c"], vec![build::int("to", 1)]),
            node("Add", &["r", "c"], &["s"], vec![]),
            node("Dropout", &["s", "ratio"], &["y"], vec![]),
        ],
        vec![value("x", &[2, 4]), typed_value("n", DataType::Int64, &[2, 3])],
        vec![value("y", &[2, 3]), value("m", &[2, 3])],
        vec![
            build::floats("w", &[4, 3], &[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2]),
            build::floats("ratio", &[], &[0.25]),
        ],
    );
    let g = onnx::load_bytes(&build::bytes(&m), &ImportConfig::new()).unwrap_or_else(|e| panic!("{e}"));
    Context::new(g)
}

fn value_named<'g>(g: &'g Graph, name: &str) -> &'g stowage_compiler::ir::ValueData {
    g.values().find(|(_, d)| d.name == name).map(|(_, d)| d).unwrap_or_else(|| panic!("no value '{name}'"))
}

#[test]
fn every_float_inside_is_stored_in_half() {
    let mut cx = context();
    let before = cx.print();
    let stored = cx.store_floats_in(DatumType::F16).unwrap_or_else(|e| panic!("{e}"));
    insta::assert_snapshot!(format!("{before}---\n{}", cx.print()));
    // Rule 1: the weight, the MatMul, Relu, Cast, Add and Dropout results; rule 3: one cast per f32 input and output.
    assert_eq!(stored, Stored { retyped: 6, casts: 3, kept_f32: vec![] });
    let g = &cx.graph;
    let w = value_named(g, "w");
    assert_eq!(w.ty.dt, DatumType::F16);
    let ValueDef::Const(t) = &w.def else { panic!("w is a constant") };
    assert_eq!(t.to_vec::<half::f16>().expect("f16")[1], half::f16::from_f32(0.2), "rounded to nearest");
    // Rule 1: the model's Cast to f32 casts to f16 now.
    let cast = g.order().iter().map(|&n| g.node(n)).find(|n| n.name.starts_with("Cast")).expect("the model's cast");
    assert!(matches!(cast.op, Op::Cast { to: DatumType::F16, .. }), "{:?}", cast.op);
    // Rule 2: Dropout's ratio is read at compile time and keeps its type.
    assert_eq!(value_named(g, "ratio").ty.dt, DatumType::F32);
    // Rule 3: the inputs are as the model declares them, read through one cast put first; the outputs keep their
    // names and types, written by casts put last; the integer input is untouched.
    let first = g.node(g.order()[0]);
    assert_eq!((first.name.as_str(), g.ty(g.inputs()[0]).dt), ("x.to_fp16", DatumType::F32));
    assert_eq!(g.ty(g.inputs()[1]).dt, DatumType::I64);
    for (o, name) in g.outputs().iter().zip(["y", "m"]) {
        assert_eq!((o.name.as_str(), g.value(o.value).name.as_str(), g.ty(o.value).dt), (name, name, DatumType::F32));
        let p = g.producer(o.value).expect("made by a node");
        assert!(matches!(g.node(p).op, Op::Cast { to: DatumType::F32, .. }));
        assert_eq!(g.ty(g.node(p).inputs[0].expect("input")).dt, DatumType::F16);
    }
    assert_eq!(value_named(g, "m.fp16").ty.dt, DatumType::F16);
}

#[test]
fn bf16_stores_alike() {
    let mut cx = context();
    let stored = cx.store_floats_in(DatumType::BF16).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((stored.retyped, stored.casts), (6, 3));
    let g = &cx.graph;
    assert_eq!(value_named(g, "s").ty.dt, DatumType::BF16);
    assert_eq!(g.node(g.order()[0]).name, "x.to_bf16");
    assert_eq!(value_named(g, "m.bf16").ty.dt, DatumType::BF16);
}

/// In a graph stored in f16, elementwise runs fuse over f16 (`fuse::plan_in`): the chain reads and writes `F16`
/// operands (and the integer one it casts), the boundary cast from the f32 input is a chain of its own that
/// converts on load, and no f32 chain is left.
#[test]
fn half_chains_are_planned_over_the_stored_type() {
    use stowage_compiler::lowering::fuse;
    use stowage_kir::Elem;
    let mut cx = context();
    cx.store_floats_in(DatumType::F16).unwrap_or_else(|e| panic!("{e}"));
    let g = &cx.graph;
    let none = std::collections::HashSet::new();
    assert!(fuse::plan(g, &none).is_empty(), "no f32 chain is left");
    let chains = fuse::plan_in(g, &none, DatumType::F16);
    let named = |name: &str| g.order().iter().copied().find(|&n| g.node(n).name == name).expect("a node");
    let p = chains.get(&named("Add_s")).expect("a chain rooted at the Add");
    assert_eq!(p.members.len(), 3, "Relu, Cast and Add");
    let elems: Vec<Elem> = p.loops.inputs.iter().map(|o| o.elem).collect();
    assert!(elems.contains(&Elem::F16) && elems.contains(&Elem::I64), "{elems:?}");
    assert_eq!((p.loops.output.elem, p.loops.output.strides.last().copied()), (Elem::F16, Some(2)));
    let cast = chains.get(&named("x.to_fp16")).expect("the input's cast");
    assert_eq!((cast.loops.inputs[0].elem, cast.loops.output.elem), (Elem::F32, Elem::F16));
    p.loops.check().unwrap_or_else(|e| panic!("{e}"));
}

/// Rules 2 and 3 at the edges: an input that is also an output stays that output untouched; a cast of integers to
/// f32 that only an output reads stays f32 (labels keep their exactness); a constant that is an output keeps its
/// type there while the node reading it gets a converted copy.
#[test]
fn outputs_keep_what_they_are() {
    let m = build::model(
        13,
        vec![node("Add", &["x", "k"], &["r"], vec![]), node("Cast", &["n"], &["labels"], vec![build::int("to", 1)])],
        vec![value("x", &[2, 3]), typed_value("n", DataType::Int64, &[2, 3])],
        vec![value("r", &[2, 3]), value("x", &[2, 3]), value("labels", &[2, 3]), value("k", &[3])],
        vec![build::floats("k", &[3], &[0.1, 0.2, 0.3])],
    );
    let g = onnx::load_bytes(&build::bytes(&m), &ImportConfig::new()).unwrap_or_else(|e| panic!("{e}"));
    let mut cx = Context::new(g);
    cx.store_floats_in(DatumType::F16).unwrap_or_else(|e| panic!("{e}"));
    let g = &cx.graph;
    let output = |name: &str| g.outputs().iter().find(|o| o.name == name).expect("an output").value;
    assert!(matches!(g.value(output("x")).def, ValueDef::Input(0)), "x is the input itself");
    assert_eq!(g.ty(output("labels")).dt, DatumType::F32);
    let p = g.producer(output("labels")).expect("the cast");
    assert_eq!(g.node(p).name, "Cast_labels");
    assert!(matches!(g.node(p).op, Op::Cast { to: DatumType::F32, .. }), "{:?}", g.node(p).op);
    assert_eq!(g.ty(output("k")).dt, DatumType::F32, "the constant output keeps its type");
    let add = g.order().iter().map(|&n| g.node(n)).find(|n| n.name == "Add_r").expect("the Add");
    assert_eq!(g.ty(add.inputs[1].expect("k's copy")).dt, DatumType::F16);
    assert_eq!(g.value(add.inputs[1].expect("k's copy")).name, "k.fp16");
    assert_eq!(g.ty(output("r")).dt, DatumType::F32);
}
