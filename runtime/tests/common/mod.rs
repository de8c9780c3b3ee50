//! Shared by the runtime's integration tests.

#![allow(dead_code)]

pub mod test_device;

use stowage_runtime::{Ledger, LedgerTag, Tensor};
pub use test_device::{Mode, TestBuffer, TestContext};

/// Run `check` once in each mode of the test device.
pub fn both_modes(check: impl Fn(Mode)) {
    for mode in [Mode::Unified, Mode::Discrete] {
        check(mode);
    }
}

/// `values` produced on a fresh test device by a kernel still running, wrapped as the model
/// output `y` would be at the boundary.
pub fn lazy_output(mode: Mode, shape: &[usize], values: &[f32]) -> (TestContext, TestBuffer, Ledger, Tensor<'static>) {
    let cx = TestContext::new(mode);
    let buffer = cx.produce(shape, values);
    let ledger = Ledger::recording();
    let tensor = buffer.clone().into_tensor(LedgerTag::new(&ledger, "y")).expect("wrapping an owned buffer");
    (cx, buffer, ledger, tensor)
}

/// The bytes of `values`.
pub fn bytemuck_bytes(values: &[f32]) -> Vec<u8> {
    stowage_runtime::bytemuck::cast_slice(values).to_vec()
}

/// `0.0, 1.0, …` as f32.
pub fn iota(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32).collect()
}
