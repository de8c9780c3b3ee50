use stowage_runtime::{DatumType, TensorStorage};

// Four independent mistakes: all four are reported, each at its own attribute.
#[derive(TensorStorage)]
#[storage(space = host, name = "host", alignment = 3, colour = red, row_pitch_alignment = 12, layouts(padded_rows))]
struct Host {
    #[storage(buffer)]
    bytes: Vec<u8>,
    #[storage(dtype, shape)]
    dt: DatumType,
}

fn main() {}
