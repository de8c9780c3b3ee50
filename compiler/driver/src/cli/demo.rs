//! `stowage demo`: compiles the bundled SqueezeNet, runs it on the input ONNX's test runner uses, checks the
//! result against the bundled reference, and shows what ran where, the copies, the peak memory and the latency.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use crate::pipeline::{self as session, RunOptions};
use prost::Message;
use stowage_compiler::onnx;
use stowage_runtime::Tensor;

const MODEL: &[u8] = include_bytes!("../../demo/squeezenet.onnx");
const REFERENCE: &[u8] = include_bytes!("../../demo/squeezenet_output_0.pb");

pub fn run(threads: usize, defaults: RunOptions) -> Result<String, String> {
    let start = Instant::now();
    let shape = [1usize, 3, 224, 224];
    let n: usize = shape.iter().product();
    let input =
        Tensor::from_vec(&shape, (0..n).map(|i| i as f32 / n as f32).collect::<Vec<_>>()).map_err(|e| e.to_string())?;
    let options = RunOptions { repeat: 10, threads, ..defaults };
    let outcome = session::run_bytes(
        MODEL,
        Path::new("squeezenet.onnx (bundled)"),
        vec![("data_0".into(), input)],
        &options,
        start,
    )?;
    let reference = onnx::proto::TensorProto::decode(REFERENCE).map_err(|e| e.to_string())?;
    let reference = onnx::tensor::decode(&reference, None).map_err(|e| e.to_string())?;
    let (name, got) = &outcome.outputs[0];
    let (g, w) =
        (got.to_vec::<f32>().map_err(|e| e.to_string())?, reference.to_vec::<f32>().map_err(|e| e.to_string())?);
    let max_err = g.iter().zip(&w).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    let ok = g.len() == w.len() && g.iter().zip(&w).all(|(a, b)| (a - b).abs() <= 1e-4 + 1e-3 * b.abs());

    let mut ops: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, op) in &outcome.steps {
        *ops.entry(op).or_default() += 1;
    }
    let mut text = String::new();
    text.push_str("stowage demo: SqueezeNet 1.0 (the onnx package's light model), input 1x3x224x224 f32\n\n");
    text.push_str(&format!(
        "compiled in {:.1} ms to {} steps on target cpu:\n",
        outcome.compile_ms,
        outcome.steps.len()
    ));
    for (op, count) in &ops {
        text.push_str(&format!("  cpu  {count:>3} x {op}\n"));
    }
    let planned: Vec<String> =
        outcome.plan.run_copies().map(|c| format!("  planned: {} '{}' ({})\n", c.kind, c.value, c.reason)).collect();
    let performed = outcome.ledger.entries();
    text.push_str(&format!(
        "\ncopies: {} planned, {} performed ({} bytes moved){}\n{}",
        planned.len(),
        performed.len(),
        outcome.ledger.bytes_moved(),
        if planned.is_empty() && performed.is_empty() {
            ": the input is read where it is, every value stays on the host"
        } else {
            ""
        },
        planned.concat()
    ));
    let host = outcome.plan.arenas.iter().find(|a| a.space == "host");
    let (arena, bound) = host.map_or((0, 0), |a| (a.peak_bytes, a.lower_bound_bytes));
    let mib = |b: usize| b as f64 / (1 << 20) as f64;
    text.push_str(&format!(
        "peak memory: planned arena {:.2} MiB (lower bound {:.2} MiB), measured {:.2} MiB of intermediate values, \
         {:.2} MiB of constants\n\
         latency: first run {:.2} ms, median {:.2} ms over {} runs, {threads} thread(s)\n",
        mib(arena),
        mib(bound),
        mib(outcome.peak_bytes),
        mib(outcome.const_bytes),
        outcome.first_run_ms,
        outcome.run_median_ms,
        options.repeat,
    ));
    text.push_str(&format!(
        "output '{name}': {}{:?}, max |difference| from the reference {max_err:.2e}: {}\n",
        got.dt(),
        got.shape(),
        if ok { "matches (rtol 1e-3, atol 1e-4)" } else { "DOES NOT MATCH" }
    ));
    if ok {
        Ok(text)
    } else {
        Err(format!("the demo's output does not match the reference (max difference {max_err:.2e})"))
    }
}
