//! The activations of ONNX's recurrent layers (`LSTM`, `GRU`, `RNN`: the `activations` attribute with its
//! `activation_alpha` and `activation_beta`), with their scalar f32 semantics: what the IR's whole layer
//! (`stowage_compiler::ir::Lstm`) names and what a backend's recurrent kernel computes.

/// An activation of a recurrent layer's list (ONNX's `activations`, with `activation_alpha` and
/// `activation_beta` resolved to each one's parameters).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Activation {
    /// `1/(1+e^-x)`.
    Sigmoid,
    /// `tanh x`.
    Tanh,
    /// `max(x, 0)`.
    Relu,
    /// `x/(1+|x|)`.
    Softsign,
    /// `ln(1+e^x)`.
    Softplus,
    /// `max(0, min(1, alpha·x + beta))`.
    HardSigmoid(f32, f32),
    /// `x` if positive, else `alpha·x`.
    LeakyRelu(f32),
    /// `alpha·x + beta`.
    Affine(f32, f32),
    /// `alpha·tanh(beta·x)`.
    ScaledTanh(f32, f32),
    /// `x` if positive, else `alpha·(e^x − 1)`.
    Elu(f32),
    /// `x` if above `alpha`, else 0.
    ThresholdedRelu(f32),
}

impl Activation {
    /// The activation at `x`, with the sigmoid and tanh the generated chains compute ([`crate::func`]).
    pub fn apply(self, x: f32) -> f32 {
        match self {
            Activation::Sigmoid => crate::func::sigmoid_f32(x),
            Activation::Tanh => crate::func::tanh_f32(x),
            Activation::Relu => x.max(0.0),
            Activation::Softsign => x / (1.0 + x.abs()),
            Activation::Softplus => (x.exp()).ln_1p(),
            Activation::HardSigmoid(a, b) => (a * x + b).clamp(0.0, 1.0),
            Activation::LeakyRelu(a) => {
                if x >= 0.0 {
                    x
                } else {
                    a * x
                }
            }
            Activation::Affine(a, b) => a * x + b,
            Activation::ScaledTanh(a, b) => a * (b * x).tanh(),
            Activation::Elu(a) => {
                if x >= 0.0 {
                    x
                } else {
                    a * (x.exp() - 1.0)
                }
            }
            Activation::ThresholdedRelu(a) => {
                if x > a {
                    x
                } else {
                    0.0
                }
            }
        }
    }

    /// Its name and parameters as the text form prints them (`HardSigmoid(0.2,0.5)`).
    pub fn text(self) -> String {
        match self {
            Activation::Sigmoid => "Sigmoid".into(),
            Activation::Tanh => "Tanh".into(),
            Activation::Relu => "Relu".into(),
            Activation::Softsign => "Softsign".into(),
            Activation::Softplus => "Softplus".into(),
            Activation::HardSigmoid(a, b) => format!("HardSigmoid({a},{b})"),
            Activation::LeakyRelu(a) => format!("LeakyRelu({a})"),
            Activation::Affine(a, b) => format!("Affine({a},{b})"),
            Activation::ScaledTanh(a, b) => format!("ScaledTanh({a},{b})"),
            Activation::Elu(a) => format!("Elu({a})"),
            Activation::ThresholdedRelu(a) => format!("ThresholdedRelu({a})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activations_match_their_definitions() {
        assert_eq!(Activation::Relu.apply(-1.0), 0.0);
        assert_eq!(Activation::HardSigmoid(0.2, 0.5).apply(10.0), 1.0);
        assert_eq!(Activation::ThresholdedRelu(1.0).apply(1.0), 0.0);
        assert_eq!(Activation::LeakyRelu(0.1).apply(-2.0), -0.2);
        assert!((Activation::Sigmoid.apply(0.0) - 0.5).abs() < 1e-7);
        assert!((Activation::Tanh.apply(0.5) - 0.5f32.tanh()).abs() < 1e-6);
        assert!((Activation::ScaledTanh(2.0, 0.5).apply(1.0) - 2.0 * 0.5f32.tanh()).abs() < 1e-6);
        assert!((Activation::Softplus.apply(1.0) - 1.0f32.exp().ln_1p()).abs() < 1e-6);
        assert!((Activation::Elu(1.0).apply(-1.0) - ((-1.0f32).exp() - 1.0)).abs() < 1e-6);
    }
}
