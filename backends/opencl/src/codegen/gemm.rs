//! The batched, tiled matrix product.

use std::fmt::Write as _;

use super::lit;

/// Element strides of a batched matrix operand: one per batch axis, then the row and the column stride.
pub type Strides = (Vec<usize>, usize, usize);

/// A batched product `C[b][m, n] = epilogue(alpha · Σₖ A[b][m, k] · B[b][k, n])`.
#[derive(Clone, Debug)]
pub struct Gemm {
    /// Rows, columns, inner dimension.
    pub m: usize,
    /// Columns.
    pub n: usize,
    /// Inner dimension.
    pub k: usize,
    /// Batch extents (broadcast batch axes, outermost first).
    pub batch: Vec<usize>,
    /// Element strides of A: per batch axis, then row and column.
    pub a: Strides,
    /// Element strides of B: per batch axis, then row (k) and column (n).
    pub b: Strides,
    /// Element strides of C: per batch axis, then row and column.
    pub c: Strides,
    /// Product scale.
    pub alpha: f32,
    /// An added term through its strides (batch, row, column; 0 on broadcast axes), scaled by `beta`.
    pub bias: Option<(Strides, f32)>,
    /// ReLU on the result.
    pub relu: bool,
    /// B is the im2col unfolding of a convolution's input `X` (window, channels, groups), computed as it is loaded
    /// (an implicit product: no im2col buffer, no second launch); the batch axes are then (batch item, group).
    pub im2col: Option<(super::Window, usize, usize)>,
    /// Work-groups the device needs to be busy (twice its compute units); larger tiles are used only while the
    /// product still makes this many.
    pub min_groups: usize,
}

/// Tile edge of [`gemm`].
pub const TILE: usize = 16;

fn batch_offset(s: &mut String, var: &str, batch: &[usize], strides: &[usize]) {
    let _ = write!(s, "  size_t {var} = 0; {{ size_t q = bi;");
    for a in (0..batch.len()).rev() {
        let _ = write!(s, " {var} += (q % {}) * {}; q /= {};", batch[a], strides[a], batch[a]);
    }
    s.push_str(" }\n");
}

/// Outputs per work item along each axis of [`gemm`]'s tile: 4 × 4 or 2 × 2 when the product still makes at least
/// `g.min_groups` work-groups that way (enough to fill the device: a batch-1 layer of ResNet's third stage is only
/// 16 groups of 64 × 64), else 1 (a work-group of 16 × 16 items covers `16·R` × `16·R` outputs).
///
/// `STOWAGE_OPENCL_GEMM_BLOCK` (1, 2 or 4) forces one size, for measuring.
pub fn gemm_block(g: &Gemm) -> usize {
    if let Some(r) = std::env::var("STOWAGE_OPENCL_GEMM_BLOCK").ok().and_then(|v| v.parse::<usize>().ok()) {
        if matches!(r, 1 | 2 | 4) {
            return r;
        }
    }
    let batch: usize = g.batch.iter().product();
    let groups = |r: usize| g.m.div_ceil(TILE * r) * g.n.div_ceil(TILE * r) * batch.max(1);
    [4, 2].into_iter().find(|&r| g.k >= TILE && groups(r) >= g.min_groups.max(1)).unwrap_or(1)
}

/// Kernel `name(A, B, C[, bias])` for `g`: work-groups of 16 × 16 items, each item computing `R` × `R` outputs
/// ([`gemm_block`]) from tiles of A and B staged in local memory 16 columns of K at a time; global size
/// `[ceil(n / 16R) · 16, ceil(m / 16R) · 16, Π batch]`, local `[16, 16, 1]`.
pub fn gemm(name: &str, g: &Gemm) -> String {
    let r = gemm_block(g);
    let (bm, bn) = (TILE * r, TILE * r);
    let mut s = String::new();
    let bias = if g.bias.is_some() { ", __global const float* restrict D" } else { "" };
    let b_name = if g.im2col.is_some() { "X" } else { "B" };
    let _ = writeln!(
        s,
        "__kernel void {name}(__global const float* restrict A, __global const float* restrict {b_name}, __global float* restrict C{bias}) {{"
    );
    let _ = writeln!(s, "  const int lc = get_local_id(0), lr = get_local_id(1), tid = lr * {TILE} + lc;");
    let _ = writeln!(
        s,
        "  const int row0 = get_group_id(1) * {bm}, col0 = get_group_id(0) * {bn}; const size_t bi = get_global_id(2);"
    );
    let _ = writeln!(s, "  __local float As[{bm}][{}]; __local float Bs[{TILE}][{}];", TILE + 1, bn + 1);
    batch_offset(&mut s, "ao", &g.batch, &g.a.0);
    batch_offset(&mut s, "bo", &g.batch, &g.b.0);
    batch_offset(&mut s, "co", &g.batch, &g.c.0);
    let _ = writeln!(s, "  float acc[{r}][{r}];");
    let _ = writeln!(s, "  for (int i = 0; i < {r}; ++i) for (int j = 0; j < {r}; ++j) acc[i][j] = 0.0f;");
    let _ = writeln!(s, "  for (int t = 0; t < {}; t += {TILE}) {{", g.k);
    let _ = writeln!(s, "    for (int e = tid; e < {}; e += {}) {{", bm * TILE, TILE * TILE);
    let _ = writeln!(
        s,
        "      const int rr = e / {TILE}, kk = e % {TILE}, gr = row0 + rr, gk = t + kk;\n      As[rr][kk] = (gr < {m} && gk < {k}) ? A[ao + (size_t)gr * {ars} + (size_t)gk * {acs}] : 0.0f;\n    }}",
        m = g.m,
        k = g.k,
        ars = g.a.1,
        acs = g.a.2
    );
    let _ = writeln!(s, "    for (int e = tid; e < {}; e += {}) {{", bn * TILE, TILE * TILE);
    match &g.im2col {
        None => {
            let _ = writeln!(
                s,
                "      const int kk = e / {bn}, cc = e % {bn}, gk = t + kk, gc = col0 + cc;\n      Bs[kk][cc] = (gk < {k} && gc < {n}) ? B[bo + (size_t)gk * {brs} + (size_t)gc * {bcs}] : 0.0f;\n    }}",
                k = g.k,
                n = g.n,
                brs = g.b.1,
                bcs = g.b.2
            );
        }
        Some((w, channels, groups)) => {
            let _ = writeln!(s, "      const int kk = e / {bn}, cc = e % {bn}, gk = t + kk, gc = col0 + cc;");
            let _ = writeln!(s, "      float v = 0.0f;");
            let _ = writeln!(s, "      if (gk < {} && gc < {}) {{", g.k, g.n);
            s.push_str(&super::window::im2col_value(w, *channels, *groups, "gk", "gc", "bi", "v"));
            let _ = writeln!(s, "      }}\n      Bs[kk][cc] = v;\n    }}");
        }
    }
    let _ = writeln!(s, "    barrier(CLK_LOCAL_MEM_FENCE);");
    let _ = writeln!(s, "    for (int j = 0; j < {TILE}; ++j) {{");
    let _ = writeln!(s, "      float a[{r}], b[{r}];");
    let _ = writeln!(
        s,
        "      for (int i = 0; i < {r}; ++i) {{ a[i] = As[lr + i * {TILE}][j]; b[i] = Bs[j][lc + i * {TILE}]; }}"
    );
    let _ = writeln!(s, "      for (int i = 0; i < {r}; ++i) for (int q = 0; q < {r}; ++q) acc[i][q] += a[i] * b[q];");
    let _ = writeln!(s, "    }}");
    let _ = writeln!(s, "    barrier(CLK_LOCAL_MEM_FENCE);");
    let _ = writeln!(s, "  }}");
    let _ = writeln!(s, "  for (int i = 0; i < {r}; ++i) for (int q = 0; q < {r}; ++q) {{");
    let _ = writeln!(s, "    const int row = row0 + lr + i * {TILE}, col = col0 + lc + q * {TILE};");
    let _ = writeln!(s, "    if (row >= {} || col >= {}) continue;", g.m, g.n);
    let _ = writeln!(s, "    float v = {} * acc[i][q];", lit(g.alpha));
    if let Some(((bs, brs, bcs), beta)) = &g.bias {
        batch_offset(&mut s, "dof", &g.batch, bs);
        let _ = writeln!(s, "    v += {} * D[dof + (size_t)row * {brs} + (size_t)col * {bcs}];", lit(*beta));
    }
    if g.relu {
        let _ = writeln!(s, "    v = v < 0.0f ? 0.0f : v;");
    }
    let _ = writeln!(s, "    C[co + (size_t)row * {} + (size_t)col * {}] = v;", g.c.1, g.c.2);
    let _ = writeln!(s, "  }}");
    s.push_str("}\n");
    s
}
