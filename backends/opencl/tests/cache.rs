//! Programs are cached on disk keyed by device and source: a second start (a fresh target, as a new process would
//! open) loads the binary instead of compiling. Its own test binary, because it sets the cache folder.

use stowage_opencl::Target;

#[test]
fn a_second_start_loads_the_program_instead_of_compiling_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    // SAFETY: this test binary has this one test, so no other thread reads the environment while it is set.
    unsafe { std::env::set_var("STOWAGE_CACHE_DIR", dir.path()) };
    let source = "__kernel void twice(__global float* y) { size_t i = get_global_id(0); y[i] = 2.0f * y[i]; }";
    let first = Target::open("opencl").expect("an OpenCL device");
    first.program(source, "test").expect("builds");
    first.program(source, "test").expect("again");
    let s = first.build_stats();
    assert_eq!((s.compiled, s.loaded, s.reused), (1, 0, 1), "compiled once, then found in the process");
    let cached: Vec<_> = std::fs::read_dir(dir.path().join("opencl")).expect("cache folder").collect();
    assert_eq!(cached.len(), 1, "one binary on disk");
    let second = Target::open("opencl").expect("opens again");
    second.program(source, "test").expect("loads");
    assert_eq!(second.build_stats().compiled, 0, "nothing compiled at the second start");
    assert_eq!(second.build_stats().loaded, 1);
    // Another source is another entry.
    second.program(&source.replace("2.0f", "3.0f"), "test").expect("builds");
    assert_eq!(second.build_stats().compiled, 1);
}
