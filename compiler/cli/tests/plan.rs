//! `stowage plan`: the text form is stable (an insta snapshot), JSON carries the report's planning keys, dot and
//! SVG draw copies in red; bad targets, layouts and states fail at plan time with one line naming what is wrong.

mod common;

use common::{case, example, fails, frame_file, mlp, model, s, stowage};

fn plan(args: &[&str]) -> String {
    let (code, out, err) = stowage(&[&["plan"], args].concat());
    assert_eq!(code, 0, "{args:?}: {err}");
    out
}

#[test]
fn the_text_plan_of_the_mlp_on_cpu_is_stable() {
    insta::assert_snapshot!(plan(&[&mlp(), "--target", "cpu"]));
}

/// A node OpenCL has no kernel for goes to the CPU, and the plan says why in words about the op: an LSTM the CPU
/// runs whole (here one whose first output is unused) is not "a node without its first output" to OpenCL.
#[test]
fn a_node_placed_on_the_cpu_says_why_opencl_refused_it() {
    let out = plan(&[&model(&case("test_lstm_defaults")), "--target", "opencl,cpu"]);
    let line = out.lines().find(|l| l.trim_start().starts_with("LSTM_0 ")).unwrap_or_else(|| panic!("{out}"));
    assert!(line.contains("cpu: the first target with a kernel for it"), "{line}");
    assert!(line.contains("opencl: no kernel (LSTM runs whole on the CPU only"), "{line}");
}

#[test]
fn json_lists_placements_copies_and_peaks() {
    let out = plan(&[&mlp(), "--target", "opencl:discrete", "--format", "json"]);
    let j: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(j["target"], "opencl:discrete");
    let copies = j["planned_copies"].as_array().expect("copies");
    assert!(copies.iter().any(|c| c["kind"] == "upload" && c["value"] == "x" && c["per_run"] == true), "{j}");
    assert!(copies.iter().any(|c| c["kind"] == "download" && c["when"] == "when read"), "{j}");
    assert!(
        j["peak_bytes"]["opencl:0"].as_u64().expect("peak")
            >= j["peak_lower_bound_bytes"]["opencl:0"].as_u64().expect("bound")
    );
    let placement = j["placement"].as_array().expect("placement");
    assert!(!placement.is_empty() && placement.iter().all(|p| p["target"] == "opencl:discrete"), "{j}");
}

#[test]
fn dot_and_svg_draw_copies_in_red() {
    let dot = plan(&[&mlp(), "--target", "opencl:discrete", "--format", "dot"]);
    assert!(dot.starts_with("digraph plan {"), "{dot}");
    assert!(dot.contains("color=red") && dot.contains("upload 3136 bytes"), "{dot}");
    let svg = plan(&[&mlp(), "--target", "opencl:discrete", "--format", "svg"]);
    assert!(svg.contains("<svg") && svg.contains("upload 3136 bytes"), "{}", &svg[..svg.len().min(400)]);
    // On the CPU nothing moves: no red edge.
    assert!(!plan(&[&mlp(), "--format", "dot"]).contains("color=red"));
}

#[test]
fn a_plan_written_to_a_file_is_whole_or_absent() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let out = tmp.path().join("plan.txt");
    let (code, stdout, err) = stowage(&["plan", &mlp(), "-o", &s(&out)]);
    assert_eq!((code, stdout.as_str()), (0, ""), "{err}");
    assert!(std::fs::read_to_string(&out).expect("written").starts_with("plan 'mlp' for cpu"));
    let missing = tmp.path().join("no/such/dir/plan.txt");
    let err = fails(&["plan", &mlp(), "-o", &s(&missing)]);
    assert!(err.contains("plan.txt"), "{err}");
    assert_eq!(std::fs::read_dir(tmp.path()).expect("dir").count(), 1, "nothing else left behind");
}

#[test]
fn bad_plans_fail_before_running_naming_what_is_wrong() {
    // The example's product in f64 has no OpenCL kernel.
    let mixed = example("mixed");
    let err = fails(&["plan", &mixed, "--target", "opencl"]);
    assert!(err.contains("node 'dense_f64' (MatMul): no target can run it (opencl: no kernel"), "{err}");
    // With the CPU after it in the list, it falls back.
    let text = plan(&[&mixed, "--target", "opencl,cpu"]);
    assert!(text.contains("dense_f64") && text.contains("cpu: the first target with a kernel for it"), "{text}");
    let err = fails(&["plan", &mlp(), "--target", "opencl,tpu"]);
    assert!(err.contains("unknown target 'tpu'"), "{err}");
    let err = fails(&["plan", &mlp(), "--input-layout", "x=nhwc"]);
    assert!(err.contains("--input-layout x=nhwc") && err.contains("names 4 axes, the input has 2"), "{err}");
    let err = fails(&["plan", &mlp(), "--input-layout", "frame=row-major"]);
    assert!(err.contains("no run-time input 'frame'"), "{err}");
    let err = fails(&["plan", &mlp(), "--input-layout", "x=diagonal"]);
    assert!(err.contains("unknown layout word 'diagonal'"), "{err}");
    let err = fails(&["plan", &mlp(), "--state", "logits=x"]);
    assert!(err.contains("--state logits=x") && err.contains("f32[1, 10]"), "{err}");
    let err = fails(&["plan", &mlp(), "--target", "opencl:discrete", "--max-copies", "1"]);
    assert!(err.contains("over the budget of 1 copies") && err.contains("download 'logits'"), "{err}");
    let (code, _, err) = stowage(&["plan", &mlp(), "--format", "pdf"]);
    assert_eq!(code, 2, "a usage error: {err}");
}

#[test]
fn a_caller_layout_is_read_in_place_where_the_kernel_takes_it_and_relaid_once_where_not() {
    // A 2-D product reads a column-major operand through its strides.
    let matmul = model(&case("test_matmul_2d"));
    let text = plan(&[&matmul, "--input-layout", "a=column-major"]);
    assert!(text.contains("a: column-major, 64-byte aligned; host reads it in place"), "{text}");
    assert!(text.contains("copies: 0 per run"), "{text}");
    // Softmax reads packed rows only: one relayout per run, with its reason.
    let softmax = model(&case("test_softmax_axis_0"));
    let text = plan(&[&softmax, "--input-layout", "x=column-major"]);
    assert!(text.contains("relayout 'x' host -> host, 240 bytes, every run: the caller's column-major"), "{text}");
    // A layout that changes nothing (column-major of a [1, N] row) is the packed one: no copy.
    let text = plan(&[&mlp(), "--input-layout", "x=column-major"]);
    assert!(text.contains("x: row-major") && text.contains("copies: 0 per run"), "{text}");
}

#[test]
fn run_reports_the_plan_beside_the_ledger_with_a_caller_layout_and_a_budget() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let frame = frame_file(tmp.path());
    let report = tmp.path().join("r.json");
    let json = |p: &std::path::Path| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(p).expect("report")).expect("json")
    };
    // The camera frame with padded rows, on the CPU: read in place, nothing planned, nothing performed.
    let layout = ["--input-layout", "frame=nhwc,row-pitch=2048"];
    let (camera, report_arg) = (example("camera"), s(&report));
    let args = [&["run", &camera, "--input", &frame, "--report", &report_arg], &layout[..]].concat();
    let (code, _, err) = stowage(&args);
    assert_eq!(code, 0, "{err}");
    let r = json(&report);
    assert_eq!(r["planned_copies"], serde_json::json!([]), "{r}");
    assert_eq!(r["performed_copies"], serde_json::json!([]), "{r}");
    // On a discrete device, twice: one upload of the frame per run, planned and performed.
    let args = [&args[..], &["--target", "opencl:discrete", "--repeat", "2"]].concat();
    let (code, _, err) = stowage(&args);
    assert_eq!(code, 0, "{err}");
    let r = json(&report);
    let planned = r["planned_copies"].as_array().expect("planned");
    assert_eq!(planned.len(), 1, "{r}");
    assert_eq!((planned[0]["value"].as_str(), planned[0]["bytes"].as_u64()), (Some("frame"), Some(921_600)));
    let performed = r["performed_copies"].as_array().expect("performed");
    assert_eq!(performed.iter().filter(|c| c["value"] == "frame").count(), 2, "{r}");
    // A budget the plan does not fit fails before running, naming the copy.
    let err = fails(&[&args[..], &["--max-copy-bytes", "1000"]].concat());
    assert!(err.contains("over the budget of 1000 bytes") && err.contains("upload 'frame'"), "{err}");
}

#[test]
fn an_input_that_lives_on_the_device_is_planned_and_run_with_no_copy_per_run() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let frame = frame_file(tmp.path());
    let report = tmp.path().join("r.json");
    let json = |p: &std::path::Path| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(p).expect("report")).expect("json")
    };
    let camera = example("camera");
    // The plan says where it lives and plans nothing for it, on the picture too.
    let text = plan(&[&camera, "--target", "opencl:discrete", "--input-device", "frame=opencl:0"]);
    assert!(
        text.contains("frame: row-major, 4096-byte aligned on opencl:0 (--input-device); opencl:0 reads it in place")
    );
    assert!(!text.contains("'frame'"), "{text}");
    let dot = plan(&[&camera, "--target", "opencl", "--input-device", "frame=opencl", "--format", "dot"]);
    assert!(dot.contains("label=\"frame\\non opencl:0\", shape=ellipse, fillcolor=lightblue"), "{dot}");
    // `stowage run` puts the file's frame there once, before three runs that move nothing but the output read.
    let report_arg = s(&report);
    let base = ["run", &camera, "--input", &frame, "--report", &report_arg, "--repeat", "3"];
    for target in ["opencl", "opencl:discrete"] {
        let args = [&base[..], &["--target", target, "--input-device", "frame=opencl:0"]].concat();
        let (code, _, err) = stowage(&args);
        assert_eq!(code, 0, "{err}");
        let r = json(&report);
        let frame_moves = |key: &str| r[key].as_array().expect(key).iter().filter(|c| c["value"] == "frame").count();
        assert_eq!(frame_moves("planned_copies"), 0, "{r}");
        assert_eq!(frame_moves("performed_copies"), 0, "{r}");
        assert_eq!(frame_moves("placed_inputs"), 1, "{r}");
        // Padded rows where it lives: one relayout on the device per run, planned and performed.
        let padded = [&args[..], &["--input-layout", "frame=nhwc,row-pitch=2048"]].concat();
        let (code, _, err) = stowage(&padded);
        assert_eq!(code, 0, "{err}");
        let r = json(&report);
        let relaid = |key: &str| {
            let all = r[key].as_array().expect(key).iter();
            all.filter(|c| c["value"] == "frame" && c["from"] == "opencl:0" && c["to"] == "opencl:0").count()
        };
        assert_eq!((relaid("planned_copies"), relaid("performed_copies")), (1, 3), "{r}");
    }
    // Read on the host, it is one download per run, planned and performed, unified or not.
    let mixed = example("mixed");
    let input = common::target_dir().join("planning-examples/mixed_input.pb");
    for target in ["cpu,opencl", "cpu,opencl:discrete"] {
        let args = ["run", &mixed, "--input", &s(&input), "--report", &report_arg, "--repeat", "3", "--target", target];
        let (code, _, err) = stowage(&[&args[..], &["--input-device", "x=opencl:0"]].concat());
        assert_eq!(code, 0, "{err}");
        let r = json(&report);
        let kinds = |key: &str| -> Vec<String> {
            r[key].as_array().expect(key).iter().map(|c| format!("{} {}", c["kind"], c["value"])).collect()
        };
        assert_eq!(kinds("planned_copies"), vec!["\"download\" \"x\""], "{r}");
        assert_eq!(kinds("performed_copies"), vec!["\"download\" \"x\""; 3], "{r}");
    }
    // Names that are not there are errors naming them.
    let err = fails(&[&base[..], &["--target", "opencl", "--input-device", "frame=opencl:3"]].concat());
    assert!(err.contains("--input-device frame=opencl:3: 'opencl:3' is none of the targets (opencl)"), "{err}");
    let err = fails(&[&base[..], &["--target", "opencl", "--input-device", "image=opencl"]].concat());
    assert!(err.contains("--input-device image=opencl:0: the model has no run-time input 'image'"), "{err}");
    let err = fails(&[&base[..], &["--target", "opencl,cpu", "--input-device", "frame=cpu"]].concat());
    assert!(err.contains("--input-device frame=cpu: 'cpu' is host memory"), "{err}");
}

#[test]
fn a_precision_is_asked_per_target_shown_in_the_plan_and_reported() {
    // PoCL has no tensor cores and the CPU no TF32 arithmetic: both fall back to fp32, and say so.
    let text = plan(&[&mlp(), "--target", "opencl,cpu", "--precision", "tf32"]);
    assert!(
        text.contains("    precision: tf32 asked, fp32 computed (") && text.contains("has no tensor cores"),
        "{text}"
    );
    assert!(text.contains("fp32 computed (the CPU has no TF32 arithmetic: products in fp32)"), "{text}");
    // Per target, by name: the CPU keeps the default, which is not shown.
    let text = plan(&[&mlp(), "--target", "opencl,cpu", "--precision", "opencl=tf32"]);
    assert_eq!(text.matches("precision:").count(), 1, "{text}");
    let out = plan(&[&mlp(), "--target", "cpu", "--precision", "tf32", "--format", "json"]);
    let j: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(j["precision"][0]["asked"], "tf32", "{j}");
    assert_eq!(j["precision"][0]["computed"], "fp32", "{j}");
    // What cannot be done is refused, naming the target and what it lacks; unknown targets and words too.
    let err = fails(&["plan", &mlp(), "--precision", "fp16"]);
    assert!(err.contains("--precision cpu=fp16: target cpu cannot compute in fp16: its kernels store fp32"), "{err}");
    // fp16 and bf16 store the plan's values: asked of one target beside an fp32 one, refused naming both.
    let err = fails(&["plan", &mlp(), "--target", "opencl,cpu", "--precision", "opencl=bf16"]);
    assert!(
        err.contains(
            "--precision opencl=bf16: fp16 and bf16 store the plan's values, so every target must compute in the same \
             one: opencl computes in bf16, cpu in fp32 (cpu cannot store bf16 (its kernels store fp32, not bf16): leave \
             it out of --target)"
        ),
        "{err}"
    );
    // On OpenCL alone, an fp16 plan stores every value in f16 between one cast in and one cast out.
    let text = plan(&[&mlp(), "--target", "opencl", "--precision", "fp16"]);
    assert!(text.contains("    precision: fp16 (values stored in fp16"), "{text}");
    assert!(text.contains("x.to_fp16") && text.contains("logits.to_f32"), "{text}");
    let err = fails(&["plan", &mlp(), "--precision", "opencl=tf32"]);
    assert!(err.contains("--precision opencl=tf32: 'opencl' is none of the targets (cpu)"), "{err}");
    let (code, _, err) = stowage(&["plan", &mlp(), "--precision", "fp64"]);
    assert!(
        code != 0 && err.contains("--precision fp64: 'fp64' is no precision (one of fp32, tf32, fp16, bf16)"),
        "{err}"
    );
    // A run reports what each target computed.
    let tmp = tempfile::tempdir().expect("temp dir");
    let report = tmp.path().join("r.json");
    let input = mlp().replace("model.onnx", "test_data_set_0/input_0.pb");
    let args = ["run", &mlp(), "--input", &input, "--precision", "tf32", "--report", &s(&report)];
    let (code, _, err) = stowage(&args);
    assert_eq!(code, 0, "{err}");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).expect("report")).expect("json");
    assert_eq!(r["precision"][0]["target"], "cpu", "{r}");
    assert_eq!(
        (r["precision"][0]["asked"].as_str(), r["precision"][0]["computed"].as_str()),
        (Some("tf32"), Some("fp32"))
    );
}
