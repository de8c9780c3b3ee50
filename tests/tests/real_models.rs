//! The real-model suite: trained models that other projects ship inside their PyPI packages (voice activity, wake
//! words, a mel front end, content-type detection, OCR detection and classification, …), with realistic inputs and
//! onnxruntime's outputs, written by `scripts/onnx/real_models.py` (its manifest says which package each comes from).
//! The models the manifest marks `ci` run here through `stowage run`'s code on `cpu` and on `opencl,cpu` (PoCL),
//! compared with rtol 1e-3, atol 1e-4 (`stowage_tests::suites`); `scripts/bench` times all of them.
//! An input the manifest lists under `input_values` (silero's sample rate, which an `If` reads) is one `stowage run`
//! folds from the value given (`onnx::value_inputs`), so one branch is imported; the wake word's `If` on a
//! threshold is chosen at run time (both branches run, `Where` selects).

fn check(test: &str, target: &str) {
    stowage_tests::suites::check(test, "real-models", "real_models.py", target, 8);
}

#[test]
fn every_real_model_matches_onnxruntime_on_the_cpu() {
    check("every_real_model_matches_onnxruntime_on_the_cpu", "cpu");
}

/// Placed op by op on the OpenCL device (PoCL in CI), the CPU taking what it has no kernel for.
#[test]
fn every_real_model_matches_onnxruntime_on_opencl_and_cpu() {
    check("every_real_model_matches_onnxruntime_on_opencl_and_cpu", "opencl,cpu");
}
