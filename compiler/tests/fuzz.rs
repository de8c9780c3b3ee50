//! A bounded fuzz test: real model bytes, mutated, must import (and optimise) to a model or an error, never a
//! panic. 50,000 mutants over light model-zoo graphs and ONNX node test models, seeded, so a failure repeats.
//! A panicking mutant is written to target/fuzz-failures/ to replay. `compiler/fuzz` has the cargo-fuzz target
//! for longer runs.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};

use prost::Message;
use stowage_compiler::onnx::proto::ModelProto;
use stowage_compiler::onnx::{self, ImportConfig};
use stowage_compiler::Context;

const MUTANTS: usize = 50_000;

/// A seed model, with the input values its shape-setting inputs need (taken from its test data).
struct Seed {
    name: String,
    bytes: Vec<u8>,
    config: ImportConfig,
}

fn seeds() -> Vec<Seed> {
    let light = common::generated("onnx-models/light", "light_models.py");
    let nodes = common::generated("onnx-node-tests", "gen_node_tests.py");
    let mut seeds = Vec::new();
    for name in ["squeezenet", "inception_v1"] {
        let bytes = std::fs::read(light.join(name).join("model.onnx")).expect("light model");
        seeds.push(Seed { name: name.into(), bytes, config: ImportConfig::new() });
    }
    for case in [
        "test_conv_with_autopad_same",
        "test_reshape_negative_dim",
        "test_slice_neg_steps",
        "test_resize_upsample_sizes_nearest",
        "test_gather_negative_indices",
        "test_split_variable_parts_2d_opset18",
        "test_layer_normalization_4d_axis1",
        "test_maxpool_2d_ceil",
        "test_constant_pad",
        "test_range_float_type_positive_delta_expanded",
        "test_constantofshape_int_zeros",
        "test_reduce_sum_keepdims_random",
        "test_expand_dim_changed",
        "test_tile",
        "test_einsum_sum",
    ] {
        let dir = nodes.join(case);
        let bytes = std::fs::read(dir.join("model.onnx")).expect("node test model");
        let model = onnx::decode(&bytes).expect("decodes");
        let inputs: Vec<String> = model.graph.iter().flat_map(|g| &g.input).map(|i| i.name().to_string()).collect();
        let mut config = ImportConfig::new();
        for name in onnx::value_inputs(&model) {
            let k = inputs.iter().position(|n| *n == name).expect("an input");
            let t = onnx::read_tensor(dir.join(format!("test_data_set_0/input_{k}.pb"))).expect("input data");
            config = config.input_value(name, t);
        }
        seeds.push(Seed { name: case.into(), bytes, config });
    }
    assert!(seeds.len() >= 15, "too few seed models found");
    seeds
}

const OPS: &[&str] = &[
    "Conv",
    "MaxPool",
    "Reshape",
    "Slice",
    "Gather",
    "Concat",
    "Split",
    "Pad",
    "Resize",
    "Range",
    "Expand",
    "Tile",
    "Gemm",
    "MatMul",
    "Softmax",
    "ReduceSum",
    "Transpose",
    "Squeeze",
    "Unsqueeze",
    "Flatten",
    "ConstantOfShape",
    "Shape",
    "Cast",
    "Where",
    "Clip",
    "LayerNormalization",
    "BatchNormalization",
    "Dropout",
    "ArgMax",
    "Identity",
];
const EDGES: &[i64] = &[0, 1, -1, 2, -2, 3, 7, 1 << 20, 1 << 40, i64::MAX, i64::MIN];

/// One edit that keeps the protobuf valid: an attribute, a dimension, an op type, an input name, an opset.
fn mutate_model(rng: &mut fastrand::Rng, m: &mut ModelProto) {
    let edge = |rng: &mut fastrand::Rng| EDGES[rng.usize(..EDGES.len())];
    let Some(g) = m.graph.as_mut() else { return };
    match rng.u8(0..6) {
        0 | 1 if !g.node.is_empty() => {
            let n = rng.usize(..g.node.len());
            let node = &mut g.node[n];
            if node.attribute.is_empty() {
                return;
            }
            let a = rng.usize(..node.attribute.len());
            let attr = &mut node.attribute[a];
            if !attr.ints.is_empty() {
                let i = rng.usize(..attr.ints.len());
                attr.ints[i] = edge(rng);
                if rng.bool() {
                    attr.ints.pop();
                }
            } else if attr.i.is_some() {
                attr.i = Some(edge(rng));
            } else if attr.f.is_some() {
                attr.f = Some([0.0, -1.0, f32::NAN, f32::INFINITY, 1e30][rng.usize(..5)]);
            } else {
                attr.r#type = Some(rng.i32(0..15));
            }
        }
        2 if !g.node.is_empty() => {
            let n = rng.usize(..g.node.len());
            g.node[n].op_type = Some(OPS[rng.usize(..OPS.len())].to_string());
        }
        3 if !g.node.is_empty() => {
            let n = rng.usize(..g.node.len());
            let node = &mut g.node[n];
            match rng.u8(0..3) {
                0 => {
                    node.input.pop();
                }
                1 => node.input.push(String::new()),
                _ => {
                    if let Some(first) = node.input.first().cloned() {
                        node.input.push(first);
                    }
                }
            }
        }
        4 => {
            let k = rng.usize(..g.initializer.len().max(1));
            if let Some(t) = g.initializer.get_mut(k) {
                if let Some(d) = t.dims.first_mut() {
                    *d = edge(rng);
                } else {
                    t.data_type = Some(rng.i32(0..25));
                }
            } else if let Some(vi) = g.input.first_mut() {
                vi.r#type = None;
            }
        }
        _ => {
            if let Some(o) = m.opset_import.first_mut() {
                o.version = Some(rng.i64(1..30));
            }
        }
    }
}

/// One random edit: flip bits, overwrite with a boundary value, insert, delete, or duplicate a span.
fn mutate(rng: &mut fastrand::Rng, bytes: &mut Vec<u8>) {
    let len = bytes.len().max(1);
    match rng.u8(0..6) {
        0 => {
            for _ in 0..rng.usize(1..4) {
                let i = rng.usize(..len).min(bytes.len().saturating_sub(1));
                if let Some(b) = bytes.get_mut(i) {
                    *b ^= 1 << rng.u8(0..8);
                }
            }
        }
        1 => {
            let i = rng.usize(..len);
            let v = [0x00, 0x01, 0x7f, 0x80, 0xff][rng.usize(..5)];
            if let Some(b) = bytes.get_mut(i) {
                *b = v;
            }
        }
        2 => {
            let i = rng.usize(..=bytes.len());
            let n = rng.usize(1..8);
            for _ in 0..n {
                bytes.insert(i, rng.u8(..));
            }
        }
        3 => {
            let i = rng.usize(..len);
            let end = (i + rng.usize(1..16)).min(bytes.len());
            if i < end {
                bytes.drain(i..end);
            }
        }
        4 => {
            let i = rng.usize(..len);
            let end = (i + rng.usize(1..32)).min(bytes.len());
            if i < end {
                let span: Vec<u8> = bytes[i..end].to_vec();
                let at = rng.usize(..=bytes.len());
                bytes.splice(at..at, span);
            }
        }
        _ => {
            // A large varint where a small one was: dims, attribute ints, lengths.
            let i = rng.usize(..len);
            if i < bytes.len() {
                bytes.splice(i..i + 1, [0xff, 0xff, 0xff, 0xff, 0x0f]);
            }
        }
    }
}

#[test]
fn mutated_models_import_or_fail_cleanly() {
    let seeds = seeds();
    // STOWAGE_FUZZ_SEED and STOWAGE_FUZZ_MUTANTS explore further than CI does.
    let seed: u64 = std::env::var("STOWAGE_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed);
    let mutants: usize = std::env::var("STOWAGE_FUZZ_MUTANTS").ok().and_then(|s| s.parse().ok()).unwrap_or(MUTANTS);
    let mut rng = fastrand::Rng::with_seed(seed);
    let (mut imported, mut rejected) = (0usize, 0usize);
    let start = std::time::Instant::now();
    for i in 0..mutants {
        let seed = &seeds[i % seeds.len()];
        let name = &seed.name;
        // Half the mutants edit bytes (the decoder's side), half edit a decoded model (the importer's side).
        let bytes = if i % 2 == 0 {
            let mut bytes = seed.bytes.clone();
            for _ in 0..rng.usize(1..3) {
                mutate(&mut rng, &mut bytes);
            }
            bytes
        } else {
            let mut m = onnx::decode(&seed.bytes).expect("seed decodes");
            for _ in 0..rng.usize(1..3) {
                mutate_model(&mut rng, &mut m);
            }
            m.encode_to_vec()
        };
        let outcome = catch_unwind(AssertUnwindSafe(|| match onnx::load_bytes(&bytes, &seed.config) {
            Ok(graph) => {
                let mut cx = Context::new(graph);
                cx.set_verify(true);
                cx.optimize().map(|_| ()).map_err(|e| e.to_string())
            }
            Err(e) => Err(e.to_string()),
        }));
        match outcome {
            Ok(Ok(())) => imported += 1,
            Ok(Err(message)) => {
                assert!(!message.contains("bug in stowage"), "mutant {i} of {name}: {message}");
                if std::env::var_os("STOWAGE_FUZZ_VERBOSE").is_some() {
                    println!("{name}: {message}");
                }
                rejected += 1;
            }
            Err(_) => {
                let dir = common::root().join("target/fuzz-failures");
                std::fs::create_dir_all(&dir).expect("mkdir");
                let path = dir.join(format!("{name}-{i}.onnx"));
                std::fs::write(&path, &bytes).expect("write mutant");
                panic!("mutant {i} of {name} panicked; its bytes are in {}", path.display());
            }
        }
    }
    println!(
        "{mutants} mutants (seed {seed}) in {:.1} s: {imported} imported, {rejected} rejected",
        start.elapsed().as_secs_f64()
    );
    assert!(
        imported > 100 && rejected > 100,
        "mutation is too mild or too harsh: {imported} imported, {rejected} rejected"
    );
}
