//! Typed references into a [`Graph`](super::Graph): a `u32` each, printed as `v7` and `n3`.

use cranelift_entity::entity_impl;

/// A value: a graph input, a constant, or one output of a node.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(u32);
entity_impl!(ValueId, "v");

/// A node: one op applied to values.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(u32);
entity_impl!(NodeId, "n");
