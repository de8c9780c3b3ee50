//! Device memory from outside (`src/buffer/external.rs`), rule by rule, on every OpenCL device path here (PoCL:
//! unified, and forced discrete): a caller's context, buffers and events taken in place, checked, retained and
//! released once; padded rows relaid on the device; outputs handed out without a download.

use opencl3::command_queue::CommandQueue;
use opencl3::context::Context;
use opencl3::memory::{Buffer, ClMem, CL_MEM_READ_WRITE};
use opencl3::types::{CL_BLOCKING, CL_NON_BLOCKING};
use stowage_compiler::ir::{Graph, Op, Unary, ValueType};
use stowage_opencl::{ClBuffer, Target};
use stowage_runtime::{DatumType, Layout, Ledger, MoveKind, Tensor};

const SHAPE: [usize; 3] = [2, 3, 5];
const PATHS: [bool; 2] = [false, true];

/// x[2,3,5] → Tanh → y: one launch.
fn graph() -> Graph {
    let mut g = Graph::new("tanh");
    let ty = ValueType::new(DatumType::F32, SHAPE);
    let x = g.add_input("x", ty.clone());
    let t = g.add_node("squash", Op::Unary(Unary::Tanh), vec![Some(x)], vec![Some(("y".into(), ty))]);
    g.add_output("y", g.node(t).outputs[0].expect("y"));
    g
}

fn values() -> Vec<f32> {
    (0..30).map(|i| (i as f32 - 15.0) / 7.0).collect()
}

fn want() -> Vec<f32> {
    values().iter().map(|v| v.tanh()).collect()
}

fn close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 1e-5, "{got:?} against {want:?}");
    }
}

/// A caller's context on the first device, its own queue, and the target opened in that context (rule 1).
fn caller(discrete: bool) -> (Context, CommandQueue, Target) {
    let (device, _) = stowage_opencl::devices().expect("devices").into_iter().next().expect("a device");
    let context = Context::from_device(&device).expect("context");
    // SAFETY: the device is the context's.
    let queue = unsafe { CommandQueue::create_with_properties(&context, device.id(), 0, 0) }.expect("queue");
    // SAFETY: valid handles of one context.
    let target = unsafe { Target::from_raw(context.get(), device.id(), discrete) }.expect("target");
    (context, queue, target)
}

/// A caller's buffer of `bytes` in `context`, written from `host` on the caller's queue, not waited for.
fn written(context: &Context, queue: &CommandQueue, host: &[u8], bytes: usize) -> (Buffer<u8>, opencl3::event::Event) {
    // SAFETY: no host pointer; `bytes` bytes.
    let mut buffer =
        unsafe { Buffer::<u8>::create(context, CL_MEM_READ_WRITE, bytes, std::ptr::null_mut()) }.expect("buffer");
    // SAFETY: `host` outlives the write: the tests wait for the event (through stowage) before returning.
    let event = unsafe { queue.enqueue_write_buffer(&mut buffer, CL_NON_BLOCKING, 0, host, &[]) }.expect("write");
    (buffer, event)
}

fn bytes_of(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

#[test]
fn a_callers_buffer_in_its_own_context_runs_in_place_and_the_output_is_handed_out() {
    for discrete in PATHS {
        let (context, queue, target) = caller(discrete);
        assert_eq!(target.raw_context(), context.get(), "rule 1: the caller's context");
        let program = stowage_opencl::lower(&graph(), &target, &Ledger::off()).expect("lowers");
        let host = bytes_of(&values());
        let (mem, ready) = written(&context, &queue, &host, host.len());
        let layout = Layout::row_major(DatumType::F32, &SHAPE).expect("layout");
        // SAFETY: a valid buffer and event of the target's context.
        let wrapped =
            unsafe { ClBuffer::from_raw(&target, "x", mem.get(), DatumType::F32, &SHAPE, &layout, Some(ready.get())) }
                .expect("wraps");
        // Rule 2: the caller's own reference may go at once.
        drop(mem);
        let x = wrapped.input("x", &SHAPE, &layout).expect("input");
        let ledger = Ledger::recording();
        let out = program.run(vec![x], &ledger).expect("runs");
        // Rule 6: the output's buffer, read by the caller on its own queue after the event that completes it.
        let y = ClBuffer::of(&out[0]).expect("a device output");
        let mut got = vec![0u8; host.len()];
        let wait: Vec<_> = y.raw_ready().into_iter().collect();
        let handed = Buffer::<u8>::new(y.raw_mem());
        // SAFETY: a blocking read of the output's bytes, after its event.
        unsafe { queue.enqueue_read_buffer(&handed, CL_BLOCKING, y.raw_offset(), &mut got, &wait) }.expect("read");
        std::mem::forget(handed); // the tensor holds the reference; the caller took none
        let got: Vec<f32> = got.chunks(4).map(|c| f32::from_ne_bytes(c.try_into().expect("4"))).collect();
        close(&got, &want());
        assert!(ledger.entries().is_empty(), "discrete {discrete}: {:?}", ledger.entries());
        // Read on the host through stowage, it is one download on the discrete path, none on unified memory.
        close(&out[0].to_vec::<f32>().expect("reads"), &want());
    }
}

#[test]
fn padded_rows_on_the_device_are_one_relayout_there() {
    for discrete in PATHS {
        let (context, queue, target) = caller(discrete);
        let program = stowage_opencl::lower(&graph(), &target, &Ledger::off()).expect("lowers");
        // Rows of 5 floats, 32 bytes apart.
        let layout = Layout::padded(DatumType::F32, &SHAPE, 1, 32).expect("layout");
        let mut host = [0u8; 6 * 32];
        for (k, v) in values().iter().enumerate() {
            let at = (k / 5) * 32 + (k % 5) * 4;
            host[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        }
        // The buffer ends with the last row's bytes, not its padding (NVIDIA checks a rectangle in whole pitches).
        let span = 5 * 32 + 5 * 4;
        let (mem, ready) = written(&context, &queue, &host[..span], span);
        // SAFETY: a valid buffer and event of the target's context.
        let wrapped =
            unsafe { ClBuffer::from_raw(&target, "x", mem.get(), DatumType::F32, &SHAPE, &layout, Some(ready.get())) }
                .expect("wraps");
        let x = wrapped.input("x", &SHAPE, &layout).expect("input");
        let ledger = Ledger::recording();
        let out = program.run(vec![x], &ledger).expect("runs");
        let moves = ledger.entries();
        assert_eq!(moves.len(), 1, "{moves:?}");
        assert_eq!(moves[0].kind, MoveKind::Relayout);
        assert_eq!((moves[0].from.name(), moves[0].to.name()), (target.space().name(), target.space().name()));
        close(&out[0].to_vec::<f32>().expect("reads"), &want());
    }
}

#[test]
fn another_context_a_short_buffer_and_a_null_handle_are_refused_naming_the_input() {
    let (_, _, target) = caller(false);
    let (other, other_queue, _) = caller(false);
    let layout = Layout::row_major(DatumType::F32, &SHAPE).expect("layout");
    let host = bytes_of(&values());
    let (foreign, _) = written(&other, &other_queue, &host, host.len());
    // SAFETY: valid handles; the checks refuse them before anything is retained.
    let err = unsafe { ClBuffer::from_raw(&target, "frame", foreign.get(), DatumType::F32, &SHAPE, &layout, None) }
        .expect_err("another context");
    assert!(err.to_string().starts_with("input 'frame': its cl_mem belongs to another OpenCL context"), "{err}");
    let (context, queue, target) = caller(false);
    let (short, _) = written(&context, &queue, &host[..64], 64);
    // SAFETY: as above.
    let err = unsafe { ClBuffer::from_raw(&target, "frame", short.get(), DatumType::F32, &SHAPE, &layout, None) }
        .expect_err("too small");
    assert_eq!(err.to_string(), "input 'frame': its cl_mem holds 64 bytes; f32[2, 3, 5] as row-major needs 120");
    // SAFETY: a null handle is refused before it is used.
    let err =
        unsafe { ClBuffer::from_raw(&target, "frame", std::ptr::null_mut(), DatumType::F32, &SHAPE, &layout, None) }
            .expect_err("null");
    assert_eq!(err.to_string(), "input 'frame': a null cl_mem");
    // Nothing was retained: the caller's buffers are released with their last reference (reference counts, once
    // the writes holding them are done).
    other_queue.finish().expect("finish");
    queue.finish().expect("finish");
    assert_eq!(foreign.reference_count().expect("count"), 1);
    assert_eq!(short.reference_count().expect("count"), 1);
}

#[test]
fn a_buffer_of_another_target_is_a_counted_download_and_upload() {
    let first = Target::open("opencl").expect("target");
    let second = Target::open("opencl").expect("target");
    let g = graph();
    let produce = stowage_opencl::lower(&g, &first, &Ledger::off()).expect("lowers");
    let consume = stowage_opencl::lower(&g, &second, &Ledger::off()).expect("lowers");
    let x = Tensor::from_slice(&SHAPE, &values()).expect("x");
    let y = produce.run(vec![x], &Ledger::off()).expect("runs").remove(0);
    let ledger = Ledger::recording();
    let z = consume.run(vec![y], &ledger).expect("runs");
    let moves = ledger.entries();
    let kinds: Vec<MoveKind> = moves.iter().map(|m| m.kind).collect();
    assert_eq!(kinds, vec![MoveKind::Download, MoveKind::Upload], "{moves:?}");
    let twice: Vec<f32> = want().iter().map(|v| v.tanh()).collect();
    close(&z[0].to_vec::<f32>().expect("reads"), &twice);
}

#[test]
fn an_output_crosses_dlpack_in_place_and_comes_back_as_an_input_with_no_copy() {
    for discrete in PATHS {
        let (_, _, target) = caller(discrete);
        let program = stowage_opencl::lower(&graph(), &target, &Ledger::off()).expect("lowers");
        let x = Tensor::from_slice(&SHAPE, &values()).expect("x");
        let y = program.run(vec![x], &Ledger::off()).expect("runs").remove(0);
        let exported = stowage_opencl::export_dlpack(&y).expect("exports");
        let described = exported.validate().expect("valid");
        assert_eq!(described.device().device_type, stowage_runtime::dlpark::ffi::DLDeviceType::OPENCL);
        assert_eq!(described.data_ptr() as usize, ClBuffer::of(&y).expect("device").raw_mem() as usize, "in place");
        assert_eq!(described.shape(), &[2, 3, 5]);
        drop(y); // the export keeps the buffer
        let again = stowage_opencl::import_dlpack(&target, exported, "y", 1 << 20).expect("imports");
        let ledger = Ledger::recording();
        let z = program.run(vec![again], &ledger).expect("runs");
        assert!(ledger.entries().is_empty(), "discrete {discrete}: {:?}", ledger.entries());
        let twice: Vec<f32> = want().iter().map(|v| v.tanh()).collect();
        close(&z[0].to_vec::<f32>().expect("reads"), &twice);
    }
    // A host tensor is not OpenCL's to import or export.
    let (_, _, target) = caller(false);
    let host = Tensor::from_slice(&SHAPE, &values()).expect("x").with_name("h");
    let err = stowage_opencl::export_dlpack(&host).err().expect("a host tensor is refused").to_string();
    assert!(err.starts_with("DLPack tensor h: it is in host memory, not OpenCL's"), "{err}");
    let err = stowage_opencl::import_dlpack(&target, host.to_dlpack().expect("exports"), "h", 1 << 20)
        .expect_err("a CPU tensor")
        .to_string();
    assert!(err.contains("DLPack tensor h: it is on device type 1 (id 0); this import takes 4"), "{err}");
}
