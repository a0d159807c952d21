//! A fork-join pool for the kernels' flat parallel loops, built for
//! microsecond-scale jobs.
//!
//! Why not rayon for these loops: a rayon job started from a thread outside
//! its pool (Python's) is injected into the pool's queue and the caller blocks
//! on a latch, so every job pays for waking a sleeping worker and then waking
//! the caller. On a virtual machine whose idle vCPUs halt, each wake-up costs
//! tens of microseconds: a 256K-element add took ~140 us on two rayon threads
//! against ~125 us on one. OpenMP (torch CPU) avoids this by letting workers
//! spin for a while after a parallel region. This pool does the same:
//!
//! - the calling thread runs tasks too (no hand-back wake-up);
//! - workers spin on an epoch counter for [`spin_time`] after their last job
//!   (`FOO_RS_SPIN_US`, default 8 ms, as long as torch CPU's libgomp team
//!   stays busy here; `0` sleeps at once), yielding the core to any other
//!   runnable thread after the first microseconds, then sleep on a
//!   condition variable;
//! - one job at a time: a caller that finds the pool busy (another Python
//!   thread's kernel, or a nested call from inside a task) runs its tasks
//!   inline, so concurrent callers never wait for each other.
//!
//! The thread count follows [`num_threads`]: `FOO_RS_NUM_THREADS`, else the
//! hook the PyO3 module installs (torch's `get_num_threads()`, so
//! `torch.set_num_threads` applies to foo), else the machine's parallelism.
//! Callers split work by task index only, so results never depend on how
//! many threads ran.

use std::cell::Cell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// A closure run once per task index.
type TaskFn<'a> = dyn Fn(usize) + Sync + 'a;

struct Pool {
    /// Even: a job (or none) is published; odd: a caller is setting one up.
    epoch: AtomicU64,
    /// Workers inside the job-claiming section.
    in_flight: AtomicUsize,
    /// The published job: a `*const TaskFn` stored as two words.
    func: [AtomicUsize; 2],
    ntasks: AtomicUsize,
    next: AtomicUsize,
    remaining: AtomicUsize,
    /// Workers allowed to join the current job (threads - 1).
    helpers: AtomicUsize,
    /// First panic payload of a task, re-raised on the caller.
    panic: Mutex<Option<Box<dyn std::any::Any + Send>>>,
    busy: Mutex<()>,
    spawned: Mutex<usize>,
    sleep: Mutex<usize>,
    wake: Condvar,
}

static POOL: OnceLock<Pool> = OnceLock::new();

thread_local! {
    /// Set on pool workers and while a caller runs a job: nested calls run inline.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
    /// A thread count for calls from this thread only (see [`with_threads`]).
    static LOCAL: Cell<usize> = const { Cell::new(0) };
}

/// Runs `f` with [`num_threads`] fixed to `n` for kernels called from this
/// thread (tests use it to check that results do not depend on the count).
pub fn with_threads<R>(n: usize, f: impl FnOnce() -> R) -> R {
    let old = LOCAL.with(|c| c.replace(n));
    struct Restore(usize);
    impl Drop for Restore {
        fn drop(&mut self) {
            LOCAL.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(old);
    f()
}

/// Signature of the thread-count hook (returns <= 0 when it has no answer).
pub type ThreadsHook = extern "C" fn() -> i32;
static HOOK: AtomicPtr<()> = AtomicPtr::new(std::ptr::null_mut());
static OVERRIDE: AtomicUsize = AtomicUsize::new(0);

/// Installs the function [`num_threads`] asks (the PyO3 module installs
/// torch's `at::get_num_threads`).
pub fn set_threads_hook(hook: ThreadsHook) {
    HOOK.store(hook as *mut (), Release);
}

/// Fixes the thread count (0 returns to the environment / hook / machine).
pub fn set_num_threads(n: usize) {
    OVERRIDE.store(n, Release);
}

/// A positive integer from the environment, or `default`: how the pool and
/// the kernels' parallelism thresholds (`FOO_RS_NUM_THREADS`,
/// `FOO_RS_PAR_MIN`, `FOO_RS_PAR_GEMM`) read their knobs. It lives here, the
/// lowest of the kernel modules, so the modules above it only import.
pub(crate) fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&v| v > 0)
        .unwrap_or(default)
}

fn env_threads() -> usize {
    static V: OnceLock<usize> = OnceLock::new();
    *V.get_or_init(|| env_usize("FOO_RS_NUM_THREADS", 0).min(1024))
}

/// Threads a parallel loop uses, the calling thread included.
pub fn num_threads() -> usize {
    let l = LOCAL.with(|c| c.get());
    if l > 0 {
        return l;
    }
    let o = OVERRIDE.load(Acquire);
    if o > 0 {
        return o;
    }
    let e = env_threads();
    if e > 0 {
        return e;
    }
    let h = HOOK.load(Acquire);
    if !h.is_null() {
        // SAFETY: only `set_threads_hook` stores here, from a `ThreadsHook`.
        let f: ThreadsHook = unsafe { std::mem::transmute::<*mut (), ThreadsHook>(h) };
        let n = f();
        if n > 0 {
            return n as usize;
        }
    }
    static MACHINE: OnceLock<usize> = OnceLock::new();
    *MACHINE.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The default spin, in microseconds: about as long as torch CPU's OpenMP
/// (libgomp) workers stay busy after a parallel region on this 2-core VM
/// (7.8 ms, `python scripts/wake_latency.py --omp-spin`). A sleeping worker
/// takes from under a millisecond to several to run again here, and a job
/// it misses runs on the caller alone: after 20-50 ms idle a bf16 linear
/// (256x1024->1024) ran at one thread's speed for two calls. With the
/// earlier 200 us, gaps inside a training step (Python, autograd's thread)
/// put the worker to sleep: the side-by-side MLP step at 2 threads (`python
/// -m foo_rs.bench --group training -k "MLP 784" --repeats 7`, two runs
/// each) read float32 1.42 and 0.97x CPU, bf16 autocast 1.25 and 1.09 at
/// 200 us; 0.93 and 0.93, 1.08 and 1.07 at 8 ms. Spinning costs a core
/// while idle, as OpenMP's does; the yield above hands it to any runnable
/// thread.
pub const SPIN_US_DEFAULT: u64 = 8000;

/// How long an idle worker spins before it sleeps: `FOO_RS_SPIN_US`, by
/// default [`SPIN_US_DEFAULT`].
pub fn spin_time() -> Duration {
    static V: OnceLock<u64> = OnceLock::new();
    let us = *V.get_or_init(|| {
        std::env::var("FOO_RS_SPIN_US")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(SPIN_US_DEFAULT)
    });
    Duration::from_micros(us)
}

fn pool() -> &'static Pool {
    POOL.get_or_init(|| Pool {
        epoch: AtomicU64::new(0),
        in_flight: AtomicUsize::new(0),
        func: [AtomicUsize::new(0), AtomicUsize::new(0)],
        ntasks: AtomicUsize::new(0),
        next: AtomicUsize::new(0),
        remaining: AtomicUsize::new(0),
        helpers: AtomicUsize::new(0),
        panic: Mutex::new(None),
        busy: Mutex::new(()),
        spawned: Mutex::new(0),
        sleep: Mutex::new(0),
        wake: Condvar::new(),
    })
}

impl Pool {
    /// Claims and runs tasks of the published job until none is left.
    fn run_tasks(&self) {
        let ntasks = self.ntasks.load(Acquire);
        let words = [self.func[0].load(Acquire), self.func[1].load(Acquire)];
        // A raw pointer: it may be stale (the job already finished) until a
        // task index below `ntasks` is claimed, which proves it is live.
        // SAFETY: the words were stored from a `*const TaskFn`.
        let f = unsafe { std::mem::transmute::<[usize; 2], *const TaskFn>(words) };
        loop {
            let t = self.next.fetch_add(1, AcqRel);
            if t >= ntasks {
                return;
            }
            // SAFETY: task `t` is unclaimed work of the current job, whose
            // caller does not return before `remaining` reaches 0.
            if let Err(p) = catch_unwind(AssertUnwindSafe(|| unsafe { (*f)(t) })) {
                let mut slot = self.panic.lock().unwrap_or_else(|e| e.into_inner());
                slot.get_or_insert(p);
            }
            self.remaining.fetch_sub(1, AcqRel);
        }
    }

    fn worker(&'static self, index: usize) {
        INSIDE.with(|c| c.set(true));
        let mut seen = self.epoch.load(Acquire);
        loop {
            // Wait for a new even epoch: spin, then sleep.
            let start = Instant::now();
            let mut spins = 0u32;
            let e = loop {
                let e = self.epoch.load(Acquire);
                if e != seen && e.is_multiple_of(2) {
                    break e;
                }
                spins = spins.wrapping_add(1);
                if (spins.is_multiple_of(256) || spins > 2048) && start.elapsed() >= spin_time() {
                    let mut sleepers = self.sleep.lock().unwrap_or_else(|e| e.into_inner());
                    *sleepers += 1;
                    while self.epoch.load(Acquire) == seen || self.epoch.load(Acquire) % 2 == 1 {
                        sleepers = self.wake.wait(sleepers).unwrap_or_else(|e| e.into_inner());
                    }
                    *sleepers -= 1;
                    drop(sleepers);
                    continue;
                }
                if spins < 2048 {
                    std::hint::spin_loop();
                } else {
                    // Past the first microseconds, yield between checks so a
                    // runnable thread on this core (torch's OpenMP workers,
                    // the Python thread) gets it at once.
                    std::thread::yield_now();
                }
            };
            seen = e;
            if index >= self.helpers.load(Acquire) {
                continue;
            }
            self.in_flight.fetch_add(1, SeqCst);
            if self.epoch.load(SeqCst) == e {
                self.run_tasks();
            }
            self.in_flight.fetch_sub(1, SeqCst);
        }
    }

    fn ensure_workers(&'static self, n: usize) {
        let mut spawned = self.spawned.lock().unwrap_or_else(|e| e.into_inner());
        while *spawned < n {
            let index = *spawned;
            let ok = std::thread::Builder::new()
                .name(format!("foo-worker-{index}"))
                .spawn(move || self.worker(index))
                .is_ok();
            if !ok {
                break;
            }
            *spawned += 1;
        }
        self.helpers.store((*spawned).min(n), Release);
    }
}

/// Runs `f(t)` for every `t` in `0..ntasks`, on the calling thread and up to
/// `num_threads() - 1` workers; returns when all have run. Tasks must touch
/// disjoint data. A panic in a task is re-raised here.
pub fn parallel_for(ntasks: usize, f: impl Fn(usize) + Sync) {
    let threads = num_threads();
    if ntasks <= 1 || threads <= 1 || INSIDE.with(|c| c.get()) {
        (0..ntasks).for_each(f);
        return;
    }
    let p = pool();
    let Ok(guard) = p.busy.try_lock() else {
        (0..ntasks).for_each(f);
        return;
    };
    p.ensure_workers(threads - 1);
    // Set-up: an odd epoch turns workers away; wait out any still inside.
    p.epoch.fetch_add(1, SeqCst);
    let mut waits = 0u32;
    while p.in_flight.load(SeqCst) != 0 {
        // A worker is between seeing the last job and leaving it: a few
        // instructions, unless it was preempted there.
        waits = waits.wrapping_add(1);
        if waits > 1024 {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
    let fref: &TaskFn = &f;
    // SAFETY: a fat pointer is two words; it is read back only while `f` lives.
    let words: [usize; 2] =
        unsafe { std::mem::transmute::<*const TaskFn, [usize; 2]>(fref as *const TaskFn) };
    p.func[0].store(words[0], Release);
    p.func[1].store(words[1], Release);
    p.ntasks.store(ntasks, Release);
    p.next.store(0, Release);
    p.remaining.store(ntasks, Release);
    p.epoch.fetch_add(1, SeqCst);
    {
        let sleepers = p.sleep.lock().unwrap_or_else(|e| e.into_inner());
        if *sleepers > 0 {
            p.wake.notify_all();
        }
    }
    INSIDE.with(|c| c.set(true));
    p.run_tasks();
    INSIDE.with(|c| c.set(false));
    let start = Instant::now();
    let mut spins = 0u32;
    while p.remaining.load(Acquire) != 0 {
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(1024) && start.elapsed() > Duration::from_micros(50) {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
    let panic = p.panic.lock().unwrap_or_else(|e| e.into_inner()).take();
    drop(guard);
    if let Some(payload) = panic {
        resume_unwind(payload);
    }
}

/// [`parallel_for`] for fallible tasks: every task runs; the error of the
/// lowest-numbered failing task is returned (deterministic whatever the
/// thread count).
pub fn try_parallel_for<E: Send>(
    ntasks: usize,
    f: impl Fn(usize) -> Result<(), E> + Sync,
) -> Result<(), E> {
    let first: Mutex<Option<(usize, E)>> = Mutex::new(None);
    let failed = AtomicU64::new(u64::MAX);
    parallel_for(ntasks, |t| {
        if (t as u64) > failed.load(Relaxed) {
            return; // a lower task already failed; its error wins
        }
        if let Err(e) = f(t) {
            failed.fetch_min(t as u64, Relaxed);
            let mut slot = first.lock().unwrap_or_else(|e| e.into_inner());
            if slot.as_ref().is_none_or(|(k, _)| t < *k) {
                *slot = Some((t, e));
            }
        }
    });
    match first.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some((_, e)) => Err(e),
        None => Ok(()),
    }
}

/// Runs `f(i)` for every `i` in `0..n` in tasks of at least `min_len`
/// indices (at most four tasks per thread), as [`parallel_for`].
pub fn for_range(n: usize, min_len: usize, f: impl Fn(usize) + Sync) {
    let tasks = n.div_ceil(min_len.max(1)).min(num_threads() * 4).max(1);
    let chunk = n.div_ceil(tasks).max(1);
    parallel_for(n.div_ceil(chunk), |t| {
        (t * chunk..((t + 1) * chunk).min(n)).for_each(&f)
    });
}

/// [`for_range`] for fallible work: the error of the lowest failing index's
/// task is returned.
pub fn try_for_range<E: Send>(
    n: usize,
    min_len: usize,
    f: impl Fn(usize) -> Result<(), E> + Sync,
) -> Result<(), E> {
    let tasks = n.div_ceil(min_len.max(1)).min(num_threads() * 4).max(1);
    let chunk = n.div_ceil(tasks).max(1);
    try_parallel_for(n.div_ceil(chunk), |t| {
        (t * chunk..((t + 1) * chunk).min(n)).try_for_each(&f)
    })
}

/// `(0..n).map(f).collect()`, computed on the pool.
pub fn collect<R: Send>(n: usize, f: impl Fn(usize) -> R + Sync) -> Vec<R> {
    struct Slots<R>(*mut Option<R>);
    // SAFETY: each index is written by exactly one task.
    unsafe impl<R: Send> Sync for Slots<R> {}
    let mut v: Vec<Option<R>> = (0..n).map(|_| None).collect();
    let slots = Slots(v.as_mut_ptr());
    for_range(n, 1, |i| {
        let s = &slots;
        // SAFETY: `i < n` and no other task writes slot `i`.
        unsafe { *s.0.add(i) = Some(f(i)) };
    });
    v.into_iter()
        .map(|x| x.expect("collect: every index ran"))
        .collect()
}

/// `rayon::join` on this pool: `a` and `b` on two threads when the pool is
/// free (nested joins run in sequence on their thread, so a recursive tree
/// runs its top split in parallel). With more than two threads the work goes
/// to rayon, whose work stealing splits deeper levels too. The results are
/// the same either way.
pub fn join<RA: Send, RB: Send>(
    a: impl FnOnce() -> RA + Send,
    b: impl FnOnce() -> RB + Send,
) -> (RA, RB) {
    let threads = num_threads();
    if threads > 2 {
        return rayon::join(a, b);
    }
    if threads <= 1 || INSIDE.with(|c| c.get()) {
        return (a(), b());
    }
    let (fa, fb) = (Mutex::new(Some(a)), Mutex::new(Some(b)));
    let (ra, rb) = (Mutex::new(None), Mutex::new(None));
    parallel_for(2, |t| {
        if t == 0 {
            let f = fa.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(f) = f {
                *ra.lock().unwrap_or_else(|e| e.into_inner()) = Some(f());
            }
        } else {
            let f = fb.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(f) = f {
                *rb.lock().unwrap_or_else(|e| e.into_inner()) = Some(f());
            }
        }
    });
    let ra = ra
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .expect("join: first task ran");
    let rb = rb
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .expect("join: second task ran");
    (ra, rb)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn every_task_runs_once() {
        for n in [0usize, 1, 2, 3, 17, 1000] {
            let hits: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
            parallel_for(n, |t| {
                hits[t].fetch_add(1, Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Relaxed) == 1), "n={n}");
        }
    }

    #[test]
    fn many_jobs_back_to_back_and_from_several_threads() {
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for round in 0..500usize {
                        let n = 1 + round % 9;
                        let sum = AtomicUsize::new(0);
                        parallel_for(n, |t| {
                            sum.fetch_add(t + 1, Relaxed);
                        });
                        assert_eq!(sum.load(Relaxed), n * (n + 1) / 2);
                    }
                });
            }
        });
    }

    #[test]
    fn nested_calls_run_inline() {
        let total = AtomicUsize::new(0);
        parallel_for(4, |_| {
            parallel_for(5, |_| {
                total.fetch_add(1, Relaxed);
            });
        });
        assert_eq!(total.load(Relaxed), 20);
    }

    #[test]
    fn lowest_failing_task_wins() {
        for _ in 0..50 {
            let r = try_parallel_for(64, |t| if t % 10 == 7 { Err(t) } else { Ok(()) });
            assert_eq!(r, Err(7));
        }
        assert_eq!(try_parallel_for(8, |_| Ok::<(), ()>(())), Ok(()));
    }

    #[test]
    fn panic_reaches_the_caller_and_pool_survives() {
        let r = catch_unwind(|| parallel_for(8, |t| assert!(t != 5, "task five")));
        assert!(r.is_err());
        let sum = AtomicUsize::new(0);
        parallel_for(8, |t| {
            sum.fetch_add(t, Relaxed);
        });
        assert_eq!(sum.load(Relaxed), 28);
    }

    #[test]
    fn join_and_for_range() {
        fn tree(lo: u64, hi: u64) -> u64 {
            if hi - lo <= 4 {
                return (lo..hi).sum();
            }
            let mid = lo + (hi - lo) / 2;
            let (a, b) = join(|| tree(lo, mid), || tree(mid, hi));
            a + b
        }
        assert_eq!(tree(0, 1000), 999 * 1000 / 2);
        for (n, min_len) in [(0usize, 1usize), (1, 1), (10, 3), (1000, 7), (5, 100)] {
            let hits: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
            for_range(n, min_len, |i| {
                hits[i].fetch_add(1, Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Relaxed) == 1), "n={n}");
        }
    }

    #[test]
    fn workers_wake_after_sleeping() {
        parallel_for(4, |_| {});
        std::thread::sleep(spin_time() + Duration::from_millis(5));
        let sum = AtomicUsize::new(0);
        parallel_for(4, |t| {
            sum.fetch_add(t, Relaxed);
        });
        assert_eq!(sum.load(Relaxed), 6);
    }
}
