//! Which placed buffers overlap a lifetime, without looking at the others: what keeps the arena packer
//! ([`super::memory`]) near linear in buffers on long graphs, where few buffers are alive at once.
//!
//! Intervals are sorted by start once; a segment tree over that order keeps the latest end among the placed ones
//! in each range. A query descends only into ranges that start no later than the lifetime ends and hold a placed
//! buffer that ends no earlier than it starts: O((1 + k) log n) for k buffers found.

/// Closed intervals `[start, end]`, some of them placed.
pub(super) struct Overlaps {
    /// Interval indices sorted by start.
    by_start: Vec<usize>,
    /// Sorted starts, parallel to `by_start`.
    starts: Vec<usize>,
    /// Position of each interval in `by_start`.
    rank: Vec<usize>,
    /// Per tree node, 1 + the latest end of a placed interval below it (0: none placed).
    tree: Vec<usize>,
    leaves: usize,
}

impl Overlaps {
    /// Nothing placed yet among `intervals` (`(start, end)` each).
    pub(super) fn new(intervals: &[(usize, usize)]) -> Overlaps {
        let mut by_start: Vec<usize> = (0..intervals.len()).collect();
        by_start.sort_by_key(|&i| (intervals[i].0, i));
        let starts = by_start.iter().map(|&i| intervals[i].0).collect();
        let mut rank = vec![0; intervals.len()];
        for (r, &i) in by_start.iter().enumerate() {
            rank[i] = r;
        }
        let leaves = intervals.len().next_power_of_two();
        Overlaps { by_start, starts, rank, tree: vec![0; 2 * leaves], leaves }
    }

    /// Marks interval `i`, ending at `end`, placed.
    pub(super) fn place(&mut self, i: usize, end: usize) {
        let mut at = self.leaves + self.rank[i];
        self.tree[at] = end + 1;
        while at > 1 {
            at /= 2;
            self.tree[at] = self.tree[2 * at].max(self.tree[2 * at + 1]);
        }
    }

    /// Calls `f` with every placed interval that overlaps `[start, end]`.
    pub(super) fn each(&self, start: usize, end: usize, mut f: impl FnMut(usize)) {
        // Intervals at positions below `prefix` start no later than `end`.
        let prefix = self.starts.partition_point(|&s| s <= end);
        if prefix > 0 {
            self.descend(1, 0, self.leaves, prefix, start, &mut f);
        }
    }

    fn descend(&self, node: usize, lo: usize, hi: usize, prefix: usize, start: usize, f: &mut impl FnMut(usize)) {
        if lo >= prefix || self.tree[node] <= start {
            return;
        }
        if hi - lo == 1 {
            f(self.by_start[lo]);
            return;
        }
        let mid = (lo + hi) / 2;
        self.descend(2 * node, lo, mid, prefix, start, f);
        self.descend(2 * node + 1, mid, hi, prefix, start, f);
    }
}
