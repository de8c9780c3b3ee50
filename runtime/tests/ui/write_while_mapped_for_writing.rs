// While a write mapping is open, nothing else writes the tensor.
use stowage_runtime::Tensor;

fn main() -> Result<(), stowage_runtime::RuntimeError> {
    let mut t = Tensor::from_slice(&[2], &[1.0f32, 2.0])?;
    let mut write = t.map_write::<f32>()?;
    t.as_slice_mut::<f32>()?[0] = 3.0;
    write[1] = 4.0;
    Ok(())
}
