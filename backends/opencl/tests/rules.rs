//! The runtime's nine rules of `LazyHost` (the rule kit, `stowage_runtime::rules`: the very checks the runtime
//! runs on its test device), here on the machine's OpenCL device (PoCL in CI) through both paths: `opencl`
//! (unified memory, read in place) and `opencl:discrete` (staged copies).

use stowage_runtime::{map_tests, rule_tests, rules};

use stowage_opencl::{Arg, ClBuffer, Mode, Target};
use stowage_runtime::{DatumType, DeviceBuffer};

/// Copies `src` into `dst` element by element: the "kernel still running" that produces an output.
const COPY: &str =
    "__kernel void copy(__global const float* x, __global float* y) { size_t i = get_global_id(0); y[i] = x[i]; }";

struct Device(Target);

impl Device {
    fn open(target: &str) -> Device {
        Device(Target::open(target).unwrap_or_else(|e| panic!("{e}")))
    }
}

impl rules::Harness for Device {
    type Buffer = ClBuffer;

    fn label(&self) -> String {
        format!("{} ({:?})", self.0.space(), self.0.mode())
    }

    fn unified(&self) -> bool {
        self.0.mode() == Mode::Unified
    }

    fn context(&self) -> &Target {
        &self.0
    }

    fn produce(&self, shape: &[usize], values: &[f32]) -> ClBuffer {
        let t = &self.0;
        let bytes = rules::bytes(values);
        let src = <ClBuffer as DeviceBuffer>::upload(t, DatumType::F32, shape, &bytes).expect("uploads").value;
        let y = ClBuffer::allocate(t, DatumType::F32, shape).expect("allocates");
        let program = t.program(COPY, "copy (test)").expect("builds");
        let kernel = t.kernel(&program, "copy").expect("kernel");
        t.launch(&kernel, &[Arg::Buf(&src), Arg::Buf(&y)], &[values.len().max(1)], None, &[&y]).expect("launches");
        y
    }

    fn allocate(&self, dt: DatumType, shape: &[usize]) -> ClBuffer {
        ClBuffer::allocate(&self.0, dt, shape).expect("allocates")
    }

    fn run_scoped(&self, _values: &[f32]) -> Option<ClBuffer> {
        None // every OpenCL buffer is owned: a program hands out no view of memory it reuses
    }

    fn peek(&self, b: &ClBuffer) -> Vec<u8> {
        b.read_now().expect("reads")
    }

    fn host_address(&self, b: &ClBuffer) -> Option<usize> {
        b.host_address()
    }

    fn same_buffer(&self, a: &ClBuffer, b: &ClBuffer) -> bool {
        a.same_memory(b)
    }

    fn finished(&self, b: &ClBuffer) -> bool {
        b.is_idle()
    }
}

rule_tests!(Device::open, ["opencl", "opencl:discrete"]);
map_tests!(Device::open, ["opencl", "opencl:discrete"]);
