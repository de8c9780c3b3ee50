use stowage_runtime::TensorStorage;

#[derive(TensorStorage)]
#[storage(space = host, name = "host", alignment = 64)]
struct Host<const N: usize> {
    #[storage(buffer)]
    bytes: [u8; N],
}

fn main() {}
