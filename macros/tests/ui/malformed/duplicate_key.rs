use stowage_runtime::TensorStorage;

#[derive(TensorStorage)]
#[storage(space = host, name = "host", alignment = 64, alignment = 128)]
struct Host {
    #[storage(buffer)]
    bytes: Vec<u8>,
}

fn main() {}
