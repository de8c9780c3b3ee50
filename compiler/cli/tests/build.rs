//! `stowage build`: the executable it makes gives `stowage run`'s outputs, copies and report over the whole model
//! suite and the planner's examples; its generated source is stable (insta snapshots); a model that cannot be
//! planned fails at build time, and an executable given a wrong input exits 1 naming it; nothing half-written is
//! left at the output path; built code runs the plan written at build time, and refuses inputs in another layout
//! and targets of another memory path.

mod common;

use std::path::{Path, PathBuf};

use common::{example, exec, fails, frame_file, mlp, s, stowage, target_dir};
use stowage_cli::session::{Planning, RunOptions};

/// Builds `model` into `exe` with `flags`, expecting success; returns the crate `stowage build` wrote.
fn build(model: &str, exe: &Path, flags: &[&str]) -> PathBuf {
    let (code, out, err) = stowage(&[&["build", model, "-o", &s(exe)], flags].concat());
    assert_eq!(code, 0, "building {model} {flags:?}: {out}\n{err}");
    assert!(exe.exists(), "{}", exe.display());
    let dir = out.rsplit("(crate: ").next().and_then(|r| r.trim().strip_suffix(')')).expect("names its crate");
    PathBuf::from(dir)
}

fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .expect("the report is JSON")
}

/// Runs `model` through the built `exe` and through `stowage run` with the same inputs and run flags, and compares
/// outputs byte for byte and the reports' copies and peaks.
fn compare(model: &str, exe: &Path, inputs: &[String], plan_flags: &[&str], run_flags: &[&str]) -> Result<(), String> {
    let tmp = tempfile::tempdir().expect("temp dir");
    let (a, b) = (tmp.path().join("built"), tmp.path().join("run"));
    let mut args: Vec<String> = inputs.iter().map(|i| format!("--input={i}")).collect();
    args.extend(run_flags.iter().map(|f| f.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (dir_a, report_a, dir_b, report_b) = (s(&a), s(&a.join("report.json")), s(&b), s(&b.join("report.json")));
    let out_a = [&args[..], &["--output-dir", &dir_a, "--report", &report_a]].concat();
    let (code, out, err) = exec(exe, &out_a);
    if code != 0 {
        return Err(format!("the executable exited {code}: {out} {err}"));
    }
    let out_b = [&["run", model], &args[..], plan_flags, &["--output-dir", &dir_b, "--report", &report_b]].concat();
    let (code, out, err) = stowage(&out_b);
    if code != 0 {
        return Err(format!("stowage run exited {code}: {out} {err}"));
    }
    let mut k = 0;
    while b.join(format!("output_{k}.pb")).exists() {
        let name = format!("output_{k}.pb");
        if std::fs::read(a.join(&name)).ok() != std::fs::read(b.join(&name)).ok() {
            return Err(format!("{name} differs"));
        }
        k += 1;
    }
    if k == 0 {
        return Err("no outputs".into());
    }
    let (ra, rb) = (read_json(&a.join("report.json")), read_json(&b.join("report.json")));
    let keys = ["target", "planned_copies", "performed_copies", "bytes_moved", "peak_bytes", "peak_lower_bound_bytes"];
    for key in keys.into_iter().chain(["precision"]) {
        if ra[key] != rb[key] {
            return Err(format!("report key {key}: built {} but run {}", ra[key], rb[key]));
        }
    }
    Ok(())
}

/// The `input_N.pb` files of a model suite folder, in order.
fn suite_inputs(dir: &Path) -> Vec<String> {
    let mut k = 0;
    let mut out = Vec::new();
    while dir.join(format!("test_data_set_0/input_{k}.pb")).exists() {
        out.push(s(&dir.join(format!("test_data_set_0/input_{k}.pb"))));
        k += 1;
    }
    out
}

#[test]
fn built_executables_match_stowage_run_over_the_model_suite() {
    let root = target_dir().join("onnx-models");
    let mut dirs: Vec<PathBuf> = Vec::new();
    for group in ["light", "random"] {
        let mut found: Vec<PathBuf> = std::fs::read_dir(root.join(group))
            .unwrap_or_else(|e| panic!("{}/{group}: {e}: run scripts/test (it writes the model suite)", root.display()))
            .map(|e| e.expect("entry").path())
            .collect();
        found.sort();
        dirs.extend(found);
    }
    dirs.extend([root.join("mlp"), root.join("transformer_block")]);
    assert!(dirs.len() >= 12, "{dirs:?}");
    let mut failures = Vec::new();
    for dir in &dirs {
        let tmp = tempfile::tempdir().expect("temp dir");
        let exe = tmp.path().join("model");
        let model = s(&dir.join("model.onnx"));
        let crate_dir = build(&model, &exe, &[]);
        if let Err(e) = compare(&model, &exe, &suite_inputs(dir), &[], &[]) {
            failures.push(format!("{}: {e}", dir.display()));
        }
        // Each crate holds its model's constants: the suite's would fill a small disk.
        std::fs::remove_dir_all(&crate_dir).unwrap_or_else(|e| panic!("{}: {e}", crate_dir.display()));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn built_executables_make_the_planned_copies_on_opencl() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let frame = frame_file(tmp.path());
    let layout = ["--input-layout", "frame=nhwc,row-pitch=2048"];
    for target in ["cpu", "opencl", "opencl:discrete"] {
        let exe = tmp.path().join(format!("camera-{}", target.replace(':', "-")));
        build(&example("camera"), &exe, &[&["--target", target], &layout[..]].concat());
        let flags = [&["--target", target], &layout[..]].concat();
        compare(&example("camera"), &exe, std::slice::from_ref(&frame), &flags, &["--repeat", "2"])
            .unwrap_or_else(|e| panic!("camera on {target}: {e}"));
        // Built on PoCL, the `opencl` executable also carries the staging plan, and says which one it took.
        let report = tmp.path().join("report.json");
        let (code, _, err) = exec(&exe, &["--input", &frame, "--report", &s(&report)]);
        assert_eq!(code, 0, "{err}");
        let path = read_json(&report)["built_path"].clone();
        let want = match target {
            "cpu" => "host memory only",
            "opencl" => "opencl:0: unified memory, inputs imported in place",
            _ => "opencl:0: discrete memory, inputs uploaded through pinned staging",
        };
        assert_eq!(path, want, "camera on {target}");
    }
    // The f64 product on the CPU between OpenCL steps: the transfers around it, as `stowage run` makes them; built
    // at tf32, which the executable asks of the targets it opens again (PoCL and the CPU: fp32, shown). Asked of
    // `opencl` alone, and with the input placed on `opencl`, the staging plan built beside the unified one asks
    // and places them on `opencl:discrete`.
    let input = s(&target_dir().join("planning-examples/mixed_input.pb"));
    let cases = [
        ("opencl,cpu", &["--precision", "opencl=tf32", "--input-device", "x=opencl"][..], "fp32"),
        ("opencl:discrete,cpu", &["--precision", "tf32"][..], "tf32"),
    ];
    for (target, asked, cpu) in cases {
        let exe = tmp.path().join(format!("mixed-{}", target.replace([':', ','], "-")));
        let flags: Vec<&str> = ["--target", target].into_iter().chain(asked.iter().copied()).collect();
        build(&example("mixed"), &exe, &flags);
        compare(&example("mixed"), &exe, std::slice::from_ref(&input), &flags, &["--repeat", "3"])
            .unwrap_or_else(|e| panic!("mixed on {target}: {e}"));
        let report = tmp.path().join("report.json");
        let (code, _, err) = exec(&exe, &["--input", &input, "--report", &s(&report)]);
        assert_eq!(code, 0, "{err}");
        let precision = read_json(&report)["precision"].clone();
        let words: Vec<(&str, &str)> = (0..2)
            .map(|t| (precision[t]["asked"].as_str().unwrap_or("?"), precision[t]["computed"].as_str().unwrap_or("?")))
            .collect();
        assert_eq!(words, [("tf32", "fp32"), (cpu, "fp32")], "mixed on {target}: {precision}");
    }
}

/// The generated `main.rs` for `model` with `options`.
fn source(model: &str, target: &str, layouts: &[(&str, &str)]) -> String {
    let options = RunOptions {
        target: target.into(),
        planning: Planning {
            input_layouts: layouts.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect(),
            ..Planning::default()
        },
        ..stowage_cli::run_options()
    };
    stowage_cli::build::generate(Path::new(model), &options).expect("generates").main_rs
}

#[test]
fn generated_source_is_stable() {
    insta::assert_snapshot!("mlp_cpu", source(&mlp(), "cpu", &[]));
    let frame = [("frame", "nhwc,row-pitch=2048")];
    insta::assert_snapshot!("camera_cpu", source(&example("camera"), "cpu", &frame));
    insta::assert_snapshot!("camera_discrete", source(&example("camera"), "opencl:discrete", &frame));
}

#[test]
fn every_copy_is_one_line_with_its_reason() {
    let text = source(&example("mixed"), "opencl:discrete,cpu", &[]);
    assert!(text.starts_with("// @generated by stowage"), "{text}");
    let lines: Vec<&str> = text.lines().filter(|l| l.trim_start().starts_with("\"upload '")).collect();
    assert!(lines.len() >= 2, "{text}");
    for l in &lines {
        assert!(l.contains(" -> opencl:0, ") && l.contains(" bytes, ") && l.contains(": "), "{l}");
    }
    assert!(text.contains("\"download 'r64' opencl:0 -> host"), "{text}");
    // Built for `opencl` on a unified device: the staging plan a discrete GPU takes is carried too.
    let text = source(&example("mixed"), "opencl,cpu", &[]);
    let other = text.split("static OTHER_COPIES").nth(1).unwrap_or_else(|| panic!("no staging plan: {text}"));
    assert!(other.contains("\"upload 'x' host -> opencl:0") && other.contains("discrete memory"), "{other}");
    assert!(!source(&example("mixed"), "opencl:discrete,cpu", &[]).contains("static OTHER_COPIES"));
}

#[test]
fn a_model_that_cannot_be_planned_fails_at_build_time_and_leaves_nothing() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let exe = tmp.path().join("mixed");
    // OpenCL alone has no f64 product.
    let err = fails(&["build", &example("mixed"), "--target", "opencl", "-o", &s(&exe)]);
    assert!(err.contains("mixed.onnx") && err.contains("MatMul"), "{err}");
    // A copy budget the plan exceeds: the planner's error, naming the copies.
    let err =
        fails(&["build", &example("mixed"), "--target", "opencl:discrete,cpu", "--max-copies", "1", "-o", &s(&exe)]);
    assert!(err.contains("r64") && err.contains("p64"), "{err}");
    let err = fails(&["build", &mlp(), "-o", &s(&tmp.path().join("no/such/folder/exe"))]);
    assert!(err.contains("does not exist"), "{err}");
    let err = fails(&["build", &mlp(), "-o", &s(tmp.path())]);
    assert!(err.contains("is a directory"), "{err}");
    let err = fails(&["build", &s(&tmp.path().join("absent.onnx")), "-o", &s(&exe)]);
    assert!(err.contains("absent.onnx"), "{err}");
    assert_eq!(std::fs::read_dir(tmp.path()).expect("lists").count(), 0, "nothing is left in {}", tmp.path().display());
}

#[test]
fn a_build_that_fails_late_leaves_nothing_at_the_output_path() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let exe = tmp.path().join("mlp");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_stowage"))
        .args(["build", &mlp(), "-o", &s(&exe)])
        .env("STOWAGE_SOURCE", tmp.path().join("nowhere"))
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.starts_with("error: ") && err.contains("STOWAGE_SOURCE") && err.lines().count() == 1, "{err}");
    assert_eq!(std::fs::read_dir(tmp.path()).expect("lists").count(), 0, "nothing is left");
}

#[test]
fn an_executable_given_a_wrong_input_exits_1_naming_it() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let exe = tmp.path().join("mlp");
    build(&mlp(), &exe, &[]);
    let write = |name: &str, t: stowage_runtime::Tensor<'static>| {
        let path = tmp.path().join(name);
        let proto = stowage_compiler::onnx::tensor::encode(&t, "x").expect("encodes");
        std::fs::write(&path, prost::Message::encode_to_vec(&proto)).expect("writes");
        s(&path)
    };
    let shape = write("shape.pb", stowage_runtime::Tensor::from_slice(&[1, 783], &vec![0f32; 783]).expect("t"));
    let dtype = write("dtype.pb", stowage_runtime::Tensor::from_slice(&[1, 784], &vec![0i64; 784]).expect("t"));
    let good = write("good.pb", stowage_runtime::Tensor::from_slice(&[1, 784], &vec![0.5f32; 784]).expect("t"));
    let out_dir = tmp.path().join("out");
    for (file, what) in [(&shape, "f32[1, 783]"), (&dtype, "i64[1, 784]")] {
        let (code, out, err) = exec(&exe, &["--input", file, "--output-dir", &s(&out_dir)]);
        assert_eq!(code, 1, "{out} {err}");
        assert!(err.starts_with("error: input 'x'") && err.contains(what) && err.lines().count() == 1, "{err}");
        assert!(!out_dir.exists(), "no outputs are written");
    }
    let (code, _, err) = exec(&exe, &[]);
    assert!(code == 1 && err.contains("input 'x' is missing"), "{err}");
    let (code, _, err) = exec(&exe, &["--input", &good, "--input", &good]);
    assert!(code == 1 && err.contains("extra"), "{err}");
    let (code, _, err) = exec(&exe, &["--threads", "0"]);
    assert_eq!(code, 2, "a usage error: {err}");
    let (code, out, err) = exec(&exe, &["--input", &good, "--threads", "2", "--repeat", "3"]);
    assert!(code == 0 && out.contains("output 'logits': f32[1, 10]"), "{out} {err}");
}

#[test]
fn generated_modules_are_stable() {
    let module =
        |model: &str, target: &str| stowage_cli::build().target(target).generate(model).expect("generates").source;
    insta::assert_snapshot!("module_mlp_opencl", module(&mlp(), "opencl"));
    insta::assert_snapshot!("module_camera_cpu", module(&example("camera"), "cpu"));
    // A model compiled in stages: its first part built, its outputs' shapes left to the run.
    insta::assert_snapshot!("module_nms_staged_cpu", module(&run_time_model("nms_after_softmax"), "cpu"));
}

fn run_time_model(name: &str) -> String {
    s(&target_dir().join("run-time-models").join(name).join("model.onnx"))
}

#[test]
fn models_compiled_in_stages_build_their_first_part_and_run_as_stowage_run_does() {
    let root = target_dir().join("run-time-models");
    let manifest: serde_json::Value = read_json(&root.join("manifest.json"));
    let names: Vec<&str> = manifest.as_array().expect("a list").iter().filter_map(|m| m["name"].as_str()).collect();
    assert!(names.len() >= 18, "{names:?}: run scripts/test (it writes the run-time models)");
    let (mut failures, mut staged) = (Vec::new(), 0);
    for name in names {
        let (dir, tmp) = (root.join(name), tempfile::tempdir().expect("temp dir"));
        let (model, exe) = (s(&dir.join("model.onnx")), tmp.path().join("model"));
        let (code, out, err) = stowage(&["build", &model, "-o", &s(&exe)]);
        if name == "seq_chunks" {
            // Built code takes and gives tensors only: a staged model whose output is a sequence is refused, naming
            // it (`seq_split_lengths`'s sequence lives inside its later parts, and builds).
            assert!(code == 1 && err.contains("'chunks' is a sequence") && !exe.exists(), "{name}: {out} {err}");
            continue;
        }
        if code != 0 {
            failures.push(format!("{name}: the build exited {code}: {out} {err}"));
            continue;
        }
        staged += out.lines().filter(|l| l.starts_with("staged: node '")).count().min(1);
        if let Err(e) = compare(&model, &exe, &suite_inputs(&dir), &[], &["--repeat", "2"]) {
            failures.push(format!("{name}: {e}"));
        }
        // The first part on a device, the later parts compiled at run time over the same devices, and at the
        // precision the build asked (which the built options leave to the built plan).
        if name == "nms_after_softmax" || name == "compress_then_dense" {
            for flags in [&["--target", "opencl,cpu"][..], &["--target", "opencl", "--precision", "fp16"]] {
                let exe = tmp.path().join("model_opencl");
                build(&model, &exe, flags);
                if let Err(e) = compare(&model, &exe, &suite_inputs(&dir), flags, &[]) {
                    failures.push(format!("{name} with {flags:?}: {e}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Each has a node that needs a value known only at run time (an If's condition included, cut at as a run does
    // where its branches differ in shape; a model that is one Loop is cut from an empty first part);
    // `if_in_loop`'s Ifs, `loop_in_loop`'s inner Loops and `scan_long`'s Scan are built with their subgraphs, and
    // so are the top-level Ifs of `if_guarded_gather` and `if_nested_guard` on the CPU alone (`onnx/branch.rs`,
    // rule 2).
    assert_eq!(staged, 12, "models built in stages");
}

#[test]
fn build_rs_errors_are_typed() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let err = stowage_cli::build().target("opencl").out_dir(tmp.path()).compile(example("mixed")).unwrap_err();
    assert!(matches!(err, stowage_cli::BuildError::Model(ref m) if m.contains("MatMul")), "{err}");
    let err = stowage_cli::build().out_dir(tmp.path()).compile(tmp.path().join("absent.onnx")).unwrap_err();
    assert!(matches!(err, stowage_cli::BuildError::Model(ref m) if m.contains("absent.onnx")), "{err}");
    // A Build with no backend registered names the target and says none are.
    let err = stowage_cli::Build::new().out_dir(tmp.path()).compile(mlp()).unwrap_err();
    assert!(err.to_string().contains("unknown target 'cpu' (registered backends: none"), "{err}");
    // Two backends under one name are refused, naming both.
    let twice = stowage_cli::build().backends(&[&stowage_cpu::KIND]).out_dir(tmp.path()).compile(mlp()).unwrap_err();
    assert!(twice.to_string().contains("two backends registered as 'cpu': 'cpu' of stowage-cpu"), "{twice}");
    // Written once; a second compile of an unchanged model rewrites nothing.
    let module = stowage_cli::build().out_dir(tmp.path()).compile(mlp()).expect("compiles");
    let stamp = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).expect("modified time");
    let before: Vec<_> =
        ["model.rs", "model_constants.bin", "libstowage_model.a"].iter().map(|f| stamp(&tmp.path().join(f))).collect();
    assert_eq!(module, tmp.path().join("model.rs"));
    std::thread::sleep(std::time::Duration::from_millis(20));
    stowage_cli::build().out_dir(tmp.path()).compile(mlp()).expect("compiles");
    let after: Vec<_> =
        ["model.rs", "model_constants.bin", "libstowage_model.a"].iter().map(|f| stamp(&tmp.path().join(f))).collect();
    assert_eq!(before, after, "unchanged files are left alone");
}

/// `bytes` copied into leaked memory `at` bytes past a page boundary: what built code embeds, or a caller's buffer
/// at a known alignment.
fn leaked(bytes: &[u8], at: usize) -> &'static [u8] {
    let buf: &'static mut [u8] = Box::leak(vec![0u8; bytes.len() + at + 4096].into_boxed_slice());
    let start = (4096 - buf.as_ptr() as usize % 4096) % 4096 + at;
    buf[start..start + bytes.len()].copy_from_slice(bytes);
    &buf[start..start + bytes.len()]
}

#[test]
fn built_code_runs_its_written_plan_and_refuses_what_it_was_not_made_for() {
    use stowage_cli::session::{prepare_build, BuiltGraph, BuiltPlan, Session};
    use stowage_compiler::plan::{self, serial};
    use stowage_runtime::{DatumType, ExternalStorage, Layout, Ledger, Tensor};

    let model = mlp();
    let bytes = std::fs::read(&model).expect("reads the model");
    let path = Path::new(&model);
    let values: Vec<f32> = (0..784).map(|i| (i % 7) as f32 / 7.0).collect();
    let data: Vec<u8> = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
    let tensor = |at: usize| {
        let storage = ExternalStorage::borrowed(leaked(&data, at));
        let layout = Layout::row_major(DatumType::F32, &[1, 784]).expect("layout");
        vec![("x".to_string(), Tensor::external(DatumType::F32, &[1, 784], layout, storage).expect("tensor"))]
    };
    let start = std::time::Instant::now();
    let mut unified = None;
    for target in ["cpu", "opencl"] {
        let options = RunOptions { target: target.into(), ..stowage_cli::run_options() };
        let prepared = prepare_build(&bytes, path, &options, "t_").expect("prepares");
        let encoded = stowage_compiler::ir::serial::encode(&prepared.cx.graph).expect("encodes");
        let label = if target == "cpu" { "host memory only" } else { "unified memory" };
        let built = RunOptions {
            built_graph: Some(BuiltGraph {
                graph: leaked(&encoded.graph, 0),
                constants: leaked(&encoded.constants, 0),
                inputs: &["x"],
            }),
            built_plans: vec![BuiltPlan { path: label, plan: leaked(&serial::encode(&prepared.plan), 0) }],
            ..options.clone()
        };
        // The plan run is the one written out, and gives what a planned run gives.
        let session = Session::new(&[], path, &tensor(0), &built, start).expect("runs the built plan");
        assert_eq!(session.built_path.as_deref(), Some(label), "{target}");
        assert_eq!(plan::show::text(&session.plan), plan::show::text(&prepared.plan), "{target}");
        let planned = Session::new(&bytes, path, &tensor(0), &options, start).expect("plans");
        let (a, b) = (session.run(&tensor(0), &Ledger::off()), planned.run(&tensor(0), &Ledger::off()));
        let read = |r: stowage_cli::session::RunResult| r.outputs[0].to_vec::<f32>().expect("reads");
        assert_eq!(read(a.expect("runs")), read(b.expect("runs")), "{target}");
        // An input at another alignment than the plan's: refused, naming the input and both layouts.
        let err = Session::new(&[], path, &tensor(64), &built, start).err().expect("refused").to_string();
        assert!(
            err.contains(
                "input 'x': this code was built for it row-major, 4096-byte aligned, the tensor given is \
                          row-major, 64-byte aligned"
            ),
            "{target}: {err}"
        );
        unified = Some(built);
    }
    // Built for PoCL's unified memory only (its plan alone), opened on the discrete path: no plan of the code fits.
    let built = RunOptions { target: "opencl:discrete".into(), ..unified.expect("built for opencl") };
    let err = Session::new(&[], path, &tensor(0), &built, start).err().expect("refused").to_string();
    assert!(
        err.contains("this code was built for other targets (the plan for unified memory: it was made for"),
        "{err}"
    );
    assert!(err.contains("is device memory in space opencl:0, staged"), "{err}");
}
