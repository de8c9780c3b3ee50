//! The simulated device's kernels, on f32: a matrix product (MatMul of two matrices, and Gemm with its
//! transposes, scales and bias), elementwise Add with numpy broadcasting, and Relu. Each reads its inputs' device
//! bytes and writes a new device buffer: nothing leaves the device.

use stowage_runtime::DatumType;

use crate::storage::{SimBuffer, SimDevice};

/// Why a kernel failed.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// The device failed the launch (see [`SimDevice::fail_after`]).
    #[error("node '{node}' ({op}): the sim device failed the launch")]
    Lost {
        /// The node.
        node: String,
        /// Its op.
        op: &'static str,
    },
    /// A buffer could not be allocated.
    #[error("node '{node}': cannot allocate its output: {message}")]
    Allocate {
        /// The node.
        node: String,
        /// Why.
        message: String,
    },
}

/// A kernel the device runs.
#[derive(Clone, Debug)]
pub enum Kernel {
    /// `alpha * op(A) op(B) + beta * C`, op a transpose where asked; MatMul is the plain case.
    Product {
        /// A is transposed.
        trans_a: bool,
        /// B is transposed.
        trans_b: bool,
        /// Scale of the product.
        alpha: f32,
        /// Scale of C.
        beta: f32,
    },
    /// `a + b`, broadcast to the output's shape.
    Add,
    /// `max(x, 0)`.
    Relu,
}

/// Runs `kernel` for `node` on `inputs`, each seen as `views` says (its shape and element strides: Add and Relu
/// read rows padded as the caller held them), into a new buffer of `shape`.
pub fn launch(
    device: &SimDevice,
    node: &str,
    op: &'static str,
    kernel: &Kernel,
    inputs: &[&SimBuffer],
    views: &[(Vec<usize>, Vec<usize>)],
    shape: &[usize],
) -> Result<SimBuffer, KernelError> {
    if !device.launch() {
        return Err(KernelError::Lost { node: node.to_string(), op });
    }
    let out = SimBuffer::allocate(device, DatumType::F32, shape)
        .map_err(|e| KernelError::Allocate { node: node.to_string(), message: e.to_string() })?;
    match kernel {
        Kernel::Product { trans_a, trans_b, alpha, beta } => {
            let (m, n) = (shape[0], shape[1]);
            let a_shape = inputs[0].shape().to_vec();
            let k = if *trans_a { a_shape[0] } else { a_shape[1] };
            let c = inputs.get(2).map(|c| (c.read_f32(<[f32]>::to_vec), c.shape().to_vec()));
            inputs[0].read_f32(|a| {
                inputs[1].read_f32(|b| {
                    out.write_f32(|y| {
                        for i in 0..m {
                            for j in 0..n {
                                let mut sum = 0.0f32;
                                for p in 0..k {
                                    let x = if *trans_a { a[p * m + i] } else { a[i * k + p] };
                                    let w = if *trans_b { b[j * k + p] } else { b[p * n + j] };
                                    sum += x * w;
                                }
                                let bias = c.as_ref().map_or(0.0, |(c, s)| c[broadcast_index(&[i, j], shape, s)]);
                                y[i * n + j] = alpha * sum + beta * bias;
                            }
                        }
                    })
                })
            });
        }
        Kernel::Add => {
            let ((a_shape, a_strides), (b_shape, b_strides)) = (&views[0], &views[1]);
            inputs[0].read_f32(|a| {
                inputs[1].read_f32(|b| {
                    out.write_f32(|y| {
                        let mut index = vec![0; shape.len()];
                        for v in y.iter_mut() {
                            *v = a[strided_index(&index, shape, a_shape, a_strides)]
                                + b[strided_index(&index, shape, b_shape, b_strides)];
                            next(&mut index, shape);
                        }
                    })
                })
            });
        }
        Kernel::Relu => {
            let (x_shape, x_strides) = &views[0];
            inputs[0].read_f32(|x| {
                out.write_f32(|y| {
                    let mut index = vec![0; shape.len()];
                    for v in y.iter_mut() {
                        *v = x[strided_index(&index, shape, x_shape, x_strides)].max(0.0);
                        next(&mut index, shape);
                    }
                })
            })
        }
    }
    Ok(out)
}

/// The offset in a row-major tensor of shape `from`, broadcast to `to`, of the element at `index` of `to`.
fn broadcast_index(index: &[usize], to: &[usize], from: &[usize]) -> usize {
    strided_index(index, to, from, &packed_strides(from))
}

/// Element strides of packed row-major `shape`.
pub(crate) fn packed_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for axis in (0..shape.len().saturating_sub(1)).rev() {
        strides[axis] = strides[axis + 1] * shape[axis + 1];
    }
    strides
}

/// The offset, in elements, in a tensor of shape `from` with element `strides`, broadcast to `to`, of the element
/// at `index` of `to`.
fn strided_index(index: &[usize], to: &[usize], from: &[usize], strides: &[usize]) -> usize {
    let skip = to.len() - from.len();
    from.iter()
        .zip(strides)
        .enumerate()
        .map(|(axis, (&extent, &s))| if extent == 1 { 0 } else { index[skip + axis] * s })
        .sum()
}

/// Steps a row-major index through `shape`.
fn next(index: &mut [usize], shape: &[usize]) {
    for axis in (0..shape.len()).rev() {
        index[axis] += 1;
        if index[axis] < shape[axis] {
            return;
        }
        index[axis] = 0;
    }
}
