//! External data that is not a plain file inside the model's folder is refused before it is read, naming the
//! initializer and the file: symlinks and linked folders that lead out of the folder, FIFOs (which would block),
//! devices (endless), directories; and only the bytes a tensor uses are read from a file, however large.

mod common;

use std::path::Path;

use common::build::{self, node, value};
use stowage_compiler::onnx::external::ExternalDataError;
use stowage_compiler::onnx::proto::{tensor_proto::DataLocation, StringStringEntryProto, TensorProto};
use stowage_compiler::onnx::{self, ImportConfig};
use stowage_compiler::ImportErrorKind;

/// x[2,2] + w[2,2] -> y, with `w` in `location` at `offset`, written as `model.onnx` in `dir`.
fn write_model(dir: &Path, location: &str, offset: u64) -> std::path::PathBuf {
    let entry = |k: &str, v: &str| StringStringEntryProto { key: Some(k.into()), value: Some(v.into()) };
    let w = TensorProto {
        name: Some("w".into()),
        dims: vec![2, 2],
        data_type: Some(1),
        data_location: Some(DataLocation::External as i32),
        external_data: vec![entry("location", location), entry("offset", &offset.to_string())],
        ..Default::default()
    };
    let m = build::model(
        13,
        vec![node("Add", &["x", "w"], &["y"], vec![])],
        vec![value("x", &[2, 2])],
        vec![value("y", &[2, 2])],
        vec![w],
    );
    let path = dir.join("model.onnx");
    std::fs::write(&path, build::bytes(&m)).expect("writes the model");
    path
}

fn weights() -> Vec<u8> {
    [1.0f32, 2.0, 3.0, 4.0].iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Imports the model at `path`, expecting an external-data error; checks it is one line naming the initializer
/// and `location`, and returns it.
fn refused(path: &Path, location: &str) -> (String, ExternalDataError) {
    let Err(err) = onnx::load(path, &ImportConfig::new()) else { panic!("{} imported", path.display()) };
    let text = err.to_string();
    assert!(!text.contains('\n') && text.contains("initializer 'w'") && text.contains(location), "{text}");
    match *err.kind {
        ImportErrorKind::ExternalData { name, source } => {
            assert_eq!(name, "w");
            (text, source)
        }
        other => panic!("not an external-data error: {other}"),
    }
}

#[test]
fn a_file_in_the_folder_and_a_symlink_within_it_are_read() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let mut data = vec![7u8; 8];
    data.extend(weights());
    std::fs::write(tmp.path().join("w.bin"), &data).expect("writes");
    std::fs::create_dir(tmp.path().join("sub")).expect("mkdir");
    std::os::unix::fs::symlink("../w.bin", tmp.path().join("sub/link.bin")).expect("symlink");
    for location in ["w.bin", "sub/link.bin"] {
        let g = onnx::load(write_model(tmp.path(), location, 8), &ImportConfig::new()).expect("imports");
        let w = g.node(g.order()[0]).inputs[1].expect("w");
        assert_eq!(g.const_value(w).expect("constant").to_vec::<f32>().expect("f32"), [1.0, 2.0, 3.0, 4.0]);
    }
}

#[test]
fn a_symlink_to_a_file_outside_the_folder_is_refused() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let (model_dir, outside) = (tmp.path().join("model"), tmp.path().join("secret.bin"));
    std::fs::create_dir(&model_dir).expect("mkdir");
    std::fs::write(&outside, weights()).expect("writes");
    std::os::unix::fs::symlink(&outside, model_dir.join("link.bin")).expect("symlink");
    let (text, e) = refused(&write_model(&model_dir, "link.bin", 0), "link.bin");
    assert!(matches!(e, ExternalDataError::Outside { .. }) && text.contains("outside the model's folder"), "{text}");
    assert!(text.contains("secret.bin"), "names where it leads: {text}");
}

#[test]
fn a_path_through_a_linked_folder_outside_is_refused() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let (model_dir, elsewhere) = (tmp.path().join("model"), tmp.path().join("elsewhere"));
    std::fs::create_dir(&model_dir).expect("mkdir");
    std::fs::create_dir(&elsewhere).expect("mkdir");
    std::fs::write(elsewhere.join("w.bin"), weights()).expect("writes");
    std::os::unix::fs::symlink(&elsewhere, model_dir.join("data")).expect("symlink");
    let (_, e) = refused(&write_model(&model_dir, "data/w.bin", 0), "data/w.bin");
    assert!(matches!(e, ExternalDataError::Outside { .. }), "{e}");
}

#[test]
fn a_fifo_is_refused_without_blocking() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let fifo = tmp.path().join("w.fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("runs mkfifo");
    assert!(made.success(), "mkfifo {}", fifo.display());
    // Opening a FIFO with no writer would block forever: the import must not even try.
    let path = write_model(tmp.path(), "w.fifo", 0);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(refused(&path, "w.fifo")).expect("sends"));
    let (text, e) = rx.recv_timeout(std::time::Duration::from_secs(20)).expect("the import returned, it did not block");
    assert!(
        matches!(e, ExternalDataError::NotAFile { kind: "FIFO", .. }) && text.contains("not a regular file"),
        "{text}"
    );
}

#[test]
fn a_device_and_a_directory_are_refused_by_name() {
    let tmp = tempfile::tempdir().expect("temp dir");
    std::os::unix::fs::symlink("/dev/zero", tmp.path().join("zero.bin")).expect("symlink");
    let (text, e) = refused(&write_model(tmp.path(), "zero.bin", 0), "zero.bin");
    assert!(matches!(e, ExternalDataError::NotAFile { kind: "character device", .. }), "{text}");
    std::fs::create_dir(tmp.path().join("dir.bin")).expect("mkdir");
    let (text, e) = refused(&write_model(tmp.path(), "dir.bin", 0), "dir.bin");
    assert!(matches!(e, ExternalDataError::NotAFile { kind: "directory", .. }) && text.contains("directory"), "{text}");
}

#[test]
fn only_the_bytes_used_are_read_from_a_large_sparse_file() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let big = tmp.path().join("big.bin");
    let file = std::fs::File::create(&big).expect("creates");
    let offset = (6u64 << 30) - 1024;
    file.set_len(6 << 30).expect("a sparse 6 GiB file");
    std::os::unix::fs::FileExt::write_all_at(&file, &weights(), offset).expect("writes the weights");
    drop(file);
    let start = std::time::Instant::now();
    let g = onnx::load(write_model(tmp.path(), "big.bin", offset), &ImportConfig::new()).expect("imports");
    let w = g.node(g.order()[0]).inputs[1].expect("w");
    assert_eq!(g.const_value(w).expect("constant").to_vec::<f32>().expect("f32"), [1.0, 2.0, 3.0, 4.0]);
    // Reading 6 GiB of zeros takes seconds and 6 GiB of memory; 16 bytes take nothing.
    assert!(start.elapsed() < std::time::Duration::from_secs(2), "took {:?}", start.elapsed());
    // Past the end: refused with the file's size, nothing allocated for it.
    let (text, e) = refused(&write_model(tmp.path(), "big.bin", 6 << 30), "big.bin");
    assert!(matches!(e, ExternalDataError::Short { size, .. } if size == 6 << 30), "{text}");
}
