use stowage_runtime::TensorStorage;

#[derive(TensorStorage)]
#[storage(space = gpu, name = "host", alignment = 64)]
struct Host {
    #[storage(buffer)]
    bytes: Vec<u8>,
}

fn main() {}
