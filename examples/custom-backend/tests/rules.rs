//! The rule kit (`stowage_runtime::rules`) on the simulated device: the nine LazyHost rules, and the map checks as
//! they apply to a device that is not host-mappable (mapping is refused; lazy tensors map through one download).

use stowage_example_sim::{SimBuffer, SimDevice};
use stowage_runtime::rules::Harness;
use stowage_runtime::{map_tests, rule_tests, DatumType};

struct Sim(SimDevice);

impl Sim {
    fn new(_mode: ()) -> Sim {
        Sim(SimDevice::new())
    }
}

impl Harness for Sim {
    type Buffer = SimBuffer;

    fn label(&self) -> String {
        "sim device".into()
    }

    fn unified(&self) -> bool {
        false
    }

    fn context(&self) -> &SimDevice {
        &self.0
    }

    fn produce(&self, shape: &[usize], values: &[f32]) -> SimBuffer {
        SimBuffer::written(&self.0, shape, values).expect("allocates")
    }

    fn allocate(&self, dt: DatumType, shape: &[usize]) -> SimBuffer {
        SimBuffer::allocate(&self.0, dt, shape).expect("allocates")
    }

    fn run_scoped(&self, _values: &[f32]) -> Option<SimBuffer> {
        None
    }

    fn peek(&self, b: &SimBuffer) -> Vec<u8> {
        b.device_bytes()
    }

    fn host_address(&self, _b: &SimBuffer) -> Option<usize> {
        // The host never sees device memory.
        None
    }

    fn same_buffer(&self, a: &SimBuffer, b: &SimBuffer) -> bool {
        a.same_memory(b)
    }

    fn finished(&self, _b: &SimBuffer) -> bool {
        // Kernels run to completion when launched.
        true
    }
}

rule_tests!(Sim::new, [()]);
map_tests!(Sim::new, [()]);

#[test]
fn every_check_at_once() {
    stowage_runtime::rules::check_all(&Sim::new(()));
}
