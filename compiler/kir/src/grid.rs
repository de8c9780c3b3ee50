//! `GridSample`'s modes, shared by the IR (`Op::GridSample`) and the kernels that run it.

/// How `GridSample` reads between pixels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum GridMode {
    /// The nearest pixel (coordinates rounded half to even).
    Nearest,
    /// Linear along each axis (bilinear, trilinear).
    Linear,
    /// Keys' cubic convolution along each axis (a = −0.75).
    Cubic,
}

/// What `GridSample` reads outside the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum GridPadding {
    /// Zeros.
    Zeros,
    /// The nearest edge pixel.
    Border,
    /// The input mirrored at its borders.
    Reflection,
}
