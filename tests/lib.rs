//! Helpers for the workspace-level suites: where the generated ONNX data lives, output comparison, and suites spread
//! over two processes.

mod processes;
pub mod suites;

pub use processes::across_processes;

use std::path::PathBuf;

use stowage_compiler::consts;
use stowage_runtime::{strings, DatumType, Tensor};

/// The workspace root: where this crate was built, or `STOWAGE_WORKSPACE` where the suites run elsewhere (test
/// binaries carried to the device machine with the generated folders they read).
pub fn root() -> PathBuf {
    match std::env::var_os("STOWAGE_WORKSPACE") {
        Some(root) => PathBuf::from(root),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_path_buf(),
    }
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

/// A tensor of `shape` filled with values in [-0.5, 0.5) from a linear congruential sequence seeded by `seed`: the
/// same on every machine, for suites that compare two backends on made-up weights.
pub fn random_f32s(shape: &[usize], seed: u64) -> Tensor<'static> {
    let n: usize = shape.iter().product();
    let step = |s: u64| s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let mut state = step(seed);
    let data: Vec<f32> = (0..n)
        .map(|_| {
            state = step(state);
            ((state >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        })
        .collect();
    Tensor::from_slice(shape, &data).expect("a shape and as many values")
}

/// Compares `got` with `want`: same datum type and shape, and every element within `atol + rtol * |want|`
/// (NaN matches NaN, infinities match exactly). `Err` says where they differ first.
pub fn compare(got: &Tensor<'_>, want: &Tensor<'_>, rtol: f64, atol: f64) -> Result<(), String> {
    if got.dt() != want.dt() || got.shape() != want.shape() {
        return Err(format!("got {}{:?}, expected {}{:?}", got.dt(), got.shape(), want.dt(), want.shape()));
    }
    if got.dt() == DatumType::Str {
        // Strings compare as text, exactly.
        let text = |t: &Tensor<'_>| strings::handles(t).map(|h| strings::resolve_all(&h)).map_err(|e| e.to_string());
        let (g, w) = (text(got)?, text(want)?);
        return match g.iter().zip(&w).position(|(a, b)| a != b) {
            None => Ok(()),
            Some(i) => Err(format!("strings differ at {i}: got {:?}, expected {:?}", g[i], w[i])),
        };
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

/// Inputs for a model's graph inputs made from their declared types (bytes counting up modulo 7, so integers are
/// small and non-negative), for fuzzing: `None` when an input is not a static tensor of at most 4,096 elements, or
/// the bytes are not a model that decodes within 64 MiB.
pub fn declared_inputs(model: &[u8]) -> Option<Vec<(String, Tensor<'static>)>> {
    use stowage_compiler::onnx::proto::{tensor_shape_proto::dimension::Value, type_proto};
    let model = stowage_compiler::onnx::decode_within(model, 64 << 20).ok()?;
    let g = model.graph.as_ref()?;
    let mut out = Vec::new();
    for vi in g.input.iter().filter(|i| !g.initializer.iter().any(|t| t.name() == i.name())) {
        let Some(type_proto::Value::TensorType(tt)) = vi.r#type.as_ref()?.value.as_ref() else { return None };
        let dt = stowage_compiler::onnx::tensor::datum_type(tt.elem_type()).ok()?;
        let dims = &tt.shape.as_ref()?.dim;
        let shape: Vec<usize> = dims
            .iter()
            .map(|d| match d.value {
                Some(Value::DimValue(v)) if (0..=4096).contains(&v) => Some(v as usize),
                _ => None,
            })
            .collect::<Option<_>>()?;
        let count = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).filter(|&n| n <= 4096)?;
        if dt == DatumType::Str {
            // Strings are handles the table gave out: the digits counting up modulo 7, as text.
            let text: Vec<String> = (0..count).map(|i| (i % 7).to_string()).collect();
            out.push((vi.name().to_string(), strings::tensor_of(&shape, &text).ok()?));
            continue;
        }
        let bytes: Vec<u8> = (0..count * dt.size_of()).map(|i| (i % 7) as u8).collect();
        out.push((vi.name().to_string(), Tensor::from_bytes(dt, &shape, &bytes).ok()?));
    }
    Some(out)
}
