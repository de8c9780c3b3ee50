use stowage_runtime::TensorStorage;

#[derive(TensorStorage)]
#[storage(space = host, name = "host", alignment = 64)]
struct Host {
    #[storage(buffer)]
    bytes: Vec<u8>,
    #[storage(strides)]
    strides: Vec<usize>,
}

fn main() {}
