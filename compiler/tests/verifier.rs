//! The verifier catches graphs that break its invariants (what a buggy pass would leave behind).

use stowage_compiler::ir::{verify::verify, Binary, Graph, Op, Unary, ValueType};
use stowage_runtime::{DatumType, Tensor};

fn f32s(shape: &[usize]) -> ValueType {
    ValueType::new(DatumType::F32, shape)
}

fn relu_graph() -> Graph {
    let mut g = Graph::new("g");
    let x = g.add_input("x", f32s(&[2, 3]));
    let n = g.add_node("relu", Op::Unary(Unary::Relu), vec![Some(x)], vec![Some(("y".into(), f32s(&[2, 3])))]);
    let y = g.node(n).outputs[0].expect("output");
    g.add_output("y", y);
    g
}

fn message(g: &Graph) -> String {
    verify(g).expect_err("the verifier should fail").to_string()
}

#[test]
fn a_well_formed_graph_verifies() {
    verify(&relu_graph()).expect("verifies");
}

#[test]
fn a_wrong_output_type() {
    let mut g = Graph::new("g");
    let x = g.add_input("x", f32s(&[2, 3]));
    g.add_node("relu", Op::Unary(Unary::Relu), vec![Some(x)], vec![Some(("y".into(), f32s(&[3, 2])))]);
    let m = message(&g);
    assert!(m.contains("\"relu\"") && m.contains("typed f32[3,2]") && m.contains("bug in stowage"), "{m}");
}

#[test]
fn a_use_before_its_definition() {
    let mut g = relu_graph();
    let y = g.outputs()[0].value;
    let first = g.order()[0];
    let n = g.add_node("neg", Op::Unary(Unary::Neg), vec![Some(y)], vec![Some(("z".into(), f32s(&[2, 3])))]);
    g.move_before(n, first);
    let m = message(&g);
    assert!(m.contains("\"neg\"") && m.contains("used before it is defined"), "{m}");
}

#[test]
fn a_use_of_a_removed_node() {
    let mut g = relu_graph();
    let n = g.order()[0];
    g.remove_node(n);
    let m = message(&g);
    assert!(m.contains("output \"y\"") && m.contains("not defined by a live node"), "{m}");
}

#[test]
fn a_wrong_arity() {
    let mut g = relu_graph();
    let x = g.inputs()[0];
    let n = g.order()[0];
    g.node_mut(n).inputs.push(Some(x));
    assert!(message(&g).contains("takes 1 to 1 inputs, has 2"));
}

#[test]
fn a_shape_input_that_is_not_a_constant() {
    let mut g = Graph::new("g");
    let x = g.add_input("x", f32s(&[2, 3]));
    let shape = g.add_const("shape", Tensor::from_vec(&[1], vec![6i64]).expect("tensor"));
    let n = g.add_node(
        "r",
        Op::Reshape { allowzero: false },
        vec![Some(x), Some(shape)],
        vec![Some(("y".into(), f32s(&[6])))],
    );
    verify(&g).expect("verifies with a constant shape");
    let s = g.add_input("s", ValueType::new(DatumType::I64, [1]));
    g.node_mut(n).inputs[1] = Some(s);
    assert!(message(&g).contains("input 1 sets a shape but is not a constant"));
}

#[test]
fn an_attribute_left_unnormalised() {
    let mut g = Graph::new("g");
    let x = g.add_input("x", f32s(&[2, 3]));
    let n = g.add_node("c", Op::Concat { axis: 1 }, vec![Some(x), Some(x)], vec![Some(("y".into(), f32s(&[2, 6])))]);
    verify(&g).expect("verifies");
    g.node_mut(n).op = Op::Concat { axis: -1 };
    assert!(message(&g).contains("not normalised"));
}

#[test]
fn mismatched_datum_types() {
    let mut g = Graph::new("g");
    let x = g.add_input("x", f32s(&[2]));
    let i = g.add_input("i", ValueType::new(DatumType::I64, [2]));
    g.add_node("add", Op::Binary(Binary::Add), vec![Some(x), Some(i)], vec![Some(("y".into(), f32s(&[2])))]);
    assert!(message(&g).contains("datum type i64"));
}
