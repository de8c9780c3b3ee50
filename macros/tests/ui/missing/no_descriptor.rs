use stowage_runtime::TensorStorage;

#[derive(TensorStorage)]
struct Host {
    #[storage(buffer)]
    bytes: Vec<u8>,
}

fn main() {}
