//! A sim kernel that fails mid-run: the run errors naming the node and the device, every buffer the run took is
//! released, and the next run succeeds; a device that claims an op it has no kernel for fails at lowering, naming
//! the node, the op and the backend. Through the driver's library API, with the test's own device registered.

use std::path::PathBuf;
use std::time::Instant;

use stowage_driver::pipeline::{RunOptions, Session};
use stowage_driver::{Registry, TargetKind};
use stowage_example_sim::plugin::SimKind;
use stowage_example_sim::SimDevice;
use stowage_runtime::{Ledger, Tensor};

#[test]
fn a_failed_launch_releases_every_buffer_of_the_run() {
    let device = SimDevice::new();
    let kind: &'static SimKind = Box::leak(Box::new(SimKind::on(device.clone())));
    let kinds: [&'static dyn TargetKind; 2] = [kind, &stowage_cpu::KIND];
    let options = RunOptions { target: "sim,cpu".into(), ..RunOptions::new(Registry::new(&kinds).expect("registry")) };
    let model = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/onnx-models/mlp/model.onnx");
    let bytes = std::fs::read(&model).expect("run scripts/test: it writes the model suite");
    let session = Session::new(&bytes, &model, &[], &options, Instant::now()).expect("plans and lowers");
    let constants = device.live_buffers();
    assert!(constants > 0, "the weights live on the device");
    let x = vec![("x".to_string(), Tensor::from_vec(&[1, 784], vec![0.5f32; 784]).expect("tensor"))];

    device.fail_after(2);
    let err = match session.run(&x, &Ledger::recording()) {
        Ok(_) => panic!("the third launch fails"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("the sim device failed the launch") && err.contains("node '"), "{err}");
    assert_eq!(device.live_buffers(), constants, "every buffer of the failed run is released");

    device.fail_after(usize::MAX);
    let out = session.run(&x, &Ledger::recording()).expect("the next run succeeds");
    assert_eq!(out.outputs[0].shape(), &[1, 10]);
    drop(out);
    assert_eq!(device.live_buffers(), constants);
}

#[test]
fn a_backend_that_cannot_lower_what_it_claimed_names_the_node_op_and_backend() {
    let device = SimDevice::new();
    device.claim("Softmax");
    let kind: &'static SimKind = Box::leak(Box::new(SimKind::on(device.clone())));
    let kinds: [&'static dyn TargetKind; 2] = [kind, &stowage_cpu::KIND];
    let options = RunOptions { target: "sim,cpu".into(), ..RunOptions::new(Registry::new(&kinds).expect("registry")) };
    let model = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/onnx-models/transformer_block/model.onnx");
    let bytes = std::fs::read(&model).expect("run scripts/test: it writes the model suite");
    let err = match Session::new(&bytes, &model, &[], &options, Instant::now()) {
        Ok(_) => panic!("the sim has no Softmax kernel"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("model.onnx: node '") && err.contains("(Softmax): "), "{err}");
    assert!(err.ends_with("(the sim backend could not lower what the plan gave it)"), "{err}");
    assert_eq!(device.live_buffers(), 0, "nothing is left on the device: {err}");
}
