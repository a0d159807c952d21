//! The allocator's recorded history, behind `torch.foo.memory._record_memory_history`
//! and `_snapshot` (CUDA's names and format; `torch.cuda._memory_viz` and
//! pytorch.org/memory_viz read the result).
//!
//! While recording, every allocation, free and segment change is an entry in a
//! bounded ring (`max_entries`, oldest dropped first), and each live block
//! keeps the stack trace of the call that allocated it. Stack traces are
//! c10's `CapturedTraceback`s: only C++ can gather one (Python frames read
//! from the interpreter, as CUDA's allocator does), so the glue installs two
//! hooks, gather and release, and this module holds the opaque handles.
//! Symbolizing them into frames happens when a snapshot is taken.
//!
//! Lock order: a device allocator's lock, then this recorder's (segment
//! changes are recorded under the allocator's lock). A trace is never
//! gathered under either: gathering may take the GIL.

use std::collections::{HashMap, VecDeque};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

/// Gathers the current stack (`cpp` nonzero: C++ frames too); an owned,
/// opaque handle, or null.
pub type GatherFn = extern "C" fn(cpp: i32) -> *mut c_void;
/// Releases a handle from [`GatherFn`].
pub type ReleaseFn = extern "C" fn(handle: *mut c_void);

static HOOKS: OnceLock<(GatherFn, ReleaseFn)> = OnceLock::new();

/// Installs the glue's traceback hooks (once; later calls are ignored).
pub fn set_hooks(gather: GatherFn, release: ReleaseFn) {
    let _ = HOOKS.set((gather, release));
}

/// A gathered stack trace (released when the last reference goes).
#[derive(Debug)]
pub struct Traceback(*mut c_void);

// SAFETY: a CapturedTraceback is immutable once gathered; the glue's release
// hook may run on any thread (c10 does the same with its own tracebacks).
unsafe impl Send for Traceback {}
unsafe impl Sync for Traceback {}

impl Traceback {
    /// The opaque handle, for the glue's symbolizer.
    pub fn handle(&self) -> *const c_void {
        self.0
    }
}

impl Drop for Traceback {
    fn drop(&mut self) {
        if let Some((_, release)) = HOOKS.get() {
            release(self.0);
        }
    }
}

/// What an entry records (CUDA's `TraceEntry::Action` names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Alloc,
    FreeRequested,
    FreeCompleted,
    SegmentAlloc,
    SegmentFree,
    Oom,
}

impl Action {
    /// The name in a snapshot's `device_traces`.
    pub fn name(self) -> &'static str {
        match self {
            Action::Alloc => "alloc",
            Action::FreeRequested => "free_requested",
            Action::FreeCompleted => "free_completed",
            Action::SegmentAlloc => "segment_alloc",
            Action::SegmentFree => "segment_free",
            Action::Oom => "oom",
        }
    }
}

/// One recorded event.
#[derive(Debug, Clone)]
pub struct Entry {
    pub action: Action,
    pub device: usize,
    pub addr: usize,
    pub size: usize,
    /// Microseconds since the Unix epoch.
    pub time_us: i64,
    pub frames: Option<Arc<Traceback>>,
}

/// Which stack traces are kept (`_record_memory_history`'s `context`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    /// None.
    None,
    /// Those of the live blocks' allocations.
    State,
    /// Also on the trace's alloc entries.
    Alloc,
    /// Also on its free entries.
    All,
}

#[derive(Default)]
struct State {
    entries: VecDeque<Entry>,
    max_entries: usize,
    /// Whether trace entries are kept (`enabled="all"`; `"state"` keeps only
    /// the live blocks' traces).
    trace: bool,
    context: Option<Context>,
    cpp: bool,
    /// Allocation trace of each live block allocated while recording, by
    /// (device, address).
    live: HashMap<(usize, usize), Option<Arc<Traceback>>>,
}

/// A recorder: the process has one ([`RECORDER`]); tests make their own.
pub struct Recorder {
    enabled: AtomicBool,
    state: Mutex<Option<State>>,
}

/// The process's recorder, fed by the c10 allocator's entry points and the
/// device allocators.
pub static RECORDER: Recorder = Recorder::new();

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

fn gather(cpp: bool) -> Option<Arc<Traceback>> {
    let (gather, _) = HOOKS.get()?;
    let h = gather(i32::from(cpp));
    (!h.is_null()).then(|| Arc::new(Traceback(h)))
}

fn push(st: &mut State, entry: Entry) {
    if st.trace && st.max_entries > 0 {
        if st.entries.len() == st.max_entries {
            st.entries.pop_front();
        }
        st.entries.push_back(entry);
    }
}

impl Recorder {
    pub const fn new() -> Recorder {
        Recorder {
            enabled: AtomicBool::new(false),
            state: Mutex::new(None),
        }
    }

    fn state(&self) -> MutexGuard<'_, Option<State>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether anything is being recorded (one relaxed load on the hot path).
    #[inline]
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Starts (or reconfigures) recording: `trace` keeps alloc/free entries
    /// (at most `max_entries`), `context` says which of them carry stack
    /// traces. `clear` drops the entries recorded so far.
    pub fn start(&self, trace: bool, context: Context, cpp: bool, max_entries: usize, clear: bool) {
        let mut s = self.state();
        let st = s.get_or_insert_with(State::default);
        st.trace = trace;
        st.context = Some(context);
        st.cpp = cpp;
        st.max_entries = max_entries;
        if clear || !trace {
            st.entries.clear();
        }
        while st.entries.len() > st.max_entries {
            st.entries.pop_front();
        }
        self.enabled.store(true, Ordering::Relaxed);
    }

    /// Stops recording and drops everything recorded (`enabled=None`).
    pub fn stop(&self) {
        self.enabled.store(false, Ordering::Relaxed);
        // Dropping the tracebacks may take the GIL (the glue's release): not
        // under the recorder's lock.
        let old = self.state().take();
        drop(old);
    }

    /// `Some(cpp)` if an allocation (or, with `free`, a free) gets a stack
    /// trace.
    fn wants_trace(&self, free: bool) -> Option<bool> {
        let s = self.state();
        let st = s.as_ref()?;
        match st.context? {
            Context::All => Some(st.cpp),
            Context::State | Context::Alloc if !free => Some(st.cpp),
            _ => None,
        }
    }

    /// Records an allocation of `size` bytes at `addr` (call with no lock
    /// held: the stack trace may take the GIL).
    pub fn on_alloc(&self, device: usize, addr: usize, size: usize) {
        let frames = self.wants_trace(false).and_then(gather);
        let mut s = self.state();
        let Some(st) = s.as_mut() else { return };
        st.live.insert((device, addr), frames.clone());
        let frames = frames.filter(|_| st.context != Some(Context::State));
        let time_us = now_us();
        push(
            st,
            Entry {
                action: Action::Alloc,
                device,
                addr,
                size,
                time_us,
                frames,
            },
        );
    }

    /// Records the free of the block at `addr` (call with no lock held):
    /// CUDA's `free_requested` then `free_completed` (foo frees at once).
    pub fn on_free(&self, device: usize, addr: usize, size: usize) {
        let frames = self.wants_trace(true).and_then(gather);
        let mut s = self.state();
        let Some(st) = s.as_mut() else { return };
        let old = st.live.remove(&(device, addr));
        let time_us = now_us();
        for action in [Action::FreeRequested, Action::FreeCompleted] {
            let frames = frames.clone();
            push(
                st,
                Entry {
                    action,
                    device,
                    addr,
                    size,
                    time_us,
                    frames,
                },
            );
        }
        drop(s);
        drop(old); // may release a traceback: outside the lock
    }

    /// Records a segment change or an OOM (no stack trace: called under the
    /// allocator's lock).
    pub fn on_segment(&self, action: Action, device: usize, addr: usize, size: usize) {
        if let Some(st) = self.state().as_mut() {
            let time_us = now_us();
            push(
                st,
                Entry {
                    action,
                    device,
                    addr,
                    size,
                    time_us,
                    frames: None,
                },
            );
        }
    }

    /// The recorded entries of `device`, oldest first.
    pub fn entries(&self, device: usize) -> Vec<Entry> {
        self.state().as_ref().map_or_else(Vec::new, |st| {
            st.entries
                .iter()
                .filter(|e| e.device == device)
                .cloned()
                .collect()
        })
    }

    /// The allocation trace of the live block at `addr` of `device`, if it
    /// was allocated while recording with stack traces.
    pub fn block_trace(&self, device: usize, addr: usize) -> Option<Arc<Traceback>> {
        self.state()
            .as_ref()?
            .live
            .get(&(device, addr))
            .and_then(Clone::clone)
    }
}

impl Default for Recorder {
    fn default() -> Recorder {
        Recorder::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_a_bounded_ring_of_entries_per_device() {
        let r = Recorder::new();
        assert!(!r.enabled());
        r.on_alloc(0, 0x800, 1); // not recording: nothing kept
        r.start(true, Context::None, false, 4, true);
        r.on_alloc(0, 0x1000, 100);
        r.on_alloc(1, 0x2000, 200);
        r.on_free(0, 0x1000, 100);
        r.on_segment(Action::SegmentAlloc, 0, 0x1000, 2 << 20);
        let e0: Vec<_> = r
            .entries(0)
            .iter()
            .map(|e| (e.action, e.addr, e.size))
            .collect();
        // Four entries kept: the first alloc on device 0 fell out of the ring.
        assert_eq!(
            e0,
            vec![
                (Action::FreeRequested, 0x1000, 100),
                (Action::FreeCompleted, 0x1000, 100),
                (Action::SegmentAlloc, 0x1000, 2 << 20),
            ]
        );
        assert_eq!(r.entries(1).len(), 1);
        assert!(r.block_trace(1, 0x2000).is_none(), "no hooks, no traces");
        // "state": live blocks only, no entries.
        r.start(false, Context::None, false, 4, false);
        assert!(r.entries(0).is_empty() && r.entries(1).is_empty());
        r.on_alloc(0, 0x3000, 1);
        assert!(r.entries(0).is_empty());
        r.stop();
        assert!(!r.enabled());
        r.start(true, Context::All, false, 8, false);
        assert!(r.entries(1).is_empty(), "stop dropped everything");
    }
}
