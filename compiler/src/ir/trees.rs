//! A tree ensemble ([`Op::TreeEnsemble`](super::Op::TreeEnsemble)): the decision trees of ONNX-ML's `TreeEnsemble`,
//! `TreeEnsembleRegressor` and `TreeEnsembleClassifier` in one form, which `onnx/ml.rs` builds and the CPU kernel
//! walks. Input `X` is `[N, F]` floats; the output is `[N, targets]` of `X`'s type: per row and target, the votes of
//! the leaf each tree reaches, aggregated. Post-transforms and base values are ordinary ops after it.
//!
//! Invariants, checked by [`Trees::check`] when the import builds one (so the kernel can walk without checks):
//! 1. Every child and root names an interior node or a leaf that exists; every vote's target is below `targets`.
//! 2. No walk can loop: following children from any root never meets a node twice (a cycle is an error naming the
//!    node), so a walk takes at most `nodes.len()` steps.
//! 3. A `Member` node has its set in `members`; other nodes compare with `split`.

/// The comparison at an interior node: `x <op> split` (or `x ∈ members`) takes the `yes` child.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Branch {
    /// `x <= split`.
    Leq,
    /// `x < split`.
    Lt,
    /// `x >= split`.
    Gte,
    /// `x > split`.
    Gt,
    /// `x == split`.
    Eq,
    /// `x != split`.
    Neq,
    /// `x` is one of the node's `members`.
    Member,
}

/// Where a branch leads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Child {
    /// An interior node, by index into [`Trees::nodes`].
    Node(u32),
    /// A leaf, by index into [`Trees::leaves`].
    Leaf(u32),
}

/// An interior node.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TreeNode {
    /// The feature (column of `X`) it reads.
    pub feature: u32,
    /// Its comparison.
    pub branch: Branch,
    /// The threshold, for every branch but `Member`.
    pub split: f64,
    /// The set, for `Member`.
    pub members: Vec<f64>,
    /// A NaN feature takes `yes` (else it takes what its comparison gives: `no`, but `yes` at a `Neq` node).
    pub missing_yes: bool,
    /// Where a true comparison leads.
    pub yes: Child,
    /// Where a false one leads.
    pub no: Child,
}

/// How the votes of the trees for one target combine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Aggregate {
    /// Their sum.
    Sum,
    /// Their sum over the number of trees.
    Average,
    /// The smallest vote (0 when no leaf votes for the target).
    Min,
    /// The largest vote (0 when no leaf votes for the target).
    Max,
}

/// The trees.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Trees {
    /// Output columns.
    pub targets: usize,
    /// How votes combine.
    pub aggregate: Aggregate,
    /// Where each tree starts.
    pub roots: Vec<Child>,
    /// The interior nodes of all trees.
    pub nodes: Vec<TreeNode>,
    /// Each leaf's votes: `(target, weight)`.
    pub leaves: Vec<Vec<(u32, f64)>>,
}

impl Trees {
    /// The largest feature index any node reads, plus one (0 without nodes).
    pub fn features(&self) -> usize {
        self.nodes.iter().map(|n| n.feature as usize + 1).max().unwrap_or(0)
    }

    /// Checks invariants 1–3 of the module doc.
    pub fn check(&self) -> Result<(), String> {
        let valid = |c: Child| match c {
            Child::Node(n) => (n as usize) < self.nodes.len(),
            Child::Leaf(l) => (l as usize) < self.leaves.len(),
        };
        for (i, n) in self.nodes.iter().enumerate() {
            for c in [n.yes, n.no] {
                if !valid(c) {
                    return Err(format!("node {i} leads to {c:?}, which does not exist"));
                }
            }
            if n.branch == Branch::Member && n.members.is_empty() {
                return Err(format!("node {i} tests membership of an empty set"));
            }
        }
        if let Some(r) = self.roots.iter().find(|&&r| !valid(r)) {
            return Err(format!("a tree starts at {r:?}, which does not exist"));
        }
        for (l, votes) in self.leaves.iter().enumerate() {
            if let Some((t, _)) = votes.iter().find(|(t, _)| *t as usize >= self.targets) {
                return Err(format!("leaf {l} votes for target {t}, but there are {}", self.targets));
            }
        }
        // Invariant 2: colour the nodes with an explicit stack (never recursion): 1 on the path, 2 finished.
        let mut colour = vec![0u8; self.nodes.len()];
        for &root in &self.roots {
            let Child::Node(r) = root else { continue };
            if colour[r as usize] == 2 {
                continue;
            }
            let mut stack: Vec<(u32, u8)> = vec![(r, 0)];
            colour[r as usize] = 1;
            while let Some(top) = stack.last_mut() {
                let (n, next) = *top;
                let node = &self.nodes[n as usize];
                let child = match next {
                    0 => Some(node.yes),
                    1 => Some(node.no),
                    _ => None,
                };
                top.1 += 1;
                match child {
                    None => {
                        colour[n as usize] = 2;
                        stack.pop();
                    }
                    Some(Child::Node(c)) => match colour[c as usize] {
                        0 => {
                            colour[c as usize] = 1;
                            stack.push((c, 0));
                        }
                        1 => return Err(format!("node {c} is reached again from node {n}: its tree has a cycle")),
                        _ => {}
                    },
                    Some(Child::Leaf(_)) => {}
                }
            }
        }
        Ok(())
    }

    /// The leaf tree `root` reaches for the features `x` (invariant 2 bounds the walk).
    pub fn leaf(&self, root: Child, x: impl Fn(usize) -> f64) -> usize {
        let mut at = root;
        loop {
            match at {
                Child::Leaf(l) => return l as usize,
                Child::Node(n) => {
                    let node = &self.nodes[n as usize];
                    let v = x(node.feature as usize);
                    // onnxruntime's rule: the comparison, or a NaN where missing values go `yes` (so a NaN takes
                    // `yes` at a `Neq` node either way).
                    let compared = match node.branch {
                        Branch::Leq => v <= node.split,
                        Branch::Lt => v < node.split,
                        Branch::Gte => v >= node.split,
                        Branch::Gt => v > node.split,
                        Branch::Eq => v == node.split,
                        Branch::Neq => v != node.split,
                        Branch::Member => node.members.contains(&v),
                    };
                    let yes = compared || (node.missing_yes && v.is_nan());
                    at = if yes { node.yes } else { node.no };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(yes: Child, no: Child) -> TreeNode {
        TreeNode { feature: 0, branch: Branch::Leq, split: 0.5, members: vec![], missing_yes: true, yes, no }
    }

    #[test]
    fn walks_take_the_comparison_and_nan_its_missing_branch() {
        let t = Trees {
            targets: 1,
            aggregate: Aggregate::Sum,
            roots: vec![Child::Node(0)],
            nodes: vec![node(Child::Leaf(0), Child::Node(1)), node(Child::Leaf(1), Child::Leaf(2))],
            leaves: vec![vec![(0, 1.0)], vec![(0, 2.0)], vec![(0, 3.0)]],
        };
        t.check().expect("valid");
        assert_eq!(t.leaf(Child::Node(0), |_| 0.25), 0);
        assert_eq!(t.leaf(Child::Node(0), |_| 0.75), 2);
        assert_eq!(t.leaf(Child::Node(0), |_| f64::NAN), 0);
    }

    #[test]
    fn cycles_missing_children_and_targets_out_of_range_are_refused() {
        let mut t = Trees {
            targets: 1,
            aggregate: Aggregate::Sum,
            roots: vec![Child::Node(0)],
            nodes: vec![node(Child::Node(1), Child::Leaf(0)), node(Child::Node(0), Child::Leaf(0))],
            leaves: vec![vec![(0, 1.0)]],
        };
        assert!(t.check().unwrap_err().contains("cycle"));
        t.nodes[1].yes = Child::Leaf(5);
        assert!(t.check().unwrap_err().contains("does not exist"));
        t.nodes[1].yes = Child::Leaf(0);
        t.leaves[0][0].0 = 3;
        assert!(t.check().unwrap_err().contains("target 3"));
    }
}
