use stowage_runtime::TensorStorage;

#[derive(TensorStorage)]
#[storage(space = host, name = "host", alignment = 64)]
struct Host {
    bytes: Vec<u8>,
}

fn main() {}
