//! The memory API behind torch.foo.memory_*.

use super::device_index;
use crate::allocator;
use crate::allocator::history::{Context, Traceback, RECORDER};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr};
use std::sync::Arc;

extern "C" {
    /// Symbolizes traceback handles (rust/glue/foo_glue.cpp): `frame` is
    /// called per frame of each, innermost first. 0, or -1 with `err` set.
    fn foo_glue_symbolize(
        handles: *const *const c_void,
        n: usize,
        frame: extern "C" fn(*mut c_void, usize, *const c_char, *const c_char, u64),
        ctx: *mut c_void,
        err: *mut c_char,
        err_len: usize,
    ) -> i32;
}

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

/// `torch.foo.memory._record_memory_history`'s arguments, checked as
/// CUDA's binding checks them: `enabled` None (stop), "state" or "all";
/// `context` None, "state", "alloc" or "all"; `stacks` "python" or "all".
#[pyfunction]
#[pyo3(signature = (enabled, context, stacks, max_entries, clear_history))]
fn record_memory_history(
    enabled: Option<&str>,
    context: Option<&str>,
    stacks: &str,
    max_entries: usize,
    clear_history: bool,
) -> PyResult<()> {
    let bad = |what: &str, v: &str| {
        PyValueError::new_err(format!("foo: _record_memory_history: invalid {what} {v:?}"))
    };
    let cpp = match stacks {
        "python" => false,
        "all" => true,
        s => return Err(bad("stacks", s)),
    };
    let context = match context {
        None => Context::None,
        Some("state") => Context::State,
        Some("alloc") => Context::Alloc,
        Some("all") => Context::All,
        Some(c) => return Err(bad("context", c)),
    };
    match enabled {
        None => RECORDER.stop(),
        Some("state") => RECORDER.start(false, context, cpp, max_entries, clear_history),
        Some("all") => RECORDER.start(true, context, cpp, max_entries, clear_history),
        Some(e) => return Err(bad("enabled", e)),
    }
    Ok(())
}

/// Frames of each traceback, as `torch.foo.memory._snapshot()` lists them:
/// one list object per distinct traceback.
struct Frames<'py> {
    py: Python<'py>,
    index: HashMap<usize, usize>,
    handles: Vec<Arc<Traceback>>,
    lists: Vec<Bound<'py, PyList>>,
    empty: Bound<'py, PyList>,
}

impl<'py> Frames<'py> {
    fn new(py: Python<'py>) -> Frames<'py> {
        Frames {
            py,
            index: HashMap::new(),
            handles: Vec::new(),
            lists: Vec::new(),
            empty: PyList::empty(py),
        }
    }

    /// Registers a traceback; its slot in `lists` once symbolized.
    fn add(&mut self, t: &Option<Arc<Traceback>>) -> Option<usize> {
        let t = t.as_ref()?;
        let key = t.handle() as usize;
        let n = self.handles.len();
        Some(*self.index.entry(key).or_insert_with(|| {
            self.handles.push(t.clone());
            n
        }))
    }

    fn symbolize(&mut self) -> PyResult<()> {
        type Collected = Vec<Vec<(String, String, u64)>>;
        extern "C" fn frame(
            ctx: *mut c_void,
            i: usize,
            file: *const c_char,
            name: *const c_char,
            line: u64,
        ) {
            // SAFETY: `ctx` is the `Collected` below; the strings are
            // NUL-terminated and live for this call.
            let out = unsafe { &mut *(ctx as *mut Collected) };
            let s = |p: *const c_char| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
            if let Some(v) = out.get_mut(i) {
                v.push((s(file), s(name), line));
            }
        }
        let mut out: Collected = vec![Vec::new(); self.handles.len()];
        if !self.handles.is_empty() {
            let ptrs: Vec<*const c_void> = self.handles.iter().map(|t| t.handle()).collect();
            let mut err = [0 as c_char; 512];
            // SAFETY: live handles from the glue's gather hook; `frame`
            // writes only into `out`; the GIL is held (Python frames).
            let rc = unsafe {
                foo_glue_symbolize(
                    ptrs.as_ptr(),
                    ptrs.len(),
                    frame,
                    &mut out as *mut Collected as *mut c_void,
                    err.as_mut_ptr(),
                    err.len(),
                )
            };
            if rc != 0 {
                // SAFETY: the glue NUL-terminates the message.
                let msg = unsafe { CStr::from_ptr(err.as_ptr()) }.to_string_lossy();
                return Err(PyRuntimeError::new_err(format!(
                    "foo: symbolizing recorded stack traces failed: {msg}"
                )));
            }
        }
        for frames in out {
            let list = PyList::empty(self.py);
            for (filename, name, line) in frames {
                let d = PyDict::new(self.py);
                d.set_item("filename", filename)?;
                d.set_item("name", name)?;
                d.set_item("line", line)?;
                list.append(d)?;
            }
            self.lists.push(list);
        }
        Ok(())
    }

    fn get(&self, slot: Option<usize>) -> Bound<'py, PyList> {
        slot.map_or_else(|| self.empty.clone(), |i| self.lists[i].clone())
    }
}

/// `torch.foo.memory._snapshot()`: every device's segments and blocks (with
/// the stack that allocated each live block, if recorded) and each device's
/// recorded trace, in CUDA's format.
#[pyfunction]
fn memory_snapshot<'py>(py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
    let devices = allocator::devices();
    let segments: Vec<_> = devices.iter().map(|d| d.snapshot()).collect();
    let traces: Vec<_> = devices
        .iter()
        .map(|d| RECORDER.entries(d.index()))
        .collect();
    let mut frames = Frames::new(py);
    let block_slots: Vec<Vec<Vec<Option<usize>>>> = segments
        .iter()
        .enumerate()
        .map(|(dev, segs)| {
            segs.iter()
                .map(|seg| {
                    seg.blocks
                        .iter()
                        .map(|b| {
                            let t = b.allocated.then(|| RECORDER.block_trace(dev, b.address));
                            frames.add(&t.flatten())
                        })
                        .collect()
                })
                .collect()
        })
        .collect();
    let trace_slots: Vec<Vec<Option<usize>>> = traces
        .iter()
        .map(|t| t.iter().map(|e| frames.add(&e.frames)).collect())
        .collect();
    frames.symbolize()?;

    let seg_list = PyList::empty(py);
    for (dev, segs) in segments.iter().enumerate() {
        for (si, seg) in segs.iter().enumerate() {
            let blocks = PyList::empty(py);
            let (mut allocated, mut requested) = (0usize, 0usize);
            for (bi, b) in seg.blocks.iter().enumerate() {
                let d = PyDict::new(py);
                d.set_item("address", b.address)?;
                d.set_item("size", b.size)?;
                d.set_item("requested_size", b.requested)?;
                let state = if b.allocated {
                    "active_allocated"
                } else {
                    "inactive"
                };
                d.set_item("state", state)?;
                d.set_item("frames", frames.get(block_slots[dev][si][bi]))?;
                if b.allocated {
                    allocated += b.size;
                    requested += b.requested;
                }
                blocks.append(d)?;
            }
            let d = PyDict::new(py);
            d.set_item("device", dev)?;
            d.set_item("address", seg.address)?;
            d.set_item("total_size", seg.total_size)?;
            d.set_item("allocated_size", allocated)?;
            d.set_item("active_size", allocated)?;
            d.set_item("requested_size", requested)?;
            d.set_item("stream", 0)?;
            d.set_item("segment_type", if seg.large { "large" } else { "small" })?;
            d.set_item("segment_pool_id", (0, 0))?;
            d.set_item("is_expandable", false)?;
            d.set_item("frames", PyList::empty(py))?;
            d.set_item("blocks", blocks)?;
            seg_list.append(d)?;
        }
    }
    let trace_list = PyList::empty(py);
    for (dev, entries) in traces.iter().enumerate() {
        let l = PyList::empty(py);
        for (i, e) in entries.iter().enumerate() {
            let d = PyDict::new(py);
            d.set_item("action", e.action.name())?;
            d.set_item("addr", e.addr)?;
            d.set_item("size", e.size)?;
            d.set_item("stream", 0)?;
            d.set_item("time_us", e.time_us)?;
            d.set_item("frames", frames.get(trace_slots[dev][i]))?;
            if e.action == allocator::history::Action::Oom {
                d.set_item("device_free", devices[dev].mem_get_info().0)?;
            }
            l.append(d)?;
        }
        trace_list.append(l)?;
    }
    let out = PyDict::new(py);
    out.set_item("segments", seg_list)?;
    out.set_item("device_traces", trace_list)?;
    Ok(out)
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(record_memory_history, m)?)?;
    m.add_function(wrap_pyfunction!(memory_snapshot, m)?)?;
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
