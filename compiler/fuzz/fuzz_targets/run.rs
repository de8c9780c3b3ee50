//! Any bytes, through the whole pipeline on the CPU: import, the passes, planning, compiling and a run with inputs
//! made from the graph's declared input types. Outputs or an error, never a panic; values are limited to 64 MiB,
//! so a shape bomb is refused rather than allocated. The bounded version runs in CI: `tests/tests/fuzz_run.rs`.
#![no_main]

use std::time::Instant;

use libfuzzer_sys::fuzz_target;
use stowage_cli::session::{self, RunOptions};
use stowage_compiler::onnx::ImportConfig;

fuzz_target!(|data: &[u8]| {
    let Some(given) = stowage_tests::declared_inputs(data) else { return };
    let options = RunOptions {
        target: "cpu".into(),
        config: ImportConfig::new().max_value_bytes(64 << 20),
        ..stowage_cli::run_options()
    };
    if let Err(e) = session::run_bytes(data, std::path::Path::new("fuzz.onnx"), given, &options, Instant::now()) {
        assert!(!e.to_string().contains("bug in stowage"), "{e}");
    }
});
