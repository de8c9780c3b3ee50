//! The run-time-shape suite (`scripts/onnx/run_time_models.py`): models in which a node needs a value computed from
//! the inputs (`NonZero`, `Compress`, `NonMaxSuppression`, `Unique`, a `TopK` whose K and a `Loop` whose trip count
//! are counted from the data, an `If` whose branches differ in shape), compiled in stages
//! (`compiler/driver/src/stages.rs`). Each must match onnxruntime on `cpu` and `opencl,cpu`, be compiled in stages
//! (not folded whole), keep one version of each part over repeated runs, and report every part's planned copies.

use std::path::PathBuf;

use stowage_cli::session::{self, Outcome, RunOptions};
use stowage_compiler::onnx;
use stowage_runtime::Tensor;

fn suite() -> PathBuf {
    stowage_tests::generated("run-time-models", "run_time_models.py")
}

/// Runs the suite's model `name` on `target` with its reference inputs, `repeat` times.
fn run(name: &str, target: &str, repeat: usize, limit: Option<usize>) -> Result<Outcome, String> {
    run_on(name, target, repeat, limit, None)
}

/// [`run`], with `given` for the model's first input instead of the reference's.
fn run_on(
    name: &str,
    target: &str,
    repeat: usize,
    limit: Option<usize>,
    given: Option<Tensor<'static>>,
) -> Result<Outcome, String> {
    let dir = suite().join(name);
    let data = dir.join("test_data_set_0");
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(suite().join("manifest.json")).unwrap()).unwrap();
    let entry = manifest.as_array().unwrap().iter().find(|e| e["name"] == name).expect("in the manifest");
    let mut inputs: Vec<(String, Tensor<'static>)> = Vec::new();
    for (k, input) in entry["inputs"].as_array().unwrap().iter().enumerate() {
        inputs.push((input.as_str().unwrap().into(), onnx::read_tensor(data.join(format!("input_{k}.pb"))).unwrap()));
    }
    if let Some(t) = given {
        inputs[0].1 = t;
    }
    let mut options = RunOptions { target: target.into(), repeat, ..stowage_cli::run_options() };
    options.config.max_value_bytes = limit;
    session::run(&dir.join("model.onnx"), inputs, &options).map_err(|e| e.to_string())
}

fn names() -> Vec<String> {
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(suite().join("manifest.json")).unwrap()).unwrap();
    manifest.as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap().to_string()).collect()
}

#[test]
fn every_run_time_model_matches_onnxruntime_on_the_cpu() {
    stowage_tests::suites::check(
        "every_run_time_model_matches_onnxruntime_on_the_cpu",
        "run-time-models",
        "run_time_models.py",
        "cpu",
        9,
    );
}

#[test]
fn every_run_time_model_matches_onnxruntime_on_opencl_and_cpu() {
    stowage_tests::suites::check(
        "every_run_time_model_matches_onnxruntime_on_opencl_and_cpu",
        "run-time-models",
        "run_time_models.py",
        "opencl,cpu",
        9,
    );
}

#[test]
fn each_model_is_compiled_in_stages_and_each_part_once_over_repeated_runs() {
    for name in names() {
        let outcome = run(&name, "cpu", 3, None).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(outcome.cuts.len(), 1, "{name}: {:?}", outcome.cuts);
        let line = &outcome.cuts[0];
        assert!(line.contains("(1 version of the node, "), "{name}: {line}");
        assert!(line.ends_with(", 1 of the rest)") || line.ends_with(", none of the rest)"), "{name}: {line}");
        assert!(!outcome.later_plans.is_empty(), "{name}: the parts after the first have no plans");
    }
}

#[test]
fn the_report_lists_every_parts_planned_copies_and_the_ledger_agrees() {
    // On OpenCL with staging through host memory, each part uploads what it reads and downloads what it makes:
    // every copy the ledger records over the run is one some part's plan has.
    let outcome = run("compress_then_dense", "opencl:discrete", 1, None).unwrap();
    let report = stowage_cli::run::report("opencl:discrete", &outcome);
    let planned = report["planned_copies"].as_array().unwrap();
    let performed = report["performed_copies"].as_array().unwrap();
    assert!(!performed.is_empty());
    for copy in performed {
        let same = |p: &&serde_json::Value| p["value"] == copy["value"] && p["to"] == copy["to"];
        assert!(planned.iter().any(|p| same(&p)), "performed {copy} is planned by no part: {planned:?}");
    }
    assert_eq!(report["stages"].as_array().unwrap().len(), 1);
}

#[test]
fn a_run_time_value_past_the_size_limit_is_an_error_naming_the_node() {
    // Rows summing to 300 and 30 make ConstantOfShape's output f32[300, 30], 36,000 bytes: under a 16 KiB limit
    // (which everything before it fits), the node compiled at run time is refused, naming it and the size.
    let x = Tensor::from_vec(&[2, 3], vec![100f32, 100.0, 100.0, 10.0, 10.0, 10.0]).unwrap();
    let e = run_on("fill_counted", "cpu", 1, Some(16 << 10), Some(x)).err().expect("refused");
    assert!(e.contains("node 'fill' (ConstantOfShape)") && e.contains("36000 bytes"), "{e}");
    assert!(!e.contains('\n'), "{e}");
    // Within the limit, the same values run.
    let x = Tensor::from_vec(&[2, 3], vec![100f32, 100.0, 100.0, 10.0, 10.0, 10.0]).unwrap();
    let outcome = run_on("fill_counted", "cpu", 1, Some(64 << 10), Some(x)).unwrap();
    assert_eq!(outcome.outputs[0].1.shape(), &[300, 30]);
}

#[test]
fn stowage_plan_shows_the_part_that_runs_first_and_each_cut() {
    use stowage_cli::show::{plan, PlanFormat};
    let model = suite().join("compress_then_dense").join("model.onnx");
    let options = stowage_cli::run_options();
    let text = plan(&model, PlanFormat::Text, None, &options).unwrap();
    assert!(text.contains("ReduceMean") && !text.contains("MatMul"), "{text}");
    assert!(text.ends_with("staged: node 'keep_rows' (Compress) needs a value known only at run time: it and what follows it are planned at run time, for the shapes that come out\n"), "{text}");
    let json: serde_json::Value =
        serde_json::from_str(&plan(&model, PlanFormat::Json, None, &options).unwrap()).unwrap();
    assert_eq!(json["stages"].as_array().map(Vec::len), Some(1));
    // A model whose cut node reads only inputs has nothing to plan before it: the import's line, said so.
    let nonzero = stowage_tests::generated("onnx-node-tests", "gen_node_tests.py").join("test_nonzero_example");
    let e = plan(&nonzero.join("model.onnx"), PlanFormat::Text, None, &options).unwrap_err();
    assert!(e.contains("(NonZero)") && e.ends_with("nothing runs before it to plan)"), "{e}");
}
