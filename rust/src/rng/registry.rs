//! Generator state: (seed, offset) per generator id. Ids `0..device_count`
//! are the devices' default generators; `new_generator` hands out the rest.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// Seed of every generator until someone seeds it (torch's default seed).
pub const DEFAULT_SEED: u64 = 67280421310721;

/// First id handed to a non-default generator.
const FIRST_USER_ID: u64 = 1 << 32;

#[derive(Clone, Copy, Debug)]
struct State {
    seed: u64,
    offset: u64,
}

fn table() -> &'static Mutex<HashMap<u64, State>> {
    static TABLE: OnceLock<Mutex<HashMap<u64, State>>> = OnceLock::new();
    TABLE.get_or_init(|| Mutex::new(HashMap::new()))
}

static NEXT_ID: AtomicU64 = AtomicU64::new(FIRST_USER_ID);

fn with_state<R>(id: u64, f: impl FnOnce(&mut State) -> R) -> R {
    let mut t = table().lock().unwrap_or_else(|e| e.into_inner());
    let s = t.entry(id).or_insert(State {
        seed: DEFAULT_SEED,
        offset: 0,
    });
    f(s)
}

/// The id of device `device`'s default generator.
pub fn default_generator(device: usize) -> u64 {
    device as u64
}

/// A fresh generator with the default seed.
pub fn new_generator() -> u64 {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    with_state(id, |_| ());
    id
}

/// A new generator with `id`'s state.
pub fn clone_generator(id: u64) -> u64 {
    let st = with_state(id, |s| *s);
    let new = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    with_state(new, |s| *s = st);
    new
}

/// Forgets a non-default generator.
pub fn release_generator(id: u64) {
    if id >= FIRST_USER_ID {
        table()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }
}

pub fn generator_seed(id: u64) -> u64 {
    with_state(id, |s| s.seed)
}

pub fn generator_offset(id: u64) -> u64 {
    with_state(id, |s| s.offset)
}

/// Seeds a generator; its offset restarts at zero (as torch's do).
pub fn set_generator_seed(id: u64, seed: u64) {
    with_state(id, |s| {
        s.seed = seed;
        s.offset = 0;
    })
}

pub fn set_generator_offset(id: u64, offset: u64) {
    with_state(id, |s| s.offset = offset)
}

/// Takes `blocks` Philox blocks from generator `id`: returns the seed and the
/// first block's counter, and advances the offset past them.
pub fn reserve_offset(id: u64, blocks: u64) -> (u64, u64) {
    with_state(id, |s| {
        let start = s.offset;
        s.offset = s.offset.wrapping_add(blocks);
        (s.seed, start)
    })
}

/// Takes `blocks` Philox blocks from device `device`'s default generator (the
/// draw of a kernel called without an explicit generator): `(seed, first block)`.
pub fn reserve_default(device: usize, blocks: u64) -> (u64, u64) {
    reserve_offset(default_generator(device), blocks)
}

/// A non-deterministic seed (time and address entropy), for `seed()`.
pub fn random_seed() -> u64 {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeding_resets_offset_and_reserve_advances() {
        let g = new_generator();
        set_generator_seed(g, 42);
        assert_eq!(reserve_offset(g, 3), (42, 0));
        assert_eq!(reserve_offset(g, 2), (42, 3));
        assert_eq!(generator_offset(g), 5);
        set_generator_seed(g, 7);
        assert_eq!(generator_offset(g), 0);
        let c = clone_generator(g);
        assert_eq!(generator_seed(c), 7);
        release_generator(g);
        release_generator(c);
    }
}
