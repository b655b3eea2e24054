//! The health of the pod manager's loop, as upstream's `/healthz/syncloop` reports it: the
//! loop stamps a time each time it comes round (on its own tick too, so an idle node stays
//! healthy), and the check fails once no stamp is newer than twice the sync frequency, or
//! five minutes if that is longer. A loop that never started yet counts as healthy.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How often the manager stamps while it has nothing else to do.
pub const STAMP_EVERY: Duration = Duration::from_secs(1);
const MIN_THRESHOLD: Duration = Duration::from_secs(300);

#[derive(Debug)]
pub struct SyncLoopHealth {
    origin: Instant,
    /// Milliseconds since `origin` of the last stamp, plus one (0: never stamped).
    last: AtomicU64,
    threshold: Duration,
}

impl SyncLoopHealth {
    pub fn new(sync_frequency: Duration) -> Self {
        SyncLoopHealth {
            origin: Instant::now(),
            last: AtomicU64::new(0),
            threshold: (sync_frequency * 2).max(MIN_THRESHOLD),
        }
    }

    pub fn stamp(&self) {
        self.stamp_at(Instant::now());
    }

    fn stamp_at(&self, now: Instant) {
        let ms = now.saturating_duration_since(self.origin).as_millis() as u64;
        self.last.store(ms + 1, Ordering::Relaxed);
    }

    /// Err with upstream's wording when the loop has not come round within the threshold.
    pub fn check(&self) -> Result<(), &'static str> {
        self.check_at(Instant::now())
    }

    fn check_at(&self, now: Instant) -> Result<(), &'static str> {
        let last = self.last.load(Ordering::Relaxed);
        if last == 0 {
            return Ok(());
        }
        let stamped = self.origin + Duration::from_millis(last - 1);
        if now.saturating_duration_since(stamped) > self.threshold {
            Err("sync Loop took longer than expected")
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
impl SyncLoopHealth {
    /// A health that turns stale a moment after its one stamp, for the server's tests.
    pub(crate) fn stale_for_tests() -> Self {
        let h = SyncLoopHealth {
            threshold: Duration::ZERO,
            ..SyncLoopHealth::new(Duration::ZERO)
        };
        h.stamp_at(h.origin);
        std::thread::sleep(Duration::from_millis(5));
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthy_until_no_stamp_is_newer_than_the_threshold() {
        let h = SyncLoopHealth::new(Duration::from_secs(60));
        let t0 = h.origin;
        assert_eq!(
            h.check_at(t0 + Duration::from_secs(3600)),
            Ok(()),
            "never stamped"
        );
        h.stamp_at(t0 + Duration::from_secs(10));
        assert_eq!(h.check_at(t0 + Duration::from_secs(309)), Ok(()));
        assert!(h.check_at(t0 + Duration::from_secs(311)).is_err());
        h.stamp_at(t0 + Duration::from_secs(311));
        assert_eq!(h.check_at(t0 + Duration::from_secs(312)), Ok(()));
    }

    #[test]
    fn a_long_sync_frequency_widens_the_threshold() {
        let h = SyncLoopHealth::new(Duration::from_secs(600));
        let t0 = h.origin;
        h.stamp_at(t0);
        assert_eq!(h.check_at(t0 + Duration::from_secs(1199)), Ok(()));
        assert!(h.check_at(t0 + Duration::from_secs(1201)).is_err());
    }
}
