//! The CLI's flags beside `stowage run`'s run-time ones: `--input-shape`, `--input-value` and the planning flags.

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
    /// The most bytes one value may have (a node's output, an input): larger ones are refused at import, before
    /// anything is allocated [default: 17179869184, 16 GiB].
    #[arg(long = "max-value-bytes", value_name = "N")]
    pub max_value_bytes: Option<usize>,
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
        config.max_value_bytes = self.max_value_bytes;
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
            let limit = self.max_value_bytes.unwrap_or(onnx::DEFAULT_MAX_VALUE_BYTES);
            let value = onnx::read_tensor_within(file, limit).map_err(|e| format!("--input-value {name}: {e}"))?;
            config = config.input_value(name, value);
        }
        Ok(config)
    }
}

/// The planning options of `run`, `plan` and `build`: caller layouts, fed-back state, a copy budget.
#[derive(Args, Debug, Default, Clone)]
pub struct PlanningFlags {
    /// The memory layout of an input as the caller holds it, read in place where a kernel can:
    /// NAME=nhwc,row-pitch=BYTES (words: row-major, column-major, nchw, nhwc, order=0.2.3.1, row-pitch=, align=).
    #[arg(long = "input-layout", value_name = "NAME=LAYOUT")]
    pub input_layouts: Vec<String>,
    /// An output fed back as the next run's input: OUT=IN. It stays on its device between runs.
    #[arg(long = "state", value_name = "OUT=IN")]
    pub states: Vec<String>,
    /// An input that already lives on a device when a run starts: NAME=TARGET (a target of --target, or its
    /// memory: opencl:0). `stowage run` puts the file's tensor there before the runs (report: placed_inputs).
    #[arg(long = "input-device", value_name = "NAME=TARGET")]
    pub input_devices: Vec<String>,
    /// Arithmetic precision: fp32 (the default), tf32, fp16 or bf16, for every target, or TARGET=P for one
    /// (repeatable; a target as in --target, or its memory: opencl:0). A target that cannot is an error, or a
    /// fallback the plan and the report show.
    #[arg(long = "precision", value_name = "[TARGET=]P")]
    pub precisions: Vec<String>,
    /// Fail planning when a run would make more copies than this.
    #[arg(long = "max-copies", value_name = "N")]
    pub max_copies: Option<usize>,
    /// Fail planning when a run would copy more bytes than this.
    #[arg(long = "max-copy-bytes", value_name = "N")]
    pub max_copy_bytes: Option<usize>,
}

impl PlanningFlags {
    /// The planning request these flags describe (layouts are parsed once the model's inputs are known).
    pub fn planning(&self) -> Result<crate::pipeline::Planning, String> {
        let mut p = crate::pipeline::Planning {
            max_copies: self.max_copies,
            max_copy_bytes: self.max_copy_bytes,
            ..Default::default()
        };
        for spec in &self.input_layouts {
            let (name, layout) = split_spec("--input-layout", spec)?;
            p.input_layouts.push((name.to_string(), layout.to_string()));
        }
        for spec in &self.states {
            let (out, inp) = split_spec("--state", spec)?;
            p.states.push((out.to_string(), inp.to_string()));
        }
        for spec in &self.input_devices {
            let (name, target) = split_spec("--input-device", spec)?;
            p.input_devices.push((name.to_string(), target.to_string()));
        }
        for spec in &self.precisions {
            match spec.split_once('=') {
                None => p.precision = Some(spec.parse().map_err(|e| format!("--precision {spec}: {e}"))?),
                Some(_) => {
                    let (target, word) = split_spec("--precision", spec)?;
                    let precision = word.parse().map_err(|e| format!("--precision {spec}: {e}"))?;
                    p.target_precisions.push((target.to_string(), precision));
                }
            }
        }
        Ok(p)
    }
}
