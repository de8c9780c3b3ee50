//! `TreeEnsemble` (`ir/trees.rs`): each row walks every tree to a leaf, and the leaves' votes are aggregated per
//! target in f64, then written in `X`'s type. Rows are independent; the walk itself is the IR's
//! ([`Trees::leaf`]), bounded by the invariants the import checked.

use stowage_compiler::ir::trees::{Aggregate, Trees};

/// The aggregated votes of `trees` for the `rows × features` values `x`, `rows × trees.targets` of them.
pub fn predict(trees: &Trees, x: &[f64], rows: usize, features: usize) -> Vec<f64> {
    let targets = trees.targets;
    let mut out = vec![0.0; rows * targets];
    let mut voted = vec![false; targets];
    for (r, y) in out.chunks_mut(targets.max(1)).enumerate().take(rows) {
        let row = &x[r * features..(r + 1) * features];
        voted.fill(false);
        for &root in &trees.roots {
            let leaf = trees.leaf(root, |f| row[f]);
            for &(t, w) in &trees.leaves[leaf] {
                let (t, acc) = (t as usize, &mut y[t as usize]);
                *acc = match trees.aggregate {
                    Aggregate::Sum | Aggregate::Average => *acc + w,
                    Aggregate::Min if voted[t] => acc.min(w),
                    Aggregate::Max if voted[t] => acc.max(w),
                    Aggregate::Min | Aggregate::Max => w,
                };
                voted[t] = true;
            }
        }
        if trees.aggregate == Aggregate::Average && !trees.roots.is_empty() {
            let n = trees.roots.len() as f64;
            y.iter_mut().for_each(|v| *v /= n);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use stowage_compiler::ir::trees::{Branch, Child, TreeNode};

    #[test]
    fn votes_sum_average_and_take_extremes_per_target() {
        let stump = |split: f64, low: u32, high: u32| TreeNode {
            feature: 0,
            branch: Branch::Lt,
            split,
            members: vec![],
            missing_yes: false,
            yes: Child::Leaf(low),
            no: Child::Leaf(high),
        };
        let mut trees = Trees {
            targets: 2,
            aggregate: Aggregate::Sum,
            roots: vec![Child::Node(0), Child::Node(1)],
            nodes: vec![stump(1.0, 0, 1), stump(2.0, 0, 2)],
            leaves: vec![vec![(0, 1.0)], vec![(0, 4.0), (1, 2.0)], vec![(0, 10.0)]],
        };
        trees.check().expect("valid");
        let x = [0.5, 1.5, 3.0];
        assert_eq!(predict(&trees, &x, 3, 1), [2.0, 0.0, 5.0, 2.0, 14.0, 2.0]);
        trees.aggregate = Aggregate::Average;
        assert_eq!(predict(&trees, &x, 3, 1), [1.0, 0.0, 2.5, 1.0, 7.0, 1.0]);
        trees.aggregate = Aggregate::Max;
        assert_eq!(predict(&trees, &x, 3, 1), [1.0, 0.0, 4.0, 2.0, 10.0, 2.0]);
    }
}
