//! Dead code elimination: removes live nodes none of whose outputs is used by a later node or a graph output.

use crate::ir::Graph;

/// Removes dead nodes, walking backwards so a whole dead chain goes in one run.
pub fn run(g: &mut Graph) -> usize {
    let mut uses = g.use_counts();
    let mut dead = Vec::new();
    for &n in g.order().iter().rev() {
        let node = g.node(n);
        if node.outputs.iter().flatten().all(|&v| uses[v] == 0) {
            dead.push(n);
            for &v in node.inputs.iter().flatten() {
                uses[v] -= 1;
            }
        }
    }
    let count = dead.len();
    g.retain_nodes(|n| !dead.contains(&n));
    count
}
