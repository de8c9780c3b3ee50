//! Row-wise ops: softmax, LRN, layer normalisation, reductions.

use std::fmt::Write as _;

use super::lit;

/// Work items sharing one row of [`softmax`] when the row is long enough to be worth it.
pub const ROW_GROUP: usize = 64;

/// Whether [`softmax`] gives rows of `len` a work-group of [`ROW_GROUP`] items each (else one item per row).
pub fn softmax_grouped(len: usize) -> bool {
    len >= ROW_GROUP
}

/// Softmax (or LogSoftmax) over `len` elements `inner` apart, for `outer · inner` rows of storage `t` (`float`,
/// `half` or `bf16`, computed in float): kernel `name(X, Y)`. Long rows ([`softmax_grouped`]) take a work-group
/// of [`ROW_GROUP`] items each, sharing the maximum and the sum through local memory (global size `rows · 64`,
/// local 64): a classifier's one row of 1,000 is otherwise one item's serial work. Short rows take one item each
/// (global size `rows`).
pub fn softmax(name: &str, t: &str, len: usize, inner: usize, log: bool) -> String {
    let x = |at: &str| super::load(t, "X", at);
    let value = if log { format!("{} - m - log(sum)", x("at")) } else { format!("exp({} - m) / sum", x("at")) };
    let out = super::store(t, "Y", "at", &value);
    let p = super::param_type(t);
    let head = format!("__kernel void {name}(__global const {p}* restrict X, __global {p}* restrict Y) {{\n");
    let xj = x(&format!("base + j * {inner}"));
    if !softmax_grouped(len) {
        return format!(
            "{head}  const size_t g = get_global_id(0), o = g / {inner}, i = g % {inner};\n  const size_t base = o * {len} * {inner} + i;\n  float m = -INFINITY;\n  for (size_t j = 0; j < {len}; ++j) m = fmax(m, {xj});\n  float sum = 0.0f;\n  for (size_t j = 0; j < {len}; ++j) sum += exp({xj} - m);\n  for (size_t j = 0; j < {len}; ++j) {{ const size_t at = base + j * {inner}; {out} }}\n}}\n"
        );
    }
    let w = ROW_GROUP;
    let tree = |op: &str| {
        format!(
            "  red[t] = v; barrier(CLK_LOCAL_MEM_FENCE);\n  for (int s = {half}; s > 0; s >>= 1) {{ if (t < s) red[t] = {op}; barrier(CLK_LOCAL_MEM_FENCE); }}\n",
            half = w / 2
        )
    };
    format!(
        "{head}  const size_t g = get_group_id(0), o = g / {inner}, i = g % {inner}; const int t = get_local_id(0);\n  const size_t base = o * {len} * {inner} + i;\n  __local float red[{w}];\n  float v = -INFINITY;\n  for (size_t j = t; j < {len}; j += {w}) v = fmax(v, {xj});\n{max}  const float m = red[0]; barrier(CLK_LOCAL_MEM_FENCE);\n  v = 0.0f;\n  for (size_t j = t; j < {len}; j += {w}) v += exp({xj} - m);\n{add}  const float sum = red[0];\n  for (size_t j = t; j < {len}; j += {w}) {{ const size_t at = base + j * {inner}; {out} }}\n}}\n",
        max = tree("fmax(red[t], red[t + s])"),
        add = tree("red[t] + red[t + s]"),
    )
}

/// Local response normalisation across `channels` channels of `plane` elements: kernel `name(X, Y)`, one work item
/// per element; X and Y stored as `t` ([`super::dt_storage`]), computed in float.
#[allow(clippy::too_many_arguments)]
pub fn lrn(
    name: &str,
    channels: usize,
    plane: usize,
    size: usize,
    alpha: f32,
    beta: f32,
    bias: f32,
    t: &str,
) -> String {
    let (lo, hi) = ((size - 1) / 2, (size - 1).div_ceil(2));
    let pt = super::param_type(t);
    let x = super::load(t, "X", &format!("(n * {channels} + j) * {plane} + p"));
    let y = super::store(
        t,
        "Y",
        "g",
        &format!(
            "{} / pow({} + {} * sum, {})",
            super::load(t, "X", "g"),
            lit(bias),
            lit(alpha / size as f32),
            lit(beta)
        ),
    );
    format!(
        "__kernel void {name}(__global const {pt}* restrict X, __global {pt}* restrict Y) {{\n  const size_t g = get_global_id(0), p = g % {plane}, c = g / {plane} % {channels}, n = g / ({plane} * {channels});\n  const int c0 = max((int)c - {lo}, 0), c1 = min((int)c + {hi}, {last});\n  float sum = 0.0f;\n  for (int j = c0; j <= c1; ++j) {{ const float x = {x}; sum += x * x; }}\n  {y}\n}}\n",
        last = channels as i64 - 1,
    )
}

/// The sum of each item's `v` over a work-group of [`ROW_GROUP`] items, left in `red[0]` (`red` and `t` declared
/// by the caller).
fn group_sum() -> String {
    format!(
        "  red[t] = v; barrier(CLK_LOCAL_MEM_FENCE);\n  for (int s = {}; s > 0; s >>= 1) {{ if (t < s) red[t] += red[t + s]; barrier(CLK_LOCAL_MEM_FENCE); }}\n",
        ROW_GROUP / 2
    )
}

/// Layer normalisation of rows of `len`: kernel `name(X, scale, [bias,] Y, [mean,] [inv_std_dev])`; the
/// statistics outputs (one value per row) are written when asked for. `grouped` ([`layer_norm_grouped`]): a
/// work-group of [`ROW_GROUP`] items per row (global size `rows · 64`, local 64), the mean and the variance each
/// summed through local memory in one pass over the row's stride; else one item per row (global size: the rows).
/// X, the scale, the bias and Y are stored as `t` ([`super::dt_storage`]), the row's sums and the result computed in
/// float; the statistics are f32.
#[allow(clippy::too_many_arguments)]
pub fn layer_norm(
    name: &str,
    len: usize,
    epsilon: f32,
    bias: bool,
    mean: bool,
    inv: bool,
    grouped: bool,
    t: &str,
) -> String {
    if grouped {
        return layer_norm_per_group(name, len, epsilon, bias, mean, inv, t);
    }
    let pt = super::param_type(t);
    let (param, add) = norm_bias(bias, t);
    let (x, xj) = (super::load(t, "X", "base + j"), super::load(t, "S", "j"));
    let y = super::store(t, "Y", "base + j", &format!("({x} - mean) * inv * {xj}{add}"));
    let stats = format!(
        "{}{}",
        if mean { ", __global float* restrict M" } else { "" },
        if inv { ", __global float* restrict V" } else { "" }
    );
    let store = format!(
        "{}{}",
        if mean { "  M[get_global_id(0)] = mean;\n" } else { "" },
        if inv { "  V[get_global_id(0)] = inv;\n" } else { "" }
    );
    format!(
        "__kernel void {name}(__global const {pt}* restrict X, __global const {pt}* restrict S{param}, __global {pt}* restrict Y{stats}) {{\n  const size_t base = get_global_id(0) * {len};\n  float mean = 0.0f;\n  for (size_t j = 0; j < {len}; ++j) mean += {x};\n  mean /= {lenf};\n  float var = 0.0f;\n  for (size_t j = 0; j < {len}; ++j) {{ const float d = {x} - mean; var += d * d; }}\n  const float inv = 1.0f / sqrt(var / {lenf} + {eps});\n  for (size_t j = 0; j < {len}; ++j) {y}\n{store}}}\n",
        lenf = lit(len as f32),
        eps = lit(epsilon)
    )
}

/// Whether [`layer_norm`] gives rows of `len` a work-group each, on a device where that pays (GPUs).
pub fn layer_norm_grouped(len: usize, device_groups: bool) -> bool {
    device_groups && len >= ROW_GROUP
}

/// The bias parameter of a normalisation kernel over data stored as `t`, and the term adding it.
fn norm_bias(bias: bool, t: &str) -> (String, String) {
    if bias {
        (format!(", __global const {}* restrict B", super::param_type(t)), format!(" + {}", super::load(t, "B", "j")))
    } else {
        (String::new(), String::new())
    }
}

/// [`layer_norm`] with a work-group per row.
fn layer_norm_per_group(name: &str, len: usize, epsilon: f32, bias: bool, mean: bool, inv: bool, t: &str) -> String {
    let w = ROW_GROUP;
    let pt = super::param_type(t);
    let (param, add) = norm_bias(bias, t);
    let (x, xj) = (super::load(t, "X", "base + j"), super::load(t, "S", "j"));
    let y = super::store(t, "Y", "base + j", &format!("({x} - mean) * inv * {xj}{add}"));
    let stats = format!(
        "{}{}",
        if mean { ", __global float* restrict M" } else { "" },
        if inv { ", __global float* restrict V" } else { "" }
    );
    let store =
        format!("{}{}", if mean { "    M[row] = mean;\n" } else { "" }, if inv { "    V[row] = inv;\n" } else { "" });
    let sum = group_sum();
    format!(
        "__kernel void {name}(__global const {pt}* restrict X, __global const {pt}* restrict S{param}, __global {pt}* restrict Y{stats}) {{\n  const size_t row = get_group_id(0), base = row * {len}; const int t = get_local_id(0);\n  __local float red[{w}];\n  float v = 0.0f;\n  for (size_t j = t; j < {len}; j += {w}) v += {x};\n{sum}  const float mean = red[0] / {lenf}; barrier(CLK_LOCAL_MEM_FENCE);\n  v = 0.0f;\n  for (size_t j = t; j < {len}; j += {w}) {{ const float d = {x} - mean; v += d * d; }}\n{sum}  const float inv = 1.0f / sqrt(red[0] / {lenf} + {eps});\n  for (size_t j = t; j < {len}; j += {w}) {y}\n  if (t == 0) {{\n{store}  }}\n}}\n",
        lenf = lit(len as f32),
        eps = lit(epsilon)
    )
}

/// A reduction of `x` (stored as `t`, [`super::dt_storage`]: `half` and `bf16` read as float) over the axes where
/// `reduced` is true, one work item per output element (the kept axes' positions, row-major): `init`, then `step`
/// for each element (`acc`, `x`, `j` its index along the reduced elements), then `finish` (over `acc`, `count`),
/// stored as `out`.
#[allow(clippy::too_many_arguments)]
pub fn reduce(
    name: &str,
    shape: &[usize],
    reduced: &[bool],
    t: &str,
    out: &str,
    acc_t: &str,
    init: &str,
    step: &str,
    finish: &str,
) -> String {
    let strides = {
        let mut st = vec![1usize; shape.len()];
        for a in (0..shape.len().saturating_sub(1)).rev() {
            st[a] = st[a + 1] * shape[a + 1];
        }
        st
    };
    let kept: Vec<usize> = (0..shape.len()).filter(|&a| !reduced[a]).collect();
    let red: Vec<usize> = (0..shape.len()).filter(|&a| reduced[a]).collect();
    let count: usize = red.iter().map(|&a| shape[a]).product();
    let mut s = String::new();
    let (pt, po) = (super::param_type(t), super::param_type(out));
    let _ = writeln!(s, "__kernel void {name}(__global const {pt}* restrict X, __global {po}* restrict Y) {{");
    let _ = writeln!(s, "  const size_t g = get_global_id(0); size_t r = g; size_t base = 0;");
    for &a in kept.iter().rev() {
        let _ = writeln!(s, "  base += (r % {}) * {}; r /= {};", shape[a], strides[a], shape[a]);
    }
    let _ = writeln!(s, "  {acc_t} acc = {init}; const size_t count = {count};");
    let _ = writeln!(s, "  for (size_t j = 0; j < count; ++j) {{");
    let _ = writeln!(s, "    size_t q = j, off = base;");
    for &a in red.iter().rev() {
        let _ = writeln!(s, "    off += (q % {}) * {}; q /= {};", shape[a], strides[a], shape[a]);
    }
    let xt = if matches!(t, "half" | "bf16") { "float" } else { t };
    let _ = writeln!(s, "    const {xt} x = {};", super::load(t, "X", "off"));
    let _ = writeln!(s, "    {step}");
    let _ = writeln!(s, "  }}");
    let _ = writeln!(s, "  {}", super::store(out, "Y", "g", finish));
    s.push_str("}\n");
    s
}

/// BatchNormalization of `[N, C, plane]` data stored as `t` (training: f32 only), channel `c` scaled by `S[c] / √(var + ε)` and shifted to `B[c]`.
/// Inference (`training == None`): kernel `name(X, S, B, M, V, Y)`, one work item per element, with the given mean
/// and variance. Training (`Some((momentum, running_mean, running_var))`): kernel `name(X, S, B, M, V, Y[, RM][,
/// RV])`, one work item per channel, normalising with the batch's mean and population variance and writing the
/// running statistics asked for, `running · momentum + batch · (1 − momentum)`, as the CPU does.
pub fn batch_norm(
    name: &str,
    n: usize,
    channels: usize,
    plane: usize,
    epsilon: f32,
    training: Option<(f32, bool, bool)>,
    t: &str,
) -> String {
    let pt = super::param_type(t);
    let params = format!("__global const {pt}* restrict X, __global const {pt}* restrict S, __global const {pt}* restrict B, __global const {pt}* restrict M, __global const {pt}* restrict V, __global {pt}* restrict Y");
    let eps = lit(epsilon);
    let ld = |p: &str, i: &str| super::load(t, p, i);
    match training {
        None => format!(
            "__kernel void {name}({params}) {{\n  const size_t g = get_global_id(0), c = g / {plane} % {channels};\n  const float a = {s} / sqrt({v} + {eps});\n  {y}\n}}\n",
            s = ld("S", "c"),
            v = ld("V", "c"),
            y = super::store(t, "Y", "g", &format!("fma({} - {}, a, {})", ld("X", "g"), ld("M", "c"), ld("B", "c"))),
        ),
        Some((momentum, rm, rv)) => {
            let count = (n * plane).max(1);
            let outs = format!(
                "{}{}",
                if rm { ", __global float* restrict RM" } else { "" },
                if rv { ", __global float* restrict RV" } else { "" }
            );
            let (m, keep) = (lit(momentum), lit(1.0 - momentum));
            let stats = format!(
                "{}{}",
                if rm { format!("  RM[c] = M[c] * {m} + mean * {keep};\n") } else { String::new() },
                if rv { format!("  RV[c] = V[c] * {m} + var * {keep};\n") } else { String::new() }
            );
            format!(
                "__kernel void {name}({params}{outs}) {{\n  const size_t c = get_global_id(0);\n  float sum = 0.0f;\n  for (size_t b = 0; b < {n}; ++b) for (size_t p = 0; p < {plane}; ++p) sum += X[(b * {channels} + c) * {plane} + p];\n  const float mean = sum / {count}.0f;\n  float sq = 0.0f;\n  for (size_t b = 0; b < {n}; ++b) for (size_t p = 0; p < {plane}; ++p) {{ const float d = X[(b * {channels} + c) * {plane} + p] - mean; sq += d * d; }}\n  const float var = sq / {count}.0f;\n  const float a = S[c] / sqrt(var + {eps});\n  for (size_t b = 0; b < {n}; ++b) for (size_t p = 0; p < {plane}; ++p) {{ const size_t i = (b * {channels} + c) * {plane} + p; Y[i] = fma(X[i] - mean, a, B[c]); }}\n{stats}}}\n"
            )
        }
    }
}
