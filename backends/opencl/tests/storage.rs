//! The OpenCL storage on the machine's OpenCL device (PoCL in CI: unified memory), in both paths: `opencl` (unified,
//! in place) and `opencl:discrete` (staged copies). Lazy outputs, one upload per input, in-place import, outputs fed
//! back, map/unmap, out-of-memory and build failures.

use opencl3::memory::ClMem as _;
use stowage_opencl::{Arg, ClBuffer, ClError, Mode, Target};
use stowage_runtime::{DatumType, DeviceBuffer, Layout, Ledger, LedgerTag, MoveKind, PlainStorage, Tensor};

const FILL: &str =
    "__kernel void fill(__global float* y, float base) { size_t i = get_global_id(0); y[i] = base + (float)i; }";

fn targets() -> Vec<Target> {
    ["opencl", "opencl:discrete"].iter().map(|t| Target::open(t).unwrap_or_else(|e| panic!("{e}"))).collect()
}

/// `n` values `base, base + 1, …` written by a kernel on `target`, wrapped as the model output `y`.
fn produced(target: &Target, n: usize, base: f32) -> (ClBuffer, Ledger, Tensor<'static>) {
    let program = target.program(FILL, "fill (test)").expect("builds");
    let kernel = target.kernel(&program, "fill").expect("kernel");
    let y = ClBuffer::allocate(target, DatumType::F32, &[n]).expect("allocates");
    target.launch(&kernel, &[Arg::Buf(&y), Arg::F32(base)], &[n], None, &[&y]).expect("launches");
    let ledger = Ledger::recording();
    let t = y.clone().into_tensor(LedgerTag::new(&ledger, "y")).expect("wraps");
    (y, ledger, t)
}

#[test]
fn devices_are_listed_and_targets_open_in_both_modes() {
    let lines = stowage_opencl::describe_devices().expect("an OpenCL device");
    assert!(lines[0].starts_with("opencl:0 "), "{lines:?}");
    let [unified, discrete] = <[Target; 2]>::try_from(targets()).unwrap();
    assert_eq!(discrete.mode(), Mode::Discrete, "opencl:discrete forces the discrete path");
    assert_eq!(discrete.descriptor().import_alignment, None);
    if unified.info().unified {
        assert_eq!(unified.mode(), Mode::Unified);
        assert_eq!(unified.descriptor().import_alignment, Some(unified.descriptor().alignment));
    }
    assert!(Target::open("opencl:99").unwrap_err().to_string().contains("opencl:99"));
    assert!(matches!(Target::open("openc"), Err(ClError::UnknownTarget(_))));
}

#[test]
fn a_kernel_output_is_lazy_and_read_back_at_most_once() {
    for target in targets() {
        let (_y, ledger, t) = produced(&target, 1000, 0.5);
        assert!(!t.is_host_readable(), "nothing is read back at the boundary");
        assert!(ledger.entries().is_empty());
        let values = t.as_slice::<f32>().expect("reads").to_vec();
        assert_eq!(values[0], 0.5);
        assert_eq!(values[999], 999.5);
        let _ = t.to_vec::<f32>().expect("reads again");
        let downloads = if target.mode() == Mode::Discrete { 1 } else { 0 };
        assert_eq!(ledger.count(MoveKind::Download), downloads, "{:?}", target.mode());
    }
}

#[test]
fn an_output_fed_back_as_an_input_moves_nothing() {
    for target in targets() {
        let (y, _, t) = produced(&target, 64, 1.0);
        let ledger = Ledger::recording();
        let back = ClBuffer::from_tensor(&t, &target, &ledger).expect("an input");
        assert!(ledger.entries().is_empty(), "{:?}: {:?}", target.mode(), ledger.entries());
        assert_eq!(back.mem().get(), y.mem().get(), "the very buffer");
    }
}

/// A host tensor of `n` floats whose storage starts at `alignment` bytes (and no more, when `misalign`).
fn host_input(n: usize, alignment: usize, misalign: bool) -> Tensor<'static> {
    let values: Vec<f32> = (0..n).map(|i| i as f32 * 0.25).collect();
    let bytes: &[u8] = stowage_runtime::bytemuck::cast_slice(&values);
    let extra = if misalign { 4 } else { 0 };
    let mut storage = PlainStorage::zeroed_aligned(bytes.len() + extra, alignment).unwrap();
    storage.as_bytes_mut()[extra..].copy_from_slice(bytes);
    let layout = Layout::strided(vec![1], extra);
    Tensor::from_storage(DatumType::F32, &[n], layout, storage).unwrap()
}

#[test]
fn inputs_are_imported_in_place_on_unified_memory_else_uploaded_once() {
    for target in targets() {
        let align = target.descriptor().alignment;
        let aligned = host_input(256, align, false);
        let imported = ClBuffer::import(&target, &aligned).expect("no OpenCL error");
        match target.mode() {
            Mode::Unified => {
                let b = imported.expect("an aligned packed input is used in place");
                assert!(b.is_imported());
            }
            Mode::Discrete => assert!(imported.unwrap_err().contains("discrete"), "the discrete path always copies"),
        }
        // A view of part of its storage (misaligned by 4 bytes) is never imported: one counted upload.
        let misaligned = host_input(256, align, true);
        assert!(ClBuffer::import(&target, &misaligned).unwrap().is_err());
        let ledger = Ledger::recording();
        let up = ClBuffer::from_tensor(&misaligned, &target, &ledger).expect("uploads");
        assert_eq!(ledger.count(MoveKind::Upload), 1);
        assert_eq!(ledger.bytes_moved(), 1024);
        let back = up.into_tensor(LedgerTag::new(&ledger, "x")).unwrap().to_vec::<f32>().unwrap();
        assert_eq!(back[255], 255.0 * 0.25);
        // The staging buffer is kept: a second upload reuses it.
        let _again = ClBuffer::from_tensor(&misaligned, &target, &ledger).expect("uploads");
        assert_eq!(ledger.count(MoveKind::Upload), 2);
    }
}

#[test]
fn mapping_waits_for_the_writer_and_unmapping_publishes() {
    for target in targets() {
        let (mut y, ledger, _) = produced(&target, 32, 10.0);
        let tag = LedgerTag::new(&ledger, "y");
        {
            let read = y.map_read::<f32>(&tag).expect("maps");
            assert_eq!(read[31], 41.0, "the kernel had finished");
        }
        {
            let mut write = y.map_write::<f32>(&tag).expect("maps for writing");
            write[0] = -1.0;
            write.unmap().expect("unmaps");
        }
        let read = y.map_read::<f32>(&tag).expect("maps");
        assert_eq!((read[0], read[1]), (-1.0, 11.0));
        let copies = ledger.entries().len();
        match target.mode() {
            Mode::Unified => assert_eq!(copies, 0, "mapping is a pointer"),
            Mode::Discrete => assert!(copies >= 3, "each mapping is a copy: {:?}", ledger.entries()),
        }
    }
}

#[test]
fn out_of_memory_names_the_size_and_leaks_nothing() {
    for target in targets() {
        let before = target.live_buffers();
        {
            let _a = ClBuffer::allocate(&target, DatumType::F32, &[16]).unwrap();
            assert_eq!(target.live_buffers(), before + 1);
            let huge = target.info().max_alloc as usize + 4096;
            let err = ClBuffer::allocate(&target, DatumType::U8, &[huge]).unwrap_err().to_string();
            assert!(err.contains(&huge.to_string()), "{err}");
        }
        assert_eq!(target.live_buffers(), before, "every buffer released");
    }
}

#[test]
fn a_kernel_that_does_not_build_reports_the_op_and_the_compiler_log() {
    let target = Target::open("opencl").unwrap();
    let err = target.program("__kernel void broken(__global float* y) { y[0] = undefined_name; }", "Relu 'n7'");
    let text = err.unwrap_err().to_string();
    assert!(text.contains("Relu 'n7'") && text.contains("undefined_name"), "{text}");
}

#[test]
fn an_imported_input_keeps_its_host_memory_alive_by_construction() {
    let target = Target::open("opencl").unwrap();
    if target.mode() != Mode::Unified {
        return;
    }
    let align = target.descriptor().alignment;
    let buffer = {
        let t = host_input(64, align, false);
        ClBuffer::import(&target, &t).unwrap().expect("imported")
        // `t` is dropped here: the buffer holds its storage, so the bytes stay valid.
    };
    let ledger = Ledger::recording();
    let values = buffer.into_tensor(LedgerTag::new(&ledger, "x")).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(values[63], 63.0 * 0.25);
    assert_eq!(ledger.count(MoveKind::Upload), 0, "never uploaded");
}
