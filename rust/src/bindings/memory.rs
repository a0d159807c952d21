//! The memory API behind torch.foo.memory_*.

use super::device_index;
use crate::allocator;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// torch.cuda.memory_stats-style counters of a device, as a dict.
#[pyfunction]
#[pyo3(signature = (device=None))]
fn memory_stats<'py>(py: Python<'py>, device: Option<i64>) -> PyResult<Bound<'py, PyDict>> {
    let d = allocator::device(device_index(device)?).map_err(super::AllocErr::from)?;
    let dict = PyDict::new(py);
    for (k, v) in d.stats_map() {
        dict.set_item(k, v)?;
    }
    Ok(dict)
}

/// Blocks handed out and not yet freed on a device (all devices when None).
#[pyfunction]
#[pyo3(signature = (device=None))]
fn live_blocks(device: Option<i64>) -> PyResult<usize> {
    match device {
        None => Ok(allocator::devices().iter().map(|d| d.live_blocks()).sum()),
        Some(_) => Ok(allocator::device(device_index(device)?)
            .map_err(super::AllocErr::from)?
            .live_blocks()),
    }
}

/// Releases cached blocks of every device to the system.
#[pyfunction]
fn empty_cache() {
    allocator::devices().iter().for_each(|d| d.empty_cache());
}

#[pyfunction]
#[pyo3(signature = (device=None))]
fn reset_peak_memory_stats(device: Option<i64>) -> PyResult<()> {
    allocator::device(device_index(device)?)
        .map_err(super::AllocErr::from)?
        .reset_peak_stats();
    Ok(())
}

#[pyfunction]
#[pyo3(signature = (device=None))]
fn reset_accumulated_memory_stats(device: Option<i64>) -> PyResult<()> {
    allocator::device(device_index(device)?)
        .map_err(super::AllocErr::from)?
        .reset_accumulated_stats();
    Ok(())
}

/// (free, total) bytes of a device.
#[pyfunction]
#[pyo3(signature = (device=None))]
fn mem_get_info(device: Option<i64>) -> PyResult<(usize, usize)> {
    Ok(allocator::device(device_index(device)?)
        .map_err(super::AllocErr::from)?
        .mem_get_info())
}

/// Limits a device to `fraction` of its memory.
#[pyfunction]
#[pyo3(signature = (fraction, device=None))]
fn set_per_process_memory_fraction(fraction: f64, device: Option<i64>) -> PyResult<()> {
    if !(0.0..=1.0).contains(&fraction) {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "Invalid fraction value: {fraction}. Allowed range: 0~1"
        )));
    }
    allocator::device(device_index(device)?)
        .map_err(super::AllocErr::from)?
        .set_memory_fraction(fraction);
    Ok(())
}

/// A human-readable table of a device's memory statistics.
#[pyfunction]
#[pyo3(signature = (device=None))]
fn memory_summary(device: Option<i64>) -> PyResult<String> {
    Ok(allocator::device(device_index(device)?)
        .map_err(super::AllocErr::from)?
        .memory_summary())
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(memory_stats, m)?)?;
    m.add_function(wrap_pyfunction!(live_blocks, m)?)?;
    m.add_function(wrap_pyfunction!(empty_cache, m)?)?;
    m.add_function(wrap_pyfunction!(reset_peak_memory_stats, m)?)?;
    m.add_function(wrap_pyfunction!(reset_accumulated_memory_stats, m)?)?;
    m.add_function(wrap_pyfunction!(mem_get_info, m)?)?;
    m.add_function(wrap_pyfunction!(set_per_process_memory_fraction, m)?)?;
    m.add_function(wrap_pyfunction!(memory_summary, m)?)?;
    Ok(())
}
