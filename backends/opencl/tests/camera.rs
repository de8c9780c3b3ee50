//! The camera example (`examples/camera.rs`) as a test: a producer kernel in its own context writes each frame
//! into an OpenCL buffer, and a session adopting that context runs the camera model on it in place, on unified
//! memory and through the discrete path: no ledger entry for any frame, and the first frame's output equals the
//! same model run on the frame from host memory.

#[path = "../examples/camera.rs"]
mod camera;

#[test]
fn frames_made_on_the_device_are_run_where_they_are_with_no_copy() {
    for target in ["opencl", "opencl:discrete"] {
        let r = camera::run(target, 4).unwrap_or_else(|e| panic!("{target}: {e}"));
        assert_eq!(r.moves, vec![0; 4], "{target}: ledger entries per frame");
        assert!(r.max_difference < 1e-5, "{target}: {}", r.max_difference);
    }
}
