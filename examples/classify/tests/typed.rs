//! The typed modules build.rs compiled in: the SqueezeNet's outputs equal `stowage run`'s on the same image; the
//! binary prints a sorted top 5; on OpenCL an `Aligned` input is used in place and plain memory costs exactly one
//! copy, counted in the ledger with its reason.

use std::path::PathBuf;

use stowage_driver::model::Aligned;
use stowage_example_classify::{detections, mlp_opencl, preprocess, squeezenet, top5, PHOTO};
use stowage_runtime::Tensor;

fn model_suite(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/onnx-models").join(name).join("model.onnx")
}

#[test]
fn the_compiled_in_squeezenet_gives_stowage_runs_outputs() {
    let model = squeezenet::Model::new().expect("prepares");
    let mut image = Aligned::<squeezenet::Data0>::boxed();
    preprocess(PHOTO, &mut image).expect("reads the photo");
    let out = model.run(&image).expect("runs");
    let got = out.softmaxout_1.to_vec::<f32>().expect("reads");
    assert_eq!(model.ledger().entries().len(), 0, "read in place: {:?}", model.ledger().entries());

    let flat: Vec<f32> = image.0[0].iter().flatten().flatten().copied().collect();
    let input = Tensor::from_vec(&[1, 3, 224, 224], flat).expect("tensor");
    let options = stowage_cli::run_options();
    let outcome =
        stowage_cli::session::run(&model_suite("random/squeezenet"), vec![("data_0".into(), input)], &options)
            .expect("stowage run");
    let want = outcome.outputs[0].1.to_vec::<f32>().expect("reads");
    assert_eq!(got, want, "the same kernels on the same input");
    let sum: f32 = got.iter().sum();
    assert!((sum - 1.0).abs() < 1e-3, "a softmax: {sum}");
}

#[test]
fn the_binary_prints_a_sorted_top_5() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_classify")).output().expect("runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text} {}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 7, "{text}");
    let scores: Vec<f32> = lines[1..6]
        .iter()
        .map(|l| l.rsplit(": ").next().and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("{l}")))
        .collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{text}");
    assert!(lines[1].starts_with("1. ") && lines[1].contains("(class "), "{text}");
    assert_eq!(lines[6], "0 copies", "{text}");
    assert_eq!(top5(&[0.1, 0.5, 0.2, 0.9, 0.0, 0.3])[0].0, 3);
}

#[test]
fn an_aligned_input_is_used_in_place_and_plain_memory_costs_one_counted_copy() {
    let model = mlp_opencl::Model::new().expect("prepares (PoCL)");
    let mut aligned = Aligned::<mlp_opencl::X>::boxed();
    for (i, v) in aligned.0[0].iter_mut().enumerate() {
        *v = (i as f32 * 0.01).sin();
    }
    let a = model.run(&*aligned).expect("runs").logits.to_vec::<f32>().expect("reads");
    assert_eq!(model.ledger().take().len(), 0, "page-aligned memory is imported in place");

    let plain: Box<mlp_opencl::X> = Box::new(aligned.0);
    let b = model.run(&*plain).expect("runs").logits.to_vec::<f32>().expect("reads");
    let copies = model.ledger().take();
    assert_eq!(copies.len(), 1, "{copies:?}");
    assert_eq!(&*copies[0].value, "x");
    assert_eq!(copies[0].bytes, 784 * 4);
    assert!(copies[0].reason.contains("not an Aligned buffer"), "{}", copies[0].reason);
    assert_eq!(a, b, "the same result either way");
}

#[test]
fn a_cpu_and_an_opencl_module_start_in_one_process_in_either_order() {
    // Each program takes the kernels linked in from its own module's table: no table belongs to the process, so
    // neither start order leaves the other model without its kernels.
    for cpu_first in [false, true] {
        let (cpu, opencl) = if cpu_first {
            let cpu = squeezenet::Model::new().expect("the CPU module prepares");
            (cpu, mlp_opencl::Model::new().expect("the OpenCL module prepares"))
        } else {
            let opencl = mlp_opencl::Model::new().expect("the OpenCL module prepares");
            (squeezenet::Model::new().expect("the CPU module prepares"), opencl)
        };
        let image = Aligned::<squeezenet::Data0>::boxed();
        let scores = cpu.run(&image).expect("the CPU module runs").softmaxout_1.to_vec::<f32>().expect("reads");
        assert_eq!(scores.len(), 1000, "cpu first: {cpu_first}");
        let x = Aligned::<mlp_opencl::X>::boxed();
        let logits = opencl.run(&*x).expect("the OpenCL module runs").logits.to_vec::<f32>().expect("reads");
        assert_eq!(logits.len(), 10, "cpu first: {cpu_first}");
    }
}

#[test]
fn a_model_compiled_in_stages_runs_from_its_typed_module() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/run-time-models/nms_after_softmax");
    let read = |file: &str| {
        stowage_compiler::onnx::read_tensor_within(dir.join("test_data_set_0").join(file), 1 << 20)
            .unwrap_or_else(|e| panic!("{e}: run scripts/test (it writes the run-time models)"))
    };
    let (boxes, feat) =
        (read("input_0.pb").to_vec::<f32>().expect("f32"), read("input_1.pb").to_vec::<f32>().expect("f32"));
    let mut b: Box<detections::Boxes> = Box::new([[[0.0; 4]; 40]; 1]);
    b[0].iter_mut().flatten().zip(&boxes).for_each(|(x, v)| *x = *v);
    let mut f: Box<detections::Feat> = Box::new([[[0.0; 8]; 40]; 1]);
    f[0].iter_mut().flatten().zip(&feat).for_each(|(x, v)| *x = *v);
    let model = detections::Model::new().expect("prepares its first part");
    for run in 0..2 {
        let out = model.run(&b, &f).expect("runs");
        let (sel, kept, right) = (read("output_0.pb"), read("output_1.pb"), read("output_2.pb"));
        assert_eq!(out.sel.shape(), sel.shape(), "run {run}");
        assert_eq!(out.sel.to_vec::<i64>().expect("i64"), sel.to_vec::<i64>().expect("i64"), "run {run}");
        // The boxes kept are the input's, gathered; their right edges a maximum of them: exact.
        assert_eq!(out.kept.to_vec::<f32>().expect("f32"), kept.to_vec::<f32>().expect("f32"), "run {run}");
        assert_eq!(out.right.to_vec::<f32>().expect("f32"), right.to_vec::<f32>().expect("f32"), "run {run}");
    }
    assert_eq!(model.ledger().entries().len(), 0, "on the CPU nothing is copied: {:?}", model.ledger().entries());
}
