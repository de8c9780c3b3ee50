//! Programs are cached on disk keyed by device and source: a second start (a fresh target, as a new process would
//! open) loads the binary instead of compiling, except on PoCL, which keeps a kernel cache of its own (asking it for
//! binaries would make it compile every kernel twice). Its own test binary, because it sets the environment.

use stowage_opencl::Target;

#[test]
fn a_second_start_loads_the_program_instead_of_compiling_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let entries = || std::fs::read_dir(dir.path().join("opencl")).map_or(0, |d| d.count());
    // SAFETY: this test binary has this one test, so no other thread reads the environment while it is set.
    unsafe { std::env::set_var("STOWAGE_CACHE_DIR", dir.path()) };
    let source = "__kernel void twice(__global float* y) { size_t i = get_global_id(0); y[i] = 2.0f * y[i]; }";
    // By default, PoCL's programs are left to PoCL's own cache; other drivers' go to the folder.
    let first = Target::open("opencl").expect("an OpenCL device");
    let platform = first.info().platform.clone();
    first.program(&source.replace("2.0f", "4.0f"), "test").expect("builds");
    let pocl = platform == "Portable Computing Language";
    assert_eq!(stowage_opencl::keeps_on_disk(&platform), !pocl, "{platform}");
    assert_eq!(entries(), usize::from(!pocl), "binaries kept by stowage on {platform}");
    // The folder's own path, taken on every device when asked for.
    // SAFETY: as above.
    unsafe { std::env::set_var("STOWAGE_OPENCL_DISK_CACHE", "always") };
    let before = entries();
    first.program(source, "test").expect("builds");
    first.program(source, "test").expect("again");
    let s = first.build_stats();
    assert_eq!((s.compiled, s.loaded, s.reused), (2, 0, 1), "compiled once, then found in the process");
    assert_eq!(entries(), before + 1, "one more binary on disk");
    let second = Target::open("opencl").expect("opens again");
    second.program(source, "test").expect("loads");
    assert_eq!(second.build_stats().compiled, 0, "nothing compiled at the second start");
    assert_eq!(second.build_stats().loaded, 1);
    // Another source is another entry.
    second.program(&source.replace("2.0f", "3.0f"), "test").expect("builds");
    assert_eq!(second.build_stats().compiled, 1);
    assert_eq!(entries(), before + 2);
    // And never: nothing read or written.
    // SAFETY: as above.
    unsafe { std::env::set_var("STOWAGE_OPENCL_DISK_CACHE", "never") };
    let third = Target::open("opencl").expect("opens again");
    third.program(source, "test").expect("builds");
    assert_eq!((third.build_stats().compiled, third.build_stats().loaded), (1, 0), "the folder is not read");
}
