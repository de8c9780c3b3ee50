//! The product kernels alone, on the first GPU: for each shape `m,n,k` given, builds the kernel the backend
//! generates ([`codegen::gemm`]) in each mode (`fp32`: the tiled kernel on floats; `tf32`, `fp16`, `bf16`: tensor
//! cores), checks a sample of its outputs against a product computed here, and times it with the queue's profiling
//! events (median of `RUNS` launches after 5 of warm-up), in microseconds and TFLOP/s. Issue 20 measures the
//! products against cuBLAS's time for the same shapes (`scripts/device/matmul_anchor.py`).
//!
//!     cargo build --release -p stowage-opencl --example gemm_speed    # then, on the device machine:
//!     . scripts/device/env.sh && target/release/examples/gemm_speed 128,3072,768 128,768,3072
//!
//! `MODES=fp32,tf32` picks modes; `PTX_DIR=dir` writes each kernel's compiled PTX there (NVIDIA's program binary),
//! for `ptxas` and `nvdisasm`. The backend's measuring variables (`STOWAGE_OPENCL_GEMM_SPLITS`, `…_MMA_BK`, …)
//! apply.

use std::error::Error;

use opencl3::command_queue::{CommandQueue, CL_QUEUE_PROFILING_ENABLE};
use opencl3::context::Context;
use opencl3::device::{Device, CL_DEVICE_TYPE_ALL, CL_DEVICE_TYPE_GPU};
use opencl3::kernel::{ExecuteKernel, Kernel};
use opencl3::memory::{Buffer, CL_MEM_READ_WRITE};
use opencl3::platform::get_platforms;
use opencl3::program::Program;
use opencl3::types::{cl_event, CL_BLOCKING};
use stowage_opencl::codegen::{self, Gemm};

fn gpu() -> Result<Device, Box<dyn Error>> {
    for p in get_platforms()? {
        if let Ok(ids) = p.get_devices(CL_DEVICE_TYPE_GPU) {
            if let Some(&id) = ids.first() {
                return Ok(Device::new(id));
            }
        }
    }
    // No GPU (PoCL here): the first device of any kind, for trying the tool (fp32 only: no inline PTX).
    for p in get_platforms()? {
        if let Some(&id) = p.get_devices(CL_DEVICE_TYPE_ALL)?.first() {
            return Ok(Device::new(id));
        }
    }
    Err("no OpenCL device".into())
}

fn product(m: usize, n: usize, k: usize, elem: &'static str, tensor_cores: bool, units: usize, ptx: bool) -> Gemm {
    Gemm {
        m,
        n,
        k,
        batch: vec![],
        a: (vec![], k, 1),
        b: (vec![], n, 1),
        c: (vec![], n, 1),
        alpha: 1.0,
        bias: None,
        residual: None,
        relu: false,
        im2col: None,
        elem,
        min_groups: 2 * units,
        tensor_cores,
        chain: None,
        ptx,
    }
}

/// Values of the storage type `elem` as bytes, and the same values as f32.
fn operand(len: usize, seed: u32, elem: &str) -> (Vec<u8>, Vec<f32>) {
    let mut x = seed.wrapping_mul(2_654_435_761).max(1);
    let values: Vec<f32> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            // Multiples of 1/64 in [-1, 1): exact in f16, bf16 and TF32.
            ((x % 128) as f32 - 64.0) / 64.0
        })
        .collect();
    let bytes = match elem {
        "half" => values.iter().flat_map(|v| half_bits(*v).to_le_bytes()).collect(),
        "bf16" => values.iter().flat_map(|v| ((v.to_bits() >> 16) as u16).to_le_bytes()).collect(),
        _ => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    };
    (bytes, values)
}

/// The f16 bits of `v`, a multiple of 1/64 in [-1, 1] (normal or zero: exact).
fn half_bits(v: f32) -> u16 {
    if v == 0.0 {
        return 0;
    }
    let b = v.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32 - 127 + 15;
    sign | ((exp as u16) << 10) | ((b >> 13) & 0x3ff) as u16
}

fn elem_bytes(elem: &str) -> usize {
    if elem == "float" {
        4
    } else {
        2
    }
}

fn buffer(cx: &Context, queue: &CommandQueue, bytes: &[u8]) -> Result<Buffer<u8>, Box<dyn Error>> {
    // SAFETY: no host pointer.
    let mut b = unsafe { Buffer::<u8>::create(cx, CL_MEM_READ_WRITE, bytes.len().max(4), std::ptr::null_mut()) }?;
    // SAFETY: a blocking write of at most the buffer's length.
    unsafe { queue.enqueue_write_buffer(&mut b, CL_BLOCKING, 0, bytes, &[]) }?;
    Ok(b)
}

fn read_c(queue: &CommandQueue, c: &Buffer<u8>, len: usize, elem: &str) -> Result<Vec<f32>, Box<dyn Error>> {
    let mut host = vec![0u8; len * elem_bytes(elem)];
    // SAFETY: a blocking read of the whole output.
    unsafe { queue.enqueue_read_buffer(c, CL_BLOCKING, 0, &mut host, &[]) }?;
    Ok(match elem {
        "float" => host.chunks(4).map(|w| f32::from_le_bytes([w[0], w[1], w[2], w[3]])).collect(),
        "bf16" => host.chunks(2).map(|w| f32::from_bits((u16::from_le_bytes([w[0], w[1]]) as u32) << 16)).collect(),
        _ => host.chunks(2).map(|w| half_to_f32(u16::from_le_bytes([w[0], w[1]]))).collect(),
    })
}

fn half_to_f32(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = ((h >> 10) & 0x1f) as i32;
    let frac = (h & 0x3ff) as f32;
    match exp {
        0 => sign * frac * 2f32.powi(-24),
        31 => f32::NAN,
        e => sign * (1.0 + frac / 1024.0) * 2f32.powi(e - 15),
    }
}

struct Timed {
    micros: f64,
    worst: f64,
    describe: String,
    /// The first wrong output, if any (a measuring variant that leaves a stage out computes wrong results).
    wrong: Option<String>,
}

fn time(
    cx: &Context,
    queue: &CommandQueue,
    g: &Gemm,
    runs: usize,
    ptx_dir: Option<&str>,
    tag: &str,
) -> Result<Timed, Box<dyn Error>> {
    let (m, n, k) = (g.m, g.n, g.k);
    let d = codegen::division(g);
    let mut source = String::new();
    if g.tensor_cores {
        source.push_str(codegen::MMA_HELPERS);
    }
    source.push_str(&codegen::gemm("product", g));
    let program = Program::create_and_build_from_source(cx, &source, "-cl-std=CL1.2")
        .map_err(|log| format!("the kernel did not build: {log}"))?;
    if let Some(dir) = ptx_dir {
        for binary in program.get_binaries()? {
            std::fs::write(format!("{dir}/{tag}.ptx"), &binary)?;
        }
        std::fs::write(format!("{dir}/{tag}.cl"), &source)?;
    }
    let kernel = Kernel::create(&program, "product")?;
    let (a_bytes, a) = operand(m * k, 1, g.elem);
    let (b_bytes, b) = operand(k * n, 2, g.elem);
    let a_buf = buffer(cx, queue, &a_bytes)?;
    let b_buf = buffer(cx, queue, &b_bytes)?;
    let c_buf = buffer(cx, queue, &vec![0u8; m * n * elem_bytes(g.elem)])?;
    let split = d.splits > 1;
    // A split's partial sums: one slice per range where the device takes no PTX (`Division::scratch_bytes`).
    let p_buf = buffer(cx, queue, &vec![0u8; d.scratch_bytes(g).max(m * n * 4)])?;
    let n_buf = buffer(cx, queue, &vec![0u8; d.tiles(g) * 4])?;
    let (global, local) = (d.global(g), d.local(g));
    let mut times = Vec::new();
    for run in 0..runs + 5 {
        let mut launch = ExecuteKernel::new(&kernel);
        // SAFETY: the kernel's parameters are A, B[, P, N], C (no terms), in this order.
        unsafe {
            launch.set_arg(&a_buf).set_arg(&b_buf);
            if split {
                launch.set_arg(&p_buf).set_arg(&n_buf);
            }
            launch.set_arg(&c_buf).set_global_work_sizes(&global).set_local_work_sizes(&local);
        }
        // SAFETY: the buffers outlive the launch, which `wait` finishes.
        let event = unsafe { launch.enqueue_nd_range(queue) }?;
        event.wait()?;
        if run >= 5 {
            let ns = event.profiling_command_end()? - event.profiling_command_start()?;
            times.push(ns as f64 / 1000.0);
        }
        let _: cl_event = event.get();
    }
    queue.finish()?;
    // Rows 0, m/2 and m-1 against the product in f64.
    let c = read_c(queue, &c_buf, m * n, g.elem)?;
    let tol = match (g.elem, g.tensor_cores) {
        ("float", false) => 1e-4,
        ("float", true) => 2e-2,
        _ => 5e-2,
    };
    let mut wrong = None;
    'rows: for i in [0, m / 2, m - 1] {
        for j in 0..n {
            let want: f64 = (0..k).map(|q| a[i * k + q] as f64 * b[q * n + j] as f64).sum();
            let got = c[i * n + j] as f64;
            if (got - want).abs() > tol * (1.0 + want.abs()) {
                wrong = Some(format!("WRONG at ({i}, {j}): {got}, want {want}"));
                break 'rows;
            }
        }
    }
    times.sort_by(f64::total_cmp);
    let micros = times[times.len() / 2];
    Ok(Timed { micros, worst: *times.last().unwrap_or(&micros), describe: codegen::describe(g), wrong })
}

fn main() -> Result<(), Box<dyn Error>> {
    let device = gpu()?;
    let units = device.max_compute_units()? as usize;
    let nvidia = device.vendor()?.contains("NVIDIA");
    println!("device: {} ({units} compute units)", device.name()?);
    let cx = Context::from_device(&device)?;
    // SAFETY: the device is the context's.
    let queue = unsafe { CommandQueue::create_with_properties(&cx, device.id(), CL_QUEUE_PROFILING_ENABLE, 0) }?;
    let runs = std::env::var("RUNS").ok().and_then(|r| r.parse().ok()).unwrap_or(50usize).max(1);
    let modes = std::env::var("MODES").unwrap_or_else(|_| "fp32,tf32,fp16".into());
    let ptx_dir = std::env::var("PTX_DIR").ok();
    let shapes: Vec<String> = std::env::args().skip(1).collect();
    for shape in &shapes {
        let dims: Vec<usize> = shape.split(',').filter_map(|d| d.parse().ok()).collect();
        let [m, n, k] = dims[..] else {
            return Err(format!("shape '{shape}': expected m,n,k").into());
        };
        for mode in modes.split(',') {
            let (elem, tc) = match mode {
                "fp32" => ("float", false),
                "tf32" => ("float", true),
                "fp16" => ("half", true),
                "bf16" => ("bf16", true),
                other => return Err(format!("mode '{other}': expected fp32, tf32, fp16 or bf16").into()),
            };
            let g = product(m, n, k, elem, tc, units, nvidia);
            let tag = format!("m{m}n{n}k{k}_{mode}");
            match time(&cx, &queue, &g, runs, ptx_dir.as_deref(), &tag) {
                Ok(t) => println!(
                    "{m:>5} x {n:>5} x {k:>5} {mode:<5} {:>9.1} us (worst {:>8.1})  {:>6.1} TFLOP/s  [{}]{}",
                    t.micros,
                    t.worst,
                    2.0 * (m * n * k) as f64 / t.micros / 1e6,
                    t.describe,
                    t.wrong.map(|w| format!("  {w}")).unwrap_or_default()
                ),
                Err(e) => println!("{m:>5} x {n:>5} x {k:>5} {mode:<5} FAILED: {e}"),
            }
        }
    }
    Ok(())
}
