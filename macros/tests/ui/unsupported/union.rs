use stowage_runtime::TensorStorage;

#[derive(TensorStorage)]
#[storage(space = host, name = "host", alignment = 64)]
union Host {
    word: u64,
    bytes: [u8; 8],
}

fn main() {}
