//! Elementwise kernels: an engine in the spirit of ATen's `TensorIterator`
//! ([`Operand`], broadcasting, dimension coalescing, dtype casting on load
//! and store, rayon splitting, runtime SIMD dispatch) and the pointwise ops
//! of foo on top of it ([`unary`], [`binary`], [`ternary`]).
//!
//! Callers (the Python bindings, tests, benches) give the output view(s),
//! already allocated with the broadcast shape and result dtype, the inputs,
//! and the common dtype torch's type promotion gives; the ops compute in that
//! dtype (float32 for float16/bfloat16) exactly as torch CPU does.

mod cast;
pub mod complex;
mod half_bits;
mod iter;
// The C++ glue's dense fill entry (native.rs, "python" feature) is its only caller.
#[cfg_attr(not(feature = "python"), allow(unused_imports))]
pub(crate) use iter::{fill_dense, zero_dense};
pub mod math;
mod ops;
pub mod simd;
pub mod spec;
pub mod special;

pub use cast::Scalar;
pub use iter::{broadcast_shapes, output_strides, promote_types, Layout, Operand, MAX_OPERANDS};
pub use ops::{
    binary, compute_dtype, identity, ternary, unary, BinaryOp, DivMode, Target, TernaryOp, UnaryOp,
};
pub use simd::{
    detected as detected_simd_level, level as simd_level, set_level as set_simd_level, SimdLevel,
};

#[cfg(test)]
mod tests;
