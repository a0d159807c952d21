//! `extern "C"` entry points called by the C++ glue (rust/glue/foo_glue.cpp).
//! Every function is total: errors become return codes or messages, never
//! panics across the FFI boundary.

use crate::{allocator, device, rng};
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
