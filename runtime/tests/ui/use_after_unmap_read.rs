// A slice taken from a read mapping cannot outlive it.
use stowage_runtime::Tensor;

fn main() -> Result<(), stowage_runtime::RuntimeError> {
    let t = Tensor::from_slice(&[2], &[1.0f32, 2.0])?;
    let read = t.map_read::<f32>()?;
    let elements: &[f32] = &read;
    drop(read);
    println!("{}", elements[0]);
    Ok(())
}
