// A slice taken from a write mapping cannot be used after the unmap.
use stowage_runtime::Tensor;

fn main() -> Result<(), stowage_runtime::RuntimeError> {
    let mut t = Tensor::from_slice(&[2], &[1.0f32, 2.0])?;
    let mut write = t.map_write::<f32>()?;
    let elements: &mut [f32] = &mut write;
    write.unmap()?;
    elements[0] = 5.0;
    Ok(())
}
