//! Random numbers of foo: a counter-based Philox4x32-10 generator.
//!
//! A generator is a (seed, offset) pair. Element `i` of a random kernel
//! draws from the Philox block at counter `offset + i / 4`, lane `i % 4`, so
//! results do not depend on how the work is split between threads, and a
//! kernel that fills `n` elements advances the offset by `ceil(n / 4)`.

mod philox;
mod registry;

pub use philox::{philox4x32_10, uniform_f32, uniform_f64, Philox};
pub use registry::{
    clone_generator, default_generator, generator_offset, generator_seed, new_generator,
    random_seed, release_generator, reserve_default, reserve_offset, set_generator_offset,
    set_generator_seed, DEFAULT_SEED,
};
