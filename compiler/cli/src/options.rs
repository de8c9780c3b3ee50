//! Parsing of the planning options shared by `run`, `plan`, `build` and `import`.

use clap::Args;
use stowage_compiler::onnx::{self, ImportConfig};

/// `--input-shape` and `--input-value`.
#[derive(Args, Debug, Default)]
pub struct ShapeOptions {
    /// Fix an input's shape, symbolic dimensions included: NAME=1,3,224,224 (repeatable).
    #[arg(long = "input-shape", value_name = "NAME=DIMS")]
    pub input_shapes: Vec<String>,
    /// Fold an input's value as a constant, read from an ONNX TensorProto file: NAME=FILE.pb (repeatable).
    #[arg(long = "input-value", value_name = "NAME=FILE.pb")]
    pub input_values: Vec<String>,
}

fn split_spec<'a>(flag: &str, spec: &'a str) -> Result<(&'a str, &'a str), String> {
    spec.split_once('=')
        .filter(|(n, v)| !n.is_empty() && !v.is_empty())
        .ok_or_else(|| format!("{flag} '{spec}': expected NAME=VALUE"))
}

impl ShapeOptions {
    /// The import configuration these options describe.
    pub fn config(&self) -> Result<ImportConfig, String> {
        let mut config = ImportConfig::new();
        for spec in &self.input_shapes {
            let (name, dims) = split_spec("--input-shape", spec)?;
            let shape =
                dims.split(',').map(|d| d.trim().parse::<usize>()).collect::<Result<Vec<_>, _>>().map_err(|_| {
                    format!("--input-shape '{spec}': dimensions must be non-negative integers, like 1,3,224,224")
                })?;
            config = config.input_shape(name, shape);
        }
        for spec in &self.input_values {
            let (name, file) = split_spec("--input-value", spec)?;
            let value = onnx::read_tensor(file).map_err(|e| format!("--input-value {name}: {e}"))?;
            config = config.input_value(name, value);
        }
        Ok(config)
    }
}
