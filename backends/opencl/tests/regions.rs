//! Regions of one allocation at overlapping places (`ClBuffer::region`), written by kernels and released as the
//! session's arena releases them: values alive at different times share bytes, and a segment's regions outlive
//! another's in any order. NVIDIA's OpenCL crashed here when a region was released after an older one that
//! overlaps it; the backend now releases every region with its allocation, the last made first. Each pattern is
//! a test of its own, so that a driver that crashes on one names it: on PoCL in CI, and on the H200 through
//! `scripts/device/regions.sh`.

use stowage_opencl::{Arg, ClBuffer, Target};
use stowage_runtime::DatumType;

/// An allocation of eight base alignments on `opencl:discrete`, regions at `regions` (offset and length in half
/// base alignments), each written by a kernel in turn as the executor does, then dropped in `order` (indices into
/// `regions`) before the allocation; each region holds what its kernel wrote while alive.
fn regions(regions: &[(usize, usize)], order: &[usize]) {
    let target = Target::open("opencl:discrete").expect("an OpenCL device");
    let align = target.info().base_align.max(64);
    let arena = ClBuffer::allocate(&target, DatumType::U8, &[8 * align]).expect("the allocation");
    let source = "__kernel void fill(__global float* a, float v) { a[get_global_id(0)] = v; }";
    let program = target.program(source, "fill").expect("builds");
    let kernel = target.kernel(&program, "fill").expect("a kernel");
    let mut made: Vec<Option<ClBuffer>> = Vec::new();
    for (k, &(at, len)) in regions.iter().enumerate() {
        let floats = len * align / 2 / 4;
        let r = arena.region(at * align, len * align / 2, DatumType::F32, &[floats]).expect("a region");
        target.launch(&kernel, &[Arg::Buf(&r), Arg::F32(k as f32)], &[floats], None, &[&r]).expect("launches");
        let read = r.read_now().expect("reads");
        assert!(read.chunks(4).all(|b| b == (k as f32).to_le_bytes()), "region {k}");
        made.push(Some(r));
    }
    for &i in order {
        drop(made[i].take());
    }
    drop(arena);
    assert_eq!(target.live_buffers(), 0, "every region and the allocation released");
}

#[test]
fn two_regions_at_one_origin_of_different_lengths() {
    regions(&[(0, 4), (0, 2)], &[0, 1]);
}

#[test]
fn two_regions_at_one_origin_of_one_length() {
    regions(&[(0, 2), (0, 2)], &[0, 1]);
}

#[test]
fn overlapping_regions_at_two_origins() {
    regions(&[(0, 4), (1, 2)], &[0, 1]);
}

#[test]
fn disjoint_regions() {
    regions(&[(0, 2), (2, 2)], &[0, 1]);
}

#[test]
fn regions_released_last_made_first() {
    regions(&[(0, 4), (4, 4), (0, 2), (2, 2)], &[3, 2, 1, 0]);
}

#[test]
fn regions_released_first_made_first() {
    regions(&[(0, 4), (4, 4), (0, 2), (2, 2)], &[0, 1, 2, 3]);
}
