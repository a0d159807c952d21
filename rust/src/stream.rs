//! Streams and events of foo, with torch.cuda's names and meaning.
//!
//! foo runs every kernel synchronously on the calling thread, so the work
//! submitted to a stream is complete when the submitting call returns. That
//! makes the ordering guarantees of streams hold trivially; what remains real
//! state is here: which streams exist (a default stream and a pool per device,
//! plus streams created on demand with a priority), each thread's current
//! stream per device, and events (recorded or not, on which stream, at what
//! time), whose timestamps give `elapsed_time`.
//!
//! Stream ids: 0 is a device's default stream; `1..=POOL_SIZE` its
//! low-priority pool, `POOL_SIZE+1..=2*POOL_SIZE` its high-priority pool;
//! larger ids are streams made by `new_stream`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Instant;

/// Streams per priority in each device's pool (as CUDA's 32).
pub const POOL_SIZE: i64 = 32;
/// The lowest (default) and highest priority foo accepts; lower is higher,
/// as in CUDA. Priorities outside are clamped.
pub const PRIORITY_LOW: i32 = 0;
/// See [`PRIORITY_LOW`].
pub const PRIORITY_HIGH: i32 = -1;
/// The default stream's id on every device.
pub const DEFAULT_STREAM: i64 = 0;

/// Why a stream or event call failed.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamError {
    /// No foo device has this index.
    InvalidDevice { device: i64, count: usize },
    /// The stream id was never handed out on that device.
    UnknownStream { device: i64, stream: i64 },
    /// The event id is unknown (never created or already destroyed).
    UnknownEvent { event: u64 },
    /// `elapsed_time` with an event that was not recorded.
    NotRecorded,
    /// `elapsed_time` with an event created without timing.
    TimingDisabled,
    /// The two events of `elapsed_time` belong to different devices.
    DeviceMismatch { first: i64, second: i64 },
}

impl fmt::Display for StreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StreamError::InvalidDevice { device, count } => write!(
                f,
                "Invalid foo device index {device}: there are {count} foo devices \
                 (set FOO_RS_DEVICE_COUNT to change)"
            ),
            StreamError::UnknownStream { device, stream } => {
                write!(f, "foo:{device} has no stream with id {stream}")
            }
            StreamError::UnknownEvent { event } => write!(f, "foo: unknown event {event}"),
            StreamError::NotRecorded => write!(
                f,
                "Both events must be recorded before calculating elapsed time (foo)."
            ),
            StreamError::TimingDisabled => write!(
                f,
                "Both events must be created with argument 'enable_timing=True' (foo)."
            ),
            StreamError::DeviceMismatch { first, second } => write!(
                f,
                "foo events are on different devices (foo:{first} and foo:{second})"
            ),
        }
    }
}

impl std::error::Error for StreamError {}

fn check_device(device: i64) -> Result<usize, StreamError> {
    let count = crate::device::count();
    match usize::try_from(device) {
        Ok(d) if d < count => Ok(d),
        _ => Err(StreamError::InvalidDevice { device, count }),
    }
}

/// Clamps a requested priority to foo's range (as CUDA does).
pub fn clamp_priority(priority: i32) -> i32 {
    priority.clamp(PRIORITY_HIGH, PRIORITY_LOW)
}

struct Registry {
    /// Priority of each stream made by `new_stream`, per device.
    created: Mutex<Vec<HashMap<i64, i32>>>,
    next_id: AtomicI64,
    /// Round-robin cursors of the pools, per device: (low, high).
    cursors: Vec<(AtomicUsize, AtomicUsize)>,
}

/// Locks one of this file's tables. Every critical section is one map
/// operation, which leaves the map whole even if it panics, so a poisoned
/// lock still guards valid state (and panicking here would only turn one
/// failure into a failure of every later stream call).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn registry() -> &'static Registry {
    static REG: OnceLock<Registry> = OnceLock::new();
    REG.get_or_init(|| {
        let n = crate::device::count();
        Registry {
            created: Mutex::new(vec![HashMap::new(); n]),
            next_id: AtomicI64::new(2 * POOL_SIZE + 1),
            cursors: (0..n)
                .map(|_| (AtomicUsize::new(0), AtomicUsize::new(0)))
                .collect(),
        }
    })
}

/// The priority of stream `stream` on `device`.
pub fn priority(device: i64, stream: i64) -> Result<i32, StreamError> {
    let d = check_device(device)?;
    match stream {
        DEFAULT_STREAM => Ok(PRIORITY_LOW),
        s if (1..=POOL_SIZE).contains(&s) => Ok(PRIORITY_LOW),
        s if (POOL_SIZE + 1..=2 * POOL_SIZE).contains(&s) => Ok(PRIORITY_HIGH),
        s => lock(&registry().created)[d]
            .get(&s)
            .copied()
            .ok_or(StreamError::UnknownStream { device, stream }),
    }
}

/// Whether `stream` exists on `device`.
pub fn exists(device: i64, stream: i64) -> bool {
    priority(device, stream).is_ok()
}

/// A new stream on `device` with `priority` (clamped); streams are never
/// destroyed (as CUDA's pool streams are not), the id stays valid.
pub fn new_stream(device: i64, priority: i32) -> Result<i64, StreamError> {
    let d = check_device(device)?;
    let id = registry().next_id.fetch_add(1, Ordering::Relaxed);
    lock(&registry().created)[d].insert(id, clamp_priority(priority));
    Ok(id)
}

/// The next stream of `device`'s pool, round robin (high or low priority).
pub fn pool_stream(device: i64, high_priority: bool) -> Result<i64, StreamError> {
    let d = check_device(device)?;
    let (low, high) = &registry().cursors[d];
    let cursor = if high_priority { high } else { low };
    let i = (cursor.fetch_add(1, Ordering::Relaxed) as i64) % POOL_SIZE;
    Ok(if high_priority {
        POOL_SIZE + 1 + i
    } else {
        1 + i
    })
}

thread_local! {
    static CURRENT: RefCell<Vec<i64>> = const { RefCell::new(Vec::new()) };
}

/// This thread's current stream on `device` (the default stream until set).
pub fn current(device: i64) -> Result<i64, StreamError> {
    let d = check_device(device)?;
    Ok(CURRENT.with(|c| c.borrow().get(d).copied().unwrap_or(DEFAULT_STREAM)))
}

/// Makes `stream` this thread's current stream on `device`; returns the
/// previous one.
pub fn exchange(device: i64, stream: i64) -> Result<i64, StreamError> {
    let d = check_device(device)?;
    if !exists(device, stream) {
        return Err(StreamError::UnknownStream { device, stream });
    }
    Ok(CURRENT.with(|c| {
        let mut v = c.borrow_mut();
        if v.len() <= d {
            v.resize(d + 1, DEFAULT_STREAM);
        }
        std::mem::replace(&mut v[d], stream)
    }))
}

/// Nanoseconds on foo's clock (monotonic, since the first call).
pub fn now_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

#[derive(Debug, Clone)]
struct Event {
    device: i64,
    timing: bool,
    /// (stream, timestamp in ns) of the last record.
    recorded: Option<(i64, u64)>,
}

fn events() -> &'static Mutex<HashMap<u64, Event>> {
    static EVENTS: OnceLock<Mutex<HashMap<u64, Event>>> = OnceLock::new();
    EVENTS.get_or_init(|| Mutex::new(HashMap::new()))
}

static NEXT_EVENT: AtomicU64 = AtomicU64::new(1);

/// A new unrecorded event on `device`; `timing` enables `elapsed_time`.
pub fn event_create(device: i64, timing: bool) -> Result<u64, StreamError> {
    check_device(device)?;
    let id = NEXT_EVENT.fetch_add(1, Ordering::Relaxed);
    lock(events()).insert(
        id,
        Event {
            device,
            timing,
            recorded: None,
        },
    );
    Ok(id)
}

/// Forgets an event (unknown ids are ignored: c10 destroys events once).
pub fn event_destroy(event: u64) {
    lock(events()).remove(&event);
}

/// Events alive (created and not destroyed).
pub fn live_events() -> usize {
    lock(events()).len()
}

/// Records `event` on `stream`: all work submitted to the stream so far has
/// run (kernels are synchronous), so the event completes now, and its
/// timestamp is taken now.
pub fn event_record(event: u64, device: i64, stream: i64) -> Result<(), StreamError> {
    if !exists(device, stream) {
        check_device(device)?;
        return Err(StreamError::UnknownStream { device, stream });
    }
    let mut map = lock(events());
    let e = map
        .get_mut(&event)
        .ok_or(StreamError::UnknownEvent { event })?;
    if e.device != device {
        return Err(StreamError::DeviceMismatch {
            first: e.device,
            second: device,
        });
    }
    e.recorded = Some((stream, now_ns()));
    Ok(())
}

/// Whether `event` was ever recorded (and so, complete).
pub fn event_recorded(event: u64) -> Result<bool, StreamError> {
    lock(events())
        .get(&event)
        .map(|e| e.recorded.is_some())
        .ok_or(StreamError::UnknownEvent { event })
}

/// Milliseconds between the records of `start` and `end` (as CUDA's
/// `cudaEventElapsedTime`; negative if `end` was recorded first).
pub fn elapsed_ms(start: u64, end: u64) -> Result<f64, StreamError> {
    let map = lock(events());
    let a = map
        .get(&start)
        .ok_or(StreamError::UnknownEvent { event: start })?;
    let b = map
        .get(&end)
        .ok_or(StreamError::UnknownEvent { event: end })?;
    if !a.timing || !b.timing {
        return Err(StreamError::TimingDisabled);
    }
    if a.device != b.device {
        return Err(StreamError::DeviceMismatch {
            first: a.device,
            second: b.device,
        });
    }
    match (a.recorded, b.recorded) {
        (Some((_, t0)), Some((_, t1))) => Ok((t1 as f64 - t0 as f64) / 1e6),
        _ => Err(StreamError::NotRecorded),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_round_robin_and_priorities() {
        let a = pool_stream(0, false).unwrap();
        assert!((1..=POOL_SIZE).contains(&a));
        let h = pool_stream(0, true).unwrap();
        assert_eq!(priority(0, h).unwrap(), PRIORITY_HIGH);
        let n = new_stream(0, -5).unwrap();
        assert_eq!(priority(0, n).unwrap(), PRIORITY_HIGH);
        assert!(priority(1, n).is_err(), "a stream belongs to one device");
        assert!(new_stream(99, 0).is_err());
    }

    #[test]
    fn current_stream_is_per_thread() {
        let s = new_stream(0, 0).unwrap();
        assert_eq!(exchange(0, s).unwrap(), DEFAULT_STREAM);
        assert_eq!(current(0).unwrap(), s);
        std::thread::spawn(|| assert_eq!(current(0).unwrap(), DEFAULT_STREAM))
            .join()
            .unwrap();
        assert_eq!(exchange(0, DEFAULT_STREAM).unwrap(), s);
        assert!(exchange(0, 1 << 40).is_err());
    }

    #[test]
    fn events_time_and_errors() {
        let a = event_create(0, true).unwrap();
        let b = event_create(0, true).unwrap();
        assert_eq!(elapsed_ms(a, b), Err(StreamError::NotRecorded));
        event_record(a, 0, DEFAULT_STREAM).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(5));
        event_record(b, 0, DEFAULT_STREAM).unwrap();
        let ms = elapsed_ms(a, b).unwrap();
        assert!((4.0..1000.0).contains(&ms), "{ms}");
        let c = event_create(0, false).unwrap();
        event_record(c, 0, DEFAULT_STREAM).unwrap();
        assert_eq!(elapsed_ms(a, c), Err(StreamError::TimingDisabled));
        assert!(event_record(a, 1, DEFAULT_STREAM).is_err());
        for e in [a, b, c] {
            event_destroy(e);
        }
        assert!(event_recorded(a).is_err());
    }
}
