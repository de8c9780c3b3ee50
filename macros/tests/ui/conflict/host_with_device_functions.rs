use stowage_runtime::TensorStorage;

#[derive(TensorStorage)]
#[storage(space = host, name = "host", alignment = 64, download = fetch, import_alignment = 64)]
struct Host {
    #[storage(buffer)]
    bytes: Vec<u8>,
}

fn main() {}
