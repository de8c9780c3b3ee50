//! Any bytes: the importer and the import passes return a model or an error, and never panic; a graph they
//! accept always verifies.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stowage_compiler::onnx::{self, ImportConfig};
use stowage_compiler::Context;

fuzz_target!(|data: &[u8]| {
    if let Ok(graph) = onnx::load_bytes(data, &ImportConfig::new()) {
        let mut cx = Context::new(graph);
        cx.set_verify(true);
        if let Err(e) = cx.optimize() {
            assert!(!e.to_string().contains("bug in stowage"), "{e}");
        }
    }
});
