use stowage_runtime::TensorStorage;

// A value that does not parse is reported, and the keys after it are still read: only the
// real mistakes are reported, not "missing name" or "missing alignment".
#[derive(TensorStorage)]
#[storage(space = host, space_of = 5 +, name = "host", alignment = 64, colour = red)]
struct Host {
    #[storage(buffer)]
    bytes: Vec<u8>,
}

fn main() {}
