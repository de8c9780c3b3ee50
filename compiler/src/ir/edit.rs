//! Batched rewrites of a [`Graph`] in time linear in its size: what a pass uses instead of
//! [`Graph::replace_uses`], [`Graph::move_before`] and [`Graph::remove_node`], each of which walks every node.
//!
//! An [`Edit`] keeps, from one walk of the graph, each value's use count (as [`Graph::use_counts`] gives it) and
//! its readers, and updates both as the pass redirects uses, adds nodes and removes them. Changes to the order are
//! recorded and made in one walk by [`Edit::finish`]; until then [`Graph::order`] still lists removed nodes and
//! puts added ones last. The result is the graph the one-at-a-time methods would have left, node for node.

use cranelift_entity::SecondaryMap;

use super::{Graph, NodeId, Op, ValueId, ValueType};

/// Use counts, readers and pending order changes of one graph, for one pass.
pub struct Edit {
    counts: SecondaryMap<ValueId, u32>,
    /// Nodes that read each value, one entry per input slot at the time it was added; entries of removed nodes,
    /// and of nodes since redirected, are stale and skipped.
    readers: SecondaryMap<ValueId, Vec<NodeId>>,
    /// Graph output positions that hold each value.
    outputs: SecondaryMap<ValueId, Vec<usize>>,
    removed: SecondaryMap<NodeId, bool>,
    /// Nodes to put right before a node, in the order they were added.
    before: SecondaryMap<NodeId, Vec<NodeId>>,
    placed: SecondaryMap<NodeId, bool>,
}

impl Edit {
    /// Counts the uses of every value in `g`.
    pub fn new(g: &Graph) -> Edit {
        let mut edit = Edit {
            counts: SecondaryMap::with_capacity(g.value_count()),
            readers: SecondaryMap::with_capacity(g.value_count()),
            outputs: SecondaryMap::with_capacity(g.value_count()),
            removed: SecondaryMap::with_capacity(g.node_count()),
            before: SecondaryMap::with_capacity(g.node_count()),
            placed: SecondaryMap::with_capacity(g.node_count()),
        };
        for &n in g.order() {
            edit.read(g, n);
        }
        for (i, o) in g.outputs().iter().enumerate() {
            edit.counts[o.value] += 1;
            edit.outputs[o.value].push(i);
        }
        edit
    }

    fn read(&mut self, g: &Graph, n: NodeId) {
        for &v in g.node(n).inputs.iter().flatten() {
            self.counts[v] += 1;
            self.readers[v].push(n);
        }
    }

    /// Uses of `v` by live nodes and graph outputs, now.
    pub fn uses(&self, v: ValueId) -> u32 {
        self.counts[v]
    }

    /// Makes every live user of `old` (node inputs and graph outputs) use `new` instead.
    pub fn replace_uses(&mut self, g: &mut Graph, old: ValueId, new: ValueId) {
        if old == new {
            return;
        }
        for n in std::mem::take(&mut self.readers[old]) {
            if self.removed[n] {
                continue;
            }
            let mut moved = 0;
            for input in g.node_mut(n).inputs.iter_mut().flatten() {
                if *input == old {
                    *input = new;
                    moved += 1;
                }
            }
            // A node that read `old` twice has two entries: the first moves both.
            for _ in 0..moved {
                self.readers[new].push(n);
            }
            self.counts[old] -= moved;
            self.counts[new] += moved;
        }
        for i in std::mem::take(&mut self.outputs[old]) {
            g.set_output_value(i, new);
            self.counts[old] -= 1;
            self.counts[new] += 1;
            self.outputs[new].push(i);
        }
    }

    /// Adds a node (as [`Graph::add_node`]) and puts it right before `before`, after any put there already.
    pub fn insert_before(
        &mut self,
        g: &mut Graph,
        before: NodeId,
        name: impl Into<String>,
        op: Op,
        inputs: Vec<Option<ValueId>>,
        outputs: Vec<Option<(String, ValueType)>>,
    ) -> NodeId {
        let n = g.add_node(name, op, inputs, outputs);
        self.read(g, n);
        self.before[before].push(n);
        self.placed[n] = true;
        n
    }

    /// Sets a live node's inputs.
    pub fn set_inputs(&mut self, g: &mut Graph, n: NodeId, inputs: Vec<Option<ValueId>>) {
        for &v in g.node(n).inputs.iter().flatten() {
            self.counts[v] -= 1;
        }
        g.node_mut(n).inputs = inputs;
        self.read(g, n);
    }

    /// Removes a live node from the order. Its outputs must have no remaining users.
    pub fn remove(&mut self, g: &Graph, n: NodeId) {
        if std::mem::replace(&mut self.removed[n], true) {
            return;
        }
        for &v in g.node(n).inputs.iter().flatten() {
            self.counts[v] -= 1;
        }
    }

    /// Makes the recorded order changes, in one walk of the order.
    pub fn finish(self, g: &mut Graph) {
        let mut order = Vec::with_capacity(g.order().len());
        for &n in g.order() {
            if !self.placed[n] {
                self.emit(n, &mut order);
            }
        }
        g.set_order(order);
    }

    fn emit(&self, n: NodeId, order: &mut Vec<NodeId>) {
        for &m in &self.before[n] {
            self.emit(m, order);
        }
        if !self.removed[n] {
            order.push(n);
        }
    }
}
