//! What `#[derive(TensorStorage)]` generates for the test device beyond the lazy-host rules:
//! the descriptor, formatting that never reads device bytes, allocation, device copies.

mod common;

use common::{both_modes, bytemuck_bytes, iota, TestBuffer, TestContext};
use stowage_runtime::{DatumType, DeviceBuffer, Ledger, LedgerTag, MapSupport, MemoryKind, MoveKind};

#[test]
fn the_descriptor_is_the_attributes() {
    let d = TestBuffer::DESCRIPTOR;
    assert_eq!(d, <TestBuffer as DeviceBuffer>::DESCRIPTOR);
    assert_eq!((d.name, d.kind, d.alignment, d.map), ("test", MemoryKind::Device, 64, MapSupport::Copy));
    assert_eq!((d.bandwidth_gbps, d.latency_us, d.can_slice), (16.0, 5.0, true));
    // 1 MB at 16 GB/s plus 5 µs.
    assert!((d.transfer_us(1_000_000) - 67.5).abs() < 1e-9);
}

#[test]
fn debug_and_display_never_read_device_bytes() {
    both_modes(|mode| {
        let cx = TestContext::new(mode);
        let buffer = cx.produce(&[2, 3], &iota(6));
        let shown = buffer.to_string();
        let debug = format!("{buffer:?}");
        assert!(shown.ends_with("f32[2, 3], 24 bytes"), "{shown}");
        assert!(debug.starts_with("TestBuffer { space: MemorySpace"), "{debug}");
        assert_eq!(cx.counters.downloads() + cx.counters.maps.load(std::sync::atomic::Ordering::SeqCst), 0);
    });
}

#[test]
fn allocate_and_copy_on_the_device_are_recorded() {
    both_modes(|mode| {
        let cx = TestContext::new(mode);
        let src = cx.produce(&[4], &iota(4));
        let mut dst = TestBuffer::allocate(&cx, DatumType::F32, &[4]).unwrap();
        src.wait().unwrap();
        let ledger = Ledger::recording();
        dst.copy_from(&src, &LedgerTag::new(&ledger, "state")).unwrap();
        assert_eq!(dst.peek(), bytemuck_bytes(&iota(4)));
        let entries = ledger.entries();
        assert_eq!(entries.len(), 1);
        assert_eq!((entries[0].kind, entries[0].bytes), (MoveKind::DeviceToDevice, 16));
        assert_eq!(cx.counters.downloads() + cx.counters.uploads(), 0, "{mode:?}");
    });
}

#[test]
fn a_padded_input_is_uploaded_as_it_is_held_or_packed() {
    use stowage_runtime::{device_input, device_input_as_held, Layout, PlainStorage, Tensor};
    // f32[3, 2] in rows of 4 floats: the span is 2 rows of 16 bytes and the last row's 8.
    let values: Vec<f32> = (0..12).map(|i| i as f32).collect();
    let storage = PlainStorage::copy_from(&bytemuck_bytes(&values)).unwrap();
    let layout = Layout::padded(DatumType::F32, &[3, 2], 0, 16).unwrap();
    let x = Tensor::from_storage(DatumType::F32, &[3, 2], layout, storage).unwrap().with_name("x");
    both_modes(|mode| {
        let cx = TestContext::new(mode);
        let ledger = Ledger::recording();
        let held = device_input_as_held::<TestBuffer>(&x, &[4, 1], &cx, &ledger).unwrap();
        assert_eq!(held.peek(), bytemuck_bytes(&values[..10]), "the caller's bytes, padding and all");
        let moves = ledger.take();
        assert_eq!(moves.len(), 1, "{moves:?}");
        assert_eq!((moves[0].kind, moves[0].bytes), (MoveKind::Upload, 40));
        // Packed for kernels that read packed rows: a relayout on the host, then the upload (the test device
        // has no `upload_with`).
        let packed = device_input::<TestBuffer>(&x, &cx, &ledger).unwrap();
        assert_eq!(packed.peek(), bytemuck_bytes(&[0.0f32, 1.0, 4.0, 5.0, 8.0, 9.0]));
        let kinds: Vec<MoveKind> = ledger.take().iter().map(|m| m.kind).collect();
        assert_eq!(kinds, [MoveKind::Relayout, MoveKind::Upload]);
        // Kernels compiled for other strides would read it wrong: refused, naming it.
        let err = device_input_as_held::<TestBuffer>(&x, &[2, 1], &cx, &ledger).unwrap_err().to_string();
        assert!(err.contains("tensor x:") && err.contains("compiled for [2, 1]"), "{err}");
    });
}
