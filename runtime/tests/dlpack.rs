//! DLPack in and out (`src/dlpack.rs`), rule by rule: in place both ways, the storage kept alive by an export, the
//! deleter run exactly once, and bad descriptors refused naming the tensor.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use stowage_runtime::dlpark::ffi::{DLDataType, DLDataTypeCode, DLDevice, DLManagedTensor};
use stowage_runtime::dlpark::metadata::Dynamic;
use stowage_runtime::dlpark::Managed;
use stowage_runtime::{DatumType, Tensor};

const LIMIT: usize = 1 << 20;

/// Host data owned by a producer that counts how often it is freed.
struct Owner {
    data: Vec<f32>,
    freed: Arc<AtomicUsize>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.freed.fetch_add(1, Ordering::SeqCst);
    }
}

/// A producer's managed tensor of `shape` and element `strides` over 12 floats 0..12, on `device`, of `dtype`.
fn produced<M: stowage_runtime::dlpark::ManagedTensorBase>(
    shape: Vec<i64>,
    strides: Vec<i64>,
    device: DLDevice,
    dtype: DLDataType,
) -> (Managed<M>, Arc<AtomicUsize>, usize) {
    let freed = Arc::new(AtomicUsize::new(0));
    let mut owner = Box::new(Owner { data: (0..12).map(|v| v as f32).collect(), freed: Arc::clone(&freed) });
    let data = owner.data.as_mut_ptr();
    let mut made = Dynamic::new(shape, strides).initialize_as::<M>(owner).expect("allocates");
    made.set_data(data.cast()).set_dtype(dtype).set_device(device);
    // SAFETY: the data lives in the owner, which the managed tensor holds.
    (unsafe { made.finish() }, freed, data as usize)
}

#[test]
fn an_export_is_in_place_keeps_its_storage_and_reads_back_in_every_layout() {
    let t = Tensor::from_vec(&[3, 4], (0..12).map(|v| v as f32).collect()).expect("tensor").with_name("t");
    let address = t.as_bytes().expect("bytes").as_ptr() as usize;
    // Column-major and a view of two columns cross as they are (rule 1).
    for (view, want) in [
        (t.clone(), (0..12).map(|v| v as f32).collect::<Vec<_>>()),
        (t.permute(&[1, 0]).expect("transposed"), vec![0., 4., 8., 1., 5., 9., 2., 6., 10., 3., 7., 11.]),
        (t.slice(1, 1..3).expect("slice"), vec![1., 2., 5., 6., 9., 10.]),
    ] {
        let exported = view.to_dlpack().expect("exports");
        let described = exported.validate().expect("valid");
        assert_eq!(described.data_ptr() as usize, address, "in place");
        assert_eq!(described.device(), DLDevice::CPU);
        assert_eq!(exported.flags(), stowage_runtime::dlpark::DlpackFlags::READ_ONLY);
        drop(view);
        // Rule 2: the export holds the storage; read back in place, the same elements.
        let back = Tensor::from_dlpack(exported, "back", LIMIT).expect("imports");
        assert_eq!(back.storage().host_bytes().expect("bytes").as_ptr() as usize, address);
        assert_eq!(back.to_vec::<f32>().expect("reads"), want);
    }
    assert_eq!(t.to_vec::<f32>().expect("reads").len(), 12);
}

#[test]
fn an_import_is_in_place_and_the_deleter_runs_once_after_the_last_reader() {
    let (managed, freed, address) = produced::<DLManagedTensor>(
        vec![3, 2],
        vec![1, 3],
        DLDevice::CPU,
        DLDataType::new(DLDataTypeCode::FLOAT, 32, 1),
    );
    let t = Tensor::from_dlpack(managed, "x", LIMIT).expect("imports");
    assert_eq!(t.storage().host_bytes().expect("bytes").as_ptr() as usize, address, "rule 4: in place");
    assert_eq!(t.shape(), &[3, 2]);
    assert_eq!(t.to_vec::<f32>().expect("reads"), vec![0., 3., 1., 4., 2., 5.]);
    let shared = t.clone();
    drop(t);
    assert_eq!(freed.load(Ordering::SeqCst), 0, "a reader remains");
    drop(shared);
    assert_eq!(freed.load(Ordering::SeqCst), 1, "freed once, after the last reader");
}

#[test]
fn bad_descriptors_are_refused_naming_the_tensor_and_freed_once() {
    let f32_type = DLDataType::new(DLDataTypeCode::FLOAT, 32, 1);
    // Shape, strides, device, type, limit, and what the error says.
    type Case = (Vec<i64>, Vec<i64>, DLDevice, DLDataType, usize, &'static str);
    let cases: [Case; 5] = [
        (
            vec![3, 4],
            vec![4, 1],
            DLDevice::cuda(0),
            f32_type,
            LIMIT,
            "it is on device type 2 (id 0); this import takes 1",
        ),
        (
            vec![3, 4],
            vec![4, 1],
            DLDevice::CPU,
            DLDataType::new(DLDataTypeCode::COMPLEX, 64, 1),
            LIMIT,
            "is none of stowage's",
        ),
        (vec![3, 4], vec![4, 1], DLDevice::CPU, DLDataType::new(DLDataTypeCode::FLOAT, 32, 4), LIMIT, "4 lanes"),
        (
            vec![3, 4],
            vec![-4, 1],
            DLDevice::CPU,
            f32_type,
            LIMIT,
            "axis 0 has stride -4: negative strides are not supported",
        ),
        (vec![3, 4], vec![4, 1], DLDevice::CPU, f32_type, 16, "it spans 48 bytes, over the 16-byte limit"),
    ];
    for (shape, strides, device, dtype, limit, want) in cases {
        let (managed, freed, _) = produced::<DLManagedTensor>(shape, strides, device, dtype);
        let err = Tensor::from_dlpack(managed, "frame", limit).expect_err(want).to_string();
        assert!(err.starts_with("DLPack tensor frame: ") && err.contains(want), "{err}");
        assert_eq!(freed.load(Ordering::SeqCst), 1, "{want}: refused, freed once");
    }
    assert_eq!(DatumType::ALL.len(), 24);
}

/// float8 crosses as DLPack's float8 codes, one byte each; the 4- and 2-bit types, which DLPack packs and stowage
/// holds one per byte, are refused naming the tensor, both ways.
#[test]
fn small_types_cross_when_their_bytes_are_dlpacks() {
    let f8 = Tensor::from_bytes(DatumType::F8E5M2, &[2], &[0x3C, 0xBC]).expect("tensor");
    let exported = f8.to_dlpack().expect("float8 exports");
    let back = Tensor::from_dlpack(exported, "f8", LIMIT).expect("and imports");
    assert_eq!((back.dt(), back.as_bytes().expect("host")), (DatumType::F8E5M2, &[0x3C, 0xBC][..]));
    let i4 = Tensor::from_bytes(DatumType::I4, &[2], &[1, 0xFF]).expect("tensor").with_name("codes");
    let Err(err) = i4.to_dlpack() else { panic!("i4 is packed in DLPack: refused") };
    let err = err.to_string();
    assert!(err.contains("codes") && err.contains("i4 is held one element per byte"), "{err}");
    assert_eq!(stowage_runtime::datum_type(DLDataType::new(DLDataTypeCode::INT, 4, 1)), None);
}
