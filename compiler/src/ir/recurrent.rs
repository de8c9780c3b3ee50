//! The recurrent layer kept whole ([`Op::Lstm`](super::Op::Lstm)): ONNX `LSTM` as one node, for targets that run
//! it as one kernel (the CPU). Other targets get it unrolled at import (`onnx/rnn.rs`), so this op reaches a
//! backend only where the driver asked the import to keep it ([`crate::onnx::ImportConfig::whole`]).
//!
//! Inputs are ONNX's eight, in its order, each optional one absent or present: `X`, `W`, `R`, `B`,
//! `sequence_lens`, `initial_h`, `initial_c`, `P`. Outputs are `Y`, `Y_h`, `Y_c`. The import has checked every
//! shape against the attributes before it makes the node; [`Lstm::output_types`] checks them again, so a graph
//! read back (built code) or rewritten by a pass is held to the same shapes.

use stowage_runtime::DatumType;

use super::ValueType;
pub use stowage_kir::recurrent::Activation;

/// ONNX `LSTM`'s attributes, normalised: the hidden size read off `R` when the attribute is absent, the
/// activations listed for every direction.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Lstm {
    /// Hidden units per direction.
    pub hidden: usize,
    /// Per direction, in order: true where it runs from the end of each sequence towards its start (`reverse`,
    /// or the second direction of `bidirectional`).
    pub reverse: Vec<bool>,
    /// Three per direction: the gates' (`f`), the cell candidate's (`g`) and the output's (`h`).
    pub activations: Vec<Activation>,
    /// Gate pre-activations clipped to `±clip` (ONNX `clip`).
    pub clip: Option<f32>,
    /// The forget gate is `1 − i` (ONNX `input_forget`).
    pub input_forget: bool,
    /// Batch-major inputs and outputs (ONNX `layout=1`): `X` is `[batch, seq, input]`.
    pub batch_major: bool,
}

/// The input positions of [`Lstm`]'s node.
pub mod lstm_input {
    /// `X`.
    pub const X: usize = 0;
    /// `W`: `[dirs, 4·hidden, input]`.
    pub const W: usize = 1;
    /// `R`: `[dirs, 4·hidden, hidden]`.
    pub const R: usize = 2;
    /// `B`: `[dirs, 8·hidden]`.
    pub const B: usize = 3;
    /// `sequence_lens`: `[batch]`, int32.
    pub const LENS: usize = 4;
    /// `initial_h`.
    pub const H0: usize = 5;
    /// `initial_c`.
    pub const C0: usize = 6;
    /// `P`: `[dirs, 3·hidden]`.
    pub const P: usize = 7;
}

impl Lstm {
    /// Directions (1 or 2).
    pub fn dirs(&self) -> usize {
        self.reverse.len()
    }

    /// `(steps, batch, input)` read off `X`'s shape.
    pub fn dims(&self, x: &[usize]) -> Option<(usize, usize, usize)> {
        match *x {
            [s, b, i] if !self.batch_major => Some((s, b, i)),
            [b, s, i] => Some((s, b, i)),
            _ => None,
        }
    }

    /// The shape of a state (`initial_h`, `Y_h`, …) for `batch`.
    pub fn state_shape(&self, batch: usize) -> Vec<usize> {
        if self.batch_major {
            vec![batch, self.dirs(), self.hidden]
        } else {
            vec![self.dirs(), batch, self.hidden]
        }
    }

    /// The types of `Y`, `Y_h` and `Y_c` for inputs of types `inputs` (absent ones `None`), or why they do not fit.
    pub fn output_types(&self, inputs: &[Option<&ValueType>]) -> Result<Vec<ValueType>, String> {
        let at = |i: usize| inputs.get(i).copied().flatten();
        let x = at(lstm_input::X).ok_or("X is required")?;
        let (steps, batch, isize) = self.dims(&x.shape).ok_or_else(|| format!("X must be 3-D, found {x}"))?;
        let (d, h) = (self.dirs(), self.hidden);
        if x.dt != DatumType::F32 {
            return Err(format!("X is {x}: the whole layer runs f32 only"));
        }
        if self.activations.len() != 3 * d {
            return Err(format!("{} activations for {d} direction(s), expected {}", self.activations.len(), 3 * d));
        }
        let want = |i: usize, name: &str, shape: Vec<usize>, required: bool| -> Result<(), String> {
            match at(i) {
                None if required => Err(format!("{name} is required")),
                None => Ok(()),
                Some(t) if t.shape == shape && t.dt == x.dt => Ok(()),
                Some(t) => Err(format!("{name} is {t}, expected {}{shape:?}", x.dt)),
            }
        };
        want(lstm_input::W, "W", vec![d, 4 * h, isize], true)?;
        want(lstm_input::R, "R", vec![d, 4 * h, h], true)?;
        want(lstm_input::B, "B", vec![d, 8 * h], false)?;
        want(lstm_input::H0, "initial_h", self.state_shape(batch), false)?;
        want(lstm_input::C0, "initial_c", self.state_shape(batch), false)?;
        want(lstm_input::P, "P", vec![d, 3 * h], false)?;
        if let Some(l) = at(lstm_input::LENS) {
            if l.shape != [batch] || !matches!(l.dt, DatumType::I32 | DatumType::I64) {
                return Err(format!("sequence_lens is {l}, expected int32[{batch}]"));
            }
        }
        let y = if self.batch_major { vec![batch, steps, d, h] } else { vec![steps, d, batch, h] };
        let state = ValueType::new(x.dt, self.state_shape(batch));
        Ok(vec![ValueType::new(x.dt, y), state.clone(), state])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(batch_major: bool) -> Lstm {
        Lstm {
            hidden: 2,
            reverse: vec![false, true],
            activations: [Activation::Sigmoid, Activation::Tanh, Activation::Tanh].repeat(2),
            clip: None,
            input_forget: false,
            batch_major,
        }
    }

    #[test]
    fn outputs_follow_the_layout() {
        let f = |s: &[usize]| ValueType::new(DatumType::F32, s.to_vec());
        let (x, w, r) = (f(&[5, 3, 4]), f(&[2, 8, 4]), f(&[2, 8, 2]));
        let types = layer(false).output_types(&[Some(&x), Some(&w), Some(&r)]).expect("fits");
        assert_eq!(types[0].shape, [5, 2, 3, 2]);
        assert_eq!(types[1].shape, [2, 3, 2]);
        let x = f(&[3, 5, 4]);
        let types = layer(true).output_types(&[Some(&x), Some(&w), Some(&r)]).expect("fits");
        assert_eq!(types[0].shape, [3, 5, 2, 2]);
        assert_eq!(types[2].shape, [3, 2, 2]);
    }

    #[test]
    fn a_weight_of_the_wrong_shape_is_named() {
        let f = |s: &[usize]| ValueType::new(DatumType::F32, s.to_vec());
        let (x, w, r) = (f(&[5, 3, 4]), f(&[2, 8, 3]), f(&[2, 8, 2]));
        let e = layer(false).output_types(&[Some(&x), Some(&w), Some(&r)]).expect_err("W does not fit");
        assert!(e.starts_with("W is ") && e.ends_with("expected f32[2, 8, 4]"), "{e}");
    }
}
