//! `extern "C"` entry points called by the C++ glue (rust/glue/foo_glue.cpp).
//! Every function is total: errors become return codes or messages, and
//! panics are caught at the boundary ([`guard`]): the entry returns its
//! documented failure value and the panic's message is kept for the glue,
//! which raises it as a c10 error ([`foo_rs_take_panic`]).

use crate::{allocator, device, rng, stream};
use std::any::Any;
use std::cell::Cell;
use std::ffi::{c_char, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

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

// ---- Panic barrier (shared with native.rs) --------------------------------

thread_local! {
    /// The message of a panic the last entry point called on this thread
    /// caught (cleared when the next one starts).
    static PANIC: Cell<Option<String>> = const { Cell::new(None) };
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    let what = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("no message");
    format!("foo: internal error (panic): {what}")
}

/// Runs `f` behind a panic barrier: its value, or the message of the panic
/// it raised (no unwinding leaves the call). The one barrier of every
/// `extern "C"` entry point (this file's through [`guard`], native.rs's
/// through its `run`).
pub(crate) fn catch_panic<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| panic_message(&*p))
}

/// An entry point's body behind the barrier: `f`'s value, or after a panic
/// `failure` (the entry's documented failure value) with the message kept
/// for [`foo_rs_take_panic`].
fn guard<R>(failure: R, f: impl FnOnce() -> R) -> R {
    // `try_with`: a call from a thread-local destructor after this one's is
    // gone still runs (without the record).
    let _ = PANIC.try_with(Cell::take);
    catch_panic(f).unwrap_or_else(|msg| {
        let _ = PANIC.try_with(|p| p.set(Some(msg)));
        failure
    })
}

/// [`guard`] for entries with a message buffer: the panic's message is
/// also written to `err`.
fn guard_err<R>(failure: R, err: *mut c_char, err_len: usize, f: impl FnOnce() -> R) -> R {
    let _ = PANIC.try_with(Cell::take);
    catch_panic(f).unwrap_or_else(|msg| {
        write_message(err, err_len, &msg);
        let _ = PANIC.try_with(|p| p.set(Some(msg)));
        failure
    })
}

/// [`guard`] for entries with no failure value (deleters, destructors and
/// `noexcept` callers that cannot raise): a panic is printed to stderr.
fn guard_void(what: &str, f: impl FnOnce()) {
    if let Err(msg) = catch_panic(f) {
        eprintln!("{msg} (in {what}; ignored)");
    }
}

/// After an entry point returned its failure value: 1 (and the message in
/// `buf`) if that was a panic caught on this thread, which the glue raises
/// as a c10 error; 0 if the value was an ordinary answer. Clears the record.
#[no_mangle]
pub extern "C" fn foo_rs_take_panic(buf: *mut c_char, len: usize) -> i32 {
    catch_panic(|| match PANIC.try_with(Cell::take).ok().flatten() {
        Some(msg) => {
            write_message(buf, len, &msg);
            1
        }
        None => 0,
    })
    .unwrap_or(0)
}

fn dev(index: i32) -> Option<&'static allocator::DeviceAllocator> {
    usize::try_from(index)
        .ok()
        .and_then(|i| allocator::device(i).ok())
}

/// Nonzero in a child forked after foo_rs was loaded (see `fork`); 0 after
/// a panic.
#[no_mangle]
pub extern "C" fn foo_rs_in_bad_fork() -> i32 {
    guard(0, || crate::fork::in_bad_fork() as i32)
}

/// The message for a bad-fork child (NUL-terminated, static; never null).
#[no_mangle]
pub extern "C" fn foo_rs_bad_fork_message() -> *const c_char {
    static MSG: std::sync::OnceLock<std::ffi::CString> = std::sync::OnceLock::new();
    guard(
        c"foo: internal error (panic) reading the bad-fork message".as_ptr(),
        || {
            MSG.get_or_init(|| {
                std::ffi::CString::new(crate::fork::BAD_FORK_MESSAGE).unwrap_or_default()
            })
            .as_ptr()
        },
    )
}

/// Number of foo devices; -1 after a panic.
#[no_mangle]
pub extern "C" fn foo_rs_device_count() -> i32 {
    guard(-1, || device::count() as i32)
}

/// This thread's current device; -1 after a panic.
#[no_mangle]
pub extern "C" fn foo_rs_current_device() -> i32 {
    guard(-1, || device::current() as i32)
}

/// Returns 0, or -1 for an invalid index or a panic (the current device is
/// unchanged).
#[no_mangle]
pub extern "C" fn foo_rs_set_device(index: i32) -> i32 {
    guard(-1, || {
        match usize::try_from(index).ok().map(device::set_current) {
            Some(Ok(())) => 0,
            _ => -1,
        }
    })
}

/// Allocates on `device`; on failure (a panic included) returns null and
/// writes the message. Zero bytes give null with no message.
#[no_mangle]
pub extern "C" fn foo_rs_alloc(
    device: i32,
    nbytes: usize,
    err: *mut c_char,
    err_len: usize,
) -> *mut c_void {
    guard_err(std::ptr::null_mut(), err, err_len, || {
        let result = usize::try_from(device)
            .map_err(|_| allocator::AllocError::InvalidDevice {
                device: 0,
                count: device::count(),
            })
            .and_then(|d| allocator::allocate(d, nbytes).map(|p| (d, p)));
        match result {
            Ok((d, p)) => {
                if allocator::history::RECORDER.enabled() && !p.is_null() {
                    allocator::history::RECORDER.on_alloc(d, p as usize, nbytes);
                }
                p as *mut c_void
            }
            Err(e) => {
                write_message(err, err_len, &e.to_string());
                std::ptr::null_mut()
            }
        }
    })
}

/// Frees a block from whichever foo device owns it (c10's deleter: cannot
/// fail; an unknown pointer or a panic is reported on stderr). Returns the
/// bytes the allocation had been asked for, and writes its device to
/// `device` (-1 if none freed it), for the profiler's memory events.
#[no_mangle]
pub extern "C" fn foo_rs_free(ptr: *mut c_void, device: *mut i32) -> usize {
    let mut freed = (-1, 0);
    if !ptr.is_null() {
        guard_void("foo_rs_free", || {
            for d in allocator::devices() {
                // SAFETY: c10 calls the deleter once per block.
                if let Ok((index, size)) = unsafe { d.free_on_device(ptr as *mut u8) } {
                    if allocator::history::RECORDER.enabled() {
                        allocator::history::RECORDER.on_free(index, ptr as usize, size);
                    }
                    freed = (index as i32, size);
                    return;
                }
            }
            eprintln!("foo_rs: free of unknown pointer {ptr:p} ignored");
        });
    }
    if !device.is_null() {
        // SAFETY: the glue passes a valid out-pointer.
        unsafe { *device = freed.0 };
    }
    freed.1
}

/// Bytes allocated and reserved on `device` now (exact without merging the
/// allocator's bins), for the profiler's memory events. -1 for a bad device.
#[no_mangle]
pub extern "C" fn foo_rs_memory_totals(
    device: i32,
    allocated: *mut usize,
    reserved: *mut usize,
) -> i32 {
    guard(-1, || {
        let Some(d) = usize::try_from(device)
            .ok()
            .and_then(|d| allocator::device(d).ok())
        else {
            return -1;
        };
        let (a, r) = d.totals();
        // SAFETY: the glue passes valid out-pointers.
        unsafe {
            *allocated = a;
            *reserved = r;
        }
        0
    })
}

/// Installs the glue's stack-trace hooks for the allocator's recorded
/// history (`allocator::history`).
#[no_mangle]
pub extern "C" fn foo_rs_set_traceback_hooks(
    gather: allocator::history::GatherFn,
    release: allocator::history::ReleaseFn,
) {
    guard_void("foo_rs_set_traceback_hooks", || {
        allocator::history::set_hooks(gather, release)
    })
}

/// The foo device whose memory holds `ptr`, or -1 (none, or a panic).
#[no_mangle]
pub extern "C" fn foo_rs_device_of_ptr(ptr: *const c_void) -> i32 {
    guard(-1, || {
        allocator::device_of_ptr(ptr as *const u8)
            .map(|d| d as i32)
            .unwrap_or(-1)
    })
}

/// Releases cached memory of `device`, or of every device when negative.
/// 0, or -1 after a panic.
#[no_mangle]
pub extern "C" fn foo_rs_empty_cache(device: i32) -> i32 {
    guard(-1, || {
        if device < 0 {
            allocator::devices().iter().for_each(|d| d.empty_cache());
        } else if let Some(d) = dev(device) {
            d.empty_cache();
        }
        0
    })
}

/// One statistic by its torch.cuda.memory_stats key (0 when unknown); -1
/// after a panic (ask [`foo_rs_take_panic`]).
#[no_mangle]
pub extern "C" fn foo_rs_stat(device: i32, key: *const c_char) -> i64 {
    guard(-1, || {
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
    })
}

/// 0, or -1 after a panic.
#[no_mangle]
pub extern "C" fn foo_rs_reset_peak_stats(device: i32) -> i32 {
    guard(-1, || {
        if let Some(d) = dev(device) {
            d.reset_peak_stats();
        }
        0
    })
}

/// 0, or -1 after a panic.
#[no_mangle]
pub extern "C" fn foo_rs_reset_accumulated_stats(device: i32) -> i32 {
    guard(-1, || {
        if let Some(d) = dev(device) {
            d.reset_accumulated_stats();
        }
        0
    })
}

/// Free and total bytes of `device` into the out-pointers; 0, or -1 after
/// a panic (nothing written).
#[no_mangle]
pub extern "C" fn foo_rs_mem_get_info(device: i32, free: *mut usize, total: *mut usize) -> i32 {
    guard(-1, || {
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
        0
    })
}

// ---- Generators (rust/src/rng) ---------------------------------------------
// Ids and seeds are any u64: the failure values below are also ordinary
// answers, so the glue asks `foo_rs_take_panic` when it sees one.

/// A new generator's id; `u64::MAX` after a panic.
#[no_mangle]
pub extern "C" fn foo_rs_gen_new(_device: i32) -> u64 {
    guard(u64::MAX, rng::new_generator)
}

/// The id of `device`'s default generator; `u64::MAX` after a panic.
#[no_mangle]
pub extern "C" fn foo_rs_gen_default(device: i32) -> u64 {
    guard(u64::MAX, || rng::default_generator(device.max(0) as usize))
}

/// A new generator with `id`'s state; `u64::MAX` after a panic.
#[no_mangle]
pub extern "C" fn foo_rs_gen_clone(id: u64) -> u64 {
    guard(u64::MAX, || rng::clone_generator(id))
}

/// Forgets generator `id` (a destructor's call: a panic goes to stderr).
#[no_mangle]
pub extern "C" fn foo_rs_gen_release(id: u64) {
    guard_void("foo_rs_gen_release", || rng::release_generator(id))
}

/// The seed of `id`; 0 after a panic.
#[no_mangle]
pub extern "C" fn foo_rs_gen_seed(id: u64) -> u64 {
    guard(0, || rng::generator_seed(id))
}

/// The Philox offset of `id`; 0 after a panic.
#[no_mangle]
pub extern "C" fn foo_rs_gen_offset(id: u64) -> u64 {
    guard(0, || rng::generator_offset(id))
}

/// 0, or -1 after a panic.
#[no_mangle]
pub extern "C" fn foo_rs_gen_set_seed(id: u64, seed: u64) -> i32 {
    guard(-1, || {
        rng::set_generator_seed(id, seed);
        0
    })
}

/// 0, or -1 after a panic.
#[no_mangle]
pub extern "C" fn foo_rs_gen_set_offset(id: u64, offset: u64) -> i32 {
    guard(-1, || {
        rng::set_generator_offset(id, offset);
        0
    })
}

/// A nondeterministic seed; 0 after a panic.
#[no_mangle]
pub extern "C" fn foo_rs_gen_random_seed() -> u64 {
    guard(0, rng::random_seed)
}

// ---- Streams and events (rust/src/stream.rs) -----------------------------
// Ids are plain integers; -1 (streams) and 0 (events) mean "failed", with the
// message written to `err` (a panic's too).

/// This thread's current stream on `device`, or -1 for an invalid device
/// or a panic.
#[no_mangle]
pub extern "C" fn foo_rs_stream_current(device: i32) -> i64 {
    guard(-1, || stream::current(device as i64).unwrap_or(-1))
}

/// Makes `id` current on `device`; returns the previous stream or -1.
#[no_mangle]
pub extern "C" fn foo_rs_stream_exchange(
    device: i32,
    id: i64,
    err: *mut c_char,
    err_len: usize,
) -> i64 {
    guard_err(-1, err, err_len, || {
        stream::exchange(device as i64, id).unwrap_or_else(|e| {
            write_message(err, err_len, &e.to_string());
            -1
        })
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
    guard_err(-1, err, err_len, || {
        stream::new_stream(device as i64, priority).unwrap_or_else(|e| {
            write_message(err, err_len, &e.to_string());
            -1
        })
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
    guard_err(-1, err, err_len, || {
        stream::pool_stream(device as i64, high != 0).unwrap_or_else(|e| {
            write_message(err, err_len, &e.to_string());
            -1
        })
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
    guard_err(0, err, err_len, || {
        match stream::priority(device as i64, id) {
            Ok(_) => 1,
            Err(e) => {
                write_message(err, err_len, &e.to_string());
                0
            }
        }
    })
}

/// A new event on `device` (timing when nonzero); 0 on failure.
#[no_mangle]
pub extern "C" fn foo_rs_event_create(
    device: i32,
    timing: i32,
    err: *mut c_char,
    err_len: usize,
) -> u64 {
    guard_err(0, err, err_len, || {
        stream::event_create(device as i64, timing != 0).unwrap_or_else(|e| {
            write_message(err, err_len, &e.to_string());
            0
        })
    })
}

/// Forgets `event` (a `noexcept` caller: a panic goes to stderr).
#[no_mangle]
pub extern "C" fn foo_rs_event_destroy(event: u64) {
    guard_void("foo_rs_event_destroy", || stream::event_destroy(event))
}

/// Records `event` on stream `id` of `device`; 0 on success, -1 on failure.
#[no_mangle]
pub extern "C" fn foo_rs_event_record(
    event: u64,
    device: i32,
    id: i64,
    err: *mut c_char,
    err_len: usize,
) -> i32 {
    guard_err(-1, err, err_len, || {
        match stream::event_record(event, device as i64, id) {
            Ok(()) => 0,
            Err(e) => {
                write_message(err, err_len, &e.to_string());
                -1
            }
        }
    })
}

/// 1 if `event` was recorded, 0 if not, -1 if unknown or after a panic.
#[no_mangle]
pub extern "C" fn foo_rs_event_recorded(event: u64) -> i32 {
    guard(-1, || {
        stream::event_recorded(event).map(i32::from).unwrap_or(-1)
    })
}

/// Milliseconds from `start` to `end` into `out`; 0 on success, -1 on failure.
#[no_mangle]
pub extern "C" fn foo_rs_event_elapsed(
    start: u64,
    end: u64,
    out: *mut f64,
    err: *mut c_char,
    err_len: usize,
) -> i32 {
    guard_err(-1, err, err_len, || match stream::elapsed_ms(start, end) {
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
    })
}

/// foo's clock in nanoseconds (the events' and the profiler's); 0 after a
/// panic.
#[no_mangle]
pub extern "C" fn foo_rs_now_ns() -> u64 {
    guard(0, stream::now_ns)
}

// ---- Pinned host memory (rust/src/allocator/host.rs) ---------------------

/// A pinned host block of at least `nbytes`; null (with the message) on
/// failure, a panic included.
#[no_mangle]
pub extern "C" fn foo_rs_host_alloc(
    nbytes: usize,
    err: *mut c_char,
    err_len: usize,
) -> *mut c_void {
    guard_err(
        std::ptr::null_mut(),
        err,
        err_len,
        || match allocator::host().allocate(nbytes) {
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
        },
    )
}

/// Frees a pinned block (c10's deleter: an unknown pointer or a panic is
/// reported on stderr).
#[no_mangle]
pub extern "C" fn foo_rs_host_free(ptr: *mut c_void) {
    guard_void("foo_rs_host_free", || {
        if !ptr.is_null() && !allocator::host().free(ptr as *mut u8) {
            eprintln!("foo_rs: free of unknown pinned pointer {ptr:p} ignored");
        }
    })
}

/// 1 if `ptr` is in a pinned block; 0 if not, or after a panic.
#[no_mangle]
pub extern "C" fn foo_rs_host_is_pinned(ptr: *const c_void) -> i32 {
    guard(0, || allocator::host().is_pinned(ptr as *const u8) as i32)
}
