//! map/unmap on a device's buffers (the Glow request's lock/unlock), over the same [`Harness`] as the rules. On a
//! device that is not host-mappable (`mappable = no`) each check that maps a buffer checks instead that mapping is
//! refused with an error.

use crate::{DatumType, DeviceBuffer, Ledger, LedgerTag, MapSupport, MoveKind, RuntimeError};

use super::{bytes, iota, lazy_output, Harness};

/// True (after checking that mapping is refused) when the harness's device is not host-mappable.
fn refuses_mapping<H: Harness>(h: &H) -> bool {
    if <H::Buffer as DeviceBuffer>::DESCRIPTOR.map != MapSupport::No {
        return false;
    }
    let mut buffer = h.produce(&[2], &[1.0, 2.0]);
    assert!(buffer.map_read::<f32>(&LedgerTag::default()).is_err(), "{}: mapped for reading", h.label());
    assert!(buffer.map_write::<f32>(&LedgerTag::default()).is_err(), "{}: mapped for writing", h.label());
    true
}

/// Mapping waits for the pending work on its buffer.
pub fn mapping_waits_for_the_pending_work_on_its_buffer<H: Harness>(h: &H) {
    if refuses_mapping(h) {
        return;
    }
    // The producer is still queued: the mapping sees its values only if it waited for it.
    let buffer = h.produce(&[4], &[1.0, 2.0, 3.0, 4.0]);
    let map = buffer.map_read::<f32>(&LedgerTag::default()).unwrap();
    assert_eq!(&*map, &[1.0, 2.0, 3.0, 4.0], "{}: mapped before the producer finished", h.label());
}

/// Dropping a write mapping makes the device see the writes.
pub fn dropping_a_write_mapping_makes_the_device_see_the_writes<H: Harness>(h: &H) {
    if refuses_mapping(h) {
        return;
    }
    let mut buffer = h.produce(&[4], &iota(4));
    let ledger = Ledger::recording();
    let tag = LedgerTag::new(&ledger, "state");
    {
        let mut map = buffer.map_write::<f32>(&tag).unwrap();
        assert_eq!(&*map, &iota(4)[..]);
        map[2] = 20.0;
    }
    assert_eq!(h.peek(&buffer), bytes(&[0.0, 1.0, 20.0, 3.0]), "{}", h.label());
    let kinds: Vec<_> = ledger.entries().iter().map(|m| (m.kind, m.bytes)).collect();
    if h.unified() {
        assert!(kinds.is_empty(), "{}: {kinds:?}", h.label());
    } else {
        assert_eq!(kinds, vec![(MoveKind::Download, 16), (MoveKind::Upload, 16)], "{}", h.label());
    }
}

/// Unmap publishes the writes.
pub fn unmap_publishes_the_writes<H: Harness>(h: &H) {
    if refuses_mapping(h) {
        return;
    }
    let mut buffer = h.produce(&[2], &[0.0; 2]);
    let mut map = buffer.map_write::<f32>(&LedgerTag::default()).unwrap();
    map.copy_from_slice(&[3.0, 4.0]);
    map.unmap().unwrap();
    assert_eq!(h.peek(&buffer), bytes(&[3.0, 4.0]), "{}", h.label());
}

/// On unified memory a mapping is a pointer not a copy.
pub fn on_unified_memory_a_mapping_is_a_pointer_not_a_copy<H: Harness>(h: &H) {
    if !h.unified() {
        return;
    }
    let mut buffer = h.produce(&[8], &iota(8));
    let ledger = Ledger::recording();
    let read = buffer.map_read::<f32>(&LedgerTag::new(&ledger, "b")).unwrap();
    assert_eq!(Some(read.as_ptr() as usize), h.host_address(&buffer), "{}", h.label());
    drop(read);
    let address = h.host_address(&buffer);
    let write = buffer.map_write::<f32>(&LedgerTag::new(&ledger, "b")).unwrap();
    assert_eq!(Some(write.as_ptr() as usize), address);
    drop(write);
    assert!(ledger.entries().is_empty());
}

/// A mapping of the wrong element size is an error.
pub fn a_mapping_of_the_wrong_element_size_is_an_error<H: Harness>(h: &H) {
    if refuses_mapping(h) {
        return;
    }
    let buffer = h.allocate(DatumType::U8, &[6]);
    let err = buffer.map_read::<f32>(&LedgerTag::new(&Ledger::off(), "odd")).unwrap_err();
    assert!(matches!(err, RuntimeError::View { .. }), "{err}");
    assert!(err.to_string().contains("6 bytes"), "{err}");
}

/// A lazy tensor maps its host bytes once.
pub fn a_lazy_tensor_maps_its_host_bytes_once<H: Harness>(h: &H) {
    let (_buffer, ledger, y) = lazy_output(h, &[4], &iota(4));
    for _ in 0..3 {
        assert_eq!(&*y.map_read::<f32>().unwrap(), &iota(4)[..]);
    }
    assert_eq!(ledger.entries().len(), usize::from(!h.unified()), "{}", h.label());
}

/// One `#[test]` per map/unmap check for a harness made by `$make` in each of `$modes`.
#[macro_export]
macro_rules! map_tests {
    ($make:expr, $modes:expr) => {
        $crate::map_tests!(@each $make, $modes;
            mapping_waits_for_the_pending_work_on_its_buffer,
            dropping_a_write_mapping_makes_the_device_see_the_writes,
            unmap_publishes_the_writes,
            on_unified_memory_a_mapping_is_a_pointer_not_a_copy,
            a_mapping_of_the_wrong_element_size_is_an_error,
            a_lazy_tensor_maps_its_host_bytes_once);
    };
    (@each $make:expr, $modes:expr; $($check:ident),*) => {
        $(
            #[test]
            fn $check() {
                for mode in $modes {
                    $crate::rules::map::$check(&$make(mode));
                }
            }
        )*
    };
}
