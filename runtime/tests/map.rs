//! map/unmap on device buffers and tensors.

mod common;

use std::time::Duration;

use common::{both_modes, bytemuck_bytes, iota, Mode, TestBuffer, TestContext};
use stowage_runtime::{DatumType, DeviceBuffer, Ledger, LedgerTag, MoveKind, RuntimeError, Tensor};

#[test]
fn mapping_waits_for_the_pending_work_on_its_buffer() {
    both_modes(|mode| {
        let cx = TestContext::new(mode);
        let buffer = TestBuffer::allocate(&cx, DatumType::F32, &[4]).unwrap();
        buffer.queue_write(bytemuck_bytes(&[1.0, 2.0, 3.0, 4.0]), Duration::from_millis(50));
        assert!(buffer.pending() > 0);
        let map = buffer.map_read::<f32>(&LedgerTag::default()).unwrap();
        assert_eq!(&*map, &[1.0, 2.0, 3.0, 4.0], "{mode:?}: mapped before the kernel finished");
        assert_eq!(buffer.pending(), 0);
    });
}

#[test]
fn dropping_a_write_mapping_makes_the_device_see_the_writes() {
    both_modes(|mode| {
        let cx = TestContext::new(mode);
        let mut buffer = cx.produce(&[4], &iota(4));
        let ledger = Ledger::recording();
        let tag = LedgerTag::new(&ledger, "state");
        {
            let mut map = buffer.map_write::<f32>(&tag).unwrap();
            assert_eq!(&*map, &iota(4)[..]);
            map[2] = 20.0;
        }
        assert_eq!(buffer.peek(), bytemuck_bytes(&[0.0, 1.0, 20.0, 3.0]), "{mode:?}");
        let kinds: Vec<_> = ledger.entries().iter().map(|m| (m.kind, m.bytes)).collect();
        match mode {
            Mode::Discrete => assert_eq!(kinds, vec![(MoveKind::Download, 16), (MoveKind::Upload, 16)]),
            Mode::Unified => assert!(kinds.is_empty(), "{kinds:?}"),
        }
    });
}

#[test]
fn unmap_publishes_and_reports() {
    both_modes(|mode| {
        let cx = TestContext::new(mode);
        let mut buffer = cx.produce(&[2], &[0.0; 2]);
        let mut map = buffer.map_write::<f32>(&LedgerTag::default()).unwrap();
        map.copy_from_slice(&[3.0, 4.0]);
        map.unmap().unwrap();
        assert_eq!(buffer.peek(), bytemuck_bytes(&[3.0, 4.0]), "{mode:?}");
        assert_eq!(cx.counters.unmaps.load(std::sync::atomic::Ordering::SeqCst), 1);
    });
}

#[test]
fn on_unified_memory_a_mapping_is_a_pointer_not_a_copy() {
    let cx = TestContext::new(Mode::Unified);
    let mut buffer = cx.produce(&[8], &iota(8));
    let read = buffer.map_read::<f32>(&LedgerTag::default()).unwrap();
    assert_eq!(read.as_ptr() as usize, buffer.address());
    drop(read);
    let address = buffer.address();
    let write = buffer.map_write::<f32>(&LedgerTag::default()).unwrap();
    assert_eq!(write.as_ptr() as usize, address);
    drop(write);
    assert_eq!(cx.counters.downloads() + cx.counters.uploads(), 0);
}

#[test]
fn a_mapping_of_the_wrong_element_size_is_an_error() {
    let cx = TestContext::new(Mode::Discrete);
    let buffer = TestBuffer::allocate(&cx, DatumType::U8, &[6]).unwrap();
    let err = buffer.map_read::<f32>(&LedgerTag::new(&Ledger::off(), "odd")).unwrap_err();
    assert!(matches!(err, RuntimeError::View { .. }), "{err}");
    assert!(err.to_string().contains("6 bytes"), "{err}");
}

#[test]
fn tensors_map_for_reading_and_writing() {
    let mut t = Tensor::from_slice(&[2, 2], &[1i32, 2, 3, 4]).unwrap().with_name("t");
    {
        let read = t.map_read::<i32>().unwrap();
        assert_eq!(&*read, &[1, 2, 3, 4]);
    }
    {
        let mut write = t.map_write::<i32>().unwrap();
        write[3] = 40;
        write.unmap().unwrap();
    }
    assert_eq!(t.as_slice::<i32>().unwrap(), &[1, 2, 3, 40]);
    let err = t.map_read::<f32>().unwrap_err();
    assert_eq!(err.to_string(), "tensor t: expected datum type f32, found i32");
    let transposed = t.permute(&[1, 0]).unwrap();
    let err = transposed.map_read::<i32>().unwrap_err();
    assert!(err.to_string().contains("column-major"), "{err}");
}

#[test]
fn a_bool_tensor_maps_as_bytes() {
    let t = Tensor::from_slice(&[3], &[true, false, true]).unwrap();
    assert_eq!(t.dt(), DatumType::Bool);
    assert_eq!(&*t.map_read::<u8>().unwrap(), &[1, 0, 1]);
}

#[test]
fn a_lazy_tensor_maps_its_host_bytes_once() {
    both_modes(|mode| {
        let (cx, _buffer, ledger, y) = common::lazy_output(mode, &[4], &iota(4));
        for _ in 0..3 {
            assert_eq!(&*y.map_read::<f32>().unwrap(), &iota(4)[..]);
        }
        let copies = usize::from(mode == Mode::Discrete);
        assert_eq!(cx.counters.downloads(), copies);
        assert_eq!(ledger.entries().len(), copies);
    });
}
