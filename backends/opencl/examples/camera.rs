//! A camera-like pipeline with no copy per frame: a producer (a kernel this example enqueues on its own queue in
//! its own context, standing in for a decoder) writes each frame into an OpenCL buffer; stowage, opened in that
//! context (`Target::from_raw`, adopted by the session), runs the planner's camera model on the buffer in place,
//! the frame declared on the device (`input_devices`), the producer's event ordering the two queues; the ledger
//! counts what each frame moved: nothing, on unified memory and on a discrete device alike.
//!
//!     "$PY" scripts/onnx/planning_examples.py      # writes target/planning-examples/camera.onnx
//!     cargo run -p stowage-opencl --example camera [-- TARGET [FRAMES]]
//!
//! TARGET is `opencl` (the first device, as it reports itself) or `opencl:discrete`; `tests/camera.rs` runs it
//! on both, and `scripts/device/check.sh` on the H200.

use std::error::Error;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use opencl3::command_queue::CommandQueue;
use opencl3::context::Context;
use opencl3::kernel::{ExecuteKernel, Kernel};
use opencl3::memory::{Buffer, ClMem, CL_MEM_READ_WRITE};
use opencl3::program::Program;
use stowage_driver::pipeline::{RunOptions, Session};
use stowage_driver::{Adopted, Registry};
use stowage_opencl::{ClBuffer, Target};
use stowage_runtime::{DatumType, Layout, Ledger, Tensor};

const SHAPE: [usize; 4] = [1, 480, 640, 3];
const PRODUCER: &str = "__kernel void produce(__global uchar* frame, uint n) {
    uint i = get_global_id(0);
    frame[i] = (uchar)((i * 7u + n * 13u) % 251u);
}";

/// What the run of `frames` frames came to.
pub struct Frames {
    /// Ledger entries per frame.
    pub moves: Vec<usize>,
    /// The largest difference between the first frame's output and the same model run on the frame's bytes given
    /// from host memory.
    pub max_difference: f32,
    /// Milliseconds per frame, median.
    pub median_ms: f64,
}

/// The planner's camera model (`STOWAGE_CAMERA_MODEL` names another copy, as on a machine the binary is carried to).
pub fn model() -> PathBuf {
    match std::env::var_os("STOWAGE_CAMERA_MODEL") {
        Some(path) => PathBuf::from(path),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/planning-examples/camera.onnx"),
    }
}

fn open(target: &str, adopted: Option<&Target>) -> Result<Session, Box<dyn Error>> {
    let mut options = RunOptions::new(Registry::new(&[&stowage_opencl::KIND])?);
    options.target = target.to_string();
    // Outputs stay on the device: the next stage (a renderer, a tracker) would read them there.
    options.read_outputs = false;
    if let Some(t) = adopted {
        // The session works in the decoder's context, and the frame lives there.
        options.adopted = Adopted(vec![Arc::new(t.clone())]);
        options.planning.input_devices.push(("frame".into(), "opencl:0".into()));
    }
    let path = model();
    let bytes =
        std::fs::read(&path).map_err(|e| format!("{}: {e} (run scripts/onnx/planning_examples.py)", path.display()))?;
    Ok(Session::new(&bytes, &path, &[], &options, Instant::now())?)
}

/// Runs `frames` frames of the producer through the camera model on `target`.
pub fn run(target: &str, frames: usize) -> Result<Frames, Box<dyn Error>> {
    // The decoder's own context and queue.
    let (device, _) = stowage_opencl::devices()?.into_iter().next().ok_or("no OpenCL device")?;
    let context = Context::from_device(&device)?;
    // SAFETY: the device is the context's.
    let queue = unsafe { CommandQueue::create_with_properties(&context, device.id(), 0, 0) }?;
    // stowage opened in that context, and the session adopting it.
    // SAFETY: valid handles of one context.
    let shared = unsafe { Target::from_raw(context.get(), device.id(), target.ends_with(":discrete")) }?;
    let session = open(target, Some(&shared))?;
    let held = session.target_handle("opencl:0").and_then(|h| h.downcast_ref::<Target>()).ok_or("no OpenCL target")?;
    if held.raw_context() != context.get() {
        return Err("the session did not adopt the decoder's context".into());
    }
    let program =
        Program::create_and_build_from_source(&context, PRODUCER, "").map_err(|log| format!("producer: {log}"))?;
    let kernel = Kernel::create(&program, "produce")?;
    let len: usize = SHAPE.iter().product();
    // SAFETY: no host pointer.
    let frame = unsafe { Buffer::<u8>::create(&context, CL_MEM_READ_WRITE, len, std::ptr::null_mut()) }?;
    let layout = Layout::row_major(DatumType::U8, &SHAPE)?;
    let (mut moves, mut times, mut first) = (Vec::new(), Vec::new(), None);
    for n in 0..frames {
        let t0 = Instant::now();
        // SAFETY: the kernel's arguments are the frame buffer and a number, as declared; one work-item a byte.
        let ready = unsafe {
            ExecuteKernel::new(&kernel)
                .set_arg(&frame)
                .set_arg(&(n as u32))
                .set_global_work_size(len)
                .enqueue_nd_range(&queue)
        }?;
        // SAFETY: a valid buffer and event of the target's context.
        let wrapped = unsafe {
            ClBuffer::from_raw(held, "frame", frame.get(), DatumType::U8, &SHAPE, &layout, Some(ready.get()))
        }?;
        let input = wrapped.input("frame", &SHAPE, &layout)?;
        let ledger = Ledger::recording();
        let out = session.run(&[("frame".to_string(), input)], &ledger)?;
        times.push(t0.elapsed().as_secs_f64() * 1e3);
        moves.push(ledger.entries().len());
        if n == 0 {
            first = Some(out.outputs);
        }
    }
    // The first frame again, from host memory, on a session of its own: the same output.
    // Frame 0 of the producer: (i * 7 + 0 * 13) % 251.
    let host: Vec<u8> = (0..len).map(|i| ((i as u32 * 7) % 251) as u8).collect();
    let reference =
        open(target, None)?.run(&[("frame".to_string(), Tensor::from_slice(&SHAPE, &host)?)], &Ledger::off())?;
    let got = first.ok_or("no frame ran")?[0].to_vec::<f32>()?;
    let want = reference.outputs[0].to_vec::<f32>()?;
    let max_difference = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
    times.sort_by(f64::total_cmp);
    Ok(Frames { moves, max_difference, median_ms: times.get(times.len() / 2).copied().unwrap_or(0.0) })
}

#[allow(dead_code)] // the test includes this file for `run`
fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let target = args.next().unwrap_or_else(|| "opencl".into());
    let frames = args.next().map(|n| n.parse()).transpose()?.unwrap_or(30);
    let r = run(&target, frames)?;
    let copies: usize = r.moves.iter().sum();
    println!(
        "camera on {target}: {frames} frames, {copies} copies in all ({:?} per frame), median {:.2} ms per frame, \
         first output within {:e} of the host-input run",
        r.moves, r.median_ms, r.max_difference
    );
    Ok(())
}
