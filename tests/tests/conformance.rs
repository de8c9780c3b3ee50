//! ONNX conformance: every node test case whose ops are all in this round's op set and whose inputs and outputs
//! are plain tensors of the runtime's datum types runs through `stowage run`'s own code (the CLI's `session`)
//! and must match the reference outputs within the case's tolerances. Cases that do not pass are listed, one
//! reason each, in `conformance_expected.txt`; the test fails when an unlisted case fails and when a listed case
//! passes, so the list only shrinks. Cases of other ops are counted and reported, not run.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;
use stowage_cli::session::{self, RunOptions};
use stowage_compiler::onnx;
use stowage_compiler::onnx::structure::{self, Structure};
use stowage_runtime::Tensor;

use stowage_compiler::onnx::SUPPORTED_OPS as OP_SET;
const DTYPES: &[&str] = &[
    "bool",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "int8",
    "int16",
    "int32",
    "int64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float4_e2m1fn",
    "int4",
    "uint4",
    "int2",
    "uint2",
    "str",
];

/// Whether a value the index describes is one the runtime takes: a tensor of [`DTYPES`], a sequence of them, an
/// optional of either.
fn takes(x: &Value) -> bool {
    match x["kind"].as_str() {
        Some("tensor") | None => x["dtype"].as_str().is_some_and(|d| DTYPES.contains(&d)),
        Some("sequence") => x["elems"].as_array().is_some_and(|items| items.iter().all(takes)),
        Some("optional") => x["value"].is_null() || (x["value"]["kind"] != "optional" && takes(&x["value"])),
        Some(_) => false,
    }
}

fn counted(case: &Value) -> bool {
    let dtypes = ["inputs", "outputs"].iter().flat_map(|k| case[*k].as_array().into_iter().flatten()).all(takes);
    let known = |op: &str| match op.split_once(':') {
        None => OP_SET.contains(&op),
        Some((domain, op)) => onnx::is_other_domain_op(domain, op),
    };
    let ops = case["ops"].as_array().into_iter().flatten().all(|o| known(o.as_str().unwrap_or("")));
    dtypes && ops
}

fn run_case(dir: &Path, case: &Value, target: &str) -> Result<(), String> {
    let model = dir.join("model.onnx");
    let data = dir.join("test_data_set_0");
    // Files are read as the model declares its inputs and outputs: tensors, sequences, optionals.
    let bytes = std::fs::read(&model).map_err(|e| e.to_string())?;
    let proto = onnx::decode_within(&bytes, onnx::DEFAULT_MAX_VALUE_BYTES).map_err(|e| e.to_string())?;
    let graph = proto.graph.as_ref().ok_or("no graph")?;
    let declared = |list: &[onnx::proto::ValueInfoProto], name: &str| {
        list.iter().find(|v| v.name() == name).and_then(|v| v.r#type.clone())
    };
    let read = |file: String, ty: Option<onnx::proto::TypeProto>| {
        structure::read_value_within(&data.join(file), ty.as_ref(), onnx::DEFAULT_MAX_VALUE_BYTES)
    };
    let mut values = Vec::new();
    for (k, input) in case["inputs"].as_array().into_iter().flatten().enumerate() {
        let name = input["name"].as_str().ok_or("input without a name")?.to_string();
        let value = read(format!("input_{k}.pb"), declared(&graph.input, &name))?;
        values.push((name, value));
    }
    let mut options = RunOptions { target: target.into(), ..stowage_cli::run_options() };
    let inputs = session::structured_inputs(values, &mut options);
    let outcome = session::run(&model, inputs, &options)?;
    let got = outcome.values()?;
    let rtol = case["rtol"].as_f64().unwrap_or(1e-3);
    let atol = case["atol"].as_f64().unwrap_or(1e-7);
    let wanted = case["outputs"].as_array().ok_or("no outputs")?;
    if got.len() != wanted.len() {
        return Err(format!("{} outputs, expected {}", got.len(), wanted.len()));
    }
    for (k, (name, got)) in got.iter().enumerate() {
        let want = read(format!("output_{k}.pb"), declared(&graph.output, name))?;
        compare_values(got, &want, rtol, atol).map_err(|e| format!("output '{name}': {e}"))?;
    }
    Ok(())
}

/// Two values alike: the same form, each tensor within the tolerances.
fn compare_values(
    got: &Structure<Tensor<'static>>,
    want: &Structure<Tensor<'static>>,
    rtol: f64,
    atol: f64,
) -> Result<(), String> {
    match (got, want) {
        (Structure::Tensor(a), Structure::Tensor(b)) => stowage_tests::compare(a, b, rtol, atol),
        (Structure::Sequence { items: a, .. }, Structure::Sequence { items: b, .. }) => {
            if a.len() != b.len() {
                return Err(format!("a sequence of {} items, expected {}", a.len(), b.len()));
            }
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                stowage_tests::compare(x, y, rtol, atol).map_err(|e| format!("item {i}: {e}"))?;
            }
            Ok(())
        }
        (Structure::Optional { value: a, .. }, Structure::Optional { value: b, .. }) => match (a, b) {
            (None, None) => Ok(()),
            (Some(x), Some(y)) => compare_values(x, y, rtol, atol),
            (x, _) => Err(format!(
                "an optional {}, expected the other",
                if x.is_some() { "with a value" } else { "without one" }
            )),
        },
        (a, b) => Err(format!("{}, expected {}", a.what(), b.what())),
    }
}

#[test]
fn onnx_node_tests_pass() {
    check("onnx_node_tests_pass", "cpu", include_str!("conformance_expected.txt"));
}

/// The same cases on the CPU with every 2-D convolution, pool and inference BatchNormalization it takes in
/// channel blocks run in blocks (`cpu:blocks`: converting around each whose values the plan keeps packed), so that
/// the blocked kernels (`kernels/blocked.rs`, `conv_blocks.rs`, `depthwise_blocks.rs`) meet every Conv, pool and
/// BatchNormalization case: the same list as the CPU's.
#[test]
fn onnx_node_tests_pass_in_channel_blocks() {
    check("onnx_node_tests_pass_in_channel_blocks", "cpu:blocks", include_str!("conformance_expected.txt"));
}

/// The same cases on the OpenCL device (PoCL in CI), through the unified path. Kernels are generated for the ops
/// the OpenCL backend has; the others are on its own list.
#[test]
fn onnx_node_tests_pass_on_opencl() {
    check("onnx_node_tests_pass_on_opencl", "opencl", include_str!("conformance_expected_opencl.txt"));
}

/// And through the discrete path (staged copies), with the same list: the kernels are the same.
#[test]
fn onnx_node_tests_pass_on_opencl_discrete() {
    check(
        "onnx_node_tests_pass_on_opencl_discrete",
        "opencl:discrete",
        include_str!("conformance_expected_opencl.txt"),
    );
}

/// Both, as a list in order of preference, through the discrete path: the planner places each node the OpenCL
/// backend lacks on the CPU, with the transfers around it, so every case passes that passes on the CPU alone.
#[test]
fn onnx_node_tests_pass_on_opencl_falling_back_to_cpu() {
    check(
        "onnx_node_tests_pass_on_opencl_falling_back_to_cpu",
        "opencl:discrete,cpu",
        include_str!("conformance_expected.txt"),
    );
}

fn check(test: &str, target: &str, expected: &str) {
    let root = stowage_tests::generated("onnx-node-tests", "gen_node_tests.py");
    let index: Vec<Value> =
        serde_json::from_slice(&std::fs::read(root.join("index.json")).expect("index.json")).expect("parses");
    let expected: BTreeMap<&str, &str> = expected
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| l.split_once(' ').map_or((l, ""), |(n, r)| (n, r.trim())))
        .collect();
    let mut skipped = 0;
    let mut failures = BTreeMap::new();
    // The three OpenCL tests run at once and share the programs PoCL compiles through its kernel cache: each walks
    // the cases from another starting point, so that a program is mostly compiled once, by whichever test meets it
    // first, and loaded from the cache by the others (the kernels of the three are the same).
    let mut order: Vec<&Value> = index.iter().collect();
    let half = order.len() / 2;
    match target {
        "opencl:discrete" => order.reverse(),
        "opencl:discrete,cpu" => order.rotate_left(half),
        _ => {}
    }
    let mut cases = Vec::new();
    for case in order {
        if counted(case) {
            cases.push(case);
        } else {
            skipped += 1;
        }
    }
    let counted_cases = cases.len();
    // Over two processes: PoCL builds one program at a time in each (see `stowage_tests::across_processes`).
    let started = std::time::Instant::now();
    let results = stowage_tests::across_processes(test, &cases, |case| {
        let name = case["name"].as_str().unwrap_or_default();
        std::panic::catch_unwind(|| run_case(&root.join(name), case, target)).unwrap_or_else(|p| {
            Err(format!(
                "panicked: {}",
                p.downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            ))
        })
    });
    for (case, result) in cases.iter().zip(results) {
        if let Err(why) = result {
            failures.insert(case["name"].as_str().expect("name").to_string(), why);
        }
    }
    println!("conformance on {target}: {:.1} s", started.elapsed().as_secs_f64());
    let passed = counted_cases - failures.len();
    println!(
        "conformance on {target}: {passed} of {counted_cases} counted cases pass ({:.1}%); {skipped} cases use ops or types outside this round and were not run",
        100.0 * passed as f64 / counted_cases as f64
    );
    // `STOWAGE_CONFORMANCE_WHY=1` prints each failure with its reason, to keep the expected lists' reasons true.
    if std::env::var_os("STOWAGE_CONFORMANCE_WHY").is_some() {
        for (n, w) in &failures {
            println!("{target} fails {n}: {w}");
        }
    }
    let unexpected: Vec<String> =
        failures.iter().filter(|(n, _)| !expected.contains_key(n.as_str())).map(|(n, w)| format!("{n} {w}")).collect();
    let fixed: Vec<&str> = expected.keys().filter(|n| !failures.contains_key(**n)).copied().collect();
    assert!(counted_cases > 600, "only {counted_cases} cases counted: is {} complete?", root.display());
    assert!(
        unexpected.is_empty() && fixed.is_empty(),
        "{target}: cases failing that are not on the expected list:\n{}\n\ncases on the expected list that now pass (remove them):\n{}",
        unexpected.join("\n"),
        fixed.join("\n")
    );
}
