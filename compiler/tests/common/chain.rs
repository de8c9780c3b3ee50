//! A long chain model, for the tests that check import, the passes and planning stay linear in graph length:
//! `x: f32[1,16]` through `n` nodes cycling Relu, Neg and `Add(·, c)` with one constant `c`, the last output `y`.

use super::build::{self, node, value};
use stowage_compiler::onnx::proto::{ModelProto, NodeProto};

/// The chain of `n` nodes (at least one), as an opset-13 model.
pub fn model(n: usize) -> ModelProto {
    assert!(n > 0, "a chain has at least one node");
    let name = |i: usize| if i + 1 == n { "y".to_string() } else { format!("t{i}") };
    let nodes: Vec<NodeProto> = (0..n)
        .map(|i| {
            let input = if i == 0 { "x".to_string() } else { name(i - 1) };
            let output = name(i);
            let mut proto = match i % 3 {
                0 => node("Relu", &[&input], &[&output], vec![]),
                1 => node("Neg", &[&input], &[&output], vec![]),
                _ => node("Add", &[&input, "c"], &[&output], vec![]),
            };
            proto.name = Some(format!("n{i}"));
            proto
        })
        .collect();
    build::model(
        13,
        nodes,
        vec![value("x", &[1, 16])],
        vec![value("y", &[1, 16])],
        vec![build::floats("c", &[1, 16], &[0.5; 16])],
    )
}
