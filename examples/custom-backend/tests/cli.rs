//! The simulated backend through its own five-line CLI (`sim-stowage`): `run`, `plan` and `build` with
//! `--target sim,cpu`, outputs equal to `cpu` alone, the ledger equal to the plan, and the registry's errors.

use std::path::{Path, PathBuf};
use std::process::Command;

fn sim_stowage(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sim-stowage")).args(args).output().expect("runs");
    (
        out.status.code().expect("exited"),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// A model of the suite `scripts/test` writes, and its input.
fn model(name: &str) -> (String, String) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/onnx-models").join(name);
    assert!(dir.join("model.onnx").exists(), "{}: run scripts/test (it writes the model suite)", dir.display());
    let s = |p: PathBuf| p.to_string_lossy().into_owned();
    (s(dir.join("model.onnx")), s(dir.join("test_data_set_0/input_0.pb")))
}

fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).expect("report")).expect("JSON")
}

fn floats(path: &Path) -> Vec<f32> {
    let bytes = std::fs::read(path).expect("output");
    // A TensorProto of f32 in raw_data: the values are its last bytes.
    let n = bytes.len() / 4;
    (0..n).map(|i| f32::from_le_bytes(bytes[bytes.len() - 4 * (n - i)..][..4].try_into().expect("4 bytes"))).collect()
}

/// (from -> to, value, bytes) of each copy a run makes (outputs read), sorted.
fn copies(report: &serde_json::Value, key: &str) -> Vec<(String, String, u64)> {
    let mut v: Vec<_> = report[key]
        .as_array()
        .expect("copies")
        .iter()
        .map(|c| {
            let way = format!("{} -> {}", c["from"].as_str().unwrap_or(""), c["to"].as_str().unwrap_or(""));
            (way, c["value"].as_str().unwrap_or("").to_string(), c["bytes"].as_u64().unwrap_or(0))
        })
        .collect();
    v.sort();
    v
}

/// Runs `model` on `target`; returns its output's values and the report.
fn run(model: &(String, String), target: &str, dir: &Path) -> (Vec<f32>, serde_json::Value) {
    run_with(model, target, dir, &[])
}

/// [`run`] with more flags.
fn run_with(model: &(String, String), target: &str, dir: &Path, more: &[&str]) -> (Vec<f32>, serde_json::Value) {
    let out = dir.join(target.replace(',', "_"));
    let report = dir.join(format!("{}.json", target.replace(',', "_")));
    let (code, stdout, stderr) = sim_stowage(
        &[
            &[
                "run",
                &model.0,
                "--target",
                target,
                "--input",
                &model.1,
                "--output-dir",
                &out.to_string_lossy(),
                "--report",
                &report.to_string_lossy(),
            ],
            more,
        ]
        .concat(),
    );
    assert_eq!(code, 0, "{target}: {stdout} {stderr}");
    (floats(&out.join("output_0.pb")), read_json(&report))
}

fn close(a: &[f32], b: &[f32]) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= 1e-4 + 1e-4 * y.abs(), "{x} against {y}");
    }
}

#[test]
fn sim_and_cpu_give_the_outputs_of_cpu_alone_with_the_ledger_the_plan_predicts() {
    let tmp = tempfile::tempdir().expect("temp dir");
    for name in ["mlp", "transformer_block"] {
        let m = model(name);
        let (alone, _) = run(&m, "cpu", tmp.path());
        let (mixed, report) = run(&m, "sim,cpu", tmp.path());
        close(&mixed, &alone);
        let placement = report["placement"].to_string();
        assert!(placement.contains("\"sim\""), "{name}: nothing placed on sim: {placement}");
        assert_eq!(copies(&report, "planned_copies"), copies(&report, "performed_copies"), "{name}");
        assert!(!copies(&report, "performed_copies").is_empty(), "{name}: the sim device is reached by copies");
    }
}

/// The planned and performed copies of `x` to the sim device, on the transformer block with `x` in `layout`: the
/// outputs are those of `cpu` alone, and the ledger is the plan.
fn uploads_of_x(layout: &str) -> (Vec<serde_json::Value>, Vec<serde_json::Value>) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let m = model("transformer_block");
    let (alone, _) = run(&m, "cpu", tmp.path());
    let (mixed, report) = run_with(&m, "sim,cpu", tmp.path(), &["--input-layout", &format!("x={layout}")]);
    close(&mixed, &alone);
    assert_eq!(copies(&report, "planned_copies"), copies(&report, "performed_copies"));
    let to_sim = |key: &str| -> Vec<serde_json::Value> {
        let all = report[key].as_array().expect("copies").iter();
        all.filter(|c| c["value"] == "x" && c["to"] == "sim").cloned().collect()
    };
    (to_sim("planned_copies"), to_sim("performed_copies"))
}

/// Rows padded to 512 bytes, a pitch the device holds (256-byte row pitch alignment), read by its Add: one upload
/// of the caller's bytes as they are (15 rows of 512 bytes and the last row's 256), no packing.
#[test]
fn a_padded_input_the_device_holds_is_uploaded_as_it_is() {
    let (planned, performed) = uploads_of_x("row-pitch=512");
    assert_eq!((planned.len(), performed.len()), (1, 1), "{planned:?} {performed:?}");
    assert_eq!(planned[0]["bytes"], 15 * 512 + 256);
    assert!(
        planned[0]["reason"]
            .as_str()
            .is_some_and(|r| r.ends_with("as it is: the device holds it and its kernels read it")),
        "{planned:?}"
    );
    assert!(performed[0]["reason"].as_str().is_some_and(|r| r.ends_with("uploaded as it is held")), "{performed:?}");
}

/// Rows padded to 320 bytes, a pitch the device does not hold: packed as they are uploaded (`upload_with`), one
/// copy of the packed bytes, where a host relayout and an upload were made before.
#[test]
fn a_padded_input_the_device_does_not_hold_is_packed_as_it_uploads() {
    let (planned, performed) = uploads_of_x("row-pitch=320");
    assert_eq!((planned.len(), performed.len()), (1, 1), "{planned:?} {performed:?}");
    assert_eq!(planned[0]["bytes"], 16 * 64 * 4);
    assert!(
        planned[0]["reason"].as_str().is_some_and(|r| r.contains("packed as it goes (the caller's ")),
        "{planned:?}"
    );
    assert!(performed[0]["reason"].as_str().is_some_and(|r| r.ends_with("packed as it is uploaded")), "{performed:?}");
}

#[test]
fn plan_shows_the_sim_device_and_why_the_rest_falls_back() {
    let (code, out, err) = sim_stowage(&["plan", &model("transformer_block").0, "--target", "sim,cpu"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("sim: memory sim (Device), 256-byte aligned"), "{out}");
    assert!(out.contains("Add_17                Add                sim:"), "{out}");
    assert!(out.contains("(sim: no sim kernel for Softmax)"), "{out}");
    // The descriptor says nothing of staging: the reason does not either.
    assert!(
        out.contains("upload 'x' host -> sim, 4096 bytes, every run: sim is discrete memory: one upload\n"),
        "{out}"
    );
}

#[test]
fn targets_lists_sim_then_the_cpu_and_unknown_targets_name_both() {
    let (code, out, _) = sim_stowage(&["targets"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("sim ") && out.contains("\ncpu "), "{out}");
    let (code, _, err) = sim_stowage(&["run", &model("mlp").0, "--target", "gpu"]);
    assert_eq!(code, 1);
    assert!(err.contains("unknown target 'gpu' (registered backends: sim, cpu"), "{err}");
}

#[test]
fn a_built_executable_runs_the_plan_as_run_does() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let m = model("mlp");
    let exe = tmp.path().join("mlp-sim");
    let (code, out, err) = sim_stowage(&["build", &m.0, "--target", "sim,cpu", "-o", &exe.to_string_lossy()]);
    assert_eq!(code, 0, "{out} {err}");
    // Its crate depends on the driver and on this crate without their CLI features: no clap in the executable.
    let dir =
        out.rsplit_once("(crate: ").and_then(|(_, d)| d.trim_end().strip_suffix(')')).expect("the crate's folder");
    let manifest = std::fs::read_to_string(Path::new(dir).join("Cargo.toml")).expect("the crate's manifest");
    assert!(manifest.contains("stowage-example-sim = { path = ") && !manifest.contains("\"cli\""), "{manifest}");
    assert!(manifest.matches("default-features = false").count() == 3, "driver, sim and cpu: {manifest}");
    let report = tmp.path().join("built.json");
    let outputs = tmp.path().join("built");
    let status = Command::new(&exe)
        .args(["--input", &m.1, "--output-dir", &outputs.to_string_lossy(), "--report", &report.to_string_lossy()])
        .output()
        .expect("the executable runs");
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    let (ran, ran_report) = run(&m, "sim,cpu", tmp.path());
    assert_eq!(floats(&outputs.join("output_0.pb")), ran, "the same kernels on the same input");
    let built = read_json(&report);
    assert_eq!(copies(&built, "performed_copies"), copies(&ran_report, "performed_copies"));
}
