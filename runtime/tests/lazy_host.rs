//! The nine rules of `LazyHost`, one test each, in both modes of the test device.

mod common;

use common::{both_modes, iota, lazy_output, Mode, TestBuffer};
use stowage_runtime::{DatumType, LazyHost, Ledger, LedgerTag, MoveKind, Tensor, TensorStorage};

#[test]
fn rule_1_a_device_output_is_a_host_tensor_in_type_and_shape_with_no_bytes_copied() {
    both_modes(|mode| {
        let (cx, _buffer, ledger, y) = lazy_output(mode, &[2, 3], &iota(6));
        assert_eq!(y.dt(), DatumType::F32);
        assert_eq!(y.shape(), &[2, 3]);
        assert_eq!(y.name(), Some("y"));
        assert_eq!(y.len(), 6);
        assert!(y.lazy::<TestBuffer>().is_some());
        assert!(!y.is_host_readable(), "{mode:?}: nothing may be read back at the boundary");
        assert_eq!(cx.counters.downloads(), 0);
        assert!(ledger.entries().is_empty());
        // Printing it reads nothing either.
        let shown = y.to_string();
        assert!(shown.contains("lazy on test:"), "{shown}");
        assert_eq!(cx.counters.downloads(), 0);
    });
}

#[test]
fn rule_2_it_waits_for_the_producer_when_wrapped_on_the_queueing_thread_not_when_read() {
    both_modes(|mode| {
        let (cx, buffer, _ledger, y) = lazy_output(mode, &[4], &[1.0, 2.0, 3.0, 4.0]);
        let producer = std::thread::current().id();
        // The kernel had not finished when the output was wrapped; wrapping waited for it.
        assert_eq!(buffer.pending(), 0, "{mode:?}");
        assert_eq!(cx.counters.waiting_threads(), vec![producer]);
        // A reader on another thread sees the bytes and waits on nothing.
        let read = std::thread::scope(|s| s.spawn(|| y.as_slice::<f32>().map(<[f32]>::to_vec)).join());
        assert_eq!(read.expect("reader thread").expect("read"), vec![1.0, 2.0, 3.0, 4.0]);
        assert_eq!(cx.counters.waiting_threads(), vec![producer]);
    });
}

#[test]
fn rule_3_the_first_read_materializes_once_and_the_predicate_never_reads_back() {
    both_modes(|mode| {
        let (cx, _buffer, ledger, y) = lazy_output(mode, &[2, 2], &iota(4));
        for _ in 0..3 {
            assert!(!y.is_host_readable());
            assert!(y.storage().host_bytes().is_none());
        }
        assert_eq!(cx.counters.downloads(), 0);
        assert_eq!(y.as_slice::<f32>().unwrap(), &[0.0, 1.0, 2.0, 3.0]);
        assert!(y.is_host_readable());
        assert_eq!(y.to_vec::<f32>().unwrap(), vec![0.0, 1.0, 2.0, 3.0]);
        assert_eq!(y.as_slice::<f32>().unwrap(), &[0.0, 1.0, 2.0, 3.0]);
        let copies = if mode == Mode::Discrete { 1 } else { 0 };
        assert_eq!(cx.counters.downloads(), copies, "{mode:?}");
        assert_eq!(ledger.count(MoveKind::Download), copies, "{mode:?}");
    });
}

#[test]
fn rule_4_on_unified_memory_materializing_shares_the_allocation() {
    both_modes(|mode| {
        let (cx, buffer, ledger, y) = lazy_output(mode, &[8], &iota(8));
        let host = y.as_slice::<f32>().unwrap().as_ptr() as usize;
        match mode {
            Mode::Unified => {
                assert_eq!(host, buffer.address(), "the host reads the device allocation itself");
                assert_eq!(cx.counters.downloads(), 0);
                assert!(ledger.entries().is_empty());
            }
            Mode::Discrete => {
                assert_ne!(host, buffer.address());
                assert_eq!(cx.counters.downloads(), 1);
                let entries = ledger.entries();
                assert_eq!(entries.len(), 1);
                assert_eq!((entries[0].kind, entries[0].bytes), (MoveKind::Download, 32));
                assert_eq!(entries[0].from.name(), "test:discrete");
                assert_eq!(entries[0].to.name(), "host");
            }
        }
    });
}

#[test]
fn rule_5_a_host_write_detaches_the_device_buffer_first() {
    both_modes(|mode| {
        let (cx, buffer, _ledger, mut y) = lazy_output(mode, &[4], &iota(4));
        let before = buffer.peek();
        y.as_slice_mut::<f32>().unwrap()[0] = 42.0;
        assert!(y.device_buffer::<TestBuffer>().is_none(), "{mode:?}: still attached after a write");
        assert_eq!(y.as_slice::<f32>().unwrap(), &[42.0, 1.0, 2.0, 3.0]);
        assert_eq!(buffer.peek(), before, "{mode:?}: the write reached device memory");
        assert_ne!(y.as_slice::<f32>().unwrap().as_ptr() as usize, buffer.address());
        // And it is an ordinary host tensor now: handed back as an input, it is uploaded.
        let back = TestBuffer::from_tensor(&y, &cx, &Ledger::off()).unwrap();
        assert!(!back.same_buffer(&buffer));
    });
}

#[test]
fn rule_6_deep_clone_shares_what_was_materialized_and_the_two_stay_independent() {
    both_modes(|mode| {
        let (cx, buffer, _ledger, y) = lazy_output(mode, &[4], &iota(4));
        let host = y.as_slice::<f32>().unwrap().as_ptr();
        let mut clone = y.deep_clone().unwrap();
        assert!(!clone.shares_storage_with(&y));
        assert!(clone.is_host_readable());
        assert_eq!(clone.as_slice::<f32>().unwrap().as_ptr(), host, "{mode:?}: the clone copied");
        let downloads = cx.counters.downloads();
        clone.as_slice_mut::<f32>().unwrap()[1] = -1.0;
        assert_eq!(clone.as_slice::<f32>().unwrap(), &[0.0, -1.0, 2.0, 3.0]);
        assert_eq!(y.as_slice::<f32>().unwrap(), &[0.0, 1.0, 2.0, 3.0]);
        assert_eq!(buffer.peek(), common::bytemuck_bytes(&iota(4)));
        assert_eq!(cx.counters.downloads(), downloads, "no readback for the clone");
        assert!(y.device_buffer::<TestBuffer>().is_some());
    });
}

#[test]
fn rule_7_slicing_an_unmaterialized_tensor_stays_lazy_and_reads_only_the_slice() {
    both_modes(|mode| {
        let (cx, _buffer, ledger, y) = lazy_output(mode, &[4, 8], &iota(32));
        let rows = y.slice(0, 1..3).unwrap();
        assert_eq!(rows.shape(), &[2, 8]);
        assert!(!rows.is_host_readable(), "{mode:?}: slicing read the bytes back");
        assert!(!y.is_host_readable());
        assert_eq!(cx.counters.downloads(), 0);
        assert_eq!(rows.to_vec::<f32>().unwrap(), (8..24).map(|i| i as f32).collect::<Vec<_>>());
        match mode {
            Mode::Discrete => {
                assert!(rows.lazy::<TestBuffer>().is_some() && !rows.shares_storage_with(&y), "sliced on the device");
                assert_eq!(cx.counters.download_bytes(), 2 * 8 * 4, "only the slice's bytes");
                assert_eq!(ledger.bytes_moved(), 64);
                assert!(!y.is_host_readable(), "the parent stays on the device");
            }
            Mode::Unified => {
                assert_eq!(cx.counters.download_bytes(), 0);
                assert_eq!(ledger.bytes_moved(), 0);
            }
        }
    });
}

#[test]
fn rule_8_an_output_passed_as_the_next_runs_input_is_used_as_is() {
    both_modes(|mode| {
        let (cx, buffer, ledger, y) = lazy_output(mode, &[16], &iota(16));
        let input = TestBuffer::from_tensor(&y, &cx, &ledger).unwrap();
        assert!(input.same_buffer(&buffer), "{mode:?}: not the same device buffer");
        assert_eq!((cx.counters.uploads(), cx.counters.downloads()), (0, 0));
        assert!(ledger.entries().is_empty());
        assert!(!y.is_host_readable());

        // A transposed view of it is not its buffer: it is packed and uploaded, and the ledger says so.
        let transposed = y.reshape(&[4, 4]).unwrap().permute(&[1, 0]).unwrap();
        let packed = TestBuffer::from_tensor(&transposed, &cx, &ledger).unwrap();
        assert!(!packed.same_buffer(&buffer));
        let expected: Vec<f32> = (0..16).map(|i| ((i % 4) * 4 + i / 4) as f32).collect();
        assert_eq!(packed.peek(), common::bytemuck_bytes(&expected));
        let kinds: Vec<_> = ledger.take().iter().map(|m| m.kind).collect();
        assert!(kinds.ends_with(&[MoveKind::Relayout, MoveKind::Upload]), "{kinds:?}");

        // A host tensor is uploaded once, and the ledger says so.
        let x = Tensor::from_slice(&[16], &iota(16)).unwrap().with_name("x");
        let up = TestBuffer::from_tensor(&x, &cx, &ledger).unwrap();
        assert_eq!(up.peek(), common::bytemuck_bytes(&iota(16)));
        let entries = ledger.entries();
        assert_eq!(entries.len(), 1);
        assert_eq!((&*entries[0].value, entries[0].kind, entries[0].bytes), ("x", MoveKind::Upload, 64));
    });
}

#[test]
fn rule_9_only_owned_buffers_are_wrapped_and_run_scoped_views_are_copied_out() {
    both_modes(|mode| {
        let cx = common::TestContext::new(mode);
        let ledger = Ledger::recording();
        let view = cx.run_scoped(&iota(4));
        let refused = LazyHost::new(view.clone(), LedgerTag::new(&ledger, "v")).unwrap_err();
        assert!(refused.to_string().contains("run-scoped"), "{refused}");

        let out = view.clone().into_tensor(LedgerTag::new(&ledger, "v")).unwrap();
        assert!(out.is_host_readable(), "a view is copied out at the boundary");
        assert!(out.lazy::<TestBuffer>().is_none());
        let entries = ledger.entries();
        assert_eq!(entries.len(), 1);
        assert!(entries[0].reason.contains("run-scoped"), "{}", entries[0].reason);
        // The next run reuses the scratch memory: the copied-out tensor keeps its values.
        let mut scratch = view.clone();
        let mut map = stowage_runtime::DeviceBuffer::map_write::<f32>(&mut scratch, &LedgerTag::default()).unwrap();
        map.fill(9.0);
        drop(map);
        assert_eq!(out.as_slice::<f32>().unwrap(), &[0.0, 1.0, 2.0, 3.0]);
    });
}

#[test]
fn eight_threads_reading_one_lazy_tensor_see_one_download() {
    both_modes(|mode| {
        let (cx, _buffer, ledger, y) = lazy_output(mode, &[1024], &iota(1024));
        let seen: Vec<(usize, Vec<f32>)> = std::thread::scope(|s| {
            let readers: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        let slice = y.as_slice::<f32>().unwrap();
                        (slice.as_ptr() as usize, slice.to_vec())
                    })
                })
                .collect();
            readers.into_iter().map(|r| r.join().unwrap()).collect()
        });
        assert!(seen.iter().all(|(ptr, values)| *ptr == seen[0].0 && *values == iota(1024)));
        let copies = usize::from(mode == Mode::Discrete);
        assert_eq!(cx.counters.downloads(), copies, "{mode:?}");
        assert_eq!(ledger.count(MoveKind::Download), copies, "{mode:?}");
    });
}

#[test]
fn a_host_write_after_deep_clone_changes_neither_the_clone_nor_the_device() {
    both_modes(|mode| {
        let (_cx, buffer, _ledger, mut y) = lazy_output(mode, &[3], &[1.0, 2.0, 3.0]);
        let clone = y.deep_clone().unwrap();
        y.as_slice_mut::<f32>().unwrap().copy_from_slice(&[7.0, 8.0, 9.0]);
        assert_eq!(y.as_slice::<f32>().unwrap(), &[7.0, 8.0, 9.0]);
        assert_eq!(clone.as_slice::<f32>().unwrap(), &[1.0, 2.0, 3.0], "{mode:?}");
        assert_eq!(buffer.peek(), common::bytemuck_bytes(&[1.0, 2.0, 3.0]), "{mode:?}");
        assert!(clone.device_buffer::<TestBuffer>().is_some());
    });
}

#[test]
fn into_plain_of_a_lazy_tensor_brings_the_bytes_home() {
    both_modes(|mode| {
        let (_cx, _buffer, _ledger, y) = lazy_output(mode, &[2], &[5.0, 6.0]);
        let lazy = y.lazy::<TestBuffer>().unwrap();
        let boxed: Box<dyn TensorStorage> = lazy.deep_clone().unwrap();
        let plain = boxed.into_plain().unwrap();
        assert_eq!(plain.as_bytes(), common::bytemuck_bytes(&[5.0, 6.0]).as_slice());
    });
}
