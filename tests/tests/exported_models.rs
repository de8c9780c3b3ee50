//! The exported-model suite: scikit-learn models (decision trees, random forests, gradient boosting, extra trees,
//! logistic and linear regression, in pipelines with scalers, normalizers and binarizers) trained on fixed data and
//! exported by skl2onnx, as `scripts/onnx/sklearn_models.py` writes them with onnxruntime's outputs on held-out rows.
//! They exercise the `ai.onnx.ml` domain (`compiler/src/onnx/ml.rs`) as a user of scikit-learn meets it; each runs
//! on `cpu` and on `opencl,cpu` (PoCL: the trees have no OpenCL kernel, the planner places them on the CPU), and
//! must match labels and scores within rtol 1e-3, atol 1e-4 (`stowage_tests::suites`). Hand-built models join them
//! where onnxruntime's conventions go beyond the spec (binary classifiers with one column of scores, `Normalizer`).

#[test]
fn every_exported_model_matches_onnxruntime_on_the_cpu() {
    stowage_tests::suites::check(
        "every_exported_model_matches_onnxruntime_on_the_cpu",
        "sklearn-models",
        "sklearn_models.py",
        "cpu",
        12,
    );
}

#[test]
fn every_exported_model_matches_onnxruntime_on_opencl_and_cpu() {
    stowage_tests::suites::check(
        "every_exported_model_matches_onnxruntime_on_opencl_and_cpu",
        "sklearn-models",
        "sklearn_models.py",
        "opencl,cpu",
        12,
    );
}
