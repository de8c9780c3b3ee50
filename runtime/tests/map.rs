//! map/unmap on tensors; on device buffers, the shared checks of the rule kit (`stowage_runtime::rules::map`) run on the test device in
//! `lazy_host.rs`, and the test device's own counters are checked here.

mod common;

use common::{iota, Mode, TestContext};
use stowage_runtime::{DatumType, DeviceBuffer, LedgerTag, Tensor};

#[test]
fn tensors_map_for_reading_and_writing() {
    let mut t = Tensor::from_slice(&[2, 2], &[1i32, 2, 3, 4]).unwrap().with_name("t");
    {
        let read = t.map_read::<i32>().unwrap();
        assert_eq!(&*read, &[1, 2, 3, 4]);
    }
    {
        let mut write = t.map_write::<i32>().unwrap();
        write[3] = 40;
        write.unmap().unwrap();
    }
    assert_eq!(t.as_slice::<i32>().unwrap(), &[1, 2, 3, 40]);
    let err = t.map_read::<f32>().unwrap_err();
    assert_eq!(err.to_string(), "tensor t: expected datum type f32, found i32");
    let transposed = t.permute(&[1, 0]).unwrap();
    let err = transposed.map_read::<i32>().unwrap_err();
    assert!(err.to_string().contains("column-major"), "{err}");
}

#[test]
fn a_bool_tensor_maps_as_bytes() {
    let t = Tensor::from_slice(&[3], &[true, false, true]).unwrap();
    assert_eq!(t.dt(), DatumType::Bool);
    assert_eq!(&*t.map_read::<u8>().unwrap(), &[1, 0, 1]);
}

#[test]
fn each_unmap_reaches_the_device() {
    for mode in [Mode::Unified, Mode::Discrete] {
        let cx = TestContext::new(mode);
        let mut buffer = cx.produce(&[2], &iota(2));
        for _ in 0..2 {
            let map = buffer.map_write::<f32>(&LedgerTag::default()).unwrap();
            map.unmap().unwrap();
        }
        assert_eq!(cx.counters.unmaps.load(std::sync::atomic::Ordering::SeqCst), 2, "{mode:?}");
    }
}
