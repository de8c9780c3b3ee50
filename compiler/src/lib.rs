//! stowage's compiler: ONNX import, the IR, the pass pipeline, planning and emission.
//!
//! Empty until the ONNX import issue lands; see ARCHITECTURE.md for what goes here.
