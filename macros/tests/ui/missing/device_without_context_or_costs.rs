use stowage_runtime::{DatumType, TensorStorage};

#[derive(Clone, TensorStorage)]
#[storage(space = unified, name = "igpu", alignment = 256, allocate = gpu::allocate, upload = gpu::upload, download = gpu::download, copy = gpu::copy)]
struct Igpu {
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
