//! What every backend's lowering shares, between the optimised IR and the kernel-level IR (`stowage_kir`):
//!
//! - [`fuse`]: runs of f32 elementwise nodes as one fused chain each;
//! - [`unary_fn`], [`binary_fn`]: the kernel function of an IR elementwise op;
//! - [`conv_relu_pairs`], [`conv_epilogue_pairs`]: the ReLUs (or other activations) a convolution's epilogue
//!   takes; [`conv_silu`]: the SiLUs (`Mul(x, Sigmoid(x))`, YOLO's activation) it takes; [`residual`]: the residual
//!   additions (and their ReLUs) it takes;
//! - [`resize_spec`]: a Resize node's attributes resolved for the interpolation tables.
//!
//! A backend lowers what the planner gave it with these, so that a chain is the same kernel on every target.

use std::collections::HashMap;

use stowage_kir::{resize, BinaryFn, UnaryFn};
use stowage_runtime::DatumType;

use crate::consts;
use crate::ir::{self, Graph, Op, ValueId};

pub mod fuse;
pub mod residual;

/// Conv nodes whose f32 output is read only by a ReLU (and is no graph output), with that ReLU.
pub fn conv_relu_pairs(graph: &Graph) -> HashMap<ir::NodeId, ir::NodeId> {
    conv_epilogue_pairs(graph, &[DatumType::F32], |node| matches!(node.op, Op::Unary(ir::Unary::Relu)))
}

/// Conv nodes whose output, of one of the types `types` (the backend's convolutions' own), is read only by a node
/// that `takes` accepts, as that node's first input (and is no graph output), with that node: the activations a
/// backend's convolution epilogue applies in its registers.
pub fn conv_epilogue_pairs(
    graph: &Graph,
    types: &[DatumType],
    takes: impl Fn(&ir::NodeData) -> bool,
) -> HashMap<ir::NodeId, ir::NodeId> {
    let uses = graph.use_counts();
    let outputs: Vec<ValueId> = graph.outputs().iter().map(|o| o.value).collect();
    let mut reader: HashMap<ValueId, ir::NodeId> = HashMap::new();
    for &n in graph.order() {
        for &v in graph.node(n).inputs.iter().flatten() {
            reader.insert(v, n);
        }
    }
    let mut pairs = HashMap::new();
    for &n in graph.order() {
        let node = graph.node(n);
        let (Op::Conv(_), Some(Some(v))) = (&node.op, node.outputs.first()) else { continue };
        if uses[*v] != 1 || outputs.contains(v) || !types.contains(&graph.ty(*v).dt) {
            continue;
        }
        if let Some(&r) = reader.get(v) {
            let after = graph.node(r);
            if after.inputs.first() == Some(&Some(*v)) && takes(after) {
                pairs.insert(n, r);
            }
        }
    }
    pairs
}

/// Conv nodes whose output `x`, of one of the types `types`, is read only by a `Sigmoid` and by a `Mul` of `x` and
/// that Sigmoid's output (in either order), which nothing else reads (neither is a graph output): each with its
/// Sigmoid and its Mul. The convolution's epilogue computes the SiLU and its step writes the Mul's output.
pub fn conv_silu(graph: &Graph, types: &[DatumType]) -> HashMap<ir::NodeId, (ir::NodeId, ir::NodeId)> {
    let uses = graph.use_counts();
    let outputs: Vec<ValueId> = graph.outputs().iter().map(|o| o.value).collect();
    let alone = |v: ValueId, n: u32| uses[v] == n && !outputs.contains(&v);
    let mut found = HashMap::new();
    for &m in graph.order() {
        let Some((x, sig)) = silu_operands(graph, graph.node(m)) else { continue };
        let (Some(conv), Some(s)) = (graph.producer(x), graph.producer(sig)) else { continue };
        let is_conv = matches!(graph.node(conv).op, Op::Conv(_)) && graph.node(conv).outputs.first() == Some(&Some(x));
        if is_conv && alone(x, 2) && alone(sig, 1) && types.contains(&graph.ty(x).dt) {
            found.insert(conv, (s, m));
        }
    }
    found
}

/// For `Mul(x, Sigmoid(x))` (or `Mul(Sigmoid(x), x)`): `x` and the Sigmoid's output.
pub fn silu_operands(graph: &Graph, node: &ir::NodeData) -> Option<(ValueId, ValueId)> {
    let (Op::Binary(ir::Binary::Mul), [Some(a), Some(b)]) = (&node.op, node.inputs.as_slice()) else { return None };
    let sigmoid_of = |s: ValueId, x: ValueId| {
        let p = graph.node(graph.producer(s)?);
        (matches!(p.op, Op::Unary(ir::Unary::Sigmoid)) && p.inputs.first() == Some(&Some(x))).then_some((x, s))
    };
    sigmoid_of(*b, *a).or_else(|| sigmoid_of(*a, *b))
}

/// The kernel function of an IR unary op .
pub fn unary_fn(u: ir::Unary) -> UnaryFn {
    match u {
        ir::Unary::Abs => UnaryFn::Abs,
        ir::Unary::Ceil => UnaryFn::Ceil,
        ir::Unary::Cos => UnaryFn::Cos,
        ir::Unary::Erf => UnaryFn::Erf,
        ir::Unary::Exp => UnaryFn::Exp,
        ir::Unary::Floor => UnaryFn::Floor,
        ir::Unary::Log => UnaryFn::Log,
        ir::Unary::Neg => UnaryFn::Neg,
        ir::Unary::Not => UnaryFn::Not,
        ir::Unary::Reciprocal => UnaryFn::Reciprocal,
        ir::Unary::Relu => UnaryFn::Relu,
        ir::Unary::Sigmoid => UnaryFn::Sigmoid,
        ir::Unary::Sign => UnaryFn::Sign,
        ir::Unary::Sin => UnaryFn::Sin,
        ir::Unary::Sqrt => UnaryFn::Sqrt,
        ir::Unary::Tanh => UnaryFn::Tanh,
        ir::Unary::Softplus => UnaryFn::Softplus,
        ir::Unary::LeakyRelu { alpha } => UnaryFn::LeakyRelu(alpha),
        ir::Unary::HardSigmoid { alpha, beta } => UnaryFn::HardSigmoid(alpha, beta),
        ir::Unary::HardSwish => UnaryFn::HardSwish,
        ir::Unary::Gelu { tanh } => UnaryFn::Gelu(tanh),
        ir::Unary::Round => UnaryFn::Round,
        ir::Unary::BitNot => UnaryFn::BitNot,
        ir::Unary::Acos => UnaryFn::Acos,
        ir::Unary::Asin => UnaryFn::Asin,
        ir::Unary::Atan => UnaryFn::Atan,
        ir::Unary::Acosh => UnaryFn::Acosh,
        ir::Unary::Asinh => UnaryFn::Asinh,
        ir::Unary::Atanh => UnaryFn::Atanh,
        ir::Unary::Sinh => UnaryFn::Sinh,
        ir::Unary::Cosh => UnaryFn::Cosh,
    }
}

/// The kernel function of an IR binary op.
pub fn binary_fn(b: ir::Binary) -> BinaryFn {
    match b {
        ir::Binary::Add => BinaryFn::Add,
        ir::Binary::Sub => BinaryFn::Sub,
        ir::Binary::Mul => BinaryFn::Mul,
        ir::Binary::Div => BinaryFn::Div,
        ir::Binary::Pow => BinaryFn::Pow,
        ir::Binary::And => BinaryFn::And,
        ir::Binary::Or => BinaryFn::Or,
        ir::Binary::Equal => BinaryFn::Equal,
        ir::Binary::Greater => BinaryFn::Greater,
        ir::Binary::Less => BinaryFn::Less,
        ir::Binary::PRelu => BinaryFn::PRelu,
        ir::Binary::Mod => BinaryFn::Mod,
        ir::Binary::Fmod => BinaryFn::Fmod,
        ir::Binary::ShiftLeft => BinaryFn::ShiftLeft,
        ir::Binary::ShiftRight => BinaryFn::ShiftRight,
        ir::Binary::BitAnd => BinaryFn::BitAnd,
        ir::Binary::BitOr => BinaryFn::BitOr,
        ir::Binary::BitXor => BinaryFn::BitXor,
    }
}

/// A Resize node's attributes resolved for the kernel: roi over every axis, and scales of 0.0 where the output
/// size came from `sizes` with the stretch policy (the kernel then uses the exact ratio, as the reference does).
/// Both backends read [`resize::plan_axis`]'s tables from it.
pub fn resize_spec(
    graph: &Graph,
    r: &ir::Resize,
    inputs: &[Option<ValueId>],
    rank: usize,
) -> stowage_runtime::Result<resize::ResizeSpec> {
    let roi = match inputs.get(1).copied().flatten().and_then(|v| graph.const_value(v)) {
        Some(t) if !t.is_empty() => {
            let v: Vec<f32> = consts::to_f64s(t)?.into_iter().map(|x| x as f32).collect();
            Some(match &r.axes {
                Some(axes) if v.len() == 2 * axes.len() => {
                    let mut full: Vec<f32> = vec![0.0; rank].into_iter().chain(vec![1.0; rank]).collect();
                    for (i, &ax) in axes.iter().enumerate() {
                        let ax = if ax < 0 { (ax + rank as i64) as usize } else { ax as usize };
                        full[ax] = v[i];
                        full[rank + ax] = v[axes.len() + i];
                    }
                    full
                }
                _ => v,
            })
        }
        _ => None,
    };
    let mut r = r.clone();
    // Sizes with the stretch policy: the kernel takes 0.0 per axis and uses the exact out/in ratio, as
    // the ONNX reference does (no f32 scale reproduces it in every case).
    let sizes = inputs.get(3).copied().flatten().and_then(|v| graph.const_value(v)).is_some_and(|t| !t.is_empty());
    if sizes && r.aspect_ratio == ir::AspectRatioPolicy::Stretch {
        r.scales = vec![0.0; r.scales.len()];
    }
    let mode = match r.mode {
        ir::ResizeMode::Nearest => resize::ResizeMode::Nearest,
        ir::ResizeMode::Linear => resize::ResizeMode::Linear,
        ir::ResizeMode::Cubic => resize::ResizeMode::Cubic,
    };
    let ct = match r.coordinate_transform {
        ir::CoordinateTransform::HalfPixel => resize::CoordinateTransform::HalfPixel,
        ir::CoordinateTransform::HalfPixelSymmetric => resize::CoordinateTransform::HalfPixelSymmetric,
        ir::CoordinateTransform::PytorchHalfPixel => resize::CoordinateTransform::PytorchHalfPixel,
        ir::CoordinateTransform::AlignCorners => resize::CoordinateTransform::AlignCorners,
        ir::CoordinateTransform::Asymmetric => resize::CoordinateTransform::Asymmetric,
        ir::CoordinateTransform::TfCropAndResize => resize::CoordinateTransform::TfCropAndResize,
    };
    let nm = match r.nearest_mode {
        ir::NearestMode::RoundPreferFloor => resize::NearestMode::RoundPreferFloor,
        ir::NearestMode::RoundPreferCeil => resize::NearestMode::RoundPreferCeil,
        ir::NearestMode::Floor => resize::NearestMode::Floor,
        ir::NearestMode::Ceil => resize::NearestMode::Ceil,
    };
    Ok(resize::ResizeSpec {
        mode,
        coordinate_transform: ct,
        nearest_mode: nm,
        antialias: r.antialias,
        scales: r.scales,
        roi,
        extrapolation_value: r.extrapolation_value,
        cubic_coeff_a: r.cubic_coeff_a,
        exclude_outside: r.exclude_outside,
    })
}
