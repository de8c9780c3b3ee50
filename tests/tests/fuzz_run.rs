//! The whole pipeline, fuzzed: mutated models are imported, optimised, planned, compiled and run on `cpu` with their
//! seed's inputs, and must give outputs or one clean error: never a panic, an abort, or a run past `BOUND`.
//!
//! Seeds are ONNX node tests that pass on the CPU (their inputs from their test data); the mutations are the import
//! fuzz test's (`compiler/tests/common/mutate.rs`): edits of the decoded model that keep the protobuf valid
//! (attributes set to edge values, op types swapped, inputs dropped or repeated, dimensions and element types of
//! initializers changed, opsets moved), and, for one mutant in four, byte edits. Values are limited to 64 MiB, so a
//! shape bomb is refused as it would be under a smaller `--max-value-bytes`, not allocated.
//!
//! CI runs `MUTANTS`, seeded, so a failure repeats. `STOWAGE_FUZZ_SEED`, `STOWAGE_FUZZ_MUTANTS` and
//! `STOWAGE_FUZZ_SECONDS` (stop after that long) explore further; `STOWAGE_FUZZ_VERBOSE` prints each rejection.
//! The mutant being run is kept in `target/fuzz-failures/running-PID.onnx` (an abort leaves it there); a failing one is
//! written to `target/fuzz-failures/` under its seed's name and number.

#[path = "../../compiler/tests/common/mutate.rs"]
mod mutate;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prost::Message;
use stowage_cli::session::{self, RunOptions};
use stowage_compiler::onnx::{self, ImportConfig};
use stowage_runtime::Tensor;

const MUTANTS: usize = 20_000;
/// The longest one mutant may take to import, plan, compile and run.
const BOUND: Duration = Duration::from_secs(60);
/// The limit on one value during fuzzing.
const VALUE_LIMIT: usize = 64 << 20;

const SEEDS: &[&str] = &[
    "test_conv_with_autopad_same",
    "test_conv_with_strides_padding",
    "test_convtranspose_1d",
    "test_maxpool_2d_ceil",
    "test_maxpool_2d_pads",
    "test_averagepool_2d_pads",
    "test_globalaveragepool",
    "test_gemm_all_attributes",
    "test_matmul_3d",
    "test_softmax_axis_1",
    "test_layer_normalization_4d_axis1",
    "test_batchnorm_epsilon",
    "test_reshape_negative_dim",
    "test_slice_neg_steps",
    "test_gather_negative_indices",
    "test_concat_2d_axis_1",
    "test_split_variable_parts_2d_opset18",
    "test_transpose_all_permutations_2",
    "test_constant_pad",
    "test_resize_upsample_sizes_nearest",
    "test_resize_downsample_scales_linear",
    "test_expand_dim_changed",
    "test_tile",
    "test_range_float_type_positive_delta_expanded",
    "test_constantofshape_int_zeros",
    "test_reduce_sum_keepdims_random",
    "test_reduce_mean_default_axes_keepdims_random",
    "test_argmax_keepdims_random",
    "test_where_example",
    "test_clip_splitbounds",
    "test_cast_FLOAT_to_FLOAT16",
    "test_einsum_sum",
    "test_flatten_axis2",
    "test_unsqueeze_axis_1",
    "test_lrn",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_path_buf()
}

/// A seed model: its bytes, the path it is named by, its inputs, and the shape-setting inputs fixed at import.
struct Seed {
    name: &'static str,
    path: PathBuf,
    bytes: Vec<u8>,
    inputs: Vec<(String, Tensor<'static>)>,
    config: ImportConfig,
}

fn seeds() -> Vec<Seed> {
    let nodes = root().join("target/onnx-node-tests");
    assert!(nodes.is_dir(), "{} is missing: run scripts/test (gen_node_tests.py writes it)", nodes.display());
    SEEDS
        .iter()
        .filter(|case| nodes.join(case).is_dir())
        .map(|&name| {
            let dir = nodes.join(name);
            let path = dir.join("model.onnx");
            let bytes = std::fs::read(&path).expect("node test model");
            let model = onnx::decode(&bytes).expect("decodes");
            let graph = model.graph.as_ref().expect("a graph");
            let inits: Vec<&str> = graph.initializer.iter().map(|t| t.name()).collect();
            let fixed = onnx::value_inputs(&model);
            let mut config = ImportConfig::new().max_value_bytes(VALUE_LIMIT);
            let mut inputs = Vec::new();
            for (k, vi) in graph.input.iter().filter(|i| !inits.contains(&i.name())).enumerate() {
                let t = onnx::read_tensor(dir.join(format!("test_data_set_0/input_{k}.pb"))).expect("input data");
                if fixed.iter().any(|f| f == vi.name()) {
                    config = config.input_value(vi.name(), t);
                } else {
                    inputs.push((vi.name().to_string(), t));
                }
            }
            Seed { name, path, bytes, inputs, config }
        })
        .collect()
}

/// What one mutant did.
enum Verdict {
    Ran,
    Refused(String),
}

fn run_one(seed: &Seed, bytes: &[u8], threads: usize) -> Verdict {
    let options =
        RunOptions { target: "cpu".into(), threads, config: seed.config.clone(), ..stowage_cli::run_options() };
    match session::run_bytes(bytes, &seed.path, seed.inputs.clone(), &options, Instant::now()) {
        Ok(_) => Verdict::Ran,
        Err(e) => Verdict::Refused(e.to_string()),
    }
}

/// Keeps `bytes` as a failing mutant and names the file.
fn keep(dir: &Path, name: &str, i: usize, bytes: &[u8]) -> PathBuf {
    let path = dir.join(format!("{name}-{i}.onnx"));
    std::fs::write(&path, bytes).expect("write mutant");
    path
}

#[test]
fn mutated_models_run_or_fail_cleanly_on_the_cpu() {
    let seeds = seeds();
    assert!(seeds.len() >= 30, "too few seed node tests found: {}", seeds.len());
    let env = |key: &str| std::env::var(key).ok().and_then(|s| s.parse::<u64>().ok());
    let rng_seed = env("STOWAGE_FUZZ_SEED").unwrap_or(0x5eed);
    let mutants = env("STOWAGE_FUZZ_MUTANTS").map_or(MUTANTS, |n| n as usize);
    let seconds = env("STOWAGE_FUZZ_SECONDS").map(Duration::from_secs);
    let failures = root().join("target/fuzz-failures");
    std::fs::create_dir_all(&failures).expect("mkdir");
    let running = failures.join(format!("running-{}.onnx", std::process::id()));

    // A watchdog: a mutant past BOUND is kept and the process ends, naming it (a hang is a finding too).
    let current: Arc<Mutex<Option<(Instant, String)>>> = Arc::default();
    let watched = Arc::clone(&current);
    let kept = running.clone();
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_secs(1));
        let late = watched
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .and_then(|(started, what)| (started.elapsed() > BOUND).then(|| what.clone()));
        if let Some(what) = late {
            eprintln!("{what} ran past {BOUND:?}; its bytes are in {}", kept.display());
            std::process::exit(101);
        }
    });

    let mut rng = fastrand::Rng::with_seed(rng_seed);
    let (mut ran, mut refused) = (0usize, 0usize);
    let start = Instant::now();
    let mut done = 0;
    for i in 0..mutants {
        if seconds.is_some_and(|s| start.elapsed() > s) {
            break;
        }
        let seed = &seeds[i % seeds.len()];
        let bytes = if i % 4 == 3 {
            let mut bytes = seed.bytes.clone();
            for _ in 0..rng.usize(1..3) {
                mutate::mutate(&mut rng, &mut bytes);
            }
            bytes
        } else {
            let mut m = onnx::decode(&seed.bytes).expect("seed decodes");
            for _ in 0..rng.usize(1..4) {
                mutate::mutate_model(&mut rng, &mut m);
            }
            m.encode_to_vec()
        };
        let threads = 1 + rng.usize(..2);
        std::fs::write(&running, &bytes).expect("write the running mutant");
        let what = format!("mutant {i} of {} (STOWAGE_FUZZ_SEED={rng_seed})", seed.name);
        *current.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), what.clone()));
        let outcome = catch_unwind(AssertUnwindSafe(|| run_one(seed, &bytes, threads)));
        *current.lock().unwrap_or_else(|p| p.into_inner()) = None;
        match outcome {
            Ok(Verdict::Ran) => ran += 1,
            Ok(Verdict::Refused(message)) => {
                // (Names in messages are the model's own, newlines and all: the CLI escapes them as it prints.)
                if message.contains("bug in stowage") {
                    let path = keep(&failures, seed.name, i, &bytes);
                    panic!("{what}: {message:?}; its bytes are in {}", path.display());
                }
                if std::env::var_os("STOWAGE_FUZZ_VERBOSE").is_some() {
                    println!("{}: {message}", seed.name);
                }
                refused += 1;
            }
            Err(_) => {
                let path = keep(&failures, seed.name, i, &bytes);
                panic!("{what} panicked; its bytes are in {}", path.display());
            }
        }
        done += 1;
    }
    let _ = std::fs::remove_file(&running);
    println!(
        "{done} mutants (seed {rng_seed}) in {:.1} s: {ran} ran, {refused} refused",
        start.elapsed().as_secs_f64()
    );
    assert!(ran > done / 20 && refused > done / 20, "mutation is too mild or too harsh: {ran} ran, {refused} refused");
}

/// Every mutant fuzzing ever found failing, kept in `tests/fuzz-corpus/` and run with inputs made from its declared
/// types: each now runs or fails with an error, without a panic.
#[test]
fn the_crash_corpus_runs_or_fails_cleanly() {
    let corpus = root().join("tests/fuzz-corpus");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&corpus)
        .expect("tests/fuzz-corpus")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "onnx"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no corpus in {}", corpus.display());
    for path in files {
        let bytes = std::fs::read(&path).expect("reads");
        let inputs = stowage_tests::declared_inputs(&bytes).expect("a corpus model declares static inputs");
        for threads in [1, 2] {
            let options = RunOptions {
                target: "cpu".into(),
                threads,
                config: ImportConfig::new().max_value_bytes(VALUE_LIMIT),
                ..stowage_cli::run_options()
            };
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                session::run_bytes(&bytes, &path, inputs.clone(), &options, Instant::now()).map(|_| ())
            }));
            match outcome {
                Ok(Ok(())) => {}
                Ok(Err(e)) => assert!(!e.to_string().contains("bug in stowage"), "{}: {e}", path.display()),
                Err(_) => panic!("{} panicked at {threads} threads", path.display()),
            }
        }
    }
}
