//! The run-time-shape suite (`scripts/onnx/run_time_models.py`): models in which a node needs a value computed from
//! the inputs (`NonZero`, `Compress`, `NonMaxSuppression`, `Unique`, a `TopK` whose K and a `Loop` whose trip count
//! are counted from the data, an `If` whose branches differ in shape), compiled in stages
//! (`compiler/driver/src/stages.rs`). Each must match onnxruntime on `cpu` and `opencl,cpu`, be compiled in stages
//! (not folded whole), keep one version of each part over repeated runs, and report every part's planned copies.

#[allow(dead_code)] // the builder serves several suites; each uses part of it
#[path = "../../compiler/tests/common/build.rs"]
mod build;

use std::path::{Path, PathBuf};

use stowage_cli::session::{self, Outcome, RunOptions};
use stowage_compiler::onnx;
use stowage_compiler::onnx::structure::Structure;
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
        18,
    );
}

#[test]
fn every_run_time_model_matches_onnxruntime_on_opencl_and_cpu() {
    stowage_tests::suites::check(
        "every_run_time_model_matches_onnxruntime_on_opencl_and_cpu",
        "run-time-models",
        "run_time_models.py",
        "opencl,cpu",
        18,
    );
}

#[test]
fn each_model_is_compiled_in_stages_and_each_part_once_over_repeated_runs() {
    for name in names() {
        let outcome = run(&name, "cpu", 3, None).unwrap_or_else(|e| panic!("{name}: {e}"));
        if name == "if_in_loop" || name == "loop_in_loop" || name == "scan_long" {
            // Its Loop unrolls and the CPU runs each iteration's If with its branches as subgraphs, or each
            // iteration's inner Loop with its body, or the long Scan with its body: no cut.
            assert!(outcome.cuts.is_empty(), "{name}: {:?}", outcome.cuts);
            if name == "if_in_loop" {
                // The state's sum passes 10 before the second and the fifth iterations: the report says which
                // branch each If took in the three runs.
                let took: Vec<bool> = outcome
                    .branches
                    .iter()
                    .map(|l| l.ends_with("then branch 3 times, the else branch never"))
                    .collect();
                assert_eq!(took, [false, true, false, false, true, false], "{:?}", outcome.branches);
            }
            continue;
        }
        if name == "if_guarded_gather" || name == "if_nested_guard" {
            // On the CPU alone a top-level If is kept whole, not cut at (`onnx/branch.rs`, rule 2): its branches
            // agree, and a branch not taken, which would read out of range, never runs, at any depth.
            assert!(outcome.cuts.is_empty(), "{name}: {:?}", outcome.cuts);
            let expected: &[&str] = if name == "if_guarded_gather" {
                &["node 'guard' (If): the then branch never, the else branch 3 times"]
            } else {
                &[
                    "node 'outer' (If): the then branch 3 times, the else branch never",
                    "node 'inner' (If): the then branch never, the else branch 3 times",
                ]
            };
            assert_eq!(outcome.branches, expected, "{name}");
            continue;
        }
        // One cut each; the loop after a Relu is cut at, then iterated: two lines.
        let lines = if name == "loop_rows" { 2 } else { 1 };
        assert_eq!(outcome.cuts.len(), lines, "{name}: {:?}", outcome.cuts);
        let line = &outcome.cuts[lines - 1];
        if name == "loop_rows" {
            // Its iteration number sets the body's slice: one version per iteration, each kept.
            assert!(line.ends_with("4 iterations in the last run, 4 versions of its body compiled"), "{line}");
        } else if line.contains("(Loop) is iterated at run time") {
            assert!(line.ends_with(", 1 version of its body compiled"), "{name}: {line}");
        } else {
            // A cut at an If counts the branch each run took (the data takes the same one three times), and
            // compiles both branches for these inputs (stages.rs rule 7), each planning no copy on the CPU.
            let (line, branches) = line.split_once("; the then branch ").unwrap_or((line, ""));
            assert_eq!(line.contains("(If)"), !branches.is_empty(), "{name}: {line}");
            let versions = if branches.is_empty() { "(1 version of the node, " } else { "(2 versions of the node, " };
            assert!(line.contains(versions), "{name}: {line}");
            if !branches.is_empty() {
                let once = [
                    "3 times, no copy planned; the else branch never, no copy planned",
                    "never, no copy planned; the else branch 3 times, no copy planned",
                ];
                assert!(once.contains(&branches), "{name}: {branches}");
            }
            assert!(line.ends_with(", 1 of the rest)") || line.ends_with(", none of the rest)"), "{name}: {line}");
        }
        // (A model that is one Loop has one part: its body.)
        let alone = line.contains("(Loop) is iterated");
        assert!(alone || !outcome.later_plans.is_empty(), "{name}: the parts after the first have no plans");
    }
}

#[test]
fn the_report_lists_every_parts_planned_copies_and_the_ledger_agrees() {
    // On OpenCL with staging through host memory, each part uploads what it reads and downloads what it makes:
    // every copy the ledger records over the run is one some part's plan has.
    // Outputs not read (as `stowage run` without --output-dir): the values later parts read are still planned.
    let options = RunOptions { target: "opencl:discrete".into(), read_outputs: false, ..stowage_cli::run_options() };
    let dir = suite().join("compress_then_dense");
    let x = onnx::read_tensor(dir.join("test_data_set_0").join("input_0.pb")).unwrap();
    let outcome = session::run(&dir.join("model.onnx"), vec![("x".into(), x)], &options).unwrap();
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
fn an_if_cut_plans_both_branches_and_only_the_one_taken_copies() {
    // stages.rs rule 7: the first run compiles the else branch too, for the same inputs; on OpenCL each branch's
    // part uploads what it reads and downloads what it makes, and only the branch taken adds to the ledger.
    let options = RunOptions { target: "opencl:discrete".into(), read_outputs: false, ..stowage_cli::run_options() };
    let dir = suite().join("if_shapes_differ");
    let x = onnx::read_tensor(dir.join("test_data_set_0").join("input_0.pb")).unwrap();
    let outcome = session::run(&dir.join("model.onnx"), vec![("x".into(), x)], &options).unwrap();
    let line = &outcome.cuts[0];
    assert!(line.contains("(2 versions of the node, 1 of the rest)"), "{line}");
    assert!(
        line.ends_with("; the then branch once, 2 copies planned; the else branch never, 2 copies planned"),
        "{line}"
    );
    let report = stowage_cli::run::report("opencl:discrete", &outcome);
    let planned = report["planned_copies"].as_array().unwrap();
    let performed = report["performed_copies"].as_array().unwrap();
    // Each part that ran uploads x every run (the first part, the branch taken): two uploads, not a third.
    let uploads = |c: &&serde_json::Value| c["kind"] == "upload";
    let every_run = planned.iter().filter(|c| c["when"] == "every run").count();
    assert_eq!((every_run, performed.iter().filter(uploads).count()), (2, 2), "{planned:?}, {performed:?}");
}

#[test]
fn a_branch_that_does_not_compile_for_the_inputs_never_fails_the_run() {
    // The else branch reshapes six elements to [4, 2]: wrong for these inputs, as a guard's branch not taken may
    // be. The run takes the then branch; the line says the else branch was not compiled, and why.
    use build::{graph_attr, int, int64s, model, node, value};
    use stowage_compiler::onnx::proto::GraphProto;
    let branch = |name: &str, nodes, out: &str, dims: &[i64], inits| GraphProto {
        name: Some(name.into()),
        node: nodes,
        output: vec![value(out, dims)],
        initializer: inits,
        ..Default::default()
    };
    let then = branch("then", vec![node("Relu", &["x"], &["a"], vec![])], "a", &[6], vec![]);
    let other = branch(
        "else",
        vec![node("Reshape", &["x", "to"], &["b"], vec![])],
        "b",
        &[4, 2],
        vec![int64s("to", &[2], &[4, 2])],
    );
    let mut pick = node("If", &["c"], &["y"], vec![graph_attr("then_branch", then), graph_attr("else_branch", other)]);
    pick.name = Some("pick".into());
    let nodes = vec![
        node("ReduceSum", &["x"], &["s"], vec![int("keepdims", 0)]),
        node("Greater", &["s", "zero"], &["c"], vec![]),
        pick,
    ];
    let m = model(17, nodes, vec![value("x", &[6])], vec![value("y", &[6])], vec![build::floats("zero", &[], &[0.0])]);
    let x = Tensor::from_vec(&[6], vec![1f32, -2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    let options = RunOptions { target: "cpu".into(), ..stowage_cli::run_options() };
    let outcome = session::run_bytes(
        &build::bytes(&m),
        Path::new("guard.onnx"),
        vec![("x".into(), x)],
        &options,
        std::time::Instant::now(),
    )
    .unwrap();
    assert_eq!(outcome.outputs[0].1.to_vec::<f32>().unwrap(), [1.0, 0.0, 3.0, 4.0, 5.0, 6.0]);
    let line = &outcome.cuts[0];
    assert!(line.contains("(1 version of the node, "), "{line}");
    let (_, words) = line
        .split_once("; the then branch once, no copy planned; the else branch never, not compiled for these inputs (")
        .expect(line);
    assert!(words.contains("Reshape") && !words.contains('\n'), "{line}");
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

#[test]
fn a_loop_iterated_at_run_time_keeps_its_state_on_the_device_no_copy_per_iteration() {
    // 4,500 iterations (more than stowage unrolls) on discrete OpenCL: the state is uploaded once and the result
    // downloaded once when read; every iteration reads the state where the last one left it.
    let outcome = run("loop_long", "opencl:discrete", 1, None).unwrap();
    assert!(outcome.cuts[0].contains("4500 iterations"), "{:?}", outcome.cuts);
    let t = &outcome.outputs[0].1;
    t.to_vec::<f32>().unwrap();
    let copies = outcome.ledger.entries();
    let kinds: Vec<String> = copies.iter().map(|m| format!("{} {}", m.kind, m.value)).collect();
    assert_eq!(kinds.len(), 2, "{kinds:?}");
    // A loop whose body computes its condition reads it once per iteration: one byte down each time.
    let outcome = run("loop_until", "opencl:discrete", 1, None).unwrap();
    let downloads = outcome.ledger.entries().iter().filter(|m| m.bytes == 1).count();
    assert_eq!(downloads, 8, "{:?}", outcome.cuts);
}

#[test]
fn a_staged_model_refuses_state_and_input_device_naming_the_node() {
    let dir = suite().join("compress_then_dense");
    let x = onnx::read_tensor(dir.join("test_data_set_0").join("input_0.pb")).unwrap();
    let mut options = stowage_cli::run_options();
    options.planning.input_devices = vec![("x".into(), "opencl".into())];
    options.target = "opencl".into();
    let e = session::run(&dir.join("model.onnx"), vec![("x".into(), x)], &options).err().expect("refused").to_string();
    assert!(e.contains("node 'keep_rows' (Compress)") && e.contains("--input-device are not taken"), "{e}");
}

#[test]
fn an_iterated_loop_takes_its_input_fixed_by_input_value() {
    // The carried value's start fixed by --input-value: the loop is still iterated (its body computes its
    // condition), the body compiled without the caller's fixed inputs, and the result is the reference's.
    let dir = suite().join("loop_until");
    let data = dir.join("test_data_set_0");
    let mut options = stowage_cli::run_options();
    options.config.input_values.insert("x".into(), onnx::read_tensor(data.join("input_0.pb")).unwrap());
    let outcome = session::run(&dir.join("model.onnx"), Vec::new(), &options).unwrap();
    assert!(outcome.cuts[0].contains("8 iterations"), "{:?}", outcome.cuts);
    let want = onnx::read_tensor(data.join("output_1.pb")).unwrap();
    stowage_tests::compare(&outcome.outputs[1].1, &want, 1e-5, 1e-6).unwrap();
}

#[test]
fn a_sequence_whose_length_comes_from_the_data_crosses_the_cut() {
    // Chunks as long as the positive entries are many, plus one: three chunks of 4, twelve of 1, one of 12. The
    // sequence the node part makes is read by the part after it (its length and the items joined back) and is a
    // model output, written whole.
    let model = suite().join("seq_chunks").join("model.onnx");
    for (positives, items) in [(3, 3), (0, 12), (11, 1)] {
        let x: Vec<f32> = (0..12).map(|i| if i < positives { 1.0 + i as f32 } else { -1.0 - i as f32 }).collect();
        let input = Tensor::from_vec(&[12], x.clone()).unwrap();
        let outcome = session::run(&model, vec![("x".into(), input)], &stowage_cli::run_options()).unwrap();
        let values = outcome.values().unwrap();
        let Structure::Sequence { items: chunks, .. } = &values[0].1 else { panic!("{:?}", values[0]) };
        assert_eq!(chunks.len(), items, "{positives} positive entries");
        let joined: Vec<f32> = chunks.iter().flat_map(|t| t.to_vec::<f32>().unwrap()).collect();
        assert_eq!(joined, x);
        let Structure::Tensor(n) = &values[1].1 else { panic!("{:?}", values[1]) };
        assert_eq!(n.to_vec::<i64>().unwrap(), vec![items as i64]);
        let Structure::Tensor(y) = &values[2].1 else { panic!("{:?}", values[2]) };
        assert_eq!(y.to_vec::<f32>().unwrap(), x.iter().map(|v| v * 2.0).collect::<Vec<_>>());
    }
}
