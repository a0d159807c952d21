//! Fork safety. A child forked after foo_rs was loaded inherits the
//! allocator's state but not rayon's worker threads, so a kernel there could
//! hang. As CUDA does, such a child is in "bad fork": its first use of foo
//! raises a clear error instead.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

static BAD_FORK: AtomicBool = AtomicBool::new(false);

extern "C" fn in_child() {
    // The panic barrier of every entry point, though a store cannot panic.
    let _ = crate::ffi::catch_panic(|| BAD_FORK.store(true, Ordering::SeqCst));
}

/// Registers the fork handler (once per process).
pub fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a handler that only stores to an atomic.
        unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
    });
}

/// Whether this process is a child forked after foo_rs was loaded.
pub fn in_bad_fork() -> bool {
    BAD_FORK.load(Ordering::Relaxed)
}

/// The error a bad-fork child gets on first use.
pub const BAD_FORK_MESSAGE: &str = "Cannot re-initialize foo in forked subprocess. foo_rs was \
    initialised in the parent process; to use foo with multiprocessing, you must use the 'spawn' \
    start method";
