//! foo_rs: the memory and compute of the `foo` PyTorch device, in Rust.
//!
//! The pure-Rust core (allocator, kernels, RNG) has no dependency on Python or
//! torch: `cargo test` and `cargo bench` build it alone. The `python` feature
//! (turned on by maturin) adds the PyO3 bindings and the C++ glue that plugs
//! the allocator, device guard and hooks into c10.

pub mod allocator;
pub mod device;
pub mod dtype;
pub mod kernels;
pub mod rng;
pub mod stream;

#[cfg(feature = "python")]
mod bindings;
#[cfg(feature = "python")]
mod ffi;
#[cfg(feature = "python")]
mod fork;
#[cfg(feature = "python")]
mod native;

pub use dtype::DType;
