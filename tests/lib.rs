//! Helpers for the workspace-level suites: where the generated ONNX data lives, and output comparison.

use std::path::PathBuf;

use stowage_compiler::consts;
use stowage_runtime::Tensor;

/// The workspace root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_path_buf()
}

/// A folder under `target/` written by a project script, or a panic saying which script writes it.
pub fn generated(dir: &str, script: &str) -> PathBuf {
    let path = root().join("target").join(dir);
    assert!(
        path.is_dir(),
        "{} is missing: run `scripts/test`, or `PY=$(scripts/onnx/env -q) && \"$PY\" scripts/onnx/{script}`",
        path.display()
    );
    path
}

/// Compares `got` with `want`: same datum type and shape, and every element within `atol + rtol * |want|`
/// (NaN matches NaN, infinities match exactly). `Err` says where they differ first.
pub fn compare(got: &Tensor<'_>, want: &Tensor<'_>, rtol: f64, atol: f64) -> Result<(), String> {
    if got.dt() != want.dt() || got.shape() != want.shape() {
        return Err(format!("got {}{:?}, expected {}{:?}", got.dt(), got.shape(), want.dt(), want.shape()));
    }
    let (g, w) = (consts::to_f64s(got).map_err(|e| e.to_string())?, consts::to_f64s(want).map_err(|e| e.to_string())?);
    let mut worst: Option<(usize, f64)> = None;
    let mut bad = 0;
    for (i, (&a, &b)) in g.iter().zip(&w).enumerate() {
        let ok = if a.is_nan() || b.is_nan() {
            a.is_nan() && b.is_nan()
        } else if a.is_infinite() || b.is_infinite() {
            a == b
        } else {
            (a - b).abs() <= atol + rtol * b.abs()
        };
        if !ok {
            bad += 1;
            let err = (a - b).abs();
            if worst.is_none_or(|(_, e)| err > e || err.is_nan()) {
                worst = Some((i, err));
            }
        }
    }
    match worst {
        None => Ok(()),
        Some((i, _)) => {
            Err(format!("{bad} of {} elements differ; worst at {i}: got {}, expected {}", g.len(), g[i], w[i]))
        }
    }
}
