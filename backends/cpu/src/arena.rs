//! The host arena: the CPU target's one allocation per session for the values its plan places there
//! (`stowage_compiler::plan::memory`), and how kernels come to write into it.
//!
//! The contract, each rule with the code that keeps it and the test that checks it:
//!
//! 1. **One allocation, the plan's size.** A session's CPU target allocates its arena once, at the planned peak of
//!    the `host` space, 128-byte aligned, when it lowers its first segment ([`HostArena::new`]; `driver.rs`);
//!    every CPU segment of the session shares it. Test: the model suite (rule 4).
//! 2. **A kernel's output lands at its offset.** Before each step the executor offers the step's planned regions,
//!    one per output in order ([`offer`]); the k-th packed buffer the kernel allocates through
//!    [`crate::HostBuffer::zeroed`] (what [`crate::storage::output`] and the `tensor_from_*` helpers call) is the
//!    k-th region, zeroed, when its size is the value's (a step that makes them out of order says which comes
//!    next: [`seek`]). A kernel that writes every element of its output asks
//!    for it through [`crate::HostBuffer::for_overwrite`] ([`crate::storage::output_for_overwrite`]) and gets the
//!    region as it is: zeroing it was a pass over the output on the running thread before the kernel's own, and,
//!    on two threads, it left the output in that thread's cache for the other to take back. Its bytes are then
//!    those of earlier values (initialised: the arena is allocated zeroed and only ever written), or in debug
//!    builds (the tests) all 0xFF, a NaN in every float type, so that a kernel which misses an element fails
//!    its test. A join (Concat) whose inputs the plan placed inside its output's buffer (`Buffer::inside`) takes
//!    its region as it is, poison or not ([`crate::HostBuffer::joined`]): those inputs' bytes are already there,
//!    and it writes the others. Tests: `outputs_land_at_their_planned_offsets`,
//!    `a_step_may_take_its_regions_out_of_order` ([`seek`]), `a_region_is_zeroed_when_it_is_taken_again`,
//!    `a_region_for_overwrite_is_not_zeroed`, and
//!    `a_concat_copies_only_what_is_not_in_place` (`lower/tests.rs`).
//! 3. **Nothing lands where the plan did not put it.** After the step, each output's memory is checked against its
//!    planned place ([`ArenaSlice::offset`] through [`crate::HostBuffer::arena_offset`]); a value that ended
//!    elsewhere in the arena (a kernel that allocated a temporary first) is moved to memory of its own, and one
//!    the plan keeps outside the arena (a graph output) never stays in it. Correctness never depends on the
//!    offer being taken, and a clone of a region is bytes of its own. Tests:
//!    `a_graph_output_never_stays_in_the_arena`, `a_clone_of_a_region_is_bytes_of_its_own`.
//! 4. **The measured peak is what was used.** The executor's peak is the arena's high-water mark over the
//!    buffers that landed in place plus the most bytes of intermediate values that did not (held elsewhere): equal
//!    to the planned peak exactly when every planned buffer landed and nothing else was allocated. A kernel's
//!    scratch, and the values of the programs a step runs inside it (an `If`'s branch, a `Loop`'s body), are
//!    neither planned nor counted. Test: the model suite (`tests/tests/models.rs`) compares the two on every model.
//! 5. **One run at a time.** A run takes the arena ([`HostArena::lease`]); a second run of a program while one is
//!    under way (another thread) gets no lease and allocates as it would without a plan. The driver runs one
//!    session's segments under one lock, so values passed between its segments stay put. Test:
//!    `a_second_run_under_way_allocates_its_own`.
//!
//! The region of a value is written only by the step that makes it, while that step's output is its one owner
//! (rule 2), and read only between that step and the last one reading it, when no other live value is planned over
//! it (the plan's invariant, which the planner's tests check): that is what makes the raw slices below sound.

use std::alloc::Layout;
use std::cell::RefCell;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use stowage_runtime::{Result, RuntimeError};

/// Alignment of the arena's base: the CPU storage's (`HostBuffer::DESCRIPTOR.alignment`).
pub const ARENA_ALIGNMENT: usize = 128;

/// One allocation holding the planned values of a session's CPU segments.
pub struct HostArena {
    /// The first byte at [`ARENA_ALIGNMENT`], `shift` bytes into the allocation.
    base: NonNull<u8>,
    shift: usize,
    len: usize,
    busy: AtomicBool,
}

// SAFETY: the arena is plain bytes; which thread writes which region when is governed by the lease (rule 5) and
// the plan's disjoint lifetimes (rule 2), not by thread identity.
unsafe impl Send for HostArena {}
// SAFETY: as above: shared references only hand out raw regions through `ArenaSlice`, each written by one owner.
unsafe impl Sync for HostArena {}

impl HostArena {
    /// An arena of `len` zero bytes (at least one, so the base is a real allocation).
    ///
    /// Allocated at the allocator's own alignment and aligned here: zeroed memory at that alignment is `calloc`'s,
    /// whose fresh pages are zero without being written, so the arena's pages are first touched by the run that
    /// uses them. At [`ARENA_ALIGNMENT`] the allocator zeroes them by hand: SqueezeNet's compile spent a tenth of
    /// its time there, 2026-12-07.
    pub fn new(len: usize) -> Result<Arc<HostArena>> {
        let oom = || RuntimeError::OutOfMemory { tensor: "the host arena".into(), bytes: len };
        let layout = Self::layout(len).ok_or_else(oom)?;
        // SAFETY: `layout` has a non-zero size.
        let raw = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) }).ok_or_else(oom)?;
        let shift = (raw.as_ptr() as usize).wrapping_neg() % ARENA_ALIGNMENT;
        // SAFETY: `shift` is under ARENA_ALIGNMENT, the slack `layout` holds past `len`, so `base` and the `len`
        // bytes after it lie inside the allocation.
        let base = unsafe { raw.add(shift) };
        Ok(Arc::new(HostArena { base, shift, len, busy: AtomicBool::new(false) }))
    }

    /// The allocation of an arena of `len` bytes: `len` (at least one) and the slack to align its base, at 16.
    fn layout(len: usize) -> Option<Layout> {
        Layout::from_size_align(len.max(1).checked_add(ARENA_ALIGNMENT)?, 16).ok()
    }

    /// Bytes of the arena.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an arena of no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The arena for one run, or `None` while another run holds it.
    pub fn lease(self: &Arc<Self>) -> Option<Lease> {
        self.busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
            .then(|| Lease(Arc::clone(self)))
    }

    /// The region `[offset, offset + len)` as bytes a buffer can own, filled as `fill` says (rule 2); `None` if it
    /// is not inside.
    fn slice(self: &Arc<Self>, offset: usize, len: usize, fill: Fill) -> Option<ArenaSlice> {
        if offset.checked_add(len)? > self.len {
            return None;
        }
        let fill = match fill {
            Fill::Zero => Some(0),
            Fill::Overwrite if cfg!(debug_assertions) => Some(0xFF),
            Fill::Overwrite | Fill::Keep => None,
        };
        if let Some(byte) = fill {
            // SAFETY: the region is inside the allocation (checked above) and, by rule 2, owned by the one value
            // being made now, so nothing reads it while it is filled.
            unsafe { self.base.as_ptr().add(offset).write_bytes(byte, len) };
        }
        Some(ArenaSlice { arena: Arc::clone(self), offset, len })
    }
}

impl Drop for HostArena {
    fn drop(&mut self) {
        let layout = Self::layout(self.len).expect("checked in new");
        // SAFETY: allocated in `new` with this layout at `base - shift`; every `ArenaSlice` holds an `Arc`, so none
        // outlives it.
        unsafe { std::alloc::dealloc(self.base.as_ptr().sub(self.shift), layout) };
    }
}

impl std::fmt::Debug for HostArena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HostArena({} bytes)", self.len)
    }
}

/// The arena held by one run; released when dropped.
pub struct Lease(Arc<HostArena>);

impl Lease {
    /// The arena.
    pub fn arena(&self) -> &Arc<HostArena> {
        &self.0
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.0.busy.store(false, Ordering::Release);
    }
}

/// A region of an arena owned by one value's buffer.
pub struct ArenaSlice {
    arena: Arc<HostArena>,
    offset: usize,
    len: usize,
}

impl ArenaSlice {
    /// Its offset in the arena.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// True when it is in `arena`.
    pub fn is_in(&self, arena: &Arc<HostArena>) -> bool {
        Arc::ptr_eq(&self.arena, arena)
    }

    /// The arena it is a region of.
    pub fn arena(&self) -> &Arc<HostArena> {
        &self.arena
    }
}

impl AsRef<[u8]> for ArenaSlice {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: inside the allocation (checked when made); read only while its value is alive (module docs).
        unsafe { std::slice::from_raw_parts(self.arena.base.as_ptr().add(self.offset), self.len) }
    }
}

impl AsMut<[u8]> for ArenaSlice {
    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: inside the allocation; `&mut self` is the one owner of the region while its value is made
        // (rule 2), and no other live value is planned over it.
        unsafe { std::slice::from_raw_parts_mut(self.arena.base.as_ptr().add(self.offset), self.len) }
    }
}

/// The regions offered to the step running on this thread.
struct Offer {
    arena: Arc<HostArena>,
    /// Per output, in order: offset and the value's bytes (inline: an offer per step allocates nothing).
    regions: smallvec::SmallVec<[Option<(usize, usize)>; 4]>,
    next: usize,
}

thread_local! {
    static OFFER: RefCell<Option<Offer>> = const { RefCell::new(None) };
}

/// While the returned guard lives, packed buffers this thread allocates take `regions` of `arena` in order
/// (rule 2): the k-th allocation gets the k-th region when its size is the region's value's.
pub fn offer(arena: &Arc<HostArena>, regions: &[Option<(usize, usize)>]) -> OfferGuard {
    let regions = smallvec::SmallVec::from_slice(regions);
    OFFER.with(|o| *o.borrow_mut() = Some(Offer { arena: Arc::clone(arena), regions, next: 0 }));
    OfferGuard(())
}

/// Ends an [`offer`] when dropped, also when the kernel fails.
pub struct OfferGuard(());

impl Drop for OfferGuard {
    fn drop(&mut self) {
        OFFER.with(|o| *o.borrow_mut() = None);
    }
}

/// Takes this thread's offer away until the returned guard drops, when it is given back as it was: a step that
/// runs a program of its own inside it (an `If`'s branch, a `Loop`'s body: `lower/subgraphs.rs`) keeps that
/// program's allocations out of the regions offered to its outputs, and writes its outputs there after (rule 2).
pub(crate) fn withhold() -> Withheld {
    Withheld(OFFER.with(|o| o.borrow_mut().take()))
}

/// An offer taken away by [`withhold`], given back when dropped.
pub(crate) struct Withheld(Option<Offer>);

impl Drop for Withheld {
    fn drop(&mut self) {
        let offer = self.0.take();
        OFFER.with(|o| *o.borrow_mut() = offer);
    }
}

/// Makes the next packed buffer this thread allocates take the region offered to output `k` (rule 2), for a
/// step that makes its outputs out of order (a `Scan`'s scan outputs before its states: `lower/subgraphs.rs`).
pub(crate) fn seek(k: usize) {
    OFFER.with(|o| {
        if let Some(offer) = o.borrow_mut().as_mut() {
            offer.next = k;
        }
    })
}

/// What a region holds when a buffer takes it (rule 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fill {
    /// Zeros.
    Zero,
    /// Whatever it held (0xFF in debug builds): the kernel writes every element.
    Overwrite,
    /// Whatever it held: a join's inputs placed inside it are there.
    Keep,
}

/// The next offered region, when it is of `len` bytes, filled as `fill` says (rule 2).
pub(crate) fn take(len: usize, fill: Fill) -> Option<ArenaSlice> {
    OFFER.with(|o| {
        let mut o = o.borrow_mut();
        let offer = o.as_mut()?;
        let region = offer.regions.get(offer.next).copied().flatten();
        offer.next += 1;
        match region {
            Some((offset, bytes)) if bytes == len => offer.arena.slice(offset, len, fill),
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{output, HostBuffer};
    use stowage_runtime::{DatumType, TensorStorage};

    fn offset_of(t: &stowage_runtime::Tensor<'static>, arena: &Arc<HostArena>) -> Option<usize> {
        t.storage().as_any()?.downcast_ref::<HostBuffer>()?.arena_offset(arena)
    }

    /// Whatever the allocator's address, the base is at the arena's alignment and every byte reads zero, at sizes
    /// `calloc` serves from its heap and from fresh pages alike.
    #[test]
    fn arenas_are_aligned_and_zero() {
        for len in [0, 1, 100, 4096, 1 << 20, 3 << 20] {
            let arenas: Vec<_> = (0..4).map(|_| HostArena::new(len).expect("arena")).collect();
            for arena in &arenas {
                assert_eq!(arena.base.as_ptr() as usize % ARENA_ALIGNMENT, 0, "{len} bytes");
                assert!(arena.shift < ARENA_ALIGNMENT && arena.len() == len);
                // SAFETY: the arena's `len` bytes from its base are its allocation's, and nothing writes them here.
                let bytes = unsafe { std::slice::from_raw_parts(arena.base.as_ptr(), len) };
                assert!(bytes.iter().all(|&b| b == 0), "{len} bytes");
            }
        }
    }

    #[test]
    fn outputs_land_at_their_planned_offsets() {
        let arena = HostArena::new(1024).expect("arena");
        {
            let _offer = offer(&arena, &[Some((128, 64)), None, Some((512, 32))]);
            let first = output(DatumType::F32, &[16]).expect("first");
            let second = output(DatumType::F32, &[16]).expect("second");
            let third = output(DatumType::F32, &[4]).expect("third: 16 bytes, not the region's 32");
            assert_eq!(offset_of(&first, &arena), Some(128), "the first region");
            assert_eq!(offset_of(&second, &arena), None, "no region for the second output");
            assert_eq!(offset_of(&third, &arena), None, "a size other than the value's is not offered");
            assert!(first.to_vec::<f32>().expect("read").iter().all(|&x| x == 0.0), "zeroed");
        }
        let after = output(DatumType::F32, &[16]).expect("after");
        assert_eq!(offset_of(&after, &arena), None, "nothing is offered once the step is over");
    }

    #[test]
    fn a_step_may_take_its_regions_out_of_order() {
        // A Scan makes its scan outputs (the step's outputs 1..) before its states (0..1).
        let arena = HostArena::new(1024).expect("arena");
        let _offer = offer(&arena, &[Some((0, 64)), Some((256, 32))]);
        seek(1);
        let scanned = output(DatumType::F32, &[8]).expect("scan output");
        seek(0);
        let state = output(DatumType::F32, &[16]).expect("state");
        assert_eq!(offset_of(&scanned, &arena), Some(256), "the second output's region");
        assert_eq!(offset_of(&state, &arena), Some(0), "the first output's region");
    }

    #[test]
    fn a_region_is_zeroed_when_it_is_taken_again() {
        let arena = HostArena::new(256).expect("arena");
        let mut t = {
            let _offer = offer(&arena, &[Some((0, 16))]);
            output(DatumType::F32, &[4]).expect("t")
        };
        t.as_slice_mut::<f32>().expect("write").copy_from_slice(&[1.0, 2.0, 3.0, 4.0]);
        drop(t);
        let _offer = offer(&arena, &[Some((0, 16))]);
        let again = output(DatumType::F32, &[4]).expect("again");
        assert_eq!(again.to_vec::<f32>().expect("read"), [0.0; 4]);
    }

    #[test]
    fn a_region_for_overwrite_is_not_zeroed() {
        let arena = HostArena::new(256).expect("arena");
        let mut t = {
            let _offer = offer(&arena, &[Some((0, 16))]);
            output(DatumType::F32, &[4]).expect("t")
        };
        t.as_slice_mut::<f32>().expect("write").copy_from_slice(&[1.0, 2.0, 3.0, 4.0]);
        drop(t);
        let _offer = offer(&arena, &[Some((0, 16))]);
        let again = crate::storage::output_for_overwrite(DatumType::F32, &[4]).expect("again");
        assert_eq!(offset_of(&again, &arena), Some(0), "in place");
        let got = again.to_vec::<f32>().expect("read");
        // Poisoned (NaN) with debug assertions, as the tests build; else the earlier value's bytes. Never zeroed.
        if cfg!(debug_assertions) {
            assert!(got.iter().all(|v| v.is_nan()), "{got:?}");
        } else {
            assert_eq!(got, [1.0, 2.0, 3.0, 4.0]);
        }
    }

    #[test]
    fn a_second_run_under_way_allocates_its_own() {
        let arena = HostArena::new(64).expect("arena");
        let first = arena.lease().expect("free");
        assert!(arena.lease().is_none(), "held by the first run");
        drop(first);
        assert!(arena.lease().is_some(), "free again");
    }

    #[test]
    fn a_clone_of_a_region_is_bytes_of_its_own() {
        let arena = HostArena::new(64).expect("arena");
        let _offer = offer(&arena, &[Some((0, 16))]);
        let b = HostBuffer::zeroed(DatumType::F32, &[4]).expect("buffer");
        assert_eq!(b.arena_offset(&arena), Some(0));
        assert_eq!(b.clone().arena_offset(&arena), None);
        assert_eq!(b.clone().host_bytes(), b.host_bytes());
    }

    /// A plan that wrongly offers a graph output's region: the output is moved out of the arena, and the peak
    /// counts nothing (the output is the caller's).
    #[cfg(feature = "compile")]
    #[test]
    fn a_graph_output_never_stays_in_the_arena() {
        use stowage_compiler::ir::{Graph, Op, Unary, ValueType};
        let mut g = Graph::new("relu");
        let ty = ValueType::new(DatumType::F32, [4]);
        let x = g.add_input("x", ty.clone());
        let n = g.add_node("n", Op::Unary(Unary::Relu), vec![Some(x)], vec![Some(("y".into(), ty))]);
        let y = g.node(n).outputs[0].expect("y");
        g.add_output("y", y);
        let mut program = crate::lower(&g, 1).expect("lowers");
        let arena = HostArena::new(256).expect("arena");
        let steps = program.steps().len();
        let offers = vec![vec![Some((0, 16))]; steps];
        let places = vec![vec![None]; steps];
        let outside = program.slot_names().iter().map(|n| n == "y").collect();
        program.use_arena(crate::program::ArenaUse { arena: Arc::clone(&arena), offers, places }, outside);
        let input = crate::storage::tensor_from(&[4], &[-1.0f32, 2.0, -3.0, 4.0]).expect("x");
        let ran = program.run(vec![input]).expect("runs");
        assert_eq!(ran.outputs[0].to_vec::<f32>().expect("y"), [0.0, 2.0, 0.0, 4.0]);
        assert_eq!(offset_of(&ran.outputs[0], &arena), None, "the output left the arena");
        assert_eq!(ran.peak_bytes, 0, "an output is not an intermediate");
    }
}
