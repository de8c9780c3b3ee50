//! Runs kept on the caller's thread where the pool does not pay for itself.
//!
//! A program allowed several threads runs its steps inside its rayon pool, and its kernels split their work between
//! the workers. On a small model that costs more than it gains: the run is handed to a worker and back, and each
//! split step pays a join for halves of a few microseconds. Measured on this project's 2-core machines (bench of
//! 2026-12-03, `docs/performance.md`), two threads were slower than one on every model under about a millisecond:
//! openWakeWord's hey_jarvis 0.05 against 0.03 ms, its melspectrogram 0.27 against 0.24, PaddleOCR's direction
//! classifier 1.29 against 0.82, the suite's transformer block 0.08 against 0.05. The thresholds inside kernels
//! cannot see this (each step is small, but whether the run gains depends on all of them), so a program measures
//! both ways on its own runs and keeps the faster. The rules:
//!
//! 1. **One thread never takes the pool.** A program on one thread runs every step on the caller's thread
//!    (`Program::run_profiled`), as before.
//! 2. **Trials first, the pool's first.** A program on several threads takes its first [`TRIALS`] runs in two
//!    blocks: half in the pool, then half on the caller's thread with one thread, so that a program run once
//!    behaves as it did before this module. Blocks, not alternation: a pool trial after a caller trial longer than
//!    the spinners' [`crate::warm::IDLE`] finds its workers asleep and pays their wake-up in its first parallel
//!    step. SqueezeNet at two threads takes 5.1 ms a run in the pool and 7.0 on the caller's thread; over 16
//!    processes of 12 runs each, alternating trials kept the caller's thread 7 times, blocks twice (2026-12-06).
//!    Each trial's whole run is timed ([`Choice::next`], [`Choice::record`]); a run that fails is not recorded.
//!    **A second look at the pool** where the caller's thread looks faster: up to [`SECOND_LOOK`] more runs in
//!    the pool before deciding, until the pool is ahead. The pool's first trials are the process's first runs, and a machine still busy from
//!    before slows those most: started right after onnxruntime's two-thread session in the same benchmark, whose
//!    workers keep spinning after its last run, the first runs of openWakeWord's melspectrogram took 4–11 ms
//!    against 0.15 later, and the trials kept the caller's thread (0.19–0.20 ms a run against the pool's 0.14–0.15;
//!    its embedding model 1.25 against 1.02; 2026-12-07).
//! 3. **Then the faster, for good.** After the trials every run takes the way whose fastest trial was faster,
//!    decided once and kept for the program's life: the caller's thread only when its fastest trial beat the
//!    pool's (over both of its blocks) by [`MARGIN`], else the pool (also when a way has no recorded trial).
//!    Fastest, not median: a trial is only ever slowed by the machine. `STOWAGE_CPU_WAY=pool` or `caller` skips
//!    the trials and forces that way on every run, for measuring.
//! 4. **The same bytes either way.** Kernels split their work by bands of the output, never one sum across
//!    threads, so a run computes the same outputs on one thread as on several: the choice changes only the time.
//! 5. **Concurrent runs.** Runs of one program at once each take their own trial number (an atomic count), so no
//!    trial is taken twice; the record and the decision are behind a lock and decided once.
//!
//! Tests: `the_first_runs_take_each_way_in_turn_then_the_faster_is_kept`,
//! `a_pool_slowed_in_its_first_trials_gets_a_second_look` (rules 2 and 3) and
//! `concurrent_runs_take_each_trial_once` (rule 5) here, and
//! `runs_give_the_same_bytes_in_the_pool_and_on_the_callers_thread` in `lower/mod.rs` (rule 4, with rule 1's
//! one-thread program as the reference).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// Trial runs before a program on several threads settles (rule 2): three each way.
pub(crate) const TRIALS: usize = 6;

/// Trial runs in the pool after [`TRIALS`] where the caller's thread looked faster (rule 2's second look).
pub(crate) const SECOND_LOOK: usize = 3;

/// How much faster the caller's thread's fastest trial must be than the pool's to be kept (rule 3): a wrong
/// choice of the caller's thread costs a large model the second core (magika 5.2 → 7.0 ms), a wrong choice of the
/// pool a small one a few microseconds, so noise between trials must not tip it.
pub(crate) const MARGIN: f64 = 0.10;

/// Where a run's steps run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Way {
    /// In the program's pool, its kernels on all its threads.
    Pool,
    /// On the caller's thread, its kernels on one thread.
    Caller,
}

/// The way `STOWAGE_CPU_WAY=pool` or `caller` forces on every run, for measuring both (read once).
fn forced() -> Option<Way> {
    // The unit tests here drive the trials themselves, whatever the environment says.
    if cfg!(test) {
        return None;
    }
    static FORCED: OnceLock<Option<Way>> = OnceLock::new();
    *FORCED.get_or_init(|| match std::env::var("STOWAGE_CPU_WAY").as_deref() {
        Ok("pool") => Some(Way::Pool),
        Ok("caller") => Some(Way::Caller),
        _ => None,
    })
}

/// One program's trials and, once made, its choice.
#[derive(Debug, Default)]
pub(crate) struct Choice {
    /// Runs that asked for a way before the choice was made.
    asked: AtomicUsize,
    /// The fastest recorded trial of the pool and of the caller's thread.
    fastest: Mutex<[Option<Duration>; 2]>,
    decided: OnceLock<Way>,
}

impl Choice {
    /// The way the next run takes, and whether it is a trial whose time is to be recorded (rules 2, 3 and 5).
    pub(crate) fn next(&self) -> (Way, bool) {
        if let Some(way) = forced() {
            return (way, false);
        }
        if let Some(way) = self.decided.get() {
            return (*way, false);
        }
        let n = self.asked.fetch_add(1, Ordering::Relaxed);
        if n < TRIALS {
            return (if n < TRIALS / 2 { Way::Pool } else { Way::Caller }, true);
        }
        // The second look, only where the caller's thread is ahead so far.
        if n < TRIALS + SECOND_LOOK && self.faster() == Way::Caller {
            return (Way::Pool, true);
        }
        (self.decide(), false)
    }

    /// The way whose fastest recorded trial is faster, by rule 3's margin for the caller's thread.
    fn faster(&self) -> Way {
        let fastest = self.fastest.lock().unwrap_or_else(|p| p.into_inner());
        match (fastest[Way::Pool as usize], fastest[Way::Caller as usize]) {
            (Some(pool), Some(caller)) if caller.mul_f64(1.0 + MARGIN) < pool => Way::Caller,
            _ => Way::Pool,
        }
    }

    /// Records a trial of `way` that took `took` (rule 2).
    pub(crate) fn record(&self, way: Way, took: Duration) {
        let mut fastest = self.fastest.lock().unwrap_or_else(|p| p.into_inner());
        let slot = &mut fastest[way as usize];
        *slot = Some(slot.map_or(took, |f| f.min(took)));
    }

    /// Rule 3: the way kept from now on.
    fn decide(&self) -> Way {
        *self.decided.get_or_init(|| self.faster())
    }

    /// The way kept, once decided.
    #[cfg(test)]
    pub(crate) fn kept(&self) -> Option<Way> {
        self.decided.get().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::{Choice, Way, SECOND_LOOK, TRIALS};
    use std::time::Duration;

    /// A choice after its first [`TRIALS`] runs took `pool_ms` and `caller_ms`, and, where the caller's thread
    /// looked faster, after the second look at the pool took `second_ms`.
    fn settle(pool_ms: u64, caller_ms: u64, second_ms: u64) -> Choice {
        let choice = Choice::default();
        for n in 0..TRIALS {
            let (way, trial) = choice.next();
            assert!(trial, "run {n} is a trial");
            assert_eq!(way, if n < TRIALS / 2 { Way::Pool } else { Way::Caller }, "run {n}");
            // The first trial of each way is slowed (a cold cache): the fastest counts, not the first.
            let first = n == 0 || n == TRIALS / 2;
            let ms = if way == Way::Pool { pool_ms } else { caller_ms } + if first { 50 } else { 0 };
            choice.record(way, Duration::from_millis(ms));
        }
        if caller_ms * 11 < pool_ms * 10 {
            // Pool trials until the pool is ahead, at most SECOND_LOOK.
            let mut looks = 0;
            while let (way, true) = choice.next() {
                assert_eq!(way, Way::Pool);
                choice.record(Way::Pool, Duration::from_millis(second_ms));
                looks += 1;
            }
            let ahead = caller_ms * 11 >= second_ms * 10;
            assert_eq!(looks, if ahead { 1 } else { SECOND_LOOK }, "second looks");
        }
        choice
    }

    #[test]
    fn the_first_runs_take_each_way_in_turn_then_the_faster_is_kept() {
        let caller_faster = settle(9, 4, 9);
        assert_eq!(caller_faster.next(), (Way::Caller, false));
        assert_eq!(caller_faster.kept(), Some(Way::Caller));
        // Later times change nothing.
        caller_faster.record(Way::Caller, Duration::from_secs(1));
        assert_eq!(caller_faster.next(), (Way::Caller, false));
        // The pool faster: decided after the first trials, with no second look.
        let pool_faster = settle(4, 9, 0);
        assert_eq!(pool_faster.next(), (Way::Pool, false));
        // A tie, or the caller's thread faster by less than the margin, keeps the pool.
        assert_eq!(settle(5, 5, 0).next(), (Way::Pool, false));
        assert_eq!(settle(105, 100, 0).next(), (Way::Pool, false));
        // Trials that all failed (none recorded) keep the pool.
        let failed = Choice::default();
        for _ in 0..TRIALS {
            failed.next();
        }
        assert_eq!(failed.next(), (Way::Pool, false));
    }

    #[test]
    fn a_pool_slowed_in_its_first_trials_gets_a_second_look() {
        // The machine busy during the first runs (another engine's threads still spinning): the pool's first
        // trials lose, its second look wins, and the pool is kept.
        let disturbed = settle(30, 4, 3);
        assert_eq!(disturbed.next(), (Way::Pool, false));
        // The caller's thread still faster than the second look by the margin: kept.
        assert_eq!(settle(30, 4, 5).next(), (Way::Caller, false));
    }

    #[test]
    fn concurrent_runs_take_each_trial_once() {
        let choice = Choice::default();
        let trials: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4).map(|_| s.spawn(|| (0..TRIALS).filter(|_| choice.next().1).count())).collect();
            handles.into_iter().map(|h| h.join().expect("joins")).sum()
        });
        assert_eq!(trials, TRIALS);
        assert_eq!(choice.kept(), Some(Way::Pool), "no trial recorded: the pool");
    }
}

/// Rule 4 on a lowered program: a product against packed weights, a fused chain and a softmax, each large enough to
/// split over two threads.
#[cfg(all(test, feature = "compile"))]
mod same_bytes {
    use stowage_compiler::ir::{Binary, Graph, Op, SoftmaxKind, Unary, ValueType};
    use stowage_runtime::{DatumType, Tensor};

    fn model() -> Graph {
        let (m, k, n) = (192, 160, 256);
        let ty = |s: Vec<usize>| ValueType::new(DatumType::F32, s);
        let mut g = Graph::new("same_bytes");
        let x = g.add_input("x", ty(vec![m, k]));
        let wv: Vec<f32> = (0..k * n).map(|i| ((i * 37 % 101) as f32 - 50.0) / 97.0).collect();
        let w = g.add_const("w", Tensor::from_slice(&[k, n], &wv).expect("weights"));
        let bv: Vec<f32> = (0..n).map(|i| (i % 13) as f32 / 7.0).collect();
        let b = g.add_const("b", Tensor::from_slice(&[n], &bv).expect("bias"));
        let mut last = x;
        let node = |g: &mut Graph, name: &str, op: Op, ins: Vec<_>| {
            let n =
                g.add_node(name, op, ins.into_iter().map(Some).collect(), vec![Some((name.into(), ty(vec![m, n])))]);
            g.node(n).outputs[0].expect("an output")
        };
        last = node(&mut g, "mm", Op::MatMul, vec![last, w]);
        last = node(&mut g, "add", Op::Binary(Binary::Add), vec![last, b]);
        last = node(&mut g, "relu", Op::Unary(Unary::Relu), vec![last]);
        last = node(&mut g, "softmax", Op::Softmax { kind: SoftmaxKind::Softmax, axis: 1, flatten: false }, vec![last]);
        g.add_output("y", last);
        g
    }

    #[test]
    fn runs_give_the_same_bytes_in_the_pool_and_on_the_callers_thread() {
        let g = model();
        let input = || {
            let xv: Vec<f32> = (0..192 * 160).map(|i| ((i * 53 % 89) as f32 - 44.0) / 31.0).collect();
            vec![Tensor::from_slice(&[192, 160], &xv).expect("input")]
        };
        // The output's bits, from a run of `program`.
        let bits = |program: &crate::Program| -> Vec<u32> {
            let out = program.run(input()).expect("runs");
            out.outputs[0].to_vec::<f32>().expect("f32").iter().map(|v| v.to_bits()).collect()
        };
        let want = bits(&crate::lower(&g, 1).expect("lowers"));
        let two = crate::lower(&g, 2).expect("lowers");
        // Every trial of both ways (a second look included), then runs the choice.
        for run in 0..super::TRIALS + super::SECOND_LOOK + 2 {
            let got = bits(&two);
            assert!(got == want, "run {run} on two threads differs from one thread's");
        }
        assert!(two.way.kept().is_some(), "decided after the trials");
    }
}
