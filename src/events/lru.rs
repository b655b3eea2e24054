//! A least-recently-used map with a fixed number of entries, as the correlator's caches are
//! upstream (groupcache's lru): a lookup or an insert makes an entry the newest, and an
//! insert beyond the limit forgets the oldest. The limit keeps a node with many short-lived
//! pods from growing the caches without bound.

use std::collections::{BTreeMap, HashMap};

#[derive(Debug)]
pub(crate) struct LruCache<V> {
    capacity: usize,
    /// Each entry with the tick of its last use.
    entries: HashMap<String, (V, u64)>,
    /// Keys by the tick of their last use: the first is the one to forget.
    order: BTreeMap<u64, String>,
    tick: u64,
}

impl<V> LruCache<V> {
    pub(crate) fn new(capacity: usize) -> LruCache<V> {
        assert!(capacity > 0, "an LRU cache needs room for one entry");
        LruCache {
            capacity,
            entries: HashMap::new(),
            order: BTreeMap::new(),
            tick: 0,
        }
    }

    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    /// The entry under `key`, now the newest.
    pub(crate) fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        let tick = self.next_tick();
        let (value, used) = self.entries.get_mut(key)?;
        if let Some(k) = self.order.remove(used) {
            self.order.insert(tick, k);
        }
        *used = tick;
        Some(value)
    }

    /// Stores `value` under `key` as the newest entry, forgetting the oldest when full.
    pub(crate) fn insert(&mut self, key: String, value: V) {
        let tick = self.next_tick();
        if let Some((_, used)) = self.entries.get(&key) {
            self.order.remove(used);
        } else if self.entries.len() == self.capacity {
            if let Some((_, oldest)) = self.order.pop_first() {
                self.entries.remove(&oldest);
            }
        }
        self.order.insert(tick, key.clone());
        self.entries.insert(key, (value, tick));
    }

    /// The entry under `key`, inserted with `make` when missing; either way now the newest.
    pub(crate) fn get_or_insert_with(&mut self, key: &str, make: impl FnOnce() -> V) -> &mut V {
        if !self.entries.contains_key(key) {
            self.insert(key.to_string(), make());
        }
        self.get_mut(key).expect("the entry was just inserted")
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_cache_forgets_the_least_recently_used_entry() {
        let mut cache = LruCache::new(2);
        cache.insert("a".to_string(), 1);
        cache.insert("b".to_string(), 2);
        // Using "a" makes "b" the oldest.
        assert_eq!(cache.get_mut("a").copied(), Some(1));
        cache.insert("c".to_string(), 3);
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.get_mut("b"), None);
        assert_eq!(cache.get_mut("a").copied(), Some(1));
        assert_eq!(cache.get_mut("c").copied(), Some(3));
    }

    #[test]
    fn replacing_an_entry_keeps_one_copy_and_makes_it_newest() {
        let mut cache = LruCache::new(2);
        cache.insert("a".to_string(), 1);
        cache.insert("b".to_string(), 2);
        cache.insert("a".to_string(), 10);
        cache.insert("c".to_string(), 3);
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.get_mut("b"), None);
        assert_eq!(cache.get_mut("a").copied(), Some(10));
        *cache.get_or_insert_with("d", || 4) += 1;
        assert_eq!(cache.get_mut("d").copied(), Some(5));
        assert_eq!(cache.get_mut("c"), None);
    }
}
