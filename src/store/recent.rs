//! Keys of recently stored events, so a resend is answered without a trip
//! through the writer.
//!
//! Providers resend what they think failed, and a retry storm is mostly
//! resends of recent deliveries. Each key here belongs to a row that is
//! already durable: keys are added only when the writer (or the syncer)
//! answers a command whose group is on disk, so a hit can be answered
//! "200 duplicate" at once, with the row id, exactly as the writer would.
//! A miss proves nothing and goes to the writer, which asks the database.
//!
//! Memory stays bounded with two generations per shard: when the current
//! map fills, it becomes the previous one and the oldest generation is
//! dropped. Whatever deletes rows (retention, purge) must call [`forget`].
//!
//! [`forget`]: RecentKeys::forget

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::Mutex;

const SHARDS: usize = 16;

/// Keys remembered in all, at most (about 100 bytes each).
pub const CAPACITY: usize = 65_536;

pub struct RecentKeys {
    hasher: RandomState,
    shards: Vec<Mutex<Generations>>,
}

#[derive(Default)]
struct Generations {
    current: HashMap<String, i64>,
    previous: HashMap<String, i64>,
}

impl Default for RecentKeys {
    fn default() -> Self {
        RecentKeys {
            hasher: RandomState::new(),
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
        }
    }
}

/// Source names cannot contain a newline (config validation), so this key
/// is unambiguous.
fn key(source: &str, delivery_id: &str) -> String {
    let mut k = String::with_capacity(source.len() + 1 + delivery_id.len());
    k.push_str(source);
    k.push('\n');
    k.push_str(delivery_id);
    k
}

impl RecentKeys {
    fn shard(&self, key: &str) -> std::sync::MutexGuard<'_, Generations> {
        let i = (self.hasher.hash_one(key) as usize) % SHARDS;
        // A panic while holding the lock cannot leave the maps torn (no
        // code between lock and unlock can panic halfway through an
        // update), so a poisoned lock is still usable.
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The row id stored under `(source, delivery_id)`, if remembered.
    pub fn get(&self, source: &str, delivery_id: &str) -> Option<i64> {
        let k = key(source, delivery_id);
        let shard = self.shard(&k);
        shard
            .current
            .get(&k)
            .or_else(|| shard.previous.get(&k))
            .copied()
    }

    /// Remembers a durable row.
    pub fn insert(&self, source: &str, delivery_id: &str, id: i64) {
        let k = key(source, delivery_id);
        let mut shard = self.shard(&k);
        if shard.current.len() >= CAPACITY / SHARDS / 2 {
            shard.previous = std::mem::take(&mut shard.current);
        }
        shard.current.insert(k, id);
    }

    /// Forgets a key whose row is being deleted.
    pub fn forget(&self, source: &str, delivery_id: &str) {
        let k = key(source, delivery_id);
        let mut shard = self.shard(&k);
        shard.current.remove(&k);
        shard.previous.remove(&k);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_forgets_and_keeps_sources_apart() {
        let r = RecentKeys::default();
        r.insert("github", "a", 1);
        assert_eq!(r.get("github", "a"), Some(1));
        assert_eq!(r.get("stripe", "a"), None);
        assert_eq!(r.get("github", "b"), None);
        r.forget("github", "a");
        assert_eq!(r.get("github", "a"), None);
    }

    #[test]
    fn memory_is_bounded_and_recent_keys_survive() {
        let r = RecentKeys::default();
        let n = CAPACITY * 4;
        for i in 0..n {
            r.insert("s", &i.to_string(), i as i64);
        }
        let held: usize = r
            .shards
            .iter()
            .map(|s| {
                let s = s.lock().unwrap();
                s.current.len() + s.previous.len()
            })
            .sum();
        assert!(held <= CAPACITY, "{held}");
        // The most recent keys are all still there.
        for i in n - 1000..n {
            assert_eq!(r.get("s", &i.to_string()), Some(i as i64));
        }
    }
}
