//! Devices and random-number state.

use super::{device_index, AllocErr};
use crate::{device, rng};
use pyo3::prelude::*;

/// Number of foo devices (FOO_RS_DEVICE_COUNT).
#[pyfunction]
fn device_count() -> usize {
    device::count()
}

/// This thread's current foo device.
#[pyfunction]
fn current_device() -> usize {
    device::current()
}

/// Makes `index` this thread's current foo device.
#[pyfunction]
fn set_device(index: i64) -> PyResult<()> {
    let i = device_index(Some(index))?;
    device::set_current(i).map_err(AllocErr::from)?;
    Ok(())
}

/// Seed and offset of device `device`'s default generator.
#[pyfunction]
#[pyo3(signature = (device=None))]
fn rng_state(device: Option<i64>) -> PyResult<(u64, u64)> {
    let g = rng::default_generator(device_index(device)?);
    Ok((rng::generator_seed(g), rng::generator_offset(g)))
}

/// Sets seed and offset of device `device`'s default generator.
#[pyfunction]
#[pyo3(signature = (seed, offset, device=None))]
fn set_rng_state(seed: u64, offset: u64, device: Option<i64>) -> PyResult<()> {
    let g = rng::default_generator(device_index(device)?);
    rng::set_generator_seed(g, seed);
    rng::set_generator_offset(g, offset);
    Ok(())
}

/// Seeds device `device`'s default generator (offset back to zero).
#[pyfunction]
#[pyo3(signature = (seed, device=None))]
fn manual_seed(seed: u64, device: Option<i64>) -> PyResult<()> {
    rng::set_generator_seed(rng::default_generator(device_index(device)?), seed);
    Ok(())
}

/// A non-deterministic seed.
#[pyfunction]
fn random_seed() -> u64 {
    rng::random_seed()
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(device_count, m)?)?;
    m.add_function(wrap_pyfunction!(current_device, m)?)?;
    m.add_function(wrap_pyfunction!(set_device, m)?)?;
    m.add_function(wrap_pyfunction!(rng_state, m)?)?;
    m.add_function(wrap_pyfunction!(set_rng_state, m)?)?;
    m.add_function(wrap_pyfunction!(manual_seed, m)?)?;
    m.add_function(wrap_pyfunction!(random_seed, m)?)?;
    Ok(())
}
