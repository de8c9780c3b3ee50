//! Dead code elimination: removes live nodes none of whose outputs is used by a later node or a graph output.

use cranelift_entity::SecondaryMap;

use crate::ir::{Graph, NodeId};

/// Removes dead nodes, walking backwards so a whole dead chain goes in one run.
pub fn run(g: &mut Graph) -> usize {
    let mut uses = g.use_counts();
    let mut dead: SecondaryMap<NodeId, bool> = SecondaryMap::with_capacity(g.node_count());
    let mut count = 0;
    for &n in g.order().iter().rev() {
        let node = g.node(n);
        if node.outputs.iter().flatten().all(|&v| uses[v] == 0) {
            dead[n] = true;
            count += 1;
            for &v in node.inputs.iter().flatten() {
                uses[v] -= 1;
            }
        }
    }
    g.retain_nodes(|n| !dead[n]);
    count
}
