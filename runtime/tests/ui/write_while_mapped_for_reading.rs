// A tensor mapped for reading cannot be mapped for writing until the read mapping is gone.
use stowage_runtime::Tensor;

fn main() -> Result<(), stowage_runtime::RuntimeError> {
    let mut t = Tensor::from_slice(&[2], &[1.0f32, 2.0])?;
    let read = t.map_read::<f32>()?;
    let mut write = t.map_write::<f32>()?;
    write[0] = read[1];
    Ok(())
}
