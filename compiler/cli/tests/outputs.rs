//! What `stowage run` writes, against planted files and other runs: nothing outside the output folder is written
//! (a symlink at an output's path is replaced, never written through), nothing that existed is lost (a report
//! aimed at an output is refused up front; a commit that fails leaves the old outputs), and runs into one folder
//! commit their outputs one whole run at a time, under the folder's lock.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{case, data, fails, model, s, stowage};
use prost::Message;
use stowage_compiler::onnx;
use stowage_runtime::Tensor;

/// Every file under `dir`, with its contents (a symlink as where it points).
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).expect("lists") {
        let path = e.expect("entry").path();
        let meta = std::fs::symlink_metadata(&path).expect("examines");
        if meta.file_type().is_symlink() {
            out.insert(
                path.clone(),
                std::fs::read_link(&path).expect("reads the link").into_os_string().into_encoded_bytes(),
            );
        } else if meta.is_dir() {
            out.extend(tree(&path));
        } else {
            out.insert(path.clone(), std::fs::read(&path).expect("reads"));
        }
    }
    out
}

fn add_args(out: &Path) -> Vec<String> {
    let add = case("test_add");
    [
        "run",
        &model(&add),
        "--input",
        &data(&add, "input_0.pb"),
        "--input",
        &data(&add, "input_1.pb"),
        "--output-dir",
        &s(out),
    ]
    .map(String::from)
    .to_vec()
}

#[test]
fn a_report_at_an_output_path_is_refused_and_the_output_kept() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let out = tmp.path().join("out");
    std::fs::create_dir(&out).expect("mkdir");
    std::fs::write(out.join("output_0.pb"), b"old").expect("writes");
    let report = out.join("output_0.pb");
    let mut args = add_args(&out);
    args.extend(["--report".into(), s(&report)]);
    let err = fails(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        err.contains(&format!("--report {}", s(&report))) && err.contains(&format!("--output-dir {}", s(&out))),
        "{err}"
    );
    assert_eq!(std::fs::read(&report).expect("still there"), b"old");
    // The same folder named another way is the same folder.
    let mut args = add_args(&out);
    args.extend(["--report".into(), s(&out.join("../out/output_0.pb"))]);
    fails(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(std::fs::read(&report).expect("still there"), b"old");
    assert_eq!(tree(tmp.path()).len(), 1, "nothing else was written");
}

#[test]
fn a_symlink_at_an_output_path_is_replaced_and_nothing_outside_is_written() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let (out, precious) = (tmp.path().join("out"), tmp.path().join("precious"));
    std::fs::create_dir(&out).expect("mkdir");
    std::fs::write(&precious, b"precious").expect("writes");
    std::os::unix::fs::symlink(&precious, out.join("output_0.pb")).expect("symlink");
    let before = tree(tmp.path());
    let (code, stdout, err) = stowage(&add_args(&out).iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 0, "{stdout}\n{err}");
    let after = tree(tmp.path());
    for (path, bytes) in &before {
        if !path.starts_with(&out) {
            assert_eq!(after.get(path), Some(bytes), "{} changed", path.display());
        }
    }
    let written: Vec<&PathBuf> = after.keys().filter(|p| !before.contains_key(*p) || p.starts_with(&out)).collect();
    assert_eq!(written, [&out.join("output_0.pb")], "only the output was written");
    assert!(std::fs::symlink_metadata(out.join("output_0.pb")).expect("examines").is_file(), "the link was replaced");
}

#[test]
fn a_commit_that_cannot_be_made_keeps_the_outputs_that_were_there() {
    let split = case("test_split_1d_uneven_split_opset18");
    let tmp = tempfile::tempdir().expect("temp dir");
    let out = tmp.path().join("out");
    std::fs::create_dir_all(out.join("output_3.pb").join("inside")).expect("mkdir");
    for k in 0..3 {
        std::fs::write(out.join(format!("output_{k}.pb")), format!("old {k}")).expect("writes");
    }
    let before = tree(tmp.path());
    let err = fails(&["run", &model(&split), "--input", &data(&split, "input_0.pb"), "--output-dir", &s(&out)]);
    assert!(err.contains(&s(&out.join("output_3.pb"))), "{err}");
    assert_eq!(tree(tmp.path()), before, "every old output is as it was, and no temporary file is left");
}

/// A f32[7] TensorProto filled with `v`, the split model's input.
fn filled(dir: &Path, v: f32) -> String {
    let path = dir.join(format!("input_{v}.pb"));
    let t = Tensor::from_slice(&[7], &[v; 7]).expect("tensor");
    std::fs::write(&path, onnx::tensor::encode(&t, "input").expect("encodes").encode_to_vec()).expect("writes");
    s(&path)
}

fn split_run(input: &str, out: &Path) -> Command {
    let split = case("test_split_1d_uneven_split_opset18");
    let mut c = Command::new(env!("CARGO_BIN_EXE_stowage"));
    c.args(["run", &model(&split), "--input", input, "--output-dir", &s(out)])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

#[test]
fn a_run_commits_under_the_folders_lock() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let out = tmp.path().join("out");
    std::fs::create_dir(&out).expect("mkdir");
    // Another run's commit, as a run's lock is: an exclusive flock on the output folder.
    let lock = std::fs::File::open(&out).expect("opens the folder");
    lock.lock().expect("locks it");
    let mut child = split_run(&filled(tmp.path(), 1.0), &out).spawn().expect("starts");
    // The run stages its outputs, then waits for the lock before renaming any of them into place.
    let start = Instant::now();
    let staged = |dir: &Path| std::fs::read_dir(dir).expect("lists").count() == 4;
    while !staged(&out) {
        assert!(start.elapsed() < Duration::from_secs(60), "the run staged nothing: {:?}", tree(&out));
        assert!(child.try_wait().expect("waits").is_none(), "the run ended while the folder was locked");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(child.try_wait().expect("waits").is_none(), "the run ended while the folder was locked");
    assert!(!out.join("output_0.pb").exists(), "an output was committed under another's lock");
    drop(lock);
    let done = child.wait_with_output().expect("waits");
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    let names: Vec<String> = tree(&out).keys().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(names, ["output_0.pb", "output_1.pb", "output_2.pb", "output_3.pb"]);
}

#[test]
fn concurrent_runs_into_one_folder_leave_one_runs_outputs() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let out = tmp.path().join("out");
    for round in 0..3 {
        let children: Vec<_> =
            (1..=4).map(|k| split_run(&filled(tmp.path(), k as f32), &out).spawn().expect("starts")).collect();
        for c in children {
            let done = c.wait_with_output().expect("waits");
            assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
        }
        let values: Vec<f32> = (0..4)
            .flat_map(|k| {
                onnx::read_tensor(out.join(format!("output_{k}.pb"))).expect("reads").to_vec::<f32>().expect("f32")
            })
            .collect();
        assert!(values.iter().all(|v| *v == values[0]), "round {round}: outputs of several runs: {values:?}");
        assert_eq!(tree(&out).len(), 4, "round {round}: no temporary file is left");
    }
}
