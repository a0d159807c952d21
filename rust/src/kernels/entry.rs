//! Kernel entry points as both ways into Rust call them (the PyO3 bindings
//! and the C++ native path): each wraps a kernel in the output rules it
//! needs (a scratch output when `out` aliases an input or must be
//! contiguous), so those rules live here once.

use super::linalg::{self, Coef};
use super::reduce::{self as red, ReduceOp};
use super::{keepdim_view, nn, with_out, KernelError, Strided};

/// Reduction `op` of `inp` over `dims` (sorted, distinct, in range; empty
/// with numel > 0 means none) into `out` (keepdim or not) and `out2`
/// (indices of max_dim/min_dim, or the mean of var/std).
pub fn reduce(
    op: ReduceOp,
    out: Strided,
    out2: Option<Strided>,
    inp: &Strided,
    dims: &[usize],
) -> Result<(), KernelError> {
    let nd = inp.ndim();
    let o = keepdim_view(out, nd, dims)?;
    let o2 = out2.map(|d| keepdim_view(d, nd, dims)).transpose()?;
    with_out(&o, &[Some(inp)], false, false, |o| match &o2 {
        Some(o2) => with_out(o2, &[Some(inp)], false, false, |o2| {
            red::reduce_op(op, o, Some(o2), inp)
        }),
        None => red::reduce_op(op, o, None, inp),
    })
}

/// `out = beta * input + alpha * (a @ b)`, 2-d, or batched (3-d) with `batched`.
pub fn addmm(
    out: &Strided,
    input: Option<&Strided>,
    a: &Strided,
    b: &Strided,
    beta: Coef,
    alpha: Coef,
    batched: bool,
) -> Result<(), KernelError> {
    with_out(out, &[Some(a), Some(b)], false, true, |o| {
        if batched {
            linalg::baddbmm(o, input, a, b, beta, alpha)
        } else {
            linalg::addmm(o, input, a, b, beta, alpha)
        }
    })
}

/// `out = (log_)softmax(inp, dim)`; `inp` contiguous.
pub fn softmax(out: &Strided, inp: &Strided, dim: usize, log: bool) -> Result<(), KernelError> {
    with_out(out, &[Some(inp)], true, false, |o| {
        nn::softmax(o, inp, dim, log)
    })
}

/// Gradient of (log_)softmax; `grad` and `output` contiguous.
pub fn softmax_backward(
    grad_input: &Strided,
    grad: &Strided,
    output: &Strided,
    dim: usize,
    log: bool,
) -> Result<(), KernelError> {
    with_out(grad_input, &[Some(grad), Some(output)], true, false, |gi| {
        nn::softmax_backward(gi, grad, output, dim, log)
    })
}
