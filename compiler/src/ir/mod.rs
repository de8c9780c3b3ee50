//! stowage's IR: typed ids, dense maps, ops with typed attributes, a printer and a verifier.
//!
//! A [`Graph`] owns [`ValueData`] and [`NodeData`] in primary maps indexed by [`ValueId`] and [`NodeId`]; nodes
//! refer to values by id only. Live nodes are kept in a topological order; passes rewrite by adding nodes,
//! redirecting uses ([`Graph::replace_uses`]) and dropping nodes from the order, many at a time through an [`Edit`]
//! so that a pass stays linear in the graph's size. Every value has a static [`ValueType`] once imported.

mod edit;
mod entities;
mod graph;
mod op;
pub mod print;
pub mod recurrent;
pub mod serial;
pub mod subgraph;
pub mod text;
pub mod tfidf;
pub mod trees;
mod types;
pub mod verify;

pub use edit::Edit;
pub use entities::{NodeId, ValueId};
pub use graph::{Graph, GraphOutput, Metadata, NodeData, ValueData, ValueDef};
pub use op::{
    AspectRatioPolicy, AutoPad, Binary, CastMode, Conv, CoordinateTransform, Gemm, GridMode, GridPadding, NearestMode,
    Op, OpAttrs, PadMode, Pool, PoolKind, Reduce, Resize, ResizeMode, ScatterReduction, SoftmaxKind, Unary, Variadic,
    Window,
};
pub use recurrent::{Activation, Lstm};
pub use subgraph::{Branches, LoopBody, ScanBody};
pub use text::Text;
pub use types::{ShapeDisplay, ValueType};
