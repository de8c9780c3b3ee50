use stowage_runtime::TensorStorage;

#[derive(Clone, TensorStorage)]
#[storage(space = device, name = "npu", alignment = 64, staging = sometimes, bandwidth_gbps = 8, latency_us = 5,
          context = (), allocate = a, upload = u, download = d, wait = w, copy = c)]
struct Npu {
    #[storage(buffer)]
    mem: Vec<u8>,
    #[storage(dtype)]
    dt: stowage_runtime::DatumType,
    #[storage(shape)]
    shape: Vec<usize>,
}

fn main() {}
