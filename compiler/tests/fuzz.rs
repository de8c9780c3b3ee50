//! A bounded fuzz test: real model bytes, mutated, must import (and optimise) to a model or an error, never a
//! panic. 50,000 mutants over light model-zoo graphs and ONNX node test models, seeded, so a failure repeats.
//! A panicking mutant is written to target/fuzz-failures/ to replay. `compiler/fuzz` has the cargo-fuzz target
//! for longer runs.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};

use prost::Message;
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
                common::mutate::mutate(&mut rng, &mut bytes);
            }
            bytes
        } else {
            let mut m = onnx::decode(&seed.bytes).expect("seed decodes");
            for _ in 0..rng.usize(1..3) {
                common::mutate::mutate_model(&mut rng, &mut m);
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
