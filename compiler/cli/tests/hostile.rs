//! Hostile names and flags: a model whose file, graph, node, input and output names carry newlines, CR, quotes,
//! `*/`, `"#`, U+202E, Rust keywords, 10,000 characters and Rust code builds into an executable that runs it and
//! prints only escaped names, and its generated Rust holds the names in string literals and escaped comments only;
//! `--threads` beyond the cap is refused before any thread starts.

mod common;

use std::path::Path;

use common::{exec, s, stowage};
use prost::Message;
use stowage_compiler::onnx;
use stowage_compiler::onnx::proto::tensor_shape_proto::{dimension, Dimension};
use stowage_compiler::onnx::proto::{tensor_proto::DataType, type_proto, TensorShapeProto, TypeProto, ValueInfoProto};
use stowage_compiler::onnx::proto::{GraphProto, ModelProto, NodeProto};
use stowage_runtime::Tensor;

/// Rust that fails the build wherever it lands outside a string literal or comment.
const INJECT: &str = "compile_error!(\"INJECTED\");";

/// A name that ends a line comment, a block comment and a raw string, reverses the text after it, and carries
/// Rust; `long` adds 10,000 characters.
fn hostile(tag: &str, long: bool) -> String {
    let tail = if long { "n".repeat(10_000) } else { String::new() };
    format!("{tag}\r\n*/ {INJECT} /* \"# '\u{202e}' fn self\n{INJECT}\n//{tail}")
}

fn f32x2(name: &str) -> ValueInfoProto {
    let dim = Dimension { value: Some(dimension::Value::DimValue(2)), ..Default::default() };
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(DataType::Float as i32),
                shape: Some(TensorShapeProto { dim: vec![dim] }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// `Self = Add(fn, IN)`, `OUT = Relu(Self)` over f32[2], both outputs; nodes, graph, `IN` and `OUT` hostile.
fn write_model(dir: &Path) -> (std::path::PathBuf, String, String) {
    let (input, output) = (hostile("in", true), hostile("out", true));
    let node = |op: &str, name: String, inputs: &[&str], out: &str| NodeProto {
        name: Some(name),
        op_type: Some(op.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![out.into()],
        ..Default::default()
    };
    let model = ModelProto {
        ir_version: Some(8),
        opset_import: vec![onnx::proto::OperatorSetIdProto { domain: Some(String::new()), version: Some(14) }],
        graph: Some(GraphProto {
            name: Some(hostile("graph", true)),
            node: vec![
                node("Add", hostile("add", true), &["fn", &input], "Self"),
                node("Relu", "type".into(), &["Self"], &output),
            ],
            input: vec![f32x2("fn"), f32x2(&input)],
            output: vec![f32x2("Self"), f32x2(&output)],
            ..Default::default()
        }),
        ..Default::default()
    };
    // A file name holds no `/` and at most 255 bytes: the rest of the hostile name.
    let path = dir.join(format!("m\r\n\"# '\u{202e}' fn {INJECT}\n.onnx"));
    std::fs::write(&path, model.encode_to_vec()).expect("writes the model");
    (path, input, output)
}

fn write_tensor(path: &Path, values: &[f32]) -> String {
    let t = Tensor::from_slice(&[2], values).expect("tensor");
    std::fs::write(path, onnx::tensor::encode(&t, "t").expect("encodes").encode_to_vec()).expect("writes");
    s(path)
}

/// Generated Rust with nothing but printable ASCII and newlines: no name can have ended a comment or reordered text.
fn assert_printable(what: &str, text: &str) {
    if let Some((i, c)) = text.char_indices().find(|&(_, c)| c != '\n' && !(' '..='~').contains(&c)) {
        panic!("{what}: {c:?} at byte {i}: {}", &text[i.saturating_sub(80)..(i + 20).min(text.len())]);
    }
}

#[test]
fn hostile_names_build_an_executable_that_runs_and_prints_them_escaped() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let (model, input, output) = write_model(tmp.path());
    let exe = tmp.path().join("exe");
    let (code, out, err) = stowage(&["build", &s(&model), "-o", &s(&exe)]);
    assert_eq!(code, 0, "{out}\n{err}");
    let crate_dir = out.rsplit("(crate: ").next().and_then(|r| r.trim().strip_suffix(')')).expect("names its crate");
    let main_rs = std::fs::read_to_string(Path::new(crate_dir).join("src/main.rs")).expect("reads main.rs");
    assert_printable("main.rs", &main_rs);
    assert!(main_rs.lines().next().expect("a header").contains("from m\\r\\n\"# '\\u{202e}' fn compile_error!"));

    let (a, b) =
        (write_tensor(&tmp.path().join("a.pb"), &[1.0, -5.0]), write_tensor(&tmp.path().join("b.pb"), &[2.0, 1.0]));
    let out_dir = tmp.path().join("out");
    let args = [format!("--input=fn={a}"), format!("--input={input}={b}"), format!("--output-dir={}", s(&out_dir))];
    let (code, stdout, stderr) = exec(&exe, &args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let read = |k: usize| onnx::read_tensor(out_dir.join(format!("output_{k}.pb"))).expect("reads").to_vec::<f32>();
    assert_eq!(read(0).expect("f32"), [3.0, -4.0], "Self = fn + in");
    assert_eq!(read(1).expect("f32"), [3.0, 0.0], "out = relu(Self)");
    // Every line is one stowage writes; the output's name is on one line, escaped.
    for line in stdout.lines() {
        assert!(["output '", "ran on ", "copy: ", "compile "].iter().any(|p| line.starts_with(p)), "{line:?}");
    }
    assert!(!stdout.contains(['\r', '\u{202e}']), "{stdout:?}");
    let escaped = output.escape_debug().to_string().replace("\\'", "'").replace("\\\"", "\"");
    assert!(stdout.contains(&format!("output '{escaped}': f32[2]")), "{stdout}");
    let (code, help, _) = exec(&exe, &["--help"]);
    assert!(
        code == 0 && help.starts_with("m\\r\\n\"# '\\u{202e}' fn compile_error!") && help.lines().count() == 2,
        "{help}"
    );
    // A built executable caps --threads too, before it starts any.
    let (code, _, err) = exec(&exe, &["--input", &a, "--threads", "5000"]);
    assert!(code == 2 && err.starts_with("error: invalid value '5000' for '--threads <N>': at most 1024"), "{err}");

    // The typed module of the same model: identifiers made plain, deduplicated, never keywords.
    let module = stowage_cli::build().generate(&model).expect("generates the module");
    assert_printable("the typed module", &module.source);
    assert!(module.name.starts_with("m_") && module.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
    for item in ["pub type VFn = [f32; 2];", "pub type In", "v_fn: &VFn", "pub v_self: ", "pub out_"] {
        assert!(module.source.contains(item), "{item} is missing from the module: {}", module.source);
    }
}

#[test]
fn threads_beyond_the_cap_are_refused_at_once() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let (model, input, _) = write_model(tmp.path());
    let m = s(&model);
    let start = std::time::Instant::now();
    for command in [
        vec!["run", &m, "--threads", "100000"],
        vec!["plan", &m, "--threads", "1025"],
        vec!["demo", "--threads", "4096"],
    ] {
        let (code, _, err) = stowage(&command);
        assert_eq!(code, 2, "{command:?}: a usage error: {err}");
        assert!(err.starts_with("error: invalid value '") && err.contains("at most 1024 kernel threads"), "{err}");
    }
    assert!(start.elapsed() < std::time::Duration::from_secs(20), "took {:?}", start.elapsed());
    // Through the library, before any target is opened.
    let options = stowage_cli::session::RunOptions { threads: 5000, ..stowage_cli::run_options() };
    let bytes = std::fs::read(&model).expect("reads");
    let x = || Tensor::from_slice(&[2], &[1f32, 2.0]).expect("tensor");
    let inputs = [("fn".to_string(), x()), (input, x())];
    let err = stowage_cli::session::Session::new(&bytes, &model, &inputs, &options, start).err().expect("refused");
    assert_eq!(err.to_string(), "5000 kernel threads asked for: at most 1024 are taken");
}

/// The one limit on a value's bytes, through the CLI: an input file larger than it is refused before it is read,
/// a model value larger than it at import, and a plan's arena larger than it at planning, each in one line naming
/// it and the flag that moves the limit.
#[test]
fn values_and_input_files_over_the_size_limit_are_refused_naming_them() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let (model, _, _) = write_model(tmp.path());
    let m = s(&model);
    let small = write_tensor(&tmp.path().join("x.pb"), &[1.0, 2.0]);
    let huge = tmp.path().join("huge.pb");
    std::fs::write(&huge, vec![0u8; 200_000]).expect("writes");
    let (code, _, err) = stowage(&["run", &m, "--input", &small, "--input", &s(&huge), "--max-value-bytes", "16"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("the file is 200000 bytes, more than the 16-byte limit on one value"), "{err}");
    assert!(err.contains("--max-value-bytes") && err.trim_end().lines().count() == 1, "{err}");
    let (code, _, err) = stowage(&["plan", &m, "--max-value-bytes", "4"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("input 'fn' would be f32[2], 8 bytes: more than the 4-byte limit on one value"), "{err}");
    // Every value of light SqueezeNet is under 3.5 MB; its CPU arena, one allocation, is 3,928,576 bytes.
    let squeezenet = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/onnx-models/light/squeezenet/model.onnx");
    let (code, _, err) = stowage(&["plan", &s(&squeezenet), "--max-value-bytes", "3500000"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("the plan's arena on host would be 3928576 bytes: more than the 3500000-byte limit"), "{err}");
    let (code, _, err) = stowage(&["plan", &s(&squeezenet), "--max-value-bytes", "3928576"]);
    assert_eq!(code, 0, "{err}");
}
