//! Graph rewrites, one per file, each a `run(&mut Graph) -> usize` returning how many rewrites it made.
//! [`crate::Context`] runs them in order with the verifier between them.

pub mod activations;
pub mod batchnorm;
pub mod dce;
pub mod fold;
pub mod gelu;
pub mod gemm;
pub mod identity;
pub mod layer_norm;
pub mod powers;
pub mod storage;
