//! The ledger: every byte the runtime moves, with its reason.
//!
//! The plan predicts the ledger and tests compare the two, so every transfer the runtime
//! performs (upload, download, device-to-device, relayout, staging, copy-on-write) is
//! recorded here by the code that performs it. A [`Ledger::off`] ledger records nothing
//! and costs one branch per move: the entry, its reason string included, is built by a
//! closure that only runs when somebody is recording.

use std::borrow::Cow;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use crate::MemorySpace;

/// What kind of move an entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MoveKind {
    /// Host to device.
    Upload,
    /// Device to host.
    Download,
    /// Device to device (another device, or another buffer on the same one).
    DeviceToDevice,
    /// Same bytes, another layout (alignment, padding, order).
    Relayout,
    /// Through an intermediate buffer the device can reach (pinned, aligned).
    Staging,
    /// Host bytes copied so a write does not reach memory someone else still reads.
    CopyOnWrite,
}

impl MoveKind {
    /// The lower-case name used in reports.
    pub const fn name(self) -> &'static str {
        match self {
            MoveKind::Upload => "upload",
            MoveKind::Download => "download",
            MoveKind::DeviceToDevice => "device-to-device",
            MoveKind::Relayout => "relayout",
            MoveKind::Staging => "staging",
            MoveKind::CopyOnWrite => "copy-on-write",
        }
    }
}

impl fmt::Display for MoveKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One recorded move.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Move {
    /// The value (tensor name) whose bytes moved.
    pub value: Arc<str>,
    /// What kind of move.
    pub kind: MoveKind,
    /// Where the bytes came from.
    pub from: MemorySpace,
    /// Where they went.
    pub to: MemorySpace,
    /// How many bytes.
    pub bytes: usize,
    /// Why the move was necessary.
    pub reason: Cow<'static, str>,
}

impl fmt::Display for Move {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {} -> {}, {} bytes ({})", self.kind, self.value, self.from, self.to, self.bytes, self.reason)
    }
}

/// A thread-safe record of moves, shared by cloning.
#[derive(Clone, Default)]
pub struct Ledger {
    entries: Option<Arc<Mutex<Vec<Move>>>>,
}

impl Ledger {
    /// A ledger that records every move.
    pub fn recording() -> Self {
        Ledger { entries: Some(Arc::default()) }
    }

    /// A ledger that records nothing (the default).
    pub fn off() -> Self {
        Ledger { entries: None }
    }

    /// True when moves are being recorded.
    pub fn is_recording(&self) -> bool {
        self.entries.is_some()
    }

    /// Record a move. `entry` runs only when the ledger is recording.
    pub fn record(&self, entry: impl FnOnce() -> Move) {
        if let Some(entries) = &self.entries {
            let entry = entry();
            entries.lock().unwrap_or_else(PoisonError::into_inner).push(entry);
        }
    }

    /// A copy of the entries so far, in the order they were recorded.
    pub fn entries(&self) -> Vec<Move> {
        match &self.entries {
            Some(entries) => entries.lock().unwrap_or_else(PoisonError::into_inner).clone(),
            None => Vec::new(),
        }
    }

    /// Take the entries so far, leaving the ledger empty and still recording.
    pub fn take(&self) -> Vec<Move> {
        match &self.entries {
            Some(entries) => std::mem::take(&mut *entries.lock().unwrap_or_else(PoisonError::into_inner)),
            None => Vec::new(),
        }
    }

    /// Total bytes moved so far.
    pub fn bytes_moved(&self) -> usize {
        self.entries().iter().map(|m| m.bytes).sum()
    }

    /// Number of entries of one kind.
    pub fn count(&self, kind: MoveKind) -> usize {
        self.entries().iter().filter(|m| m.kind == kind).count()
    }
}

impl fmt::Debug for Ledger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.entries {
            Some(_) => f.debug_list().entries(self.entries()).finish(),
            None => f.write_str("Ledger(off)"),
        }
    }
}

/// A ledger together with the value name its moves are recorded under.
///
/// Storages that move bytes on their own schedule (a lazy host tensor downloads when first
/// read, long after the run) carry one, so the entry names the right value.
#[derive(Clone, Debug, Default)]
pub struct LedgerTag {
    /// Where moves are recorded.
    pub ledger: Ledger,
    /// The value they are recorded under.
    pub value: Arc<str>,
}

impl LedgerTag {
    /// Tag moves of `value` into `ledger`.
    pub fn new(ledger: &Ledger, value: impl Into<Arc<str>>) -> Self {
        LedgerTag { ledger: ledger.clone(), value: value.into() }
    }

    /// Record one move of this value.
    pub fn record(
        &self,
        kind: MoveKind,
        from: &MemorySpace,
        to: &MemorySpace,
        bytes: usize,
        reason: impl FnOnce() -> Cow<'static, str>,
    ) {
        self.ledger.record(|| Move {
            value: self.value.clone(),
            kind,
            from: from.clone(),
            to: to.clone(),
            bytes,
            reason: reason(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_off_ledger_never_builds_entries() {
        let ledger = Ledger::off();
        ledger.record(|| unreachable!("an off ledger must not build its entry"));
        assert!(ledger.entries().is_empty());
    }

    #[test]
    fn records_from_many_threads() {
        let ledger = Ledger::recording();
        let tag = LedgerTag::new(&ledger, "x");
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..100 {
                        tag.record(MoveKind::Upload, &MemorySpace::HOST, &MemorySpace::HOST, 4, || "test".into());
                    }
                });
            }
        });
        assert_eq!(ledger.count(MoveKind::Upload), 800);
        assert_eq!(ledger.bytes_moved(), 3200);
        assert_eq!(ledger.take().len(), 800);
        assert!(ledger.entries().is_empty());
    }
}
