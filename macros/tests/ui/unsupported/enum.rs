use stowage_runtime::TensorStorage;

#[derive(TensorStorage)]
#[storage(space = host, name = "host", alignment = 64)]
enum Host {
    Bytes(Vec<u8>),
}

fn main() {}
