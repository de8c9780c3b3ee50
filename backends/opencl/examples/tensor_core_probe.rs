//! Does NVIDIA's OpenCL compiler take inline PTX for tensor cores? (Issue 20 asks this first.) On the first GPU,
//! builds OpenCL C kernels whose bodies are inline PTX (`mma.sync` in TF32 and FP16, `ldmatrix` from local
//! memory), runs one warp of each, and checks every element against the product computed here. It prints, per
//! kernel, whether it built (with the compiler's log when not), whether it ran right, and the PTX `.version` and
//! `.target` the driver compiled for.
//!
//!     cargo build -p stowage-opencl --example tensor_core_probe    # then, on the device machine:
//!     . scripts/device/env.sh && target/debug/examples/tensor_core_probe

use std::error::Error;

use opencl3::command_queue::CommandQueue;
use opencl3::context::Context;
use opencl3::device::{Device, CL_DEVICE_TYPE_GPU};
use opencl3::kernel::{ExecuteKernel, Kernel};
use opencl3::memory::{Buffer, CL_MEM_READ_WRITE};
use opencl3::platform::get_platforms;
use opencl3::program::Program;
use opencl3::types::CL_BLOCKING;

const SOURCE: &str = r#"
__kernel void mma_tf32(__global const float* A, __global const float* B, __global float* D) {
    uint lane = get_local_id(0), g = lane >> 2, t = lane & 3;
    uint a0 = as_uint(A[g * 8 + t]), a1 = as_uint(A[(g + 8) * 8 + t]);
    uint a2 = as_uint(A[g * 8 + t + 4]), a3 = as_uint(A[(g + 8) * 8 + t + 4]);
    uint b0 = as_uint(B[t * 8 + g]), b1 = as_uint(B[(t + 4) * 8 + g]);
    float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f;
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    D[g * 8 + t * 2] = d0; D[g * 8 + t * 2 + 1] = d1;
    D[(g + 8) * 8 + t * 2] = d2; D[(g + 8) * 8 + t * 2 + 1] = d3;
}

uint pack(ushort lo, ushort hi) { return (uint)lo | ((uint)hi << 16); }

__kernel void mma_f16(__global const ushort* A, __global const ushort* B, __global float* D) {
    uint lane = get_local_id(0), g = lane >> 2, t = lane & 3;
    uint a0 = pack(A[g * 16 + t * 2], A[g * 16 + t * 2 + 1]);
    uint a1 = pack(A[(g + 8) * 16 + t * 2], A[(g + 8) * 16 + t * 2 + 1]);
    uint a2 = pack(A[g * 16 + t * 2 + 8], A[g * 16 + t * 2 + 9]);
    uint a3 = pack(A[(g + 8) * 16 + t * 2 + 8], A[(g + 8) * 16 + t * 2 + 9]);
    uint b0 = pack(B[(t * 2) * 8 + g], B[(t * 2 + 1) * 8 + g]);
    uint b1 = pack(B[(t * 2 + 8) * 8 + g], B[(t * 2 + 9) * 8 + g]);
    float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f;
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    D[g * 8 + t * 2] = d0; D[g * 8 + t * 2 + 1] = d1;
    D[(g + 8) * 8 + t * 2] = d2; D[(g + 8) * 8 + t * 2 + 1] = d3;
}

__kernel void ldmatrix32(__global const ushort* M, __global uint* out) {
    __local ushort tile[256] __attribute__((aligned(16)));
    uint lane = get_local_id(0);
    for (uint i = lane; i < 256; i += 32) tile[i] = M[i];
    barrier(CLK_LOCAL_MEM_FENCE);
    uint addr = (uint)(size_t)(&tile[(lane / 8) * 64 + (lane % 8) * 8]);
    uint r0, r1, r2, r3;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
        : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
    out[lane * 4] = r0; out[lane * 4 + 1] = r1; out[lane * 4 + 2] = r2; out[lane * 4 + 3] = r3;
}

__kernel void ldmatrix_cvta(__global const ushort* M, __global uint* out) {
    __local ushort tile[256] __attribute__((aligned(16)));
    uint lane = get_local_id(0);
    for (uint i = lane; i < 256; i += 32) tile[i] = M[i];
    barrier(CLK_LOCAL_MEM_FENCE);
    ulong gaddr = (ulong)(&tile[(lane / 8) * 64 + (lane % 8) * 8]);
    uint addr;
    asm volatile("{ .reg .u64 s; cvta.to.shared.u64 s, %1; cvt.u32.u64 %0, s; }" : "=r"(addr) : "l"(gaddr));
    uint r0, r1, r2, r3;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
        : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
    out[lane * 4] = r0; out[lane * 4 + 1] = r1; out[lane * 4 + 2] = r2; out[lane * 4 + 3] = r3;
}

__kernel void address(__global const ushort* M, __global uint* out) {
    __local ushort tile[256] __attribute__((aligned(16)));
    uint lane = get_local_id(0);
    for (uint i = lane; i < 256; i += 32) tile[i] = M[i];
    barrier(CLK_LOCAL_MEM_FENCE);
    ulong wide = (ulong)(&tile[lane * 8]);
    uint narrow = (uint)(size_t)(&tile[lane * 8]);
    ushort v;
    asm volatile("ld.shared.u16 %0, [%1];" : "=h"(v) : "r"(narrow));
    out[lane * 4] = (uint)wide; out[lane * 4 + 1] = (uint)(wide >> 32); out[lane * 4 + 2] = narrow; out[lane * 4 + 3] = v;
}

__kernel void ldmatrix64(__global const ushort* M, __global uint* out) {
    __local ushort tile[256] __attribute__((aligned(16)));
    uint lane = get_local_id(0);
    for (uint i = lane; i < 256; i += 32) tile[i] = M[i];
    barrier(CLK_LOCAL_MEM_FENCE);
    ulong addr = (ulong)(&tile[(lane / 8) * 64 + (lane % 8) * 8]);
    uint r0, r1, r2, r3;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
        : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "l"(addr));
    out[lane * 4] = r0; out[lane * 4 + 1] = r1; out[lane * 4 + 2] = r2; out[lane * 4 + 3] = r3;
}
"#;

fn gpu() -> Result<Device, Box<dyn Error>> {
    for p in get_platforms()? {
        if let Ok(ids) = p.get_devices(CL_DEVICE_TYPE_GPU) {
            if let Some(&id) = ids.first() {
                return Ok(Device::new(id));
            }
        }
    }
    Err("no OpenCL GPU".into())
}

/// One kernel's run over one warp: `inputs` as buffers, then an output of `out` elements of `T`.
fn run<T: Copy + Default>(
    cx: &Context,
    queue: &CommandQueue,
    program: &Program,
    name: &str,
    inputs: &[&[u8]],
    out: usize,
) -> Result<Vec<T>, Box<dyn Error>> {
    let kernel = Kernel::create(program, name)?;
    let mut buffers = Vec::new();
    for bytes in inputs {
        // SAFETY: no host pointer.
        let mut b = unsafe { Buffer::<u8>::create(cx, CL_MEM_READ_WRITE, bytes.len(), std::ptr::null_mut()) }?;
        // SAFETY: a blocking write of exactly the buffer's length.
        unsafe { queue.enqueue_write_buffer(&mut b, CL_BLOCKING, 0, bytes, &[]) }?;
        buffers.push(b);
    }
    let bytes = out * std::mem::size_of::<T>();
    // SAFETY: no host pointer.
    let result = unsafe { Buffer::<u8>::create(cx, CL_MEM_READ_WRITE, bytes, std::ptr::null_mut()) }?;
    let mut launch = ExecuteKernel::new(&kernel);
    for b in &buffers {
        // SAFETY: the kernels take their buffers in this order.
        unsafe { launch.set_arg(b) };
    }
    // SAFETY: as above; one warp of 32 work-items in one work-group.
    unsafe { launch.set_arg(&result).set_global_work_size(32).set_local_work_size(32).enqueue_nd_range(queue) }?;
    let mut host = vec![0u8; bytes];
    // SAFETY: a blocking read of the whole output.
    unsafe { queue.enqueue_read_buffer(&result, CL_BLOCKING, 0, &mut host, &[]) }?;
    queue.finish()?;
    let mut values = vec![T::default(); out];
    // SAFETY: `host` holds `out` values of `T`, which are plain numbers.
    unsafe { std::ptr::copy_nonoverlapping(host.as_ptr(), values.as_mut_ptr().cast::<u8>(), bytes) };
    Ok(values)
}

fn as_bytes<T: Copy>(v: &[T]) -> Vec<u8> {
    // SAFETY: plain numbers, read as bytes.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }.to_vec()
}

fn product(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
    let mut d = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            d[i * n + j] = (0..k).map(|q| a[i * k + q] * b[q * n + j]).sum();
        }
    }
    d
}

fn verdict(name: &str, got: Result<bool, Box<dyn Error>>) {
    match got {
        Ok(true) => println!("{name}: builds and runs right"),
        Ok(false) => println!("{name}: builds, runs, WRONG results"),
        Err(e) => println!("{name}: failed to run: {e}"),
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let device = gpu()?;
    println!("device: {} ({})", device.name()?, device.version()?);
    let cx = Context::from_device(&device)?;
    // SAFETY: the device is the context's.
    let queue = unsafe { CommandQueue::create_with_properties(&cx, device.id(), 0, 0) }?;
    let program = match Program::create_and_build_from_source(&cx, SOURCE, "-cl-std=CL1.2") {
        Ok(p) => p,
        Err(log) => {
            println!("inline PTX: the program did not build:\n{log}");
            return Ok(());
        }
    };
    for binary in program.get_binaries()? {
        let text = String::from_utf8_lossy(&binary);
        for line in text.lines().filter(|l| l.starts_with(".version") || l.starts_with(".target")) {
            println!("compiled PTX: {line}");
        }
    }
    // Values exact in TF32 and FP16: products and sums exact in f32.
    let a: Vec<f32> = (0..16 * 8).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
    let b: Vec<f32> = (0..8 * 8).map(|i| ((i * 5) % 9) as f32 - 4.0).collect();
    verdict(
        "mma.sync m16n8k8 tf32",
        run::<f32>(&cx, &queue, &program, "mma_tf32", &[&as_bytes(&a), &as_bytes(&b)], 128)
            .map(|d| d == product(&a, &b, 16, 8, 8)),
    );
    let a: Vec<f32> = (0..16 * 16).map(|i| ((i * 7) % 13) as f32 - 6.0).collect();
    let b: Vec<f32> = (0..16 * 8).map(|i| ((i * 3) % 7) as f32 - 3.0).collect();
    let halves =
        |v: &[f32]| -> Vec<u16> { v.iter().map(|&x| stowage_runtime::half::f16::from_f32(x).to_bits()).collect() };
    verdict(
        "mma.sync m16n8k16 f16",
        run::<f32>(&cx, &queue, &program, "mma_f16", &[&as_bytes(&halves(&a)), &as_bytes(&halves(&b))], 128)
            .map(|d| d == product(&a, &b, 16, 16, 8)),
    );
    // Four 8x8 matrices of b16; lane l gets row l/4, columns 2(l%4) and 2(l%4)+1 of each.
    let m: Vec<u16> = (0..256).collect();
    let want: Vec<u32> = (0..32u32)
        .flat_map(|l| {
            (0..4u32).map(move |j| {
                let at = j * 64 + (l / 4) * 8 + (l % 4) * 2;
                at | ((at + 1) << 16)
            })
        })
        .collect();
    // A fault leaves the context unusable: one `ldmatrix` form per process (`tensor_core_probe ldmatrix32`).
    let name = std::env::args().nth(1).unwrap_or_else(|| "ldmatrix_cvta".into());
    if name == "address" {
        let r = run::<u32>(&cx, &queue, &program, &name, &[&as_bytes(&m)], 128)?;
        for l in [0usize, 1, 31] {
            let wide = r[l * 4] as u64 | ((r[l * 4 + 1] as u64) << 32);
            println!(
                "lane {l}: (ulong)&tile = {wide:#x}, (uint) = {:#x}, ld.shared there = {} (want {})",
                r[l * 4 + 2],
                r[l * 4 + 3],
                l * 8
            );
        }
        return Ok(());
    }
    verdict(&name, run::<u32>(&cx, &queue, &program, &name, &[&as_bytes(&m)], 128).map(|r| r == want));
    Ok(())
}
