//! `LSTM`, `GRU` and `RNN` unrolled over their static sequence ([`super::expand`]): per direction, one product of
//! the whole sequence with the input weights (bias added once), then per step the recurrent product (`MatMul`), the
//! gates (`Split`), their activations and the state update, in the equations of the ONNX operators (gate orders
//! i, o, f, c for LSTM and z, r, h for GRU; peepholes, `clip`, `input_forget`, `linear_before_reset`, `layout`).
//! The outputs are the steps' hidden states in time order (`Y`) and the last state of each direction (`Y_h`,
//! `Y_c`). An f32 `LSTM` for targets that run it whole is one node instead ([`crate::ir::Lstm`]), after the same
//! checks.

use stowage_kir::recurrent::Activation as Act;
use stowage_runtime::DatumType;

use super::expand::{float, int, ints, Ex, MAX_STEPS};
use crate::error::ImportErrorKind as E;
use crate::ir::{Lstm, Op};

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Lstm,
    Gru,
    Rnn,
}

impl Kind {
    /// Gates per step.
    fn gates(self) -> usize {
        match self {
            Kind::Lstm => 4,
            Kind::Gru => 3,
            Kind::Rnn => 1,
        }
    }

    /// Activations per direction, and their defaults.
    fn activations(self) -> &'static [&'static str] {
        match self {
            Kind::Lstm => &["Sigmoid", "Tanh", "Tanh"],
            Kind::Gru => &["Sigmoid", "Tanh"],
            Kind::Rnn => &["Tanh"],
        }
    }
}

/// The activations named by the `activations` attribute (or the defaults), `per_dir` for each of `dirs`, with
/// `activation_alpha` and `activation_beta` taken in order by those that have parameters.
fn activations(ex: &Ex<'_, '_>, kind: Kind, dirs: usize) -> Result<Vec<Act>, E> {
    let a = ex.attrs();
    let listed = match a.0.attribute.iter().find(|x| x.name() == "activations") {
        None => None,
        Some(x) => Some(
            x.strings
                .iter()
                .map(|s| String::from_utf8(s.clone()).map_err(|_| ex.attr_fail("activations", "is not UTF-8")))
                .collect::<Result<Vec<_>, _>>()?,
        ),
    };
    let defaults = kind.activations();
    let want = defaults.len() * dirs;
    let names: Vec<String> = match listed {
        None => (0..dirs).flat_map(|_| defaults.iter().map(|s| s.to_string())).collect(),
        Some(l) if l.len() == want => l,
        // One direction's list for a bidirectional layer is read as both directions' (as onnxruntime does).
        Some(l) if l.len() == defaults.len() => (0..dirs).flat_map(|_| l.clone()).collect(),
        Some(l) => {
            return Err(ex.attr_fail(
                "activations",
                format!("has {} names, the op takes {} per direction ({want} in all)", l.len(), defaults.len()),
            ))
        }
    };
    let alphas = a.floats("activation_alpha").map_err(|e| ex.attr_err(e))?.unwrap_or_default();
    let betas = a.floats("activation_beta").map_err(|e| ex.attr_err(e))?.unwrap_or_default();
    let (mut ai, mut bi) = (0, 0);
    let mut alpha = |d: f32| {
        ai += 1;
        alphas.get(ai - 1).copied().unwrap_or(d)
    };
    let mut beta = |d: f32| {
        bi += 1;
        betas.get(bi - 1).copied().unwrap_or(d)
    };
    names
        .iter()
        .map(|n| {
            Ok(match n.to_ascii_lowercase().as_str() {
                "sigmoid" => Act::Sigmoid,
                "tanh" => Act::Tanh,
                "relu" => Act::Relu,
                "softsign" => Act::Softsign,
                "softplus" => Act::Softplus,
                "hardsigmoid" => Act::HardSigmoid(alpha(0.2), beta(0.5)),
                "leakyrelu" => Act::LeakyRelu(alpha(0.01)),
                "affine" => Act::Affine(alpha(1.0), beta(0.0)),
                "scaledtanh" => Act::ScaledTanh(alpha(1.0), beta(1.0)),
                "elu" => Act::Elu(alpha(1.0)),
                "thresholdedrelu" => Act::ThresholdedRelu(alpha(1.0)),
                other => return Err(ex.attr_fail("activations", format!("'{other}' is not supported"))),
            })
        })
        .collect()
}

fn apply(ex: &mut Ex<'_, '_>, act: Act, x: &str, dt: DatumType) -> Result<String, E> {
    match act {
        Act::Sigmoid => ex.op("Sigmoid", &[x], vec![]),
        Act::Tanh => ex.op("Tanh", &[x], vec![]),
        Act::Relu => ex.op("Relu", &[x], vec![]),
        Act::Softplus => ex.op("Softplus", &[x], vec![]),
        Act::Softsign => {
            let abs = ex.op("Abs", &[x], vec![])?;
            let one = ex.scalar(dt, 1.0)?;
            let den = ex.op("Add", &[&abs, &one], vec![])?;
            ex.op("Div", &[x, &den], vec![])
        }
        Act::HardSigmoid(a, b) => ex.op("HardSigmoid", &[x], vec![float("alpha", a), float("beta", b)]),
        Act::LeakyRelu(a) => ex.op("LeakyRelu", &[x], vec![float("alpha", a)]),
        Act::Affine(a, b) => {
            let (sa, sb) = (ex.scalar(dt, f64::from(a))?, ex.scalar(dt, f64::from(b))?);
            let m = ex.op("Mul", &[x, &sa], vec![])?;
            ex.op("Add", &[&m, &sb], vec![])
        }
        Act::Elu(a) => super::functions::elu(ex, x, dt, a, false),
        Act::ThresholdedRelu(a) => {
            let (sa, zero) = (ex.scalar(dt, f64::from(a))?, ex.scalar(dt, 0.0)?);
            let above = ex.op("Greater", &[x, &sa], vec![])?;
            ex.op("Where", &[&above, x, &zero], vec![])
        }
        Act::ScaledTanh(a, b) => {
            let (sa, sb) = (ex.scalar(dt, f64::from(a))?, ex.scalar(dt, f64::from(b))?);
            let m = ex.op("Mul", &[x, &sb], vec![])?;
            let t = ex.op("Tanh", &[&m], vec![])?;
            ex.op("Mul", &[&t, &sa], vec![])
        }
    }
}

/// `x` clipped to ±`clip` when the node asks for it.
fn clipped(ex: &mut Ex<'_, '_>, x: String, clip: Option<(String, String)>) -> Result<String, E> {
    match clip {
        None => Ok(x),
        Some((lo, hi)) => ex.op("Clip", &[&x, &lo, &hi], vec![]),
    }
}

/// Element `i` along axis 0 of `x`, the axis dropped.
fn pick(ex: &mut Ex<'_, '_>, x: &str, i: usize) -> Result<String, E> {
    let at = ex
        .constant("index", stowage_runtime::Tensor::from_vec(&[], vec![i as i64]).map_err(|e| ex.fail(e.to_string()))?);
    ex.op("Gather", &[x, &at], vec![int("axis", 0)])
}

/// `x[from..to]` along `axis`.
fn range(ex: &mut Ex<'_, '_>, x: &str, axis: i64, from: usize, to: usize) -> Result<String, E> {
    let (s, e, a) = (ex.ints(&[from as i64])?, ex.ints(&[to as i64])?, ex.ints(&[axis])?);
    ex.op("Slice", &[x, &s, &e, &a], vec![])
}

fn transposed(ex: &mut Ex<'_, '_>, x: &str) -> Result<String, E> {
    ex.op("Transpose", &[x], vec![ints("perm", vec![1, 0])])
}

fn unsqueeze(ex: &mut Ex<'_, '_>, x: &str, axis: i64) -> Result<String, E> {
    let axes = ex.ints(&[axis])?;
    ex.op("Unsqueeze", &[x, &axes], vec![])
}

fn concat(ex: &mut Ex<'_, '_>, xs: &[String], axis: i64) -> Result<String, E> {
    if xs.len() == 1 {
        return Ok(xs[0].clone());
    }
    let refs: Vec<&str> = xs.iter().map(String::as_str).collect();
    ex.op("Concat", &refs, vec![int("axis", axis)])
}

/// Expands the recurrent node of `ex`; its outputs `[Y, Y_h]`, and `Y_c` for an LSTM.
pub(super) fn expand(ex: &mut Ex<'_, '_>) -> Result<Vec<Option<String>>, E> {
    let kind = match ex.node.op_type() {
        "LSTM" => Kind::Lstm,
        "GRU" => Kind::Gru,
        _ => Kind::Rnn,
    };
    let a = ex.attrs();
    let direction = a.string("direction").map_err(|e| ex.attr_err(e))?.unwrap_or_else(|| "forward".into());
    let reverse: Vec<bool> = match direction.as_str() {
        "forward" => vec![false],
        "reverse" => vec![true],
        "bidirectional" => vec![false, true],
        other => {
            return Err(ex.attr_fail("direction", format!("must be forward, reverse or bidirectional, found '{other}'")))
        }
    };
    let layout = a.int_or("layout", 0).map_err(|e| ex.attr_err(e))?;
    if !matches!(layout, 0 | 1) {
        return Err(ex.attr_fail("layout", format!("must be 0 or 1, found {layout}")));
    }
    let clip = a.has("clip").then(|| a.float_or("clip", 0.0)).transpose().map_err(|e| ex.attr_err(e))?;
    if clip.is_some_and(|c| c.is_nan() || c <= 0.0) {
        return Err(ex.attr_fail("clip", "must be positive"));
    }
    let input_forget = kind == Kind::Lstm && a.bool_or("input_forget", false).map_err(|e| ex.attr_err(e))?;
    let lbr = kind == Kind::Gru && a.bool_or("linear_before_reset", false).map_err(|e| ex.attr_err(e))?;
    let acts = activations(ex, kind, reverse.len())?;

    let (x, w, r) = (ex.input(0)?, ex.input(1)?, ex.input(2)?);
    let (xt, wt, rt) = (ex.ty(&x)?, ex.ty(&w)?, ex.ty(&r)?);
    let dt = xt.dt;
    let (g, dirs) = (kind.gates(), reverse.len());
    if xt.rank() != 3 || wt.rank() != 3 || rt.rank() != 3 {
        return Err(ex.fail(format!("X, W and R must be 3-D, found {xt}, {wt}, {rt}")));
    }
    let (steps, batch, isize) =
        if layout == 0 { (xt.shape[0], xt.shape[1], xt.shape[2]) } else { (xt.shape[1], xt.shape[0], xt.shape[2]) };
    let hidden = match a.int("hidden_size").map_err(|e| ex.attr_err(e))? {
        Some(h) if h > 0 => h as usize,
        Some(h) => return Err(ex.attr_fail("hidden_size", format!("must be positive, found {h}"))),
        None => rt.shape[2],
    };
    let gh = g
        .checked_mul(hidden)
        .filter(|&n| n.checked_mul(2).is_some())
        .ok_or_else(|| ex.attr_fail("hidden_size", format!("{hidden} is too large")))?;
    if wt.shape != [dirs, gh, isize] || rt.shape != [dirs, gh, hidden] {
        return Err(ex.fail(format!(
            "W is {wt} and R is {rt}; with {dirs} direction(s), hidden_size {hidden} and {isize} inputs they must be \
             [{dirs}, {gh}, {isize}] and [{dirs}, {gh}, {hidden}]"
        )));
    }
    if kind == Kind::Lstm && dt == DatumType::F32 && ex.keeps_whole() {
        // One node: the kernel reads every input as ONNX lays it out (rule 5 of `expand`).
        let layer = Lstm { hidden, reverse, activations: acts, clip, input_forget, batch_major: layout == 1 };
        let inputs: Vec<Option<String>> = (0..8).map(|i| ex.optional(i)).collect();
        return ex.whole(Op::Lstm(layer), &inputs, 3);
    }
    if steps == 0 || steps * dirs > MAX_STEPS {
        return Err(ex.fail(format!(
            "a sequence of {steps} steps in {dirs} direction(s) is not unrolled (stowage unrolls 1 to {MAX_STEPS} steps)"
        )));
    }
    // sequence_lens: ignored when it is a constant taking every whole sequence; otherwise each step past a
    // batch element's length keeps its state and writes zeros to Y (forward only: a reverse direction would start
    // each element at its own end).
    let mut lens = None;
    // About the nodes one step writes, counted against the model's unrolling budget before any is written.
    ex.spend(steps * dirs * 40)?;
    if let Some(l) = ex.optional(4) {
        let whole = ex
            .value(&l)
            .and_then(|t| crate::consts::to_i64s(t).ok())
            .is_some_and(|v| v.len() == batch && v.iter().all(|&n| n == steps as i64));
        let lt = ex.ty(&l)?;
        if lt.shape != [batch] {
            return Err(ex.fail(format!("its sequence_lens is {lt}, expected [{batch}]")));
        }
        if !whole && reverse.iter().any(|&r| r) {
            return Err(ex.fail(format!(
                "its sequence_lens '{l}' may be shorter than the sequence ({steps} steps) in a reverse direction: \
                 not supported yet"
            )));
        }
        if !whole {
            lens = Some((l, lt.dt));
        }
    }
    let state_shape = if layout == 0 { [dirs, batch, hidden] } else { [batch, dirs, hidden] };
    let mut states = Vec::new();
    for (i, label) in [(5, "initial_h"), (6, "initial_c")] {
        if i == 6 && kind != Kind::Lstm {
            continue;
        }
        states.push(match ex.optional(i) {
            None => None,
            Some(s) => {
                let st = ex.ty(&s)?;
                if st.shape != state_shape {
                    return Err(ex.fail(format!("{label} is {st}, expected {state_shape:?}")));
                }
                Some(if layout == 0 { s } else { ex.op("Transpose", &[&s], vec![ints("perm", vec![1, 0, 2])])? })
            }
        });
    }
    let clip = match clip {
        None => None,
        Some(c) => Some((ex.scalar(dt, -f64::from(c))?, ex.scalar(dt, f64::from(c))?)),
    };
    let xs = if layout == 0 { x } else { ex.op("Transpose", &[&x], vec![ints("perm", vec![1, 0, 2])])? };

    let (mut ys, mut hs, mut cs) = (Vec::new(), Vec::new(), Vec::new());
    for (d, &rev) in reverse.iter().enumerate() {
        let act = &acts[d * kind.activations().len()..];
        let wd = pick(ex, &w, d)?;
        let wdt = transposed(ex, &wd)?;
        let rd = pick(ex, &r, d)?;
        let mut xw = ex.op("MatMul", &[&xs, &wdt], vec![])?;
        // Biases: Wb and Rb of every gate, added to the input product, but GRU's Rbh with linear_before_reset,
        // which is added to the recurrent product inside the reset gate's product.
        let bias = match ex.optional(3) {
            None => None,
            Some(b) => {
                let bt = ex.ty(&b)?;
                if bt.shape != [dirs, 2 * gh] {
                    return Err(ex.fail(format!("B is {bt}, expected [{dirs}, {}]", 2 * gh)));
                }
                let bd = pick(ex, &b, d)?;
                Some((range(ex, &bd, 0, 0, gh)?, range(ex, &bd, 0, gh, 2 * gh)?))
            }
        };
        let mut rec_bias = None;
        if let Some((wb, rb)) = &bias {
            let sum = if lbr {
                rec_bias = Some(rb.clone());
                wb.clone()
            } else {
                ex.op("Add", &[wb, rb], vec![])?
            };
            xw = ex.op("Add", &[&xw, &sum], vec![])?;
        }
        let peep = match (kind, ex.optional(7)) {
            (Kind::Lstm, Some(p)) => {
                let pt = ex.ty(&p)?;
                if pt.shape != [dirs, 3 * hidden] {
                    return Err(ex.fail(format!("P is {pt}, expected [{dirs}, {}]", 3 * hidden)));
                }
                let pd = pick(ex, &p, d)?;
                Some([
                    range(ex, &pd, 0, 0, hidden)?,
                    range(ex, &pd, 0, hidden, 2 * hidden)?,
                    range(ex, &pd, 0, 2 * hidden, 3 * hidden)?,
                ])
            }
            _ => None,
        };
        let mut h = match &states[0] {
            Some(s) => pick(ex, s, d)?,
            None => ex.zeros(dt, &[batch, hidden])?,
        };
        let mut c = match states.get(1) {
            Some(Some(s)) => pick(ex, s, d)?,
            _ => ex.zeros(dt, &[batch, hidden])?,
        };
        // GRU without linear_before_reset multiplies the reset gate into the state before the h gate's product.
        let (rzr, rh) = if kind == Kind::Gru && !lbr {
            let zr = range(ex, &rd, 0, 0, 2 * hidden)?;
            let hh = range(ex, &rd, 0, 2 * hidden, 3 * hidden)?;
            (Some(transposed(ex, &zr)?), Some(transposed(ex, &hh)?))
        } else {
            (None, None)
        };
        let rdt = transposed(ex, &rd)?;
        let mut step_h = vec![String::new(); steps];
        let order: Vec<usize> = if rev { (0..steps).rev().collect() } else { (0..steps).collect() };
        for t in order {
            let xw_t = pick(ex, &xw, t)?;
            let (prev_h, prev_c) = (h.clone(), c.clone());
            match kind {
                Kind::Lstm => {
                    let hr = ex.op("MatMul", &[&h, &rdt], vec![])?;
                    let pre = ex.op("Add", &[&xw_t, &hr], vec![])?;
                    let gates = ex.op_n("Split", &[&pre], 4, vec![int("axis", 1), int("num_outputs", 4)])?;
                    let (mut i, mut o, mut f, cc) =
                        (gates[0].clone(), gates[1].clone(), gates[2].clone(), gates[3].clone());
                    if let Some([pi, _, pf]) = &peep {
                        let m = ex.op("Mul", &[pi, &c], vec![])?;
                        i = ex.op("Add", &[&i, &m], vec![])?;
                        let m = ex.op("Mul", &[pf, &c], vec![])?;
                        f = ex.op("Add", &[&f, &m], vec![])?;
                    }
                    let i = clipped(ex, i, clip.clone())?;
                    let i = apply(ex, act[0], &i, dt)?;
                    let f = if input_forget {
                        let one = ex.scalar(dt, 1.0)?;
                        ex.op("Sub", &[&one, &i], vec![])?
                    } else {
                        let f = clipped(ex, f, clip.clone())?;
                        apply(ex, act[0], &f, dt)?
                    };
                    let cc = clipped(ex, cc, clip.clone())?;
                    let cc = apply(ex, act[1], &cc, dt)?;
                    let keep = ex.op("Mul", &[&f, &c], vec![])?;
                    let new = ex.op("Mul", &[&i, &cc], vec![])?;
                    c = ex.op("Add", &[&keep, &new], vec![])?;
                    if let Some([_, po, _]) = &peep {
                        let m = ex.op("Mul", &[po, &c], vec![])?;
                        o = ex.op("Add", &[&o, &m], vec![])?;
                    }
                    let o = clipped(ex, o, clip.clone())?;
                    let o = apply(ex, act[0], &o, dt)?;
                    let hc = apply(ex, act[2], &c, dt)?;
                    h = ex.op("Mul", &[&o, &hc], vec![])?;
                }
                Kind::Gru => {
                    let xg = ex.op_n("Split", &[&xw_t], 3, vec![int("axis", 1), int("num_outputs", 3)])?;
                    let (z_pre, r_pre, hh) = if lbr {
                        let mut hr = ex.op("MatMul", &[&h, &rdt], vec![])?;
                        if let Some(rb) = &rec_bias {
                            hr = ex.op("Add", &[&hr, rb], vec![])?;
                        }
                        let hg = ex.op_n("Split", &[&hr], 3, vec![int("axis", 1), int("num_outputs", 3)])?;
                        let z = ex.op("Add", &[&xg[0], &hg[0]], vec![])?;
                        let r = ex.op("Add", &[&xg[1], &hg[1]], vec![])?;
                        (z, r, Some(hg[2].clone()))
                    } else {
                        let hzr = ex.op("MatMul", &[&h, rzr.as_deref().unwrap_or_default()], vec![])?;
                        let hg = ex.op_n("Split", &[&hzr], 2, vec![int("axis", 1), int("num_outputs", 2)])?;
                        let z = ex.op("Add", &[&xg[0], &hg[0]], vec![])?;
                        let r = ex.op("Add", &[&xg[1], &hg[1]], vec![])?;
                        (z, r, None)
                    };
                    let z = clipped(ex, z_pre, clip.clone())?;
                    let z = apply(ex, act[0], &z, dt)?;
                    let rg = clipped(ex, r_pre, clip.clone())?;
                    let rg = apply(ex, act[0], &rg, dt)?;
                    let inner = match hh {
                        Some(hh) => ex.op("Mul", &[&rg, &hh], vec![])?,
                        None => {
                            let rs = ex.op("Mul", &[&rg, &h], vec![])?;
                            ex.op("MatMul", &[&rs, rh.as_deref().unwrap_or_default()], vec![])?
                        }
                    };
                    let cand = ex.op("Add", &[&xg[2], &inner], vec![])?;
                    let cand = clipped(ex, cand, clip.clone())?;
                    let cand = apply(ex, act[1], &cand, dt)?;
                    // H = (1 - z) ⊙ cand + z ⊙ H = cand + z ⊙ (H - cand)
                    let diff = ex.op("Sub", &[&h, &cand], vec![])?;
                    let m = ex.op("Mul", &[&z, &diff], vec![])?;
                    h = ex.op("Add", &[&cand, &m], vec![])?;
                }
                Kind::Rnn => {
                    let hr = ex.op("MatMul", &[&h, &rdt], vec![])?;
                    let pre = ex.op("Add", &[&xw_t, &hr], vec![])?;
                    let pre = clipped(ex, pre, clip.clone())?;
                    h = apply(ex, act[0], &pre, dt)?;
                }
            }
            if let Some((l, ldt)) = &lens {
                // Past its length a batch element keeps its state; its Y is zero there.
                let at = ex.scalar(*ldt, t as f64)?;
                let live = ex.op("Less", &[&at, l], vec![])?;
                let live = unsqueeze(ex, &live, 1)?;
                let zero = ex.scalar(dt, 0.0)?;
                step_h[t] = ex.op("Where", &[&live, &h, &zero], vec![])?;
                h = ex.op("Where", &[&live, &h, &prev_h], vec![])?;
                if kind == Kind::Lstm {
                    c = ex.op("Where", &[&live, &c, &prev_c], vec![])?;
                }
            } else {
                step_h[t] = h.clone();
            }
        }
        if ex.optional_output(0) {
            let mut each = Vec::with_capacity(steps);
            for s in &step_h {
                each.push(unsqueeze(ex, s, 0)?);
            }
            let y = concat(ex, &each, 0)?;
            ys.push(unsqueeze(ex, &y, 1)?);
        }
        hs.push(unsqueeze(ex, &h, 0)?);
        cs.push(unsqueeze(ex, &c, 0)?);
    }
    let mut outs = Vec::new();
    outs.push(if ys.is_empty() {
        None
    } else {
        let y = concat(ex, &ys, 1)?;
        Some(if layout == 0 { y } else { ex.op("Transpose", &[&y], vec![ints("perm", vec![2, 0, 1, 3])])? })
    });
    for (k, list) in [hs, cs].into_iter().enumerate() {
        if k == 1 && kind != Kind::Lstm {
            break;
        }
        let s = concat(ex, &list, 0)?;
        outs.push(Some(if layout == 0 { s } else { ex.op("Transpose", &[&s], vec![ints("perm", vec![1, 0, 2])])? }));
    }
    Ok(outs)
}
