use stowage_runtime::{DatumType, TensorStorage};

#[derive(Clone, TensorStorage)]
#[storage(space = device, name = "gpu", alignment = 256, context = Queue, allocate = gpu::allocate, upload = gpu::upload, copy = gpu::copy, wait = gpu::wait, bandwidth_gbps = 10, latency_us = 5)]
struct Gpu {
    #[storage(buffer)]
    mem: gpu::Mem,
    #[storage(dtype)]
    dt: DatumType,
    #[storage(shape)]
    shape: Vec<usize>,
}

#[path = "../gpu_backend.rs"]
mod gpu;
use gpu::Queue;

fn main() {}
