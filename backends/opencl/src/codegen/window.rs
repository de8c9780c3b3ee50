//! Windowed ops: im2col for convolutions, pools, global pools.

use std::fmt::Write as _;

use super::lit;

/// Geometry of a convolution or a pool over `s` spatial axes.
#[derive(Clone, Debug)]
pub struct Window {
    /// Input spatial extents.
    pub input: Vec<usize>,
    /// Output spatial extents.
    pub output: Vec<usize>,
    /// Kernel extents.
    pub kernel: Vec<usize>,
    /// Strides.
    pub strides: Vec<usize>,
    /// Dilations.
    pub dilations: Vec<usize>,
    /// Padding at the start of each axis.
    pub pads: Vec<usize>,
}

/// Writes `idx` decomposed over `dims` (last fastest) into variables `{prefix}{a}`.
fn decompose(s: &mut String, idx: &str, dims: &[usize], prefix: &str) {
    decompose_as(s, idx, dims, prefix, "size_t");
}

/// [`decompose`] in integers of type `int_type` (`uint` where every index fits: 32-bit division by a constant is
/// a few instructions on a GPU, 64-bit division many).
fn decompose_as(s: &mut String, idx: &str, dims: &[usize], prefix: &str, int_type: &str) {
    let _ = writeln!(s, "  {{ {int_type} q = {idx};");
    for a in (0..dims.len()).rev() {
        let _ = writeln!(s, "    {prefix}{a} = q % {}; q /= {};", dims[a], dims[a]);
    }
    s.push_str("  }\n");
}

/// A block of statements that sets `{out}` to the im2col element of row `{row}` (`c · K + k`), column `{p}` (an
/// output position) and batch-group `{b}` (`n · groups + g`), read from `X` (stored as `t`, [`super::dt_storage`]):
/// 0 where the tap falls in the padding. Variables named in braces are C expressions of the caller.
#[allow(clippy::too_many_arguments)]
pub fn im2col_value(
    w: &Window,
    channels: usize,
    groups: usize,
    t: &str,
    row: &str,
    p: &str,
    b: &str,
    out: &str,
) -> String {
    let s_ = w.input.len();
    let kk: usize = w.kernel.iter().product();
    let cg = channels / groups;
    let plane: usize = w.input.iter().product();
    let mut s = String::new();
    // The row, column and in-plane offsets in 32-bit integers where every one fits (the implicit product computes
    // this per element it loads, so its integer work is the loads' cost); 64-bit otherwise.
    let small = |v: usize| v < (1 << 31);
    let reach = w.input.iter().zip(&w.pads).map(|(i, p)| i + p).max().unwrap_or(0)
        + w.output.iter().zip(&w.strides).map(|(o, s)| o * s).max().unwrap_or(0)
        + w.kernel.iter().zip(&w.dilations).map(|(k, d)| k * d).max().unwrap_or(0);
    // The in-plane offset of a tap outside the plane is computed, signed, before it is masked: within
    // ±plane · reach, so twice that must fit.
    let narrow = small(cg * kk)
        && small(w.output.iter().product())
        && small(plane.saturating_mul(reach.max(1)).saturating_mul(2));
    let (u, i_) = if narrow { ("uint", "int") } else { ("size_t", "long") };
    let _ = writeln!(s, "  {{ const {u} c_ = ({u})({row}) / {kk}, k_ = ({u})({row}) % {kk};");
    let vars: Vec<String> = (0..s_).flat_map(|a| [format!("o{a}"), format!("t{a}")]).collect();
    if !vars.is_empty() {
        let _ = writeln!(s, "  {u} {};", vars.join(", "));
    }
    decompose_as(&mut s, &format!("({u})({p})"), &w.output, "o", u);
    decompose_as(&mut s, "k_", &w.kernel, "t", u);
    let _ = writeln!(s, "  {i_} off = 0; int inside = 1;");
    for a in 0..s_ {
        let _ = writeln!(
            s,
            "  {{ {i_} i = ({i_})(o{a} * {}) + ({i_})(t{a} * {}) - {}; inside &= (i >= 0 && i < {}); off = off * {} + i; }}",
            w.strides[a], w.dilations[a], w.pads[a], w.input[a], w.input[a]
        );
    }
    let _ =
        writeln!(s, "  const size_t base = (({b}) / {groups} * {channels} + ({b}) % {groups} * {cg} + c_) * {plane};");
    let _ = writeln!(s, "  {out} = inside ? {} : 0.0f; }}", super::load(t, "X", "base + off"));
    s
}

/// im2col for a convolution: `cols[b][(c·K + k), p]` for batch item and group `b` (`n · groups + g`), zero where the
/// tap falls in the padding; both stored as `t`. Kernel `name(X, cols)`; global size `[P, C/g · K, N · groups]`.
pub fn im2col(name: &str, w: &Window, channels: usize, groups: usize, t: &str) -> String {
    let p: usize = w.output.iter().product();
    let kk: usize = w.kernel.iter().product();
    let cg = channels / groups;
    let mut s = String::new();
    let pt = super::param_type(t);
    let _ = writeln!(s, "__kernel void {name}(__global const {pt}* restrict X, __global {pt}* restrict cols) {{");
    let _ = writeln!(s, "  const size_t p = get_global_id(0), row = get_global_id(1), b = get_global_id(2);");
    let _ = writeln!(s, "  float v;");
    s.push_str(&im2col_value(w, channels, groups, t, "row", "p", "b", "v"));
    let _ = writeln!(s, "  {}", super::store(t, "cols", &format!("(b * {} + row) * {p} + p", cg * kk), "v"));
    s.push_str("}\n");
    s
}

/// AveragePool, one work item per output element of `[N·C, O…]`: kernel `name(X, Y)`, global size `N·C·ΠO` (max
/// pooling is [`max_pool`]); X and Y stored as `t`, summed in float.
pub fn average_pool(name: &str, w: &Window, count_include_pad: bool, t: &str) -> String {
    let s_ = w.input.len();
    let plane_in: usize = w.input.iter().product();
    let mut s = String::new();
    let pt = super::param_type(t);
    let _ = writeln!(s, "__kernel void {name}(__global const {pt}* restrict X, __global {pt}* restrict Y) {{");
    output_position(&mut s, w);
    let _ = writeln!(s, "  float acc = 0.0f; int count = 0;");
    let inside = window_taps(&mut s, w);
    let mut off = String::from("0");
    for a in 0..s_ {
        off = format!("({off}) * {} + i{a}", w.input[a]);
    }
    // Taps in the explicit padding count toward the divisor with count_include_pad; taps past the padded input
    // (ceil mode) never do.
    let padded: Vec<String> =
        (0..s_).map(|a| format!("i{a} < {}", w.input[a] + w.pads.get(s_ + a).copied().unwrap_or(0))).collect();
    let _ = writeln!(s, "  if ({}) {{", if inside.is_empty() { "1".into() } else { inside.join(" && ") });
    let _ = writeln!(s, "    const float x = {};", super::load(t, "X", &format!("nc * {plane_in} + {off}")));
    let _ = writeln!(s, "    acc += x; count++;");
    if count_include_pad {
        let _ = writeln!(
            s,
            "  }} else if ({}) {{ count++; }}",
            if padded.is_empty() { "0".into() } else { padded.join(" && ") }
        );
    } else {
        s.push_str("  }\n");
    }
    for _ in 0..s_ {
        s.push_str("  }\n");
    }
    let _ = writeln!(s, "  {}", super::store(t, "Y", "g", "count ? acc / (float)count : 0.0f"));
    s.push_str("}\n");
    s
}

/// Global pooling over `plane` elements per `(n, c)`, stored as `t` and summed in float: kernel `name(X, Y)`,
/// global size `N·C`.
pub fn global_pool(name: &str, plane: usize, max: bool, t: &str) -> String {
    let init = if max { "-INFINITY" } else { "0.0f" };
    let step = if max { "acc = (x > acc || isnan(x)) ? x : acc;" } else { "acc += x;" };
    let fin = if max { "acc".to_string() } else { format!("acc / {}", lit(plane as f32)) };
    let (pt, x, y) =
        (super::param_type(t), super::load(t, "X", &format!("g * {plane} + i")), super::store(t, "Y", "g", &fin));
    format!(
        "__kernel void {name}(__global const {pt}* restrict X, __global {pt}* restrict Y) {{\n  const size_t g = get_global_id(0);\n  float acc = {init};\n  for (size_t i = 0; i < {plane}; ++i) {{ const float x = {x}; {step} }}\n  {y}\n}}\n"
    )
}

/// MaxPool of any ordered element type stored as `ty` ([`super::dt_storage`]: half and bf16 compared as float), one work item per output element of `[N·C, O…]`, with the
/// ONNX `Indices` output when `indices` says how to number them (`Some(column_major)`): kernel `name(X, Y[, I])`.
/// As the CPU's kernel: the first largest element in row-major window order wins; a NaN loses against numbers;
/// a window without an input element gives 0 and index −1. Indices are `(n·C + c)·ΠD + spatial`, the spatial
/// position row-major, or column-major with `storage_order = 1`.
pub fn max_pool(name: &str, w: &Window, ty: &str, float: bool, indices: Option<bool>) -> String {
    let s_ = w.input.len();
    let plane_in: usize = w.input.iter().product();
    let mut s = String::new();
    let out_i = if indices.is_some() { ", __global long* restrict I" } else { "" };
    let pt = super::param_type(ty);
    let _ = writeln!(s, "__kernel void {name}(__global const {pt}* restrict X, __global {pt}* restrict Y{out_i}) {{");
    output_position(&mut s, w);
    let acc_t = if matches!(ty, "half" | "bf16") { "float" } else { ty };
    let _ = writeln!(s, "  {acc_t} acc = 0; long best = -1; int found = 0;");
    let inside = window_taps(&mut s, w);
    let (mut row, mut col, mut step) = (String::from("0"), String::from("0"), 1usize);
    for a in 0..s_ {
        row = format!("({row}) * {} + i{a}", w.input[a]);
        col = format!("{col} + i{a} * {step}");
        step *= w.input[a];
    }
    let position = if indices == Some(true) { col } else { row.clone() };
    let nan = if float { " || (isnan(acc) && !isnan(x))" } else { "" };
    let _ = writeln!(s, "  if ({}) {{", if inside.is_empty() { "1".into() } else { inside.join(" && ") });
    let _ = writeln!(s, "    const {acc_t} x = {};", super::load(ty, "X", &format!("nc * {plane_in} + {row}")));
    let _ = writeln!(
        s,
        "    if (!found || x > acc{nan}) {{ acc = x; best = (long)(nc * {plane_in}) + {position}; found = 1; }}"
    );
    s.push_str("  }\n");
    for _ in 0..s_ {
        s.push_str("  }\n");
    }
    let _ = writeln!(s, "  {}", super::store(ty, "Y", "g", "found ? acc : 0"));
    if indices.is_some() {
        let _ = writeln!(s, "  I[g] = found ? best : -1;");
    }
    s.push_str("}\n");
    s
}

/// The work item's output element of a pooling kernel over `[N·C, O…]`: `g`, the plane `nc` and the output
/// coordinates `o0…`.
fn output_position(s: &mut String, w: &Window) {
    let plane_out: usize = w.output.iter().product();
    let _ = writeln!(s, "  const size_t g = get_global_id(0), nc = g / {plane_out}, p = g % {plane_out};");
    let _ = writeln!(s, "  size_t {};", (0..w.input.len()).map(|a| format!("o{a}")).collect::<Vec<_>>().join(", "));
    decompose(s, "p", &w.output, "o");
}

/// Opens one loop per spatial axis over the window's taps, with the input coordinate `i{a}` of each (they may fall
/// in the padding); returns the conditions that put a tap inside the input. The caller closes the loops.
fn window_taps(s: &mut String, w: &Window) -> Vec<String> {
    for a in 0..w.input.len() {
        let _ = writeln!(s, "  for (int t{a} = 0; t{a} < {}; ++t{a}) {{", w.kernel[a]);
        let _ = writeln!(
            s,
            "  const long i{a} = (long)(o{a} * {}) + (long)t{a} * {} - {};",
            w.strides[a], w.dilations[a], w.pads[a]
        );
    }
    (0..w.input.len()).map(|a| format!("i{a} >= 0 && i{a} < {}", w.input[a])).collect()
}
