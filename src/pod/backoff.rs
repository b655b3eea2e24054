//! Container restart back-off as upstream's: the first restart is immediate, then 10 s
//! doubling to 300 s; an entry not touched for twice the maximum (10 minutes of running)
//! starts over.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};

pub const INITIAL: Duration = Duration::from_secs(10);
pub const MAX: Duration = Duration::from_secs(300);

#[derive(Debug, Clone)]
struct Entry {
    backoff: Duration,
    last_update: DateTime<Utc>,
}

#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    entries: HashMap<String, Entry>,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new(INITIAL, MAX)
    }
}

fn expired(event: DateTime<Utc>, last_update: DateTime<Utc>, max: Duration) -> bool {
    (event - last_update).to_std().unwrap_or_default() > max * 2
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Self {
        Backoff {
            initial,
            max,
            entries: HashMap::new(),
        }
    }

    /// Records a restart at `now` of the container that ended at `event`.
    pub fn next(&mut self, key: &str, event: DateTime<Utc>, now: DateTime<Utc>) {
        let (initial, max) = (self.initial, self.max);
        let e = self.entries.entry(key.to_string()).or_insert(Entry {
            backoff: Duration::ZERO,
            last_update: now,
        });
        if e.backoff.is_zero() || expired(event, e.last_update, max) {
            e.backoff = initial;
        } else {
            e.backoff = (e.backoff * 2).min(max);
        }
        e.last_update = now;
    }

    /// `Some(remaining wait)` while a container that ended at `event` must not be restarted.
    pub fn in_backoff(
        &self,
        key: &str,
        event: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Option<Duration> {
        let e = self.entries.get(key)?;
        if expired(event, e.last_update, self.max) {
            return None;
        }
        let since = (now - event).to_std().unwrap_or_default();
        (since < e.backoff).then(|| e.backoff - since)
    }

    /// The current back-off of a key (for the CrashLoopBackOff message).
    pub fn current(&self, key: &str) -> Duration {
        self.entries
            .get(key)
            .map(|e| e.backoff)
            .unwrap_or(self.initial)
    }

    pub fn forget_prefix(&mut self, prefix: &str) {
        self.entries.retain(|k, _| !k.starts_with(prefix));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + s, 0).unwrap()
    }

    #[test]
    fn first_restart_is_immediate_then_doubles_to_max() {
        let mut b = Backoff::default();
        assert_eq!(b.in_backoff("k", t(0), t(0)), None);
        b.next("k", t(0), t(0));
        // second crash one second after the restart: wait 10s from its finish
        assert_eq!(b.in_backoff("k", t(1), t(1)), Some(Duration::from_secs(10)));
        assert_eq!(b.in_backoff("k", t(1), t(11)), None);
        b.next("k", t(1), t(11));
        assert_eq!(b.current("k"), Duration::from_secs(20));
        for now in 11..21 {
            b.next("k", t(now), t(now));
        }
        assert_eq!(b.current("k"), MAX);
    }

    #[test]
    fn resets_after_ten_minutes_of_running() {
        let mut b = Backoff::default();
        b.next("k", t(0), t(0));
        b.next("k", t(5), t(20));
        assert_eq!(b.current("k"), Duration::from_secs(20));
        // ran for more than 600 s after the last restart: no back-off, and the next is 10 s
        assert_eq!(b.in_backoff("k", t(20 + 601), t(20 + 601)), None);
        b.next("k", t(20 + 601), t(20 + 601));
        assert_eq!(b.current("k"), INITIAL);
    }
}
