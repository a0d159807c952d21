//! `extern "C"` entry points called by the C++ glue (rust/glue/foo_glue.cpp).
//! Every function is total: errors become return codes or messages, never
//! panics across the FFI boundary.

use crate::{allocator, device, rng, stream};
use std::ffi::{c_char, c_void, CStr};

pub(crate) fn write_message(buf: *mut c_char, len: usize, msg: &str) {
    if buf.is_null() || len == 0 {
        return;
    }
    let n = msg.len().min(len - 1);
    // SAFETY: the glue passes a buffer of `len` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(msg.as_ptr(), buf as *mut u8, n);
        *buf.add(n) = 0;
    }
}

fn dev(index: i32) -> Option<&'static allocator::DeviceAllocator> {
    usize::try_from(index)
        .ok()
        .and_then(|i| allocator::device(i).ok())
}

/// Nonzero in a child forked after foo_rs was loaded (see `fork`).
#[no_mangle]
pub extern "C" fn foo_rs_in_bad_fork() -> i32 {
    crate::fork::in_bad_fork() as i32
}

/// The message for a bad-fork child (NUL-terminated, static).
#[no_mangle]
pub extern "C" fn foo_rs_bad_fork_message() -> *const c_char {
    static MSG: std::sync::OnceLock<std::ffi::CString> = std::sync::OnceLock::new();
    MSG.get_or_init(|| std::ffi::CString::new(crate::fork::BAD_FORK_MESSAGE).unwrap())
        .as_ptr()
}

#[no_mangle]
pub extern "C" fn foo_rs_device_count() -> i32 {
    device::count() as i32
}

#[no_mangle]
pub extern "C" fn foo_rs_current_device() -> i32 {
    device::current() as i32
}

/// Returns 0, or -1 for an invalid index (the current device is unchanged).
#[no_mangle]
pub extern "C" fn foo_rs_set_device(index: i32) -> i32 {
    match usize::try_from(index).ok().map(device::set_current) {
        Some(Ok(())) => 0,
        _ => -1,
    }
}

/// Allocates on `device`; on failure returns null and writes the message.
#[no_mangle]
pub extern "C" fn foo_rs_alloc(
    device: i32,
    nbytes: usize,
    err: *mut c_char,
    err_len: usize,
) -> *mut c_void {
    let result = usize::try_from(device)
        .map_err(|_| allocator::AllocError::InvalidDevice {
            device: 0,
            count: device::count(),
        })
        .and_then(|d| allocator::allocate(d, nbytes));
    match result {
        Ok(p) => p as *mut c_void,
        Err(e) => {
            write_message(err, err_len, &e.to_string());
            std::ptr::null_mut()
        }
    }
}

/// Frees a block from whichever foo device owns it.
#[no_mangle]
pub extern "C" fn foo_rs_free(ptr: *mut c_void) {
    if ptr.is_null() {
        return;
    }
    for d in allocator::devices() {
        // SAFETY: c10 calls the deleter once per block.
        if unsafe { d.free(ptr as *mut u8) }.is_ok() {
            return;
        }
    }
    eprintln!("foo_rs: free of unknown pointer {ptr:p} ignored");
}

#[no_mangle]
pub extern "C" fn foo_rs_device_of_ptr(ptr: *const c_void) -> i32 {
    allocator::device_of_ptr(ptr as *const u8)
        .map(|d| d as i32)
        .unwrap_or(-1)
}

/// Releases cached memory of `device`, or of every device when negative.
#[no_mangle]
pub extern "C" fn foo_rs_empty_cache(device: i32) {
    if device < 0 {
        allocator::devices().iter().for_each(|d| d.empty_cache());
    } else if let Some(d) = dev(device) {
        d.empty_cache();
    }
}

/// One statistic by its torch.cuda.memory_stats key (0 when unknown).
#[no_mangle]
pub extern "C" fn foo_rs_stat(device: i32, key: *const c_char) -> i64 {
    let Some(d) = dev(device) else { return 0 };
    if key.is_null() {
        return 0;
    }
    // SAFETY: the glue passes a NUL-terminated string.
    let key = unsafe { CStr::from_ptr(key) }.to_string_lossy();
    d.stats_map()
        .into_iter()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
        .unwrap_or(0)
}

#[no_mangle]
pub extern "C" fn foo_rs_reset_peak_stats(device: i32) {
    if let Some(d) = dev(device) {
        d.reset_peak_stats();
    }
}

#[no_mangle]
pub extern "C" fn foo_rs_reset_accumulated_stats(device: i32) {
    if let Some(d) = dev(device) {
        d.reset_accumulated_stats();
    }
}

#[no_mangle]
pub extern "C" fn foo_rs_mem_get_info(device: i32, free: *mut usize, total: *mut usize) {
    let (f, t) = dev(device).map(|d| d.mem_get_info()).unwrap_or((0, 0));
    // SAFETY: the glue passes valid out-pointers.
    unsafe {
        if !free.is_null() {
            *free = f;
        }
        if !total.is_null() {
            *total = t;
        }
    }
}

#[no_mangle]
pub extern "C" fn foo_rs_gen_new(_device: i32) -> u64 {
    rng::new_generator()
}

#[no_mangle]
pub extern "C" fn foo_rs_gen_default(device: i32) -> u64 {
    rng::default_generator(device.max(0) as usize)
}

#[no_mangle]
pub extern "C" fn foo_rs_gen_clone(id: u64) -> u64 {
    rng::clone_generator(id)
}

#[no_mangle]
pub extern "C" fn foo_rs_gen_release(id: u64) {
    rng::release_generator(id)
}

#[no_mangle]
pub extern "C" fn foo_rs_gen_seed(id: u64) -> u64 {
    rng::generator_seed(id)
}

#[no_mangle]
pub extern "C" fn foo_rs_gen_offset(id: u64) -> u64 {
    rng::generator_offset(id)
}

#[no_mangle]
pub extern "C" fn foo_rs_gen_set_seed(id: u64, seed: u64) {
    rng::set_generator_seed(id, seed)
}

#[no_mangle]
pub extern "C" fn foo_rs_gen_set_offset(id: u64, offset: u64) {
    rng::set_generator_offset(id, offset)
}

#[no_mangle]
pub extern "C" fn foo_rs_gen_random_seed() -> u64 {
    rng::random_seed()
}

// ---- Streams and events (rust/src/stream.rs) -----------------------------
// Ids are plain integers; -1 (streams) and 0 (events) mean "failed", with the
// message written to `err`.

/// This thread's current stream on `device`, or -1 for an invalid device.
#[no_mangle]
pub extern "C" fn foo_rs_stream_current(device: i32) -> i64 {
    stream::current(device as i64).unwrap_or(-1)
}

/// Makes `id` current on `device`; returns the previous stream or -1.
#[no_mangle]
pub extern "C" fn foo_rs_stream_exchange(
    device: i32,
    id: i64,
    err: *mut c_char,
    err_len: usize,
) -> i64 {
    stream::exchange(device as i64, id).unwrap_or_else(|e| {
        write_message(err, err_len, &e.to_string());
        -1
    })
}

/// A new stream on `device` with `priority` (clamped), or -1.
#[no_mangle]
pub extern "C" fn foo_rs_stream_new(
    device: i32,
    priority: i32,
    err: *mut c_char,
    err_len: usize,
) -> i64 {
    stream::new_stream(device as i64, priority).unwrap_or_else(|e| {
        write_message(err, err_len, &e.to_string());
        -1
    })
}

/// The next pool stream of `device` (high priority when nonzero), or -1.
#[no_mangle]
pub extern "C" fn foo_rs_stream_pool(
    device: i32,
    high: i32,
    err: *mut c_char,
    err_len: usize,
) -> i64 {
    stream::pool_stream(device as i64, high != 0).unwrap_or_else(|e| {
        write_message(err, err_len, &e.to_string());
        -1
    })
}

/// 1 if stream `id` exists on `device`, else 0 (with the message).
#[no_mangle]
pub extern "C" fn foo_rs_stream_check(
    device: i32,
    id: i64,
    err: *mut c_char,
    err_len: usize,
) -> i32 {
    match stream::priority(device as i64, id) {
        Ok(_) => 1,
        Err(e) => {
            write_message(err, err_len, &e.to_string());
            0
        }
    }
}

/// A new event on `device` (timing when nonzero); 0 on failure.
#[no_mangle]
pub extern "C" fn foo_rs_event_create(
    device: i32,
    timing: i32,
    err: *mut c_char,
    err_len: usize,
) -> u64 {
    stream::event_create(device as i64, timing != 0).unwrap_or_else(|e| {
        write_message(err, err_len, &e.to_string());
        0
    })
}

#[no_mangle]
pub extern "C" fn foo_rs_event_destroy(event: u64) {
    stream::event_destroy(event);
}

/// Records `event` on stream `id` of `device`; 0 on success.
#[no_mangle]
pub extern "C" fn foo_rs_event_record(
    event: u64,
    device: i32,
    id: i64,
    err: *mut c_char,
    err_len: usize,
) -> i32 {
    match stream::event_record(event, device as i64, id) {
        Ok(()) => 0,
        Err(e) => {
            write_message(err, err_len, &e.to_string());
            -1
        }
    }
}

/// 1 if `event` was recorded, 0 if not, -1 if unknown.
#[no_mangle]
pub extern "C" fn foo_rs_event_recorded(event: u64) -> i32 {
    stream::event_recorded(event).map(i32::from).unwrap_or(-1)
}

/// Milliseconds from `start` to `end` into `out`; 0 on success.
#[no_mangle]
pub extern "C" fn foo_rs_event_elapsed(
    start: u64,
    end: u64,
    out: *mut f64,
    err: *mut c_char,
    err_len: usize,
) -> i32 {
    match stream::elapsed_ms(start, end) {
        Ok(ms) => {
            if !out.is_null() {
                // SAFETY: the glue passes a valid out-pointer.
                unsafe { *out = ms };
            }
            0
        }
        Err(e) => {
            write_message(err, err_len, &e.to_string());
            -1
        }
    }
}

/// foo's clock in nanoseconds (the events' and the profiler's).
#[no_mangle]
pub extern "C" fn foo_rs_now_ns() -> u64 {
    stream::now_ns()
}

// ---- Pinned host memory (rust/src/allocator/host.rs) ---------------------

/// A pinned host block of at least `nbytes`; null (with the message) on failure.
#[no_mangle]
pub extern "C" fn foo_rs_host_alloc(
    nbytes: usize,
    err: *mut c_char,
    err_len: usize,
) -> *mut c_void {
    match allocator::host().allocate(nbytes) {
        Some(p) => p as *mut c_void,
        None => {
            write_message(
                err,
                err_len,
                &format!(
                    "foo: failed to allocate {} of pinned host memory",
                    allocator::format_bytes(nbytes)
                ),
            );
            std::ptr::null_mut()
        }
    }
}

#[no_mangle]
pub extern "C" fn foo_rs_host_free(ptr: *mut c_void) {
    if !ptr.is_null() && !allocator::host().free(ptr as *mut u8) {
        eprintln!("foo_rs: free of unknown pinned pointer {ptr:p} ignored");
    }
}

#[no_mangle]
pub extern "C" fn foo_rs_host_is_pinned(ptr: *const c_void) -> i32 {
    allocator::host().is_pinned(ptr as *const u8) as i32
}
