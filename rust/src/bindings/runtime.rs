//! The runtime API behind torch.foo's streams, events and pinned host memory
//! that Python asks of Rust directly (the rest goes through c10: the glue's
//! device guard and hooks call the same Rust functions).

use super::stream_err;
use crate::{allocator, stream};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// `torch.cuda.host_memory_stats()`-style counters of the pinned host allocator.
#[pyfunction]
fn host_memory_stats<'py>(py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (k, v) in allocator::host().stats_map() {
        dict.set_item(k, v)?;
    }
    Ok(dict)
}

/// Gives the pinned host allocator's cached blocks back to the system.
#[pyfunction]
fn host_empty_cache() {
    allocator::host().empty_cache();
}

#[pyfunction]
fn host_reset_peak_memory_stats() {
    allocator::host().reset_peak_stats();
}

#[pyfunction]
fn host_reset_accumulated_memory_stats() {
    allocator::host().reset_accumulated_stats();
}

/// Events created and not yet destroyed (for leak checks).
#[pyfunction]
fn live_events() -> usize {
    stream::live_events()
}

/// (least, greatest) stream priority, as torch.cuda's: lower is higher.
#[pyfunction]
fn stream_priority_range() -> (i32, i32) {
    (stream::PRIORITY_LOW, stream::PRIORITY_HIGH)
}

/// The priority of stream `id` on `device`.
#[pyfunction]
fn stream_priority(device: i64, id: i64) -> PyResult<i32> {
    stream::priority(device, id).map_err(stream_err)
}

/// Id of this thread's current stream on `device`.
#[pyfunction]
fn current_stream_id(device: i64) -> PyResult<i64> {
    stream::current(device).map_err(stream_err)
}

/// Makes stream `id` current on `device` for this thread; returns the previous id.
#[pyfunction]
fn exchange_stream(device: i64, id: i64) -> PyResult<i64> {
    stream::exchange(device, id).map_err(stream_err)
}

/// Milliseconds between the records of events `start` and `end` (their
/// `torch.Event.event_id`s; 0 is an event never recorded).
#[pyfunction]
fn event_elapsed_ms(start: u64, end: u64) -> PyResult<f64> {
    if start == 0 || end == 0 {
        return Err(stream_err(stream::StreamError::NotRecorded));
    }
    stream::elapsed_ms(start, end).map_err(stream_err)
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(host_memory_stats, m)?)?;
    m.add_function(wrap_pyfunction!(host_empty_cache, m)?)?;
    m.add_function(wrap_pyfunction!(host_reset_peak_memory_stats, m)?)?;
    m.add_function(wrap_pyfunction!(host_reset_accumulated_memory_stats, m)?)?;
    m.add_function(wrap_pyfunction!(live_events, m)?)?;
    m.add_function(wrap_pyfunction!(stream_priority_range, m)?)?;
    m.add_function(wrap_pyfunction!(stream_priority, m)?)?;
    m.add_function(wrap_pyfunction!(current_stream_id, m)?)?;
    m.add_function(wrap_pyfunction!(exchange_stream, m)?)?;
    m.add_function(wrap_pyfunction!(event_elapsed_ms, m)?)?;
    Ok(())
}
