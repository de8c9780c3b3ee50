use stowage_runtime::{DatumType, TensorStorage};

#[derive(Clone, TensorStorage)]
#[storage(space = device, name = "gpu", alignment = 256, mappable = copy, download = gpu::download, context = Queue, allocate = gpu::allocate, upload = gpu::upload, copy = gpu::copy, wait = gpu::wait, bandwidth_gbps = 10, latency_us = 5)]
struct Gpu {
    #[storage(buffer)]
    mem: gpu::Mem,
    #[storage(dtype)]
    dt: DatumType,
    #[storage(shape)]
    shape: Vec<usize>,
}

struct Queue;

mod gpu {
    use stowage_runtime::{PlainStorage, Result, Transferred};
    use std::sync::Arc;

    #[derive(Clone, Debug)]
    pub struct Mem;
    pub fn allocate(_: &super::Queue, _: usize) -> Result<Mem> { Ok(Mem) }
    pub fn upload(_: &super::Queue, _: &[u8]) -> Result<Transferred<Mem>> { Ok(Transferred { value: Mem, copied: true }) }
    pub fn download(_: &Mem) -> Result<Transferred<Arc<PlainStorage>>> { Ok(Transferred { value: Arc::new(PlainStorage::zeroed(0)?), copied: true }) }
    pub fn copy(_: &Mem, _: &Mem) -> Result<()> { Ok(()) }
    pub fn wait(_: &Mem) -> Result<()> { Ok(()) }
}

fn main() {}
