//! The current foo device, per thread (as CUDA's current device is).

use std::cell::Cell;

thread_local! {
    static CURRENT: Cell<usize> = const { Cell::new(0) };
}

/// Number of foo devices.
pub fn count() -> usize {
    crate::allocator::devices().len()
}

/// This thread's current foo device.
pub fn current() -> usize {
    CURRENT.with(|c| c.get())
}

/// Makes `index` this thread's current device; refuses an invalid index.
pub fn set_current(index: usize) -> Result<(), crate::allocator::AllocError> {
    crate::allocator::device(index)?;
    CURRENT.with(|c| c.set(index));
    Ok(())
}
