//! Shape inference against the ONNX node tests: for every case whose ops are all in this round's op set and whose
//! inputs and outputs are plain tensors of the runtime's datum types, the imported graph's output types must equal
//! the reference outputs' dtypes and shapes. Inputs that set shapes are fixed from the case's own data, as
//! `stowage run` does. Cases that do not agree are listed, with a reason each, in `node_shapes_expected.txt`; the
//! test fails when an unlisted case fails and when a listed case passes, so the list only shrinks.

mod common;

use std::collections::BTreeMap;

use serde_json::Value;
use stowage_compiler::onnx::{self, ImportConfig};
use stowage_compiler::Context;

fn counted(case: &Value) -> bool {
    let ops = case["ops"].as_array().expect("ops");
    let plain = case["plain_tensors"].as_bool() == Some(true);
    let dtypes_ok = ["inputs", "outputs"]
        .iter()
        .flat_map(|k| case[*k].as_array().expect("inputs/outputs"))
        .all(|x| x["dtype"].as_str().and_then(common::dtype).is_some());
    plain && dtypes_ok && ops.iter().all(|o| common::OP_SET.contains(&o.as_str().unwrap_or("")))
}

/// Imports one case and compares its output types with the reference; `Err` says why not.
fn check(dir: &std::path::Path, case: &Value) -> Result<(), String> {
    let model_path = dir.join("model.onnx");
    let bytes = std::fs::read(&model_path).map_err(|e| e.to_string())?;
    let model = onnx::decode(&bytes).map_err(|e| e.to_string())?;
    let inputs: Vec<String> = model.graph.iter().flat_map(|g| &g.input).map(|i| i.name().to_string()).collect();
    let mut config = ImportConfig::new();
    for name in onnx::value_inputs(&model) {
        let k = inputs.iter().position(|n| *n == name).expect("a value input is an input");
        let t = onnx::read_tensor(dir.join(format!("test_data_set_0/input_{k}.pb")))?;
        config = config.input_value(name, t);
    }
    let mut cx = Context::import(&model_path, &config).map_err(|e| e.to_string())?;
    cx.set_verify(true);
    cx.optimize().map_err(|e| e.to_string())?;
    let outputs = case["outputs"].as_array().expect("outputs");
    let g = &cx.graph;
    if g.outputs().len() != outputs.len() {
        return Err(format!("{} outputs, expected {}", g.outputs().len(), outputs.len()));
    }
    for (o, want) in g.outputs().iter().zip(outputs) {
        let ty = g.ty(o.value);
        let shape: Vec<usize> =
            want["shape"].as_array().expect("shape").iter().map(|d| d.as_u64().expect("dim") as usize).collect();
        let dt = common::dtype(want["dtype"].as_str().expect("dtype")).expect("counted dtype");
        if ty.dt.name() != dt || ty.shape != shape {
            return Err(format!("output '{}' is {ty}, expected {dt}{shape:?}", o.name));
        }
    }
    Ok(())
}

#[test]
fn shape_inference_agrees_with_onnx_node_tests() {
    let root = common::generated("onnx-node-tests", "gen_node_tests.py");
    let index: Vec<Value> = serde_json::from_slice(&std::fs::read(root.join("index.json")).expect("index.json"))
        .expect("index.json parses");
    let expected_text = include_str!("node_shapes_expected.txt");
    let expected: BTreeMap<&str, &str> = expected_text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| l.split_once(' ').map_or((l, ""), |(n, r)| (n, r.trim())))
        .collect();
    let mut counted_cases = 0;
    let mut failures = BTreeMap::new();
    for case in index.iter().filter(|c| counted(c)) {
        counted_cases += 1;
        let name = case["name"].as_str().expect("name");
        if let Err(why) = check(&root.join(name), case) {
            failures.insert(name.to_string(), why);
        }
    }
    let unexpected: Vec<String> =
        failures.iter().filter(|(n, _)| !expected.contains_key(n.as_str())).map(|(n, w)| format!("{n} {w}")).collect();
    let fixed: Vec<&str> = expected.keys().filter(|n| !failures.contains_key(**n)).copied().collect();
    println!("{counted_cases} cases counted, {} failing (all listed: {})", failures.len(), unexpected.is_empty());
    assert!(counted_cases > 600, "only {counted_cases} cases counted: is {} complete?", root.display());
    assert!(
        unexpected.is_empty() && fixed.is_empty(),
        "shape inference disagrees with ONNX on cases not in node_shapes_expected.txt:\n{}\n\
         cases listed as failing that now pass (remove them from the list):\n{}",
        unexpected.join("\n"),
        fixed.join("\n")
    );
}
