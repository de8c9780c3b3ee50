//! The planner's scenarios (issue "The planner"): each runs a small model through `stowage run`'s own code and
//! compares the run's ledger with the plan's copies and with the minimum the scenario needs.

#[allow(dead_code)] // the builder serves several suites; each uses part of it
#[path = "../../compiler/tests/common/build.rs"]
mod build;

use std::path::Path;
use std::time::Instant;

use build::{int, ints, model, node, typed_value, value};
use stowage_cli::session::{self, Outcome, Planning, RunOptions};
use stowage_compiler::onnx::proto::tensor_proto::DataType;
use stowage_compiler::onnx::proto::TensorProto;
use stowage_compiler::plan::{CopyKind, When};
use stowage_runtime::{DatumType, Layout, PlainStorage, Tensor};

/// A run of `bytes` on `target`, `repeat` times.
fn run(
    bytes: &[u8],
    target: &str,
    inputs: Vec<(&str, Tensor<'static>)>,
    planning: Planning,
    repeat: usize,
    read_outputs: bool,
) -> Outcome {
    let options = RunOptions { target: target.into(), repeat, planning, read_outputs, ..stowage_cli::run_options() };
    let inputs = inputs.into_iter().map(|(n, t)| (n.to_string(), t)).collect();
    session::run_bytes(bytes, Path::new("scenario.onnx"), inputs, &options, Instant::now())
        .unwrap_or_else(|e| panic!("{target}: {e}"))
}

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8) as f32 / (1 << 23) as f32 - 1.0)
        .collect()
}

fn weights(name: &str, dims: &[i64], seed: u32) -> TensorProto {
    let n = dims.iter().product::<i64>() as usize;
    build::floats(name, dims, &values(n, seed).iter().map(|v| v * 0.2).collect::<Vec<_>>())
}

/// An f32 tensor of `shape` whose first element is `align`-byte aligned (and, with `skew`, that many bytes past).
fn placed(shape: &[usize], seed: u32, align: usize, skew: usize) -> Tensor<'static> {
    let data = values(shape.iter().product(), seed);
    let bytes: &[u8] = stowage_runtime::bytemuck::cast_slice(&data);
    let mut storage = PlainStorage::zeroed_aligned(bytes.len() + skew, align).expect("memory");
    storage.as_bytes_mut()[skew..].copy_from_slice(bytes);
    let strides = Layout::row_major(DatumType::F32, shape).expect("layout").strides().to_vec();
    Tensor::from_storage(DatumType::F32, shape, Layout::strided(strides, skew), storage).expect("tensor")
}

/// The ledger as (kind, value, bytes), sorted.
fn performed(o: &Outcome) -> Vec<(String, String, usize)> {
    let mut v: Vec<_> = o.ledger.entries().iter().map(|m| (m.kind.to_string(), m.value.to_string(), m.bytes)).collect();
    v.sort();
    v
}

/// What the plan says `repeat` runs perform, outputs read or not, as (kind, value, bytes), sorted.
fn predicted(o: &Outcome, repeat: usize, read: bool) -> Vec<(String, String, usize)> {
    let mut v = Vec::new();
    for c in o.plan.run_copies() {
        let times = match c.when {
            When::EveryRun => repeat,
            When::FirstRun => 1,
            When::WhenRead => usize::from(read),
            When::Setup => 0,
        };
        v.extend(std::iter::repeat_n((c.kind.to_string(), c.value.clone(), c.bytes), times));
    }
    v.sort();
    v
}

/// x[1,64] → MatMul → Add → Relu → MatMul → y[1,10].
fn mlp() -> Vec<u8> {
    let m = model(
        17,
        vec![
            node("MatMul", &["x", "w1"], &["h"], vec![]),
            node("Add", &["h", "b1"], &["hb"], vec![]),
            node("Relu", &["hb"], &["r"], vec![]),
            node("MatMul", &["r", "w2"], &["y"], vec![]),
        ],
        vec![value("x", &[1, 64])],
        vec![value("y", &[1, 10])],
        vec![weights("w1", &[64, 32], 1), weights("b1", &[32], 2), weights("w2", &[32, 10], 3)],
    );
    build::bytes(&m)
}

#[test]
fn s1_cpu_with_host_inputs_copies_nothing() {
    let o = run(&mlp(), "cpu", vec![("x", placed(&[1, 64], 7, 64, 0))], Planning::default(), 3, true);
    assert_eq!(o.plan.run_copies().count(), 0, "{:?}", o.plan.copies);
    let _ = o.outputs[0].1.as_bytes().expect("readable");
    assert!(performed(&o).is_empty(), "{:?}", performed(&o));
}

#[test]
fn s2_unified_opencl_imports_an_aligned_input_and_copies_a_misaligned_one_once() {
    // PoCL's base alignment is 128 bytes: an input there is used in place.
    let o = run(&mlp(), "opencl", vec![("x", placed(&[1, 64], 7, 128, 0))], Planning::default(), 3, true);
    assert_eq!(o.plan.run_copies().count(), 0, "{:?}", o.plan.copies);
    let _ = o.outputs[0].1.as_bytes().expect("readable");
    assert!(performed(&o).is_empty(), "{:?}", performed(&o));
    // The same input one byte off: exactly one copy per run, whose reason says so.
    let o = run(&mlp(), "opencl", vec![("x", placed(&[1, 64], 7, 128, 1))], Planning::default(), 1, true);
    let planned: Vec<_> = o.plan.run_copies().collect();
    assert_eq!(planned.len(), 1, "{planned:?}");
    assert!(planned[0].reason.contains("1-byte aligned"), "{}", planned[0].reason);
    let _ = o.outputs[0].1.as_bytes().expect("readable");
    let ledger = o.ledger.entries();
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    assert!(ledger[0].reason.contains("alignment"), "{}", ledger[0].reason);
    assert_eq!(performed(&o), predicted(&o, 1, true));
}

#[test]
fn s3_discrete_opencl_uploads_each_input_once_and_downloads_only_what_is_read() {
    let x = || placed(&[1, 64], 7, 128, 0);
    // Outputs never read: one upload per run, no download.
    let o = run(&mlp(), "opencl:discrete", vec![("x", x())], Planning::default(), 3, false);
    assert_eq!(performed(&o), vec![("upload".to_string(), "x".to_string(), 256); 3]);
    assert_eq!(performed(&o), predicted(&o, 3, false));
    // An output read twice: one download.
    let o = run(&mlp(), "opencl:discrete", vec![("x", x())], Planning::default(), 1, true);
    let y = &o.outputs[0].1;
    let first = y.to_vec::<f32>().expect("read");
    let second = y.to_vec::<f32>().expect("read again");
    assert_eq!(first, second);
    assert_eq!(performed(&o), predicted(&o, 1, true));
    let downloads = performed(&o).iter().filter(|m| m.0 == "download").count();
    assert_eq!(downloads, 1);
    // And the values are the CPU's.
    let cpu = run(&mlp(), "cpu", vec![("x", x())], Planning::default(), 1, true);
    stowage_tests::compare(y, &cpu.outputs[0].1, 1e-5, 1e-6).expect("same as cpu");
}

/// A camera frame u8[1,480,640,3] (NHWC) → Cast → Sub mean → Div std → Transpose to NCHW → Conv.
fn camera() -> Vec<u8> {
    let mut mean = build::floats("mean", &[3], &[124.0, 117.0, 104.0]);
    mean.name = Some("mean".into());
    let m = model(
        17,
        vec![
            node("Cast", &["frame"], &["f"], vec![int("to", 1)]),
            node("Sub", &["f", "mean"], &["c"], vec![]),
            node("Div", &["c", "std"], &["n"], vec![]),
            node("Transpose", &["n"], &["nchw"], vec![ints("perm", &[0, 3, 1, 2])]),
            node("Conv", &["nchw", "w"], &["y"], vec![ints("pads", &[1, 1, 1, 1])]),
        ],
        vec![typed_value("frame", DataType::Uint8, &[1, 480, 640, 3])],
        vec![value("y", &[1, 8, 480, 640])],
        vec![mean, build::floats("std", &[3], &[58.0, 57.0, 57.5]), weights("w", &[8, 3, 3, 3], 5)],
    );
    build::bytes(&m)
}

fn frame(pitch: Option<usize>) -> Tensor<'static> {
    let shape = [1, 480, 640, 3];
    let data: Vec<u8> = (0..480 * 640 * 3).map(|i| (i * 7 % 251) as u8).collect();
    let packed = Tensor::from_slice(&shape, &data).expect("frame");
    match pitch {
        None => packed,
        Some(p) => packed.to_layout(Layout::padded(DatumType::U8, &shape, 1, p).expect("layout"), 64).expect("padded"),
    }
}

#[test]
fn s4_a_padded_camera_frame_is_read_in_place_on_cpu_and_uploaded_once_to_a_discrete_device() {
    let layout = Planning { input_layouts: vec![("frame".into(), "nhwc,row-pitch=2048".into())], ..Default::default() };
    let o = run(&camera(), "cpu", vec![("frame", frame(Some(2048)))], layout.clone(), 2, true);
    assert_eq!(o.plan.run_copies().count(), 0, "{:?}", o.plan.copies);
    assert!(o.plan.inputs[0].layout.row_pitch == Some(2048));
    assert!(performed(&o).is_empty(), "the first kernel reads the frame in place: {:?}", performed(&o));
    let packed = run(&camera(), "cpu", vec![("frame", frame(None))], Planning::default(), 1, true);
    assert_eq!(
        o.outputs[0].1.to_vec::<f32>().expect("read"),
        packed.outputs[0].1.to_vec::<f32>().expect("read"),
        "the same values as from a packed frame"
    );
    // A layout the frame is not in is refused before anything runs.
    let wrong = Planning { input_layouts: vec![("frame".into(), "nhwc,row-pitch=4096".into())], ..Default::default() };
    let options = RunOptions { planning: wrong, ..stowage_cli::run_options() };
    let err = session::run_bytes(
        &camera(),
        Path::new("camera.onnx"),
        vec![("frame".into(), frame(Some(2048)))],
        &options,
        Instant::now(),
    )
    .err()
    .expect("refused")
    .to_string();
    assert!(err.contains("input 'frame'") && err.contains("4096"), "{err}");
    // On a discrete device: exactly one upload of the frame per run (it packs as it goes), nothing else.
    let o = run(&camera(), "opencl:discrete", vec![("frame", frame(Some(2048)))], layout, 2, false);
    assert_eq!(performed(&o), vec![("upload".to_string(), "frame".to_string(), 480 * 640 * 3); 2]);
    assert_eq!(performed(&o), predicted(&o, 2, false));
}

/// x[1,256] → MatMul → Relu → Cast to f64 → MatMul with f64 weights → Cast to f32 → MatMul → y[1,10]: a step kept
/// in double precision, which the OpenCL backend has no product for.
fn mixed() -> Vec<u8> {
    let w64: Vec<f64> = values(256 * 256, 9).iter().map(|&v| f64::from(v) * 0.05).collect();
    let w64 = TensorProto {
        name: Some("w64".into()),
        dims: vec![256, 256],
        data_type: Some(DataType::Double as i32),
        double_data: w64,
        ..Default::default()
    };
    let m = model(
        17,
        vec![
            node("MatMul", &["x", "w1"], &["h"], vec![]),
            node("Relu", &["h"], &["r"], vec![]),
            node("Cast", &["r"], &["r64"], vec![int("to", DataType::Double as i64)]),
            node("MatMul", &["r64", "w64"], &["p64"], vec![]),
            node("Cast", &["p64"], &["p"], vec![int("to", DataType::Float as i64)]),
            node("MatMul", &["p", "w3"], &["y"], vec![]),
        ],
        vec![value("x", &[1, 256])],
        vec![value("y", &[1, 10])],
        vec![weights("w1", &[256, 256], 1), w64, weights("w3", &[256, 10], 3)],
    );
    build::bytes(&m)
}

#[test]
fn s5_an_op_opencl_lacks_runs_on_cpu_with_exactly_two_transfers_around_it() {
    let x = || placed(&[1, 256], 3, 128, 0);
    let o = run(&mixed(), "opencl:discrete,cpu", vec![("x", x())], Planning::default(), 1, false);
    let targets: Vec<(&str, &str)> = o
        .plan
        .nodes
        .iter()
        .zip(&o.plan.node_names)
        .map(|(p, (name, _))| (name.as_str(), o.plan.targets[p.target].name.as_str()))
        .collect();
    assert!(targets.contains(&("MatMul_p64", "cpu")), "{targets:?}");
    assert!(targets.iter().filter(|t| t.0 != "MatMul_p64").all(|t| t.1 == "opencl:discrete"), "{targets:?}");
    let around: Vec<_> = o.plan.run_copies().filter(|c| c.value != "x").collect();
    assert_eq!(around.len(), 2, "{around:?}");
    assert!(around.iter().any(|c| c.kind == CopyKind::Download && c.value == "r64"), "{around:?}");
    assert!(around.iter().any(|c| c.kind == CopyKind::Upload && c.value == "p64"), "{around:?}");
    assert_eq!(performed(&o), predicted(&o, 1, false));
    let transfers = performed(&o).into_iter().filter(|m| m.1 != "x").count();
    assert_eq!(transfers, 2);
    let cpu = run(&mixed(), "cpu", vec![("x", x())], Planning::default(), 1, true);
    stowage_tests::compare(&o.outputs[0].1, &cpu.outputs[0].1, 1e-4, 1e-5).expect("same as cpu");
}

/// x[1,256], s[1,256] → t = x + s; s' = tanh(t); y = t · 0.5: a recurrent state s fed back each run.
fn recurrent() -> Vec<u8> {
    recurrent_of(&[1, 256])
}

/// [`recurrent`] over tensors of `shape`.
fn recurrent_of(shape: &[i64]) -> Vec<u8> {
    let m = model(
        17,
        vec![
            node("Add", &["x", "s"], &["t"], vec![]),
            node("Tanh", &["t"], &["s_next"], vec![]),
            node("Mul", &["t", "half"], &["y"], vec![]),
        ],
        vec![value("x", shape), value("s", shape)],
        vec![value("y", shape), value("s_next", shape)],
        vec![build::floats("half", &[1], &[0.5])],
    );
    build::bytes(&m)
}

#[test]
fn s6_a_state_fed_back_for_100_runs_is_uploaded_once_and_never_moves_again() {
    let state = Planning { states: vec![("s_next".into(), "s".into())], ..Default::default() };
    let inputs = || vec![("x", placed(&[1, 256], 1, 128, 0)), ("s", placed(&[1, 256], 2, 128, 0))];
    let o = run(&recurrent(), "opencl:discrete", inputs(), state.clone(), 100, false);
    let moved = performed(&o);
    assert_eq!(moved.iter().filter(|m| m.1 == "s").count(), 1, "the state is uploaded once: {moved:?}");
    assert_eq!(moved.iter().filter(|m| m.1 == "s_next").count(), 0, "and never downloaded");
    assert_eq!(moved.iter().filter(|m| m.1 == "x").count(), 100);
    assert_eq!(moved, predicted(&o, 100, false));
    assert!(o.plan.arenas.iter().any(|a| a.persistent.iter().any(|p| p.0 == "s_next")), "{:?}", o.plan.arenas);
    // The state after 100 runs is the CPU's.
    let cpu = run(&recurrent(), "cpu", inputs(), state, 100, true);
    stowage_tests::compare(&o.outputs[1].1, &cpu.outputs[1].1, 1e-5, 1e-6).expect("same state as cpu");
}

#[test]
fn planning_errors_name_what_is_wrong_before_anything_runs() {
    let x = vec![("x".to_string(), placed(&[1, 64], 7, 64, 0))];
    let fails = |target: &str, planning: Planning| {
        let options = RunOptions { target: target.into(), planning, ..stowage_cli::run_options() };
        match session::run_bytes(&mlp(), Path::new("mlp.onnx"), x.clone(), &options, Instant::now()) {
            Ok(_) => panic!("{target} {:?}: not refused", options.planning),
            Err(e) => e.to_string(),
        }
    };
    let e = fails("cpu,gpu", Planning::default());
    assert!(e.contains("unknown target 'gpu'"), "{e}");
    let layout = |l: &str| Planning { input_layouts: vec![("x".into(), l.into())], ..Default::default() };
    assert!(fails("cpu", layout("nhwc")).contains("'nhwc' names 4 axes, the input has 2"));
    assert!(fails("cpu", layout("row-pitch=258")).contains("row-pitch=258 is not a whole number"));
    assert!(fails("cpu", layout("row-pitch=128")).contains("shorter than a packed row of 256 bytes"));
    let e = fails("cpu", Planning { input_layouts: vec![("frame".into(), "nhwc".into())], ..Default::default() });
    assert!(e.contains("no run-time input 'frame'"), "{e}");
    let e = fails("cpu", Planning { states: vec![("y".into(), "x".into())], ..Default::default() });
    assert!(e.contains("--state y=x") && e.contains("f32[1, 10]") && e.contains("f32[1, 64]"), "{e}");
    let e = fails("opencl:discrete", Planning { max_copies: Some(0), ..Default::default() });
    assert!(e.contains("over the budget of 0 copies") && e.contains("upload 'x'"), "{e}");
    let e = fails("opencl:discrete", Planning { max_copy_bytes: Some(100), ..Default::default() });
    assert!(e.contains("100 bytes") && e.contains("256 bytes"), "{e}");
}

#[test]
fn a_state_in_a_caller_layout_is_relaid_on_the_first_run_only() {
    // The caller's first state is column-major; from the second run on, the fed-back output (packed) is the state.
    let column_major = |seed| {
        let t = placed(&[4, 64], seed, 64, 0);
        t.to_layout(Layout::column_major(DatumType::F32, &[4, 64]).expect("layout"), 64).expect("relaid")
    };
    let state = Planning { states: vec![("s_next".into(), "s".into())], ..Default::default() };
    let o = run(
        &recurrent_of(&[4, 64]),
        "cpu",
        vec![("x", placed(&[4, 64], 1, 64, 0)), ("s", column_major(2))],
        state.clone(),
        3,
        true,
    );
    let relayouts: Vec<_> = o.plan.run_copies().filter(|c| c.kind == CopyKind::Relayout).collect();
    assert_eq!(relayouts.len(), 1, "{:?}", o.plan.copies);
    assert_eq!((relayouts[0].value.as_str(), relayouts[0].when), ("s", When::FirstRun));
    assert_eq!(performed(&o), predicted(&o, 3, true));
    let packed = run(
        &recurrent_of(&[4, 64]),
        "cpu",
        vec![("x", placed(&[4, 64], 1, 64, 0)), ("s", placed(&[4, 64], 2, 64, 0))],
        state,
        3,
        true,
    );
    stowage_tests::compare(&o.outputs[1].1, &packed.outputs[1].1, 0.0, 0.0).expect("the same state");
}

#[test]
fn a_view_of_part_of_a_buffer_is_read_in_place_on_cpu_and_uploaded_to_a_device_that_imports_whole_buffers() {
    let add = build::bytes(&model(
        17,
        vec![node("Add", &["x", "y"], &["z"], vec![])],
        vec![value("x", &[2, 4]), value("y", &[2, 4])],
        vec![value("z", &[2, 4])],
        vec![],
    ));
    // Rows 1..3 and columns 0..4 of a [4, 32] buffer: at a 128-byte aligned address, rows 128 bytes apart, part
    // of a larger buffer.
    let big = placed(&[4, 32], 5, 4096, 0);
    let x = big.slice(0, 1..3).expect("rows").slice(1, 0..4).expect("columns");
    let y = || placed(&[2, 4], 6, 4096, 0);
    let want: Vec<f32> =
        x.to_vec::<f32>().expect("x").iter().zip(y().to_vec::<f32>().expect("y")).map(|(a, b)| a + b).collect();
    let o = run(&add, "cpu", vec![("x", x.clone()), ("y", y())], Planning::default(), 1, true);
    assert!(o.plan.inputs[0].layout.view && o.plan.run_copies().count() == 0, "{:?}", o.plan.copies);
    assert!(performed(&o).is_empty(), "{:?}", performed(&o));
    assert_eq!(o.outputs[0].1.to_vec::<f32>().expect("z"), want);
    let o = run(&add, "opencl", vec![("x", x), ("y", y())], Planning::default(), 1, true);
    let planned: Vec<_> = o.plan.run_copies().collect();
    assert_eq!(planned.len(), 1, "{planned:?}");
    assert!(planned[0].reason.contains("part of a larger one"), "{}", planned[0].reason);
    assert_eq!(performed(&o), predicted(&o, 1, true));
    assert_eq!(o.outputs[0].1.to_vec::<f32>().expect("z"), want);
}
