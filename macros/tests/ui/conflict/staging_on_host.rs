use stowage_runtime::TensorStorage;

#[derive(TensorStorage)]
#[storage(space = host, name = "host", alignment = 64, staging = pinned)]
struct Host {
    #[storage(buffer)]
    bytes: Vec<u8>,
}

fn main() {}
