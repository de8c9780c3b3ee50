//! The nine rules of `LazyHost` (the rule kit, `stowage_runtime::rules`, shared with every backend's suite), on the runtime's test device in both
//! modes. The test device counts its own transfers too; they must agree with the ledger the rules read.

mod common;

use common::{Mode, TestBuffer, TestContext};
use stowage_runtime::{map_tests, rule_tests, rules, LedgerTag};

struct TestDevice(TestContext);

impl TestDevice {
    fn new(mode: Mode) -> TestDevice {
        TestDevice(TestContext::new(mode))
    }
}

impl rules::Harness for TestDevice {
    type Buffer = TestBuffer;

    fn label(&self) -> String {
        format!("test device, {:?}", self.0.mode())
    }

    fn unified(&self) -> bool {
        self.0.mode() == Mode::Unified
    }

    fn context(&self) -> &TestContext {
        &self.0
    }

    fn produce(&self, shape: &[usize], values: &[f32]) -> TestBuffer {
        self.0.produce(shape, values)
    }

    fn allocate(&self, dt: stowage_runtime::DatumType, shape: &[usize]) -> TestBuffer {
        TestBuffer::allocate(&self.0, dt, shape).expect("allocates")
    }

    fn run_scoped(&self, values: &[f32]) -> Option<TestBuffer> {
        Some(self.0.run_scoped(values))
    }

    fn peek(&self, b: &TestBuffer) -> Vec<u8> {
        b.peek()
    }

    fn host_address(&self, b: &TestBuffer) -> Option<usize> {
        // Every test buffer has an address; on the discrete device the host never sees it.
        Some(b.address())
    }

    fn same_buffer(&self, a: &TestBuffer, b: &TestBuffer) -> bool {
        a.same_buffer(b)
    }

    fn finished(&self, b: &TestBuffer) -> bool {
        b.pending() == 0
    }

    fn waited_here(&self, _b: &TestBuffer) {
        assert_eq!(self.0.counters.waiting_threads(), vec![std::thread::current().id()]);
    }
}

rule_tests!(TestDevice::new, [Mode::Unified, Mode::Discrete]);
map_tests!(TestDevice::new, [Mode::Unified, Mode::Discrete]);

#[test]
fn the_device_counts_the_same_downloads_as_the_ledger() {
    for mode in [Mode::Unified, Mode::Discrete] {
        let cx = TestContext::new(mode);
        let buffer = cx.produce(&[2, 8], &rules::iota(16));
        let ledger = stowage_runtime::Ledger::recording();
        let y = buffer.into_tensor(LedgerTag::new(&ledger, "y")).expect("wrapped");
        let rows = y.slice(0, 1..2).expect("slice");
        let _ = rows.to_vec::<f32>().expect("read");
        let _ = y.to_vec::<f32>().expect("read");
        assert_eq!(cx.counters.downloads(), ledger.count(stowage_runtime::MoveKind::Download), "{mode:?}");
        assert_eq!(cx.counters.download_bytes(), ledger.bytes_moved(), "{mode:?}");
    }
}
