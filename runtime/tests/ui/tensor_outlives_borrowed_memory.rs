// A tensor over borrowed caller memory cannot outlive the borrow.
use stowage_runtime::{DatumType, ExternalStorage, Layout, Tensor};

fn main() -> Result<(), stowage_runtime::RuntimeError> {
    let tensor;
    {
        let frame = vec![0u8; 4];
        let layout = Layout::row_major(DatumType::U8, &[4])?;
        tensor = Tensor::external(DatumType::U8, &[4], layout, ExternalStorage::borrowed(&frame))?;
    }
    println!("{tensor}");
    Ok(())
}
