use stowage_runtime::TensorStorage;

#[derive(TensorStorage)]
#[storage(layouts(row_major))]
struct Host {
    #[storage(buffer)]
    bytes: Vec<u8>,
}

fn main() {}
