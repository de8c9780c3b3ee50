//! The textual form of a graph: stable, one line per input, constant, node and output, for snapshots and `stowage
//! import`.
//!
//! ```text
//! graph "tiny" opset 13
//!   input v0 "x": f32[1,4]
//!   const v1 "w": f32[4,2] = splat(0.5)
//!   v2 "y": f32[1,2] = MatMul(v0, v1)  # n0 "mm"
//!   output "y" = v2
//! ```
//! Constants with more than [`PrintOptions::max_elements`] elements are elided: `splat(x)` when every element is
//! `x`, else `<N elements>`. An omitted optional input prints as `_`, an output nobody asked for as `_`.
//!
//! A node's subgraphs (an `If`'s branches, a `Loop`'s body: `ir/subgraph.rs`) print under it, indented, each as a graph of its own
//! (its ids its own; its inputs are the node's inputs after the condition, in order):
//! ```text
//!   v3 "y": f32[4] = If(v2, v0)  # n1 "guard"
//!     then:
//!       input v0 "x": f32[4]
//!       v1 "t": f32[4] = Relu(v0)  # n0 "t"
//!       output "t" = v1
//!     else:
//!       input v0 "x": f32[4]
//!       output "x" = v0
//! ```

use std::fmt::{self, Write};

use stowage_runtime::{DatumType, Tensor};

use super::{Graph, OpAttrs, ValueDef, ValueId};
use crate::consts;

/// How much to print.
#[derive(Clone, Copy, Debug)]
pub struct PrintOptions {
    /// Constants with more elements than this are elided.
    pub max_elements: usize,
}

impl Default for PrintOptions {
    fn default() -> Self {
        PrintOptions { max_elements: 8 }
    }
}

/// Prints `graph` with default options.
pub fn print(graph: &Graph) -> String {
    print_with(graph, PrintOptions::default())
}

/// Prints `graph`.
pub fn print_with(graph: &Graph, options: PrintOptions) -> String {
    let mut out = String::new();
    writeln!(out, "graph {:?} opset {}", graph.name, graph.metadata.opset).expect("writing to a String cannot fail");
    write_graph(&mut out, graph, options, "  ").expect("writing to a String cannot fail");
    out
}

fn write_graph(out: &mut String, g: &Graph, options: PrintOptions, pad: &str) -> fmt::Result {
    for &v in g.inputs() {
        writeln!(out, "{pad}input {v} {:?}: {}", g.value(v).name, g.ty(v))?;
    }
    let uses = g.use_counts();
    for (v, data) in g.values() {
        if let ValueDef::Const(t) = &data.def {
            if uses[v] > 0 {
                writeln!(out, "{pad}const {v} {:?}: {} = {}", data.name, data.ty, Elements(t, options.max_elements))?;
            }
        }
    }
    for &n in g.order() {
        let node = g.node(n);
        out.push_str(pad);
        for (i, o) in node.outputs.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            match o {
                Some(v) => write!(out, "{v} {:?}: {}", g.value(*v).name, g.ty(*v))?,
                None => out.push('_'),
            }
        }
        write!(out, " = {}(", node.op.name())?;
        for (i, input) in node.inputs.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            match input {
                Some(v) => write!(out, "{v}")?,
                None => out.push('_'),
            }
        }
        writeln!(out, "){}  # {n} {:?}", OpAttrs(&node.op), node.name)?;
        for (which, sub) in node.op.subgraphs() {
            writeln!(out, "{pad}  {which}:")?;
            write_graph(out, sub, options, &format!("{pad}    "))?;
        }
    }
    for o in g.outputs() {
        writeln!(out, "{pad}output {:?} = {}", o.name, o.value)?;
    }
    Ok(())
}

/// Prints the first element of a tensor (`0.5`, `-1`, `true`).
pub struct Scalar<'a>(pub &'a Tensor<'static>);

impl fmt::Display for Scalar<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match element_strings(self.0, 1).first() {
            Some(s) => f.write_str(s),
            None => f.write_str("<empty>"),
        }
    }
}

struct Elements<'a>(&'a Tensor<'static>, usize);

impl fmt::Display for Elements<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = self.0;
        if t.len() > self.1 {
            return if consts::is_splat(t) {
                write!(f, "splat({})", Scalar(t))
            } else {
                write!(f, "<{} elements>", t.len())
            };
        }
        write!(f, "[{}]", element_strings(t, t.len()).join(","))
    }
}

/// The first `n` elements as text; floats print in their own precision.
fn element_strings(t: &Tensor<'_>, n: usize) -> Vec<String> {
    fn take<T: fmt::Debug + stowage_runtime::Datum>(t: &Tensor<'_>, n: usize) -> Vec<String> {
        t.to_vec::<T>().unwrap_or_default().iter().take(n).map(|x| format!("{x:?}")).collect()
    }
    match t.dt() {
        DatumType::F32 => take::<f32>(t, n),
        DatumType::F64 => take::<f64>(t, n),
        d if matches!(d, DatumType::F16 | DatumType::BF16)
            || d.is_small() && stowage_runtime::small_types::int_range(d).is_none() =>
        {
            consts::to_f64s(t).unwrap_or_default().iter().take(n).map(|&x| format!("{:?}", x as f32)).collect()
        }
        DatumType::Bool => take::<bool>(t, n),
        DatumType::U64 => take::<u64>(t, n),
        _ => consts::to_i64s(t).unwrap_or_default().iter().take(n).map(|x| x.to_string()).collect(),
    }
}

impl Graph {
    /// A short description of a value for error messages: `'name' (v7)`.
    pub fn describe(&self, v: ValueId) -> String {
        format!("'{}' ({v})", self.value(v).name)
    }
}
