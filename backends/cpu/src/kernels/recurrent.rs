//! ONNX `LSTM` as one kernel: the whole layer in one step, where its unrolled form is some 25 steps per time step
//! (a recurrent product, a split, the gates' chains, the state update), each paying the executor's per-step cost.
//!
//! Per direction, the kernel keeps the pre-activations of every time step in one buffer `g`, a row of
//! `4·hidden` per column of `X` (row `t·batch + b`):
//! 1. `g` starts as the bias `Wb + Rb` of each gate, then takes the input product `X · Wᵀ` for the whole
//!    sequence at once (one product, [`gemm_strided`]) when `X` has [`PRODUCT_COLUMNS`] columns or more, or two
//!    or more and `W` is larger than [`STREAMED_BYTES`] (each step reading it again costs more than the product
//!    saves: ddddocr's 4 MB per direction, 20 steps); with fewer, each step adds its own column's product in
//!    step 2 instead, and `g` is one row.
//! 2. Each time step adds `h · Rᵀ` to its row ([`add_blocked`]): `Rᵀ` (`hidden × 4·hidden`, transposed and laid
//!    out in column blocks at preparation, [`blocked`]) streamed once, in order, the row's sums in registers, in the
//!    widest vectors the CPU has.
//! 3. The row is activated a gate at a time and updates `c` and `h` in the ONNX equations (gate order
//!    `i, o, f, c`; peepholes `i, o, f`; `clip` on every pre-activation; `input_forget`).
//! 4. With `sequence_lens`, a batch element past its length keeps its state and writes zeros to `Y`; a reverse
//!    direction runs each element's sequence backwards from its own last step.
//! 5. Each direction runs into its own `Y`, `h` and `c`, copied into the outputs' layout at the end; a
//!    bidirectional layer on two threads or more runs its directions side by side, each streaming its own
//!    weights (ddddocr's LSTM 9.3 ms on one thread, 4.3 ms on two).
//!
//! Steps 2 and 3 are one function compiled three times: for AVX-512F, for AVX2 with FMA, and portable; the
//! widest the CPU runs is picked at each step ([`step`], a cached test). Everything is f32 (the import keeps the
//! layer whole for f32 only).

use super::weights::Floats;
use stowage_kir::recurrent::Activation;

use super::gemm::gemm_strided;

/// Sums held in registers per pass of [`add_product`]: eight AVX2 registers, four AVX-512 ones (enough
/// independent sums to hide the adds' latency).
const BLOCK: usize = 64;

/// From this many columns of `X` (steps × batch) on, the input product is one product over the sequence (the
/// blocked kernels); below, each step adds its column's product with the recurrent one. At 64, openWakeWord's
/// hey_mycroft (two bidirectional layers of 16 steps, `W` of 96 and 48 KiB a direction) read its `W` from L2 at
/// every step: `perf` put 87 % of the model in the steps' products; at 4 the model takes 0.08 ms instead of 0.12
/// (`stowage run … --threads 1 --repeat 400`, old and new binaries in turn; onnxruntime 0.10), silero and
/// ppocr_rec unchanged.
const PRODUCT_COLUMNS: usize = 4;

/// Bytes of `Wᵀ` past which it would stream from beyond the core's L2 at every step: then any sequence of two
/// columns or more takes the one product.
const STREAMED_BYTES: usize = 1 << 20;

/// One direction of a layer, prepared from its slices of `W`, `R`, `B` and `P`.
pub struct Direction {
    /// `Wᵀ`: `input × 4·hidden`.
    wt: Vec<f32>,
    /// `Rᵀ` (`hidden × 4·hidden`) in column blocks ([`blocked`]): each step streams it once, in order.
    rt: Vec<f32>,
    /// `Wb + Rb`, one per gate row.
    bias: Vec<f32>,
    /// Peepholes `i, o, f`, `hidden` each.
    peep: Option<Vec<f32>>,
    /// From the end of each sequence.
    reverse: bool,
    /// The gates' (`f`), the candidate's (`g`) and the output's (`h`) activations.
    acts: [Activation; 3],
}

impl Direction {
    /// Direction `d` of the layer's weights: `w` is `W` (`[dirs, 4h, input]`), `r` is `R`, `b` is `B`
    /// (`[dirs, 8h]`), `p` is `P` (`[dirs, 3h]`).
    ///
    /// # Panics
    /// If a slice is shorter than direction `d`'s part of it.
    #[allow(clippy::too_many_arguments)]
    pub fn new<W: Floats>(
        d: usize,
        hidden: usize,
        input: usize,
        w: W,
        r: W,
        b: Option<&[f32]>,
        p: Option<&[f32]>,
        reverse: bool,
        acts: [Activation; 3],
    ) -> Direction {
        let g = 4 * hidden;
        let bias = match b {
            Some(b) => {
                let b = &b[d * 2 * g..(d + 1) * 2 * g];
                (0..g).map(|i| b[i] + b[g + i]).collect()
            }
            None => vec![0.0; g],
        };
        let (w, r) = (w.part(d * g * input, g * input), r.part(d * g * hidden, g * hidden));
        Direction {
            wt: blocked(w, g, input, g),
            rt: blocked(r, g, hidden, BLOCK),
            bias,
            peep: p.map(|p| p[d * 3 * hidden..(d + 1) * 3 * hidden].to_vec()),
            reverse,
            acts,
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        4 * (self.wt.len() + self.rt.len() + self.bias.len() + self.peep.as_ref().map_or(0, Vec::len))
    }
}

/// The layer's shape and attributes.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Time steps.
    pub steps: usize,
    /// Batch elements.
    pub batch: usize,
    /// Input features.
    pub input: usize,
    /// Hidden units.
    pub hidden: usize,
    /// Batch-major `X`, `Y` and states (ONNX `layout=1`).
    pub batch_major: bool,
    /// Pre-activations clipped to `±clip`.
    pub clip: Option<f32>,
    /// `f = 1 − i`.
    pub input_forget: bool,
}

/// What one run writes: `Y`, `Y_h`, `Y_c`, packed in the layer's layout.
pub struct Outputs<'o> {
    /// `[steps, dirs, batch, hidden]` (`[batch, steps, dirs, hidden]` batch-major), zeroed.
    pub y: &'o mut [f32],
    /// `[dirs, batch, hidden]` (`[batch, dirs, hidden]` batch-major).
    pub h: &'o mut [f32],
    /// As `h`.
    pub c: &'o mut [f32],
}

/// Runs the layer over `x` with `dirs` (each direction's weights), the sequence lengths `lens` (each at most
/// `steps`), the initial states `h0` and `c0` (in the states' layout), into `out`.
///
/// # Panics
/// If a slice does not have the length `shape` gives it, or a length exceeds `steps` (the lowering checks both).
#[allow(clippy::too_many_arguments)]
pub fn lstm(
    shape: Shape,
    dirs: &[Direction],
    x: &[f32],
    lens: Option<&[usize]>,
    h0: Option<&[f32]>,
    c0: Option<&[f32]>,
    out: Outputs<'_>,
    threads: usize,
) {
    let Shape { steps, batch, input, hidden, batch_major, .. } = shape;
    let (cols, nd, g) = (steps * batch, dirs.len(), 4 * hidden);
    assert_eq!(x.len(), cols * input, "LSTM: X");
    assert_eq!(out.y.len(), cols * nd * hidden, "LSTM: Y");
    assert!(lens.is_none_or(|l| l.len() == batch && l.iter().all(|&n| n <= steps)), "LSTM: sequence_lens");
    if hidden == 0 {
        // Every output is empty.
        return;
    }
    // Time-major X: row t·batch + b.
    let time_major: Vec<f32>;
    let xs = if batch_major && batch > 1 {
        time_major = (0..cols)
            .map(|j| (j % batch) * steps + j / batch)
            .flat_map(|r| x[r * input..(r + 1) * input].iter().copied())
            .collect();
        &time_major[..]
    } else {
        x
    };
    let state_at = |d: usize, b: usize| if batch_major { (b * nd + d) * hidden } else { (d * batch + b) * hidden };
    let y_at = |t: usize, d: usize, b: usize| {
        if batch_major {
            ((b * steps + t) * nd + d) * hidden
        } else {
            ((t * nd + d) * batch + b) * hidden
        }
    };
    let len = |b: usize| lens.map_or(steps, |l| l[b]);
    // One direction into its own `Y` (`[steps, batch, hidden]`), `h` and `c` (`[batch, hidden]`).
    let run = |d: usize, dir: &Direction, threads: usize| {
        // Many columns (or a large W): the input product as one product for the sequence; few: column by column
        // inside each step.
        let whole_product = cols >= PRODUCT_COLUMNS || (cols >= 2 && 4 * dir.wt.len() > STREAMED_BYTES);
        let mut gates = vec![0f32; if whole_product { cols * g } else { g }];
        let (mut h, mut c) = (vec![0f32; batch * hidden], vec![0f32; batch * hidden]);
        let mut y = vec![0f32; cols * hidden];
        if whole_product {
            for row in gates.chunks_mut(g) {
                row.copy_from_slice(&dir.bias);
            }
            gemm_strided(cols, g, input, &mut gates, g, true, 1.0, xs, input, 1, &dir.wt, g, 1, 1.0, threads);
        }
        for b in 0..batch {
            let at = state_at(d, b);
            let (hb, cb) = (&mut h[b * hidden..][..hidden], &mut c[b * hidden..][..hidden]);
            match h0 {
                Some(s) => hb.copy_from_slice(&s[at..at + hidden]),
                None => hb.fill(0.0),
            }
            match c0 {
                Some(s) => cb.copy_from_slice(&s[at..at + hidden]),
                None => cb.fill(0.0),
            }
        }
        for s in 0..steps {
            for b in 0..batch {
                if s >= len(b) {
                    continue;
                }
                let t = if dir.reverse { len(b) - 1 - s } else { s };
                let j = t * batch + b;
                let (row, x_t) = if whole_product {
                    (&mut gates[j * g..][..g], None)
                } else {
                    gates.copy_from_slice(&dir.bias);
                    (&mut gates[..], Some(&xs[j * input..][..input]))
                };
                let (hb, cb) = (&mut h[b * hidden..][..hidden], &mut c[b * hidden..][..hidden]);
                step(&shape, dir, row, x_t, hb, cb);
                y[j * hidden..][..hidden].copy_from_slice(hb);
            }
        }
        (y, h, c)
    };
    // Two directions on two threads or more: each streams its own weights on its own core.
    let done: Vec<(Vec<f32>, Vec<f32>, Vec<f32>)> = match dirs {
        [fwd, bwd] if threads > 1 => {
            let (a, b) = rayon::join(|| run(0, fwd, threads / 2), || run(1, bwd, threads - threads / 2));
            vec![a, b]
        }
        _ => dirs.iter().enumerate().map(|(d, dir)| run(d, dir, threads)).collect(),
    };
    for (d, (y, h, c)) in done.iter().enumerate() {
        for t in 0..steps {
            for b in 0..batch {
                let j = t * batch + b;
                out.y[y_at(t, d, b)..][..hidden].copy_from_slice(&y[j * hidden..][..hidden]);
            }
        }
        for b in 0..batch {
            let at = state_at(d, b);
            out.h[at..at + hidden].copy_from_slice(&h[b * hidden..][..hidden]);
            out.c[at..at + hidden].copy_from_slice(&c[b * hidden..][..hidden]);
        }
    }
}

/// One time step of one batch element: `row` holds its input pre-activations `i, o, f, c` (`hidden` each), `h`
/// and `c` its state, updated in place.
fn step(shape: &Shape, dir: &Direction, row: &mut [f32], x: Option<&[f32]>, h: &mut [f32], c: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: AVX-512F is available (just checked); the body is safe code over slices.
            return unsafe { step_avx512(shape, dir, row, x, h, c) };
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            // SAFETY: AVX2 and FMA are available (just checked); the body is safe code over slices.
            return unsafe { step_avx2(shape, dir, row, x, h, c) };
        }
    }
    step_body::<false>(shape, dir, row, x, h, c)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn step_avx512(shape: &Shape, dir: &Direction, row: &mut [f32], x: Option<&[f32]>, h: &mut [f32], c: &mut [f32]) {
    step_body::<true>(shape, dir, row, x, h, c)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn step_avx2(shape: &Shape, dir: &Direction, row: &mut [f32], x: Option<&[f32]>, h: &mut [f32], c: &mut [f32]) {
    step_body::<true>(shape, dir, row, x, h, c)
}

/// [`step`]'s arithmetic, inlined into each of its compilations so that the loops vectorise for each; `FMA`:
/// the products' sums in fused multiply-adds (compiled only where the CPU has them).
#[inline(always)]
fn step_body<const FMA: bool>(
    shape: &Shape,
    dir: &Direction,
    row: &mut [f32],
    x: Option<&[f32]>,
    h: &mut [f32],
    c: &mut [f32],
) {
    let n = shape.hidden;
    if let Some(x) = x {
        add_product::<FMA>(row, x, &dir.wt);
    }
    // All of h is read before it changes.
    add_blocked::<FMA>(row, h, &dir.rt);
    let [f, gc, hc] = dir.acts;
    let (i_pre, rest) = row.split_at_mut(n);
    let (o_pre, rest) = rest.split_at_mut(n);
    let (f_pre, c_pre) = rest.split_at_mut(n);
    if let Some(p) = &dir.peep {
        for u in 0..n {
            i_pre[u] += p[u] * c[u];
            f_pre[u] += p[2 * n + u] * c[u];
        }
    }
    let clip = |xs: &mut [f32]| {
        if let Some(k) = shape.clip {
            for v in xs.iter_mut() {
                *v = v.max(-k).min(k);
            }
        }
    };
    clip(i_pre);
    activate(f, i_pre);
    if shape.input_forget {
        for (fv, &iv) in f_pre.iter_mut().zip(i_pre.iter()) {
            *fv = 1.0 - iv;
        }
    } else {
        clip(f_pre);
        activate(f, f_pre);
    }
    clip(c_pre);
    activate(gc, c_pre);
    for u in 0..n {
        c[u] = f_pre[u] * c[u] + i_pre[u] * c_pre[u];
    }
    if let Some(p) = &dir.peep {
        for u in 0..n {
            o_pre[u] += p[n + u] * c[u];
        }
    }
    clip(o_pre);
    activate(f, o_pre);
    // The candidate's slice is free now: it takes h(c).
    c_pre.copy_from_slice(c);
    activate(hc, c_pre);
    for u in 0..n {
        h[u] = o_pre[u] * c_pre[u];
    }
}

/// `row[k] += Σₗ v[l] · m[l·row.len() + k]`: a block of [`BLOCK`] sums in registers over all of `v`, stored once,
/// so that `m` is the only stream (row by row, contiguous).
#[inline(always)]
fn add_product<const FMA: bool>(row: &mut [f32], v: &[f32], m: &[f32]) {
    let g = row.len();
    assert_eq!(m.len(), v.len() * g, "recurrent product: operand");
    let whole = g - g % BLOCK;
    for at in (0..whole).step_by(BLOCK) {
        let mut acc = [0f32; BLOCK];
        acc.copy_from_slice(&row[at..at + BLOCK]);
        for (l, &vl) in v.iter().enumerate() {
            let m = &m[l * g + at..][..BLOCK];
            for k in 0..BLOCK {
                acc[k] = if FMA { vl.mul_add(m[k], acc[k]) } else { acc[k] + vl * m[k] };
            }
        }
        row[at..at + BLOCK].copy_from_slice(&acc);
    }
    for (l, &vl) in v.iter().enumerate() {
        for k in whole..g {
            row[k] += vl * m[l * g + k];
        }
    }
}

/// `m` (`g` rows of `k`, row-major) transposed in column blocks of `width` (the last narrower): block `at` holds,
/// for each step `l`, its `width` rows' elements `l`, so `out[at·k + l·w + j] = m[(at + j)·k + l]`. A width of `g`
/// is the plain transpose (`Wᵀ`); [`BLOCK`] is the layout [`add_blocked`] reads as one contiguous stream per block,
/// where `Rᵀ`'s rows jump `4·g` bytes each (a page per row for a hidden size of 256 or more, which the prefetcher
/// does not follow: ddddocr's LSTM ran at half onnxruntime's speed). Written in tiles of 64 × 64, each row's run
/// of a tile read in order (ddddocr's 2 × 2 × 4 MB of weights, read along their columns one element at a time into
/// a growing vector, took a sixth of its compile).
fn blocked<W: Floats>(m: W, g: usize, k: usize, width: usize) -> Vec<f32> {
    const TILE: usize = 64;
    assert_eq!(m.len(), g * k, "recurrent weights: {} for {g} × {k}", m.len());
    let mut out = vec![0f32; g * k];
    for at in (0..g).step_by(width.max(1)) {
        let w = width.min(g - at);
        let block = &mut out[at * k..][..w * k];
        for j0 in (0..w).step_by(TILE) {
            for l0 in (0..k).step_by(TILE) {
                for j in j0..(j0 + TILE).min(w) {
                    let row = m.part((at + j) * k, k);
                    for l in l0..(l0 + TILE).min(k) {
                        block[l * w + j] = row.at(l);
                    }
                }
            }
        }
    }
    out
}

/// [`add_product`] for `m` laid out by [`blocked`].
#[inline(always)]
fn add_blocked<const FMA: bool>(row: &mut [f32], v: &[f32], m: &[f32]) {
    let (g, k) = (row.len(), v.len());
    assert_eq!(m.len(), k * g, "recurrent product: operand");
    if g == 0 || k == 0 {
        return;
    }
    let whole = g - g % BLOCK;
    for (at, block) in (0..whole).step_by(BLOCK).zip(m.chunks_exact(k * BLOCK)) {
        let mut acc = [0f32; BLOCK];
        acc.copy_from_slice(&row[at..at + BLOCK]);
        for (&vl, m) in v.iter().zip(block.chunks_exact(BLOCK)) {
            for u in 0..BLOCK {
                acc[u] = if FMA { vl.mul_add(m[u], acc[u]) } else { acc[u] + vl * m[u] };
            }
        }
        row[at..at + BLOCK].copy_from_slice(&acc);
    }
    let tail = g - whole;
    if tail > 0 {
        for (&vl, m) in v.iter().zip(m[whole * k..].chunks_exact(tail)) {
            for (r, &mv) in row[whole..].iter_mut().zip(m) {
                *r += vl * mv;
            }
        }
    }
}

/// `act` on every element of `xs`, the match taken once per gate.
#[inline(always)]
fn activate(act: Activation, xs: &mut [f32]) {
    match act {
        Activation::Sigmoid => xs.iter_mut().for_each(|v| *v = stowage_kir::func::sigmoid_f32(*v)),
        Activation::Tanh => xs.iter_mut().for_each(|v| *v = stowage_kir::func::tanh_f32(*v)),
        other => xs.iter_mut().for_each(|v| *v = other.apply(*v)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULT: [Activation; 3] = [Activation::Sigmoid, Activation::Tanh, Activation::Tanh];

    /// Each element where the layout says, for widths that divide the rows, that do not, and the whole transpose.
    #[test]
    fn blocks_hold_each_element_at_its_place() {
        for (g, k) in [(0, 5), (3, 0), (1, 1), (70, 3), (130, 67), (200, 129)] {
            let m: Vec<f32> = (0..g * k).map(|i| i as f32).collect();
            for width in [1, 64, g.max(1)] {
                let out = blocked(&m[..], g, k, width);
                assert_eq!(out.len(), g * k);
                for at in (0..g).step_by(width) {
                    let w = width.min(g - at);
                    for l in 0..k {
                        for j in 0..w {
                            assert_eq!(out[at * k + l * w + j], m[(at + j) * k + l], "{g} × {k} width {width}");
                        }
                    }
                }
            }
        }
    }

    /// The ONNX equations, one scalar at a time, time-major, for one direction.
    fn reference(
        shape: Shape,
        w: &[f32],
        r: &[f32],
        bias: &[f32],
        x: &[f32],
        reverse: bool,
        lens: &[usize],
    ) -> (Vec<f32>, Vec<f32>) {
        let Shape { steps, batch, input, hidden, .. } = shape;
        let sig = |v: f32| 1.0 / (1.0 + (-v).exp());
        let mut y = vec![0f32; steps * batch * hidden];
        let mut hs = vec![0f32; batch * hidden];
        for b in 0..batch {
            let (mut h, mut c) = (vec![0f32; hidden], vec![0f32; hidden]);
            for s in 0..lens[b] {
                let t = if reverse { lens[b] - 1 - s } else { s };
                let pre: Vec<f32> = (0..4 * hidden)
                    .map(|row| {
                        let xw: f32 = (0..input).map(|l| w[row * input + l] * x[(t * batch + b) * input + l]).sum();
                        let hr: f32 = (0..hidden).map(|l| r[row * hidden + l] * h[l]).sum();
                        xw + hr + bias[row]
                    })
                    .collect();
                for u in 0..hidden {
                    let (i, o, f, g) =
                        (sig(pre[u]), sig(pre[hidden + u]), sig(pre[2 * hidden + u]), pre[3 * hidden + u].tanh());
                    c[u] = f * c[u] + i * g;
                    h[u] = o * c[u].tanh();
                }
                y[(t * batch + b) * hidden..][..hidden].copy_from_slice(&h);
            }
            hs[b * hidden..][..hidden].copy_from_slice(&h);
        }
        (y, hs)
    }

    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| (((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8) % 1000) as f32 / 1000.0 - 0.5)
            .collect()
    }

    fn check(batch: usize, hidden: usize, reverse: bool, lens: Option<Vec<usize>>) {
        check_input(batch, hidden, 7, reverse, lens);
    }

    fn check_input(batch: usize, hidden: usize, input: usize, reverse: bool, lens: Option<Vec<usize>>) {
        check_steps(5, batch, hidden, input, reverse, lens);
    }

    fn check_steps(steps: usize, batch: usize, hidden: usize, input: usize, reverse: bool, lens: Option<Vec<usize>>) {
        let shape = Shape { steps, batch, input, hidden, batch_major: false, clip: None, input_forget: false };
        let (w, r, b) = (values(4 * hidden * input, 1), values(4 * hidden * hidden, 2), values(8 * hidden, 3));
        let x = values(steps * batch * input, 4);
        let dir = Direction::new(0, hidden, input, &w[..], &r[..], Some(&b), None, reverse, DEFAULT);
        let (mut y, mut h, mut c) =
            (vec![0f32; steps * batch * hidden], vec![0f32; batch * hidden], vec![0f32; batch * hidden]);
        let lens_given = lens.clone();
        // Sums of `input` products, in another order than the reference's.
        let tol = 1e-5 * (input as f32 / 7.0).sqrt().max(1.0);
        lstm(shape, &[dir], &x, lens_given.as_deref(), None, None, Outputs { y: &mut y, h: &mut h, c: &mut c }, 1);
        let bias: Vec<f32> = (0..4 * hidden).map(|i| b[i] + b[4 * hidden + i]).collect();
        let lens = lens.unwrap_or(vec![steps; batch]);
        let (want_y, want_h) = reference(shape, &w, &r, &bias, &x, reverse, &lens);
        for (k, (a, e)) in y.iter().zip(&want_y).enumerate() {
            assert!((a - e).abs() < tol, "Y[{k}]: {a} against {e}");
        }
        for (k, (a, e)) in h.iter().zip(&want_h).enumerate() {
            assert!((a - e).abs() < tol, "Y_h[{k}]: {a} against {e}");
        }
    }

    #[test]
    fn one_sequence_matches_the_equations() {
        // 4·16 = 64 gate rows: packed where AVX-512F runs.
        check(1, 16, false, None);
        check(1, 3, true, None);
    }

    #[test]
    fn batches_with_their_own_lengths_each_way() {
        check(3, 16, false, None);
        check(3, 16, false, Some(vec![5, 2, 0]));
        check(3, 4, true, Some(vec![1, 5, 3]));
    }

    /// Both directions of a layer, one after the other on one thread and side by side on two: each direction's
    /// `Y` and `Y_h` as the equations give them, in `[steps, dirs, batch, hidden]` and `[dirs, batch, hidden]`.
    #[test]
    fn two_directions_on_one_thread_and_on_two() {
        let (steps, batch, input, hidden) = (5, 2, 7, 20);
        let shape = Shape { steps, batch, input, hidden, batch_major: false, clip: None, input_forget: false };
        let g = 4 * hidden;
        let (w, r, b) = (values(2 * g * input, 1), values(2 * g * hidden, 2), values(2 * 2 * g, 3));
        let x = values(steps * batch * input, 4);
        let lens = vec![5, 3];
        let dirs: Vec<Direction> =
            (0..2).map(|d| Direction::new(d, hidden, input, &w[..], &r[..], Some(&b), None, d == 1, DEFAULT)).collect();
        let mut got = Vec::new();
        for threads in [1, 2] {
            let (mut y, mut h, mut c) = (
                vec![0f32; steps * 2 * batch * hidden],
                vec![0f32; 2 * batch * hidden],
                vec![0f32; 2 * batch * hidden],
            );
            lstm(shape, &dirs, &x, Some(&lens), None, None, Outputs { y: &mut y, h: &mut h, c: &mut c }, threads);
            got.push((y, h));
        }
        assert_eq!(got[0], got[1], "one thread against two");
        let (y, h) = &got[0];
        for d in 0..2 {
            let bd = &b[d * 2 * g..(d + 1) * 2 * g];
            let bias: Vec<f32> = (0..g).map(|i| bd[i] + bd[g + i]).collect();
            let (wd, rd) = (&w[d * g * input..(d + 1) * g * input], &r[d * g * hidden..(d + 1) * g * hidden]);
            let (want_y, want_h) = reference(shape, wd, rd, &bias, &x, d == 1, &lens);
            for t in 0..steps {
                for bi in 0..batch {
                    let (at, want) = (((t * 2 + d) * batch + bi) * hidden, (t * batch + bi) * hidden);
                    for u in 0..hidden {
                        let (a, e) = (y[at + u], want_y[want + u]);
                        assert!((a - e).abs() < 1e-5, "direction {d}, Y[{t}, {bi}, {u}]: {a} against {e}");
                    }
                }
            }
            for (u, (a, e)) in h[d * batch * hidden..(d + 1) * batch * hidden].iter().zip(&want_h).enumerate() {
                assert!((a - e).abs() < 1e-5, "direction {d}, Y_h[{u}]: {a} against {e}");
            }
        }
    }

    /// Fewer than `PRODUCT_COLUMNS` columns (steps × batch): each step adds its own column's input product.
    #[test]
    fn few_columns_add_their_input_product_in_each_step() {
        const { assert!(PRODUCT_COLUMNS > 3) };
        check_steps(1, 1, 20, 7, false, None);
        check_steps(3, 1, 36, 9, true, None);
        check_steps(1, 3, 16, 5, false, Some(vec![1, 0, 1]));
    }

    /// `Rᵀ` of 80 gate rows: one block of 64 and a tail of 16 (of 144: two and a tail). An input of 1100 makes `Wᵀ` larger than
    /// `STREAMED_BYTES`: its product is one product over the sequence's 5 columns.
    #[test]
    fn blocks_with_a_tail_and_large_inputs_in_one_product() {
        check(2, 20, false, Some(vec![5, 3]));
        check(1, 20, true, None);
        // 144 gate rows: two blocks and a tail of 16.
        check(2, 36, true, Some(vec![2, 5]));
        // No hidden units: empty outputs, no panic.
        check(1, 0, false, None);
        const { assert!(4 * 4 * 64 * 1100 > STREAMED_BYTES) };
        check_input(1, 64, 1100, false, None);
        check_input(2, 64, 1100, true, Some(vec![4, 5]));
    }
}
