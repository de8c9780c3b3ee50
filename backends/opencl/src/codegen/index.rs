//! Data movement by computed source index: Slice, Tile, Pad, Gather, GatherElements.

use std::fmt::Write as _;

use stowage_kir::Elem;

use super::c_type;

/// How [`index_map`] finds each output element's source.
#[derive(Clone, Debug)]
pub enum IndexMap {
    /// `x[begin + o·step]` per axis (steps may be negative).
    Slice {
        /// First index per axis.
        begin: Vec<i64>,
        /// Step per axis.
        step: Vec<i64>,
    },
    /// `x[o mod d]` per axis.
    Tile,
    /// `x[o − begin]` per axis, the outside filled by `mode`.
    Pad {
        /// Padding before each axis (negative crops).
        begin: Vec<i64>,
        /// `constant`, `reflect`, `edge` or `wrap`.
        mode: &'static str,
    },
    /// `x[…, indices[q…], …]` along `axis`, for indices of `rank` axes (of C type `index_type`).
    Gather {
        /// The gathered axis.
        axis: usize,
        /// Rank of the indices.
        rank: usize,
        /// C type of the indices.
        index_type: &'static str,
    },
    /// `x[o0, …, indices[o], …]`: the output's own position, `axis` replaced by the index at that position (the
    /// indices have the output's shape).
    GatherElements {
        /// The gathered axis.
        axis: usize,
        /// C type of the indices.
        index_type: &'static str,
    },
}

/// A data movement kernel over elements of `size` bytes: output element `o` (of `out`, row-major) is read from the
/// input `x` (of `input`) where `map` says, or is `fill` (a constant Pad outside the input). Kernel
/// `name(X, [I,] [F,] Y)`: `I` the gather indices, `F` the one-element fill value of a constant Pad; global size:
/// the output's element count.
pub fn index_map(name: &str, out: &[usize], input: &[usize], size: usize, map: &IndexMap) -> String {
    let t = c_type(Elem::Bits(size));
    let st = {
        let mut st = vec![1i64; input.len()];
        for a in (0..input.len().saturating_sub(1)).rev() {
            st[a] = st[a + 1] * input[a + 1] as i64;
        }
        st
    };
    let mut params = vec![format!("__global const {t}* restrict X")];
    if let IndexMap::Gather { index_type, .. } | IndexMap::GatherElements { index_type, .. } = map {
        params.push(format!("__global const {index_type}* restrict I"));
    }
    if matches!(map, IndexMap::Pad { mode: "constant", .. }) {
        params.push(format!("__global const {t}* restrict F"));
    }
    params.push(format!("__global {t}* restrict Y"));
    let mut s = String::new();
    let _ = writeln!(s, "__kernel void {name}({}) {{", params.join(", "));
    let _ = writeln!(s, "  const size_t g = get_global_id(0); size_t r = g; long src = 0; int ok = 1;");
    for a in (0..out.len()).rev() {
        let _ = writeln!(s, "  const long o{a} = (long)(r % {}); r /= {};", out[a], out[a]);
    }
    match map {
        IndexMap::Slice { begin, step } => {
            for a in 0..input.len() {
                let _ = writeln!(s, "  src += ({} + o{a} * {}) * {};", begin[a], step[a], st[a]);
            }
        }
        IndexMap::Tile => {
            for a in 0..input.len() {
                let _ = writeln!(s, "  src += (o{a} % {}) * {};", input[a].max(1), st[a]);
            }
        }
        IndexMap::Pad { begin, mode } => {
            for a in 0..input.len() {
                let d = input[a] as i64;
                let _ = writeln!(s, "  {{ long i = o{a} - {};", begin[a]);
                match *mode {
                    "reflect" if d > 1 => {
                        let _ = writeln!(
                            s,
                            "    const long p = {}; i = i % p; if (i < 0) i += p; if (i >= {d}) i = p - i;",
                            2 * (d - 1)
                        );
                    }
                    "reflect" | "edge" => {
                        let _ = writeln!(s, "    i = i < 0 ? 0 : (i >= {d} ? {} : i);", d - 1);
                    }
                    "wrap" => {
                        let _ = writeln!(s, "    i = i % {d}; if (i < 0) i += {d};");
                    }
                    _ => {
                        let _ = writeln!(s, "    ok &= (i >= 0 && i < {d});");
                    }
                }
                let _ = writeln!(s, "    src += i * {}; }}", st[a]);
            }
        }
        IndexMap::Gather { axis, rank, .. } => {
            // Output axes: those of x before `axis`, the indices' axes, then those of x after it.
            let q_dims = &out[*axis..*axis + rank];
            let mut q = String::from("0");
            for (k, d) in q_dims.iter().enumerate() {
                q = format!("({q}) * {d} + o{}", axis + k);
            }
            let _ = writeln!(s, "  long idx = (long)I[{q}]; if (idx < 0) idx += {};", input[*axis]);
            let _ = writeln!(s, "  ok &= (idx >= 0 && idx < {});", input[*axis]);
            for (a, stride) in st.iter().enumerate() {
                let o = match a.cmp(axis) {
                    std::cmp::Ordering::Less => format!("o{a}"),
                    std::cmp::Ordering::Equal => "idx".into(),
                    std::cmp::Ordering::Greater => format!("o{}", a + rank - 1),
                };
                let _ = writeln!(s, "  src += {o} * {stride};");
            }
        }
        IndexMap::GatherElements { axis, .. } => {
            let _ = writeln!(s, "  long idx = (long)I[g]; if (idx < 0) idx += {};", input[*axis]);
            let _ = writeln!(s, "  ok &= (idx >= 0 && idx < {});", input[*axis]);
            for (a, stride) in st.iter().enumerate() {
                let o = if a == *axis { "idx".to_string() } else { format!("o{a}") };
                let _ = writeln!(s, "  src += {o} * {stride};");
            }
        }
    }
    let fill = if matches!(map, IndexMap::Pad { mode: "constant", .. }) { "F[0]" } else { "0" };
    let _ = writeln!(s, "  Y[g] = ok ? X[src] : {fill};");
    s.push_str("}\n");
    s
}
