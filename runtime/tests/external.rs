//! Caller memory used in place: zero copies when it fits, one recorded copy when not, and
//! a release callback that runs exactly once.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use stowage_runtime::{
    Accepts, DatumType, ExternalStorage, Layout, LayoutNeed, Ledger, LedgerTag, MoveKind, PlainStorage, RuntimeError,
    Tensor,
};

const ROW_MAJOR_64: LayoutNeed = LayoutNeed { alignment: 64, accepts: Accepts::RowMajor };

fn aligned_bytes(len: usize) -> PlainStorage {
    let mut plain = PlainStorage::zeroed(len + 64).unwrap();
    for (i, b) in plain.as_bytes_mut().iter_mut().enumerate() {
        *b = i as u8;
    }
    plain
}

/// `conform`'s result, checked to be what `need` reads in place, and the ledger.
fn check<'a>(tensor: &Tensor<'a>, need: &LayoutNeed) -> (Tensor<'a>, Vec<stowage_runtime::Move>) {
    let ledger = Ledger::recording();
    let out = tensor.conform(need, &LedgerTag::new(&ledger, "frame")).unwrap();
    let address = out.storage().host_bytes().unwrap().as_ptr() as usize + out.layout().offset();
    assert_eq!(address % need.alignment, 0, "conform returned misaligned memory");
    if need.accepts == Accepts::RowMajor {
        assert!(out.is_row_major(), "conform returned {}", out.layout_kind());
    }
    (out, ledger.entries())
}

#[test]
fn memory_that_already_fits_is_read_in_place() {
    let memory = aligned_bytes(4 * 6);
    let bytes = &memory.as_bytes()[..24];
    let layout = Layout::row_major(DatumType::F32, &[2, 3]).unwrap();
    let t = Tensor::external(DatumType::F32, &[2, 3], layout, ExternalStorage::borrowed(bytes)).unwrap();
    let ledger = Ledger::recording();
    let ready = t.conform(&ROW_MAJOR_64, &LedgerTag::new(&ledger, "frame")).unwrap();
    assert!(ready.shares_storage_with(&t));
    assert_eq!(ready.as_slice::<f32>().unwrap().as_ptr() as usize, bytes.as_ptr() as usize);
    assert!(ledger.entries().is_empty());
}

#[test]
fn misaligned_memory_costs_exactly_one_copy_that_says_why() {
    let memory = aligned_bytes(16 + 3);
    let bytes = &memory.as_bytes()[3..19];
    let layout = Layout::row_major(DatumType::U8, &[16]).unwrap();
    let t = Tensor::external(DatumType::U8, &[16], layout, ExternalStorage::borrowed(bytes)).unwrap();
    let (copy, entries) = check(&t, &ROW_MAJOR_64);
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].kind, MoveKind::Relayout);
    assert_eq!(entries[0].bytes, 16);
    assert_eq!(entries[0].reason, "misaligned by 3 bytes for 64-byte alignment");
    assert_eq!(copy.as_slice::<u8>().unwrap(), bytes);
    assert_eq!(copy.as_slice::<u8>().unwrap().as_ptr() as usize % 64, 0);
}

#[test]
fn rows_padded_wrongly_cost_exactly_one_copy_that_says_why() {
    // A [1, 4, 5, 3] u8 NHWC frame with 17-byte rows, for a consumer that reads rows padded
    // to a multiple of 16 bytes.
    let shape = [1, 4, 5, 3];
    let memory = aligned_bytes(17 * 4);
    let layout = Layout::padded(DatumType::U8, &shape, 1, 17).unwrap();
    let t = Tensor::external(DatumType::U8, &shape, layout, ExternalStorage::borrowed(memory.as_bytes())).unwrap();
    let need = LayoutNeed { alignment: 16, accepts: Accepts::PaddedRows { axis: 1, pitch_multiple: 16 } };
    let ledger = Ledger::recording();
    let out = t.conform(&need, &LedgerTag::new(&ledger, "frame")).unwrap();
    let entries = ledger.entries();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].reason, "row pitch 17 bytes is not a multiple of 16");
    assert_eq!(out.layout().strides(), &[64, 16, 3, 1]);
    assert_eq!(out.to_vec::<u8>().unwrap(), t.to_vec::<u8>().unwrap());

    // The same frame with 32-byte rows fits as it is.
    let good = Layout::padded(DatumType::U8, &shape, 1, 32).unwrap();
    let memory = aligned_bytes(32 * 4);
    let t = Tensor::external(DatumType::U8, &shape, good, ExternalStorage::borrowed(memory.as_bytes())).unwrap();
    let ledger = Ledger::recording();
    let out = t.conform(&need, &LedgerTag::new(&ledger, "frame")).unwrap();
    assert!(out.shares_storage_with(&t));
    assert!(ledger.entries().is_empty());
}

#[test]
fn column_major_memory_for_a_row_major_consumer_is_one_relayout() {
    let memory = aligned_bytes(24);
    let values: Vec<f32> = (0..6).map(|i| i as f32).collect();
    let mut plain = memory.clone();
    plain.as_bytes_mut()[..24].copy_from_slice(stowage_runtime::bytemuck::cast_slice(&values));
    let layout = Layout::column_major(DatumType::F32, &[2, 3]).unwrap();
    let t =
        Tensor::external(DatumType::F32, &[2, 3], layout, ExternalStorage::borrowed(&plain.as_bytes()[..24])).unwrap();
    let (copy, entries) = check(&t, &ROW_MAJOR_64);
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].reason, "column-major where row-major is needed");
    // Column-major [2, 3]: element (r, c) is at r + 2c.
    assert!(!copy.shares_storage_with(&t));
    assert_eq!(copy.as_slice::<f32>().unwrap(), &[0.0, 2.0, 4.0, 1.0, 3.0, 5.0]);
    // Both wrong at once: still one copy, with both reasons.
    let layout = Layout::column_major(DatumType::F32, &[2, 3]).unwrap();
    let t =
        Tensor::external(DatumType::F32, &[2, 3], layout, ExternalStorage::borrowed(&plain.as_bytes()[4..28])).unwrap();
    let (_, entries) = check(&t, &ROW_MAJOR_64);
    assert_eq!(entries.len(), 1);
    assert_eq!(
        entries[0].reason,
        "misaligned by 4 bytes for 64-byte alignment; column-major where row-major is needed"
    );
}

/// Caller memory handed over as a raw pointer, with a release callback that counts.
fn raw(memory: &Arc<Vec<u8>>, releases: &Arc<AtomicUsize>) -> ExternalStorage<'static> {
    let keep = Arc::clone(memory);
    let count = Arc::clone(releases);
    let ptr = NonNull::new(memory.as_ptr().cast_mut()).unwrap();
    // SAFETY: `keep` holds the allocation until the callback runs, and nobody writes it.
    unsafe {
        ExternalStorage::from_raw_parts(
            ptr,
            memory.len(),
            Box::new(move || {
                count.fetch_add(1, Ordering::SeqCst);
                drop(keep);
            }),
        )
    }
}

#[test]
fn the_release_callback_runs_exactly_once() {
    let memory = Arc::new(vec![1u8; 64]);
    let releases = Arc::new(AtomicUsize::new(0));
    let layout = Layout::row_major(DatumType::U8, &[64]).unwrap();
    let t = Tensor::external(DatumType::U8, &[64], layout, raw(&memory, &releases)).unwrap();
    let view = t.slice(0, 8..16).unwrap();
    let clone = t.deep_clone().unwrap();
    drop(t);
    assert_eq!(releases.load(Ordering::SeqCst), 0, "a view still uses the memory");
    assert_eq!(view.as_slice::<u8>().unwrap(), &[1; 8]);
    drop(view);
    assert_eq!(releases.load(Ordering::SeqCst), 1);
    drop(clone);
    assert_eq!(releases.load(Ordering::SeqCst), 1);
}

#[test]
fn the_release_callback_runs_once_on_error_paths_too() {
    let memory = Arc::new(vec![0u8; 10]);
    let releases = Arc::new(AtomicUsize::new(0));
    // Too short for the shape: the tensor is refused, and the memory released.
    let layout = Layout::row_major(DatumType::F32, &[3]).unwrap();
    let err = Tensor::external(DatumType::F32, &[3], layout, raw(&memory, &releases)).unwrap_err();
    assert!(matches!(err, RuntimeError::ByteLength { expected: 12, found: 10, .. }), "{err}");
    assert_eq!(releases.load(Ordering::SeqCst), 1);
    assert_eq!(Arc::strong_count(&memory), 1);
}

#[test]
fn a_host_write_copies_out_of_caller_memory_and_releases_it_once() {
    let memory = Arc::new(vec![5u8; 4]);
    let releases = Arc::new(AtomicUsize::new(0));
    let layout = Layout::row_major(DatumType::U8, &[4]).unwrap();
    let mut t = Tensor::external(DatumType::U8, &[4], layout, raw(&memory, &releases)).unwrap();
    t.as_slice_mut::<u8>().unwrap()[0] = 9;
    assert_eq!(t.as_slice::<u8>().unwrap(), &[9, 5, 5, 5]);
    assert_eq!(*memory, vec![5u8; 4], "the caller's memory was written");
    assert_eq!(releases.load(Ordering::SeqCst), 1, "released once copied out");
    drop(t);
    assert_eq!(releases.load(Ordering::SeqCst), 1);
}

#[test]
fn typed_access_to_misaligned_caller_memory_is_an_error_not_a_panic() {
    let memory = aligned_bytes(16);
    let bytes = &memory.as_bytes()[1..13];
    let layout = Layout::row_major(DatumType::F32, &[3]).unwrap();
    let t = Tensor::external(DatumType::F32, &[3], layout, ExternalStorage::borrowed(bytes)).unwrap().with_name("cam");
    let err = t.as_slice::<f32>().unwrap_err();
    assert!(matches!(err, RuntimeError::Misaligned { alignment: 4, .. }), "{err}");
    assert!(err.to_string().starts_with("tensor cam:"), "{err}");
    // Element-wise reads do not need alignment.
    assert_eq!(t.to_vec::<f32>().unwrap().len(), 3);
}
