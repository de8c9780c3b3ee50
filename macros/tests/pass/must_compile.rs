// Odd but legal inputs the derive must accept: generics, lifetimes, cfg'd fields, paths to
// functions in other modules. Compiled and run.

use std::fmt::Debug;
use std::marker::PhantomData;

use stowage_runtime::{DatumType, DeviceBuffer, MemoryKind, Tensor, TensorStorage};

/// Host storage borrowing caller memory for a lifetime.
#[derive(TensorStorage)]
#[storage(space = host, name = "host", alignment = 1, layouts(row_major, column_major))]
struct Borrowed<'a> {
    #[storage(buffer)]
    bytes: &'a mut [u8],
    #[storage(dtype)]
    dt: DatumType,
    #[storage(shape)]
    shape: Vec<usize>,
}

/// Host storage generic over its buffer type, with a where clause.
#[derive(TensorStorage)]
#[storage(space = host, name = "host", alignment = 64)]
struct Generic<B>
where
    B: AsRef<[u8]> + AsMut<[u8]> + Send + Sync,
{
    #[storage(buffer)]
    bytes: B,
}

/// Device storage generic over a marker, with cfg'd fields and functions in nested modules.
#[derive(Clone, TensorStorage)]
#[storage(
    space = device,
    name = "toy",
    alignment = 128,
    row_pitch_alignment = 128,
    layouts(row_major, padded_rows),
    import_alignment = 4096,
    bandwidth_gbps = 12.5,
    latency_us = 3,
    context = backend::Queue,
    allocate = backend::memory::allocate,
    upload = backend::memory::upload,
    download = backend::memory::download,
    copy = backend::memory::copy,
    wait = backend::memory::wait
)]
struct Toy<T: Clone + Send + Sync + Default + Debug + 'static> {
    #[storage(buffer)]
    memory: backend::memory::Memory,
    #[storage(dtype)]
    dt: DatumType,
    #[storage(shape)]
    shape: Vec<usize>,
    #[cfg(any())]
    never_compiled: u32,
    #[cfg(not(any()))]
    label: String,
    marker: PhantomData<T>,
}

mod backend {
    pub struct Queue;

    pub mod memory {
        use std::sync::Arc;

        use stowage_runtime::{PlainStorage, Result, Transferred};

        #[derive(Clone, Debug)]
        pub struct Memory(pub Arc<PlainStorage>);

        pub fn allocate(_: &super::Queue, len: usize) -> Result<Memory> {
            Ok(Memory(Arc::new(PlainStorage::zeroed(len)?)))
        }
        pub fn upload(_: &super::Queue, bytes: &[u8]) -> Result<Transferred<Memory>> {
            Ok(Transferred { value: Memory(Arc::new(PlainStorage::copy_from(bytes)?)), copied: true })
        }
        pub fn download(memory: &Memory) -> Result<Transferred<Arc<PlainStorage>>> {
            Ok(Transferred { value: Arc::new(PlainStorage::copy_from(memory.0.as_bytes())?), copied: true })
        }
        pub fn copy(_: &Memory, _: &Memory) -> Result<()> {
            Ok(())
        }
        pub fn wait(_: &Memory) -> Result<()> {
            Ok(())
        }
    }
}

fn main() -> Result<(), stowage_runtime::RuntimeError> {
    let mut frame = [1u8, 2, 3, 4];
    let borrowed = Borrowed { bytes: &mut frame, dt: DatumType::U8, shape: vec![2, 2] };
    assert_eq!(Borrowed::DESCRIPTOR.alignment, 1);
    assert_eq!(borrowed.to_string(), "host u8[2, 2], 4 bytes");
    let tensor = borrowed.into_tensor()?;
    assert_eq!(tensor.as_slice::<u8>()?, &[1, 2, 3, 4]);

    let generic = Generic { bytes: vec![0u8; 8] };
    assert_eq!(generic.byte_len(), 8);
    assert!(generic.as_any().is_none());

    let toy = Toy::<u8>::allocate(&backend::Queue, DatumType::F32, &[2, 3])?;
    assert_eq!(DeviceBuffer::byte_len(&toy), 24);
    assert_eq!(toy.label, "");
    let d = <Toy<u8> as DeviceBuffer>::DESCRIPTOR;
    assert_eq!((d.kind, d.alignment, d.row_pitch_alignment, d.import_alignment), (MemoryKind::Device, 128, 128, Some(4096)));
    assert!(!d.can_slice);
    assert!(toy.map_read::<f32>(&Default::default()).is_err(), "not mappable");
    let lazy: Tensor<'static> = toy.into_tensor(Default::default())?;
    assert_eq!(lazy.to_vec::<f32>()?, vec![0.0; 6]);
    Ok(())
}
