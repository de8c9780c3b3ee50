//! stowage's compiler: ONNX import, the IR, shape inference, and the pass pipeline.
//!
//! The flow is plain code, as in Cranelift's `Context`:
//! ```no_run
//! use stowage_compiler::{onnx::ImportConfig, Context};
//! let mut cx = Context::import("model.onnx", &ImportConfig::new())?;
//! cx.optimize()?; // fold constants, drop Identity/Dropout, BatchNorm into Conv, MatMul+Add to Gemm, dead code
//! println!("{}", cx.print());
//! for t in cx.timings() {
//!     eprintln!("{t}");
//! }
//! # Ok::<(), stowage_compiler::Error>(())
//! ```

pub mod consts;
mod context;
mod error;
pub mod eval;
pub mod infer;
pub mod ir;
pub mod lowering;
pub mod onnx;
pub mod passes;
pub mod plan;

pub use context::{Context, Error, PassTiming};
pub use error::{ImportError, ImportErrorKind, UnsupportedOp};
