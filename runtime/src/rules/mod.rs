//! The rule kit (feature `rules`): the nine rules of `LazyHost` and the map/unmap checks, written once over a
//! device [`Harness`], so that every backend runs the very same checks on its own device: the runtime on its test
//! device (`runtime/tests/lazy_host.rs`, both modes), the OpenCL backend on PoCL (`backends/opencl/tests/rules.rs`,
//! unified and discrete paths), a backend from outside on its own (`examples/custom-backend`). Transfers are
//! counted from the ledger, which records every byte the runtime moves.
//!
//! A backend implements [`Harness`] for its device in a test, then writes `stowage_runtime::rule_tests!(make,
//! modes)` and `stowage_runtime::map_tests!(make, modes)` (one `#[test]` per check), or calls [`check_all`].
//! Checks panic with the harness's label when a rule does not hold: they are test code. A device that is not
//! host-mappable (`mappable = no`) is checked on what applies to it: its mappings must be refused with an error,
//! and its lazy tensors still map on the host, through one download.

pub mod map;

use crate::{device_input, DatumType, DeviceBuffer, LazyHost, Ledger, LedgerTag, MoveKind, Tensor, TensorStorage};

/// A device as the rules need it.
pub trait Harness {
    /// The backend's buffer type.
    type Buffer: DeviceBuffer + Clone + 'static;
    /// For messages: the device and its mode.
    fn label(&self) -> String;
    /// True when device memory is host memory.
    fn unified(&self) -> bool;
    /// The device.
    fn context(&self) -> &<Self::Buffer as DeviceBuffer>::Context;
    /// An owned f32 buffer of `shape` that work still queued on the device fills with `values`.
    fn produce(&self, shape: &[usize], values: &[f32]) -> Self::Buffer;
    /// A fresh buffer of `dt` and `shape`.
    fn allocate(&self, dt: DatumType, shape: &[usize]) -> Self::Buffer;
    /// A buffer valid for one run only, holding `values`, where the device makes such buffers.
    fn run_scoped(&self, values: &[f32]) -> Option<Self::Buffer>;
    /// The buffer's bytes, read by the test outside the runtime's accounting.
    fn peek(&self, b: &Self::Buffer) -> Vec<u8>;
    /// Where the host sees the buffer's memory, on unified memory.
    fn host_address(&self, b: &Self::Buffer) -> Option<usize>;
    /// True when both are the same device memory.
    fn same_buffer(&self, a: &Self::Buffer, b: &Self::Buffer) -> bool;
    /// True when no work writing `b` is still pending.
    fn finished(&self, b: &Self::Buffer) -> bool;
    /// Checks, where the device can tell, that the wait for `b`'s producer happened on this thread.
    fn waited_here(&self, _b: &Self::Buffer) {}
}

/// `values` produced on the device by work still queued, wrapped as the model output `y` at the boundary.
pub fn lazy_output<H: Harness>(h: &H, shape: &[usize], values: &[f32]) -> (H::Buffer, Ledger, Tensor<'static>) {
    let buffer = h.produce(shape, values);
    let ledger = Ledger::recording();
    let tensor = LazyHost::at_boundary(buffer.clone(), DatumType::F32, shape, LedgerTag::new(&ledger, "y"))
        .expect("wrapping an owned buffer");
    (buffer, ledger, tensor)
}

/// The bytes of `values`.
pub fn bytes(values: &[f32]) -> Vec<u8> {
    crate::bytemuck::cast_slice(values).to_vec()
}

/// `0.0, 1.0, …` as f32.
pub fn iota(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32).collect()
}

fn downloads(ledger: &Ledger) -> usize {
    ledger.count(MoveKind::Download)
}

/// Rule 1: a device output is a host tensor in type and shape with no bytes copied.
pub fn rule_1_a_device_output_is_a_host_tensor_in_type_and_shape_with_no_bytes_copied<H: Harness>(h: &H) {
    let (_buffer, ledger, y) = lazy_output(h, &[2, 3], &iota(6));
    assert_eq!(y.dt(), DatumType::F32);
    assert_eq!(y.shape(), &[2, 3]);
    assert_eq!(y.name(), Some("y"));
    assert_eq!(y.len(), 6);
    assert!(y.lazy::<H::Buffer>().is_some());
    assert!(!y.is_host_readable(), "{}: nothing may be read back at the boundary", h.label());
    assert!(ledger.entries().is_empty());
    // Printing it reads nothing either.
    let shown = y.to_string();
    assert!(shown.contains("lazy on "), "{shown}");
    assert!(ledger.entries().is_empty());
}

/// Rule 2: it waits for the producer when wrapped on the queueing thread not when read.
pub fn rule_2_it_waits_for_the_producer_when_wrapped_on_the_queueing_thread_not_when_read<H: Harness>(h: &H) {
    let (buffer, _ledger, y) = lazy_output(h, &[4], &[1.0, 2.0, 3.0, 4.0]);
    // The work had not finished when the output was wrapped; wrapping waited for it, here.
    assert!(h.finished(&buffer), "{}: the producer is still pending after wrapping", h.label());
    h.waited_here(&buffer);
    // A reader on another thread sees the bytes.
    let read = std::thread::scope(|s| s.spawn(|| y.as_slice::<f32>().map(<[f32]>::to_vec)).join());
    assert_eq!(read.expect("reader thread").expect("read"), vec![1.0, 2.0, 3.0, 4.0]);
}

/// Rule 3: the first read materializes once and the predicate never reads back.
pub fn rule_3_the_first_read_materializes_once_and_the_predicate_never_reads_back<H: Harness>(h: &H) {
    let (_buffer, ledger, y) = lazy_output(h, &[2, 2], &iota(4));
    for _ in 0..3 {
        assert!(!y.is_host_readable());
        assert!(y.storage().host_bytes().is_none());
    }
    assert_eq!(downloads(&ledger), 0);
    assert_eq!(y.as_slice::<f32>().unwrap(), &[0.0, 1.0, 2.0, 3.0]);
    assert!(y.is_host_readable());
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![0.0, 1.0, 2.0, 3.0]);
    assert_eq!(y.as_slice::<f32>().unwrap(), &[0.0, 1.0, 2.0, 3.0]);
    assert_eq!(downloads(&ledger), usize::from(!h.unified()), "{}", h.label());
}

/// Rule 4: on unified memory materializing shares the allocation.
pub fn rule_4_on_unified_memory_materializing_shares_the_allocation<H: Harness>(h: &H) {
    let (buffer, ledger, y) = lazy_output(h, &[8], &iota(8));
    let host = y.as_slice::<f32>().unwrap().as_ptr() as usize;
    if h.unified() {
        assert_eq!(Some(host), h.host_address(&buffer), "{}: the host reads the device allocation itself", h.label());
        assert!(ledger.entries().is_empty());
    } else {
        assert_ne!(Some(host), h.host_address(&buffer));
        let entries = ledger.entries();
        assert_eq!(entries.len(), 1);
        assert_eq!((entries[0].kind, entries[0].bytes), (MoveKind::Download, 32));
        assert_ne!(entries[0].from.name(), "host");
        assert_eq!(entries[0].to.name(), "host");
    }
}

/// Rule 5: a host write detaches the device buffer first.
pub fn rule_5_a_host_write_detaches_the_device_buffer_first<H: Harness>(h: &H) {
    let (buffer, _ledger, mut y) = lazy_output(h, &[4], &iota(4));
    let before = h.peek(&buffer);
    y.as_slice_mut::<f32>().unwrap()[0] = 42.0;
    assert!(y.device_buffer::<H::Buffer>().is_none(), "{}: still attached after a write", h.label());
    assert_eq!(y.as_slice::<f32>().unwrap(), &[42.0, 1.0, 2.0, 3.0]);
    assert_eq!(h.peek(&buffer), before, "{}: the write reached device memory", h.label());
    assert_ne!(Some(y.as_slice::<f32>().unwrap().as_ptr() as usize), h.host_address(&buffer));
    // And it is an ordinary host tensor now: handed back as an input, it is uploaded.
    let back = device_input::<H::Buffer>(&y, h.context(), &Ledger::off()).unwrap();
    assert!(!h.same_buffer(&back, &buffer));
}

/// Rule 6: deep clone shares what was materialized and the two stay independent.
pub fn rule_6_deep_clone_shares_what_was_materialized_and_the_two_stay_independent<H: Harness>(h: &H) {
    let (buffer, ledger, y) = lazy_output(h, &[4], &iota(4));
    let host = y.as_slice::<f32>().unwrap().as_ptr();
    let mut clone = y.deep_clone().unwrap();
    assert!(!clone.shares_storage_with(&y));
    assert!(clone.is_host_readable());
    assert_eq!(clone.as_slice::<f32>().unwrap().as_ptr(), host, "{}: the clone copied", h.label());
    let before = downloads(&ledger);
    clone.as_slice_mut::<f32>().unwrap()[1] = -1.0;
    assert_eq!(clone.as_slice::<f32>().unwrap(), &[0.0, -1.0, 2.0, 3.0]);
    assert_eq!(y.as_slice::<f32>().unwrap(), &[0.0, 1.0, 2.0, 3.0]);
    assert_eq!(h.peek(&buffer), bytes(&iota(4)));
    assert_eq!(downloads(&ledger), before, "no readback for the clone");
    assert!(y.device_buffer::<H::Buffer>().is_some());
}

/// Rule 7: slicing an unmaterialized tensor stays lazy and reads only the slice.
pub fn rule_7_slicing_an_unmaterialized_tensor_stays_lazy_and_reads_only_the_slice<H: Harness>(h: &H) {
    let (_buffer, ledger, y) = lazy_output(h, &[4, 8], &iota(32));
    let rows = y.slice(0, 1..3).unwrap();
    assert_eq!(rows.shape(), &[2, 8]);
    assert!(!rows.is_host_readable(), "{}: slicing read the bytes back", h.label());
    assert!(!y.is_host_readable());
    assert_eq!(downloads(&ledger), 0);
    assert_eq!(rows.to_vec::<f32>().unwrap(), (8..24).map(|i| i as f32).collect::<Vec<_>>());
    let moved: usize = ledger.entries().iter().filter(|m| m.kind == MoveKind::Download).map(|m| m.bytes).sum();
    if h.unified() {
        assert_eq!(moved, 0, "{}", h.label());
    } else {
        assert!(rows.lazy::<H::Buffer>().is_some() && !rows.shares_storage_with(&y), "sliced on the device");
        assert_eq!(moved, 2 * 8 * 4, "{}: only the slice's bytes", h.label());
        assert!(!y.is_host_readable(), "the parent stays on the device");
    }
}

/// Rule 8: an output passed as the next runs input is used as is.
pub fn rule_8_an_output_passed_as_the_next_runs_input_is_used_as_is<H: Harness>(h: &H) {
    let (buffer, ledger, y) = lazy_output(h, &[16], &iota(16));
    let input = device_input::<H::Buffer>(&y, h.context(), &ledger).unwrap();
    assert!(h.same_buffer(&input, &buffer), "{}: not the same device buffer", h.label());
    assert!(ledger.entries().is_empty());
    assert!(!y.is_host_readable());

    // A transposed view of it is not its buffer: it is packed and uploaded, and the ledger says so: one upload
    // that packs where the backend can (`upload_with`), else a relayout on the host and then the upload.
    let transposed = y.reshape(&[4, 4]).unwrap().permute(&[1, 0]).unwrap();
    let packed = device_input::<H::Buffer>(&transposed, h.context(), &ledger).unwrap();
    assert!(!h.same_buffer(&packed, &buffer));
    let expected: Vec<f32> = (0..16).map(|i| ((i % 4) * 4 + i / 4) as f32).collect();
    assert_eq!(h.peek(&packed), bytes(&expected));
    let kinds: Vec<_> = ledger.take().iter().map(|m| m.kind).collect();
    let packing: &[MoveKind] = if <H::Buffer as DeviceBuffer>::DESCRIPTOR.packs_on_upload {
        &[MoveKind::Upload]
    } else {
        &[MoveKind::Relayout, MoveKind::Upload]
    };
    assert!(kinds.ends_with(packing), "{}: {kinds:?}", h.label());
    assert_eq!(kinds.iter().filter(|k| **k == MoveKind::Relayout).count(), packing.len() - 1, "{kinds:?}");

    // A host tensor is uploaded once, and the ledger says so.
    let x = Tensor::from_slice(&[16], &iota(16)).unwrap().with_name("x");
    let up = device_input::<H::Buffer>(&x, h.context(), &ledger).unwrap();
    assert_eq!(h.peek(&up), bytes(&iota(16)));
    let entries = ledger.entries();
    assert_eq!(entries.len(), 1);
    assert_eq!((&*entries[0].value, entries[0].kind, entries[0].bytes), ("x", MoveKind::Upload, 64));
}

/// Rule 9: only owned buffers are wrapped and run scoped views are copied out.
pub fn rule_9_only_owned_buffers_are_wrapped_and_run_scoped_views_are_copied_out<H: Harness>(h: &H) {
    let ledger = Ledger::recording();
    let Some(view) = h.run_scoped(&iota(4)) else {
        // A device that makes no run-scoped buffers: everything it produces is owned, and wrapped as is.
        let owned = h.produce(&[4], &iota(4));
        assert!(!owned.is_run_scoped());
        assert!(LazyHost::new(owned, LedgerTag::new(&ledger, "v")).is_ok());
        return;
    };
    let refused = LazyHost::new(view.clone(), LedgerTag::new(&ledger, "v")).unwrap_err();
    assert!(refused.to_string().contains("run-scoped"), "{refused}");
    let out = LazyHost::at_boundary(view.clone(), DatumType::F32, &[4], LedgerTag::new(&ledger, "v")).unwrap();
    assert!(out.is_host_readable(), "a view is copied out at the boundary");
    assert!(out.lazy::<H::Buffer>().is_none());
    let entries = ledger.entries();
    assert_eq!(entries.len(), 1);
    assert!(entries[0].reason.contains("run-scoped"), "{}", entries[0].reason);
    // The next run reuses the scratch memory: the copied-out tensor keeps its values.
    let mut scratch = view.clone();
    let mut map = DeviceBuffer::map_write::<f32>(&mut scratch, &LedgerTag::default()).unwrap();
    map.fill(9.0);
    drop(map);
    assert_eq!(out.as_slice::<f32>().unwrap(), &[0.0, 1.0, 2.0, 3.0]);
}

/// Eight threads reading one lazy tensor see one download.
pub fn eight_threads_reading_one_lazy_tensor_see_one_download<H: Harness>(h: &H) {
    let (_buffer, ledger, y) = lazy_output(h, &[1024], &iota(1024));
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
    assert_eq!(downloads(&ledger), usize::from(!h.unified()), "{}", h.label());
}

/// A host write after deep clone changes neither the clone nor the device.
pub fn a_host_write_after_deep_clone_changes_neither_the_clone_nor_the_device<H: Harness>(h: &H) {
    let (buffer, _ledger, mut y) = lazy_output(h, &[3], &[1.0, 2.0, 3.0]);
    let clone = y.deep_clone().unwrap();
    y.as_slice_mut::<f32>().unwrap().copy_from_slice(&[7.0, 8.0, 9.0]);
    assert_eq!(y.as_slice::<f32>().unwrap(), &[7.0, 8.0, 9.0]);
    assert_eq!(clone.as_slice::<f32>().unwrap(), &[1.0, 2.0, 3.0], "{}", h.label());
    assert_eq!(h.peek(&buffer), bytes(&[1.0, 2.0, 3.0]), "{}", h.label());
    assert!(clone.device_buffer::<H::Buffer>().is_some());
}

/// Into plain of a lazy tensor brings the bytes home.
pub fn into_plain_of_a_lazy_tensor_brings_the_bytes_home<H: Harness>(h: &H) {
    let (_buffer, _ledger, y) = lazy_output(h, &[2], &[5.0, 6.0]);
    let lazy = y.lazy::<H::Buffer>().unwrap();
    let boxed: Box<dyn TensorStorage> = lazy.deep_clone().unwrap();
    let plain = boxed.into_plain().unwrap();
    assert_eq!(plain.as_bytes(), bytes(&[5.0, 6.0]).as_slice());
}

/// Every rule and every map check on `h`.
pub fn check_all<H: Harness>(h: &H) {
    rule_1_a_device_output_is_a_host_tensor_in_type_and_shape_with_no_bytes_copied(h);
    rule_2_it_waits_for_the_producer_when_wrapped_on_the_queueing_thread_not_when_read(h);
    rule_3_the_first_read_materializes_once_and_the_predicate_never_reads_back(h);
    rule_4_on_unified_memory_materializing_shares_the_allocation(h);
    rule_5_a_host_write_detaches_the_device_buffer_first(h);
    rule_6_deep_clone_shares_what_was_materialized_and_the_two_stay_independent(h);
    rule_7_slicing_an_unmaterialized_tensor_stays_lazy_and_reads_only_the_slice(h);
    rule_8_an_output_passed_as_the_next_runs_input_is_used_as_is(h);
    rule_9_only_owned_buffers_are_wrapped_and_run_scoped_views_are_copied_out(h);
    eight_threads_reading_one_lazy_tensor_see_one_download(h);
    a_host_write_after_deep_clone_changes_neither_the_clone_nor_the_device(h);
    into_plain_of_a_lazy_tensor_brings_the_bytes_home(h);
    map::mapping_waits_for_the_pending_work_on_its_buffer(h);
    map::dropping_a_write_mapping_makes_the_device_see_the_writes(h);
    map::unmap_publishes_the_writes(h);
    map::on_unified_memory_a_mapping_is_a_pointer_not_a_copy(h);
    map::a_mapping_of_the_wrong_element_size_is_an_error(h);
    map::a_lazy_tensor_maps_its_host_bytes_once(h);
}

/// One `#[test]` per rule for a harness made by `$make` in each of `$modes`.
#[macro_export]
macro_rules! rule_tests {
    ($make:expr, $modes:expr) => {
        $crate::rule_tests!(@each $make, $modes;
            rule_1_a_device_output_is_a_host_tensor_in_type_and_shape_with_no_bytes_copied,
            rule_2_it_waits_for_the_producer_when_wrapped_on_the_queueing_thread_not_when_read,
            rule_3_the_first_read_materializes_once_and_the_predicate_never_reads_back,
            rule_4_on_unified_memory_materializing_shares_the_allocation,
            rule_5_a_host_write_detaches_the_device_buffer_first,
            rule_6_deep_clone_shares_what_was_materialized_and_the_two_stay_independent,
            rule_7_slicing_an_unmaterialized_tensor_stays_lazy_and_reads_only_the_slice,
            rule_8_an_output_passed_as_the_next_runs_input_is_used_as_is,
            rule_9_only_owned_buffers_are_wrapped_and_run_scoped_views_are_copied_out,
            eight_threads_reading_one_lazy_tensor_see_one_download,
            a_host_write_after_deep_clone_changes_neither_the_clone_nor_the_device,
            into_plain_of_a_lazy_tensor_brings_the_bytes_home);
    };
    (@each $make:expr, $modes:expr; $($rule:ident),*) => {
        $(
            #[test]
            fn $rule() {
                for mode in $modes {
                    $crate::rules::$rule(&$make(mode));
                }
            }
        )*
    };
}
