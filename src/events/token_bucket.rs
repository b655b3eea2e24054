//! A token bucket (golang.org/x/time/rate as client-go uses it): up to `burst` tokens, one
//! more every `interval`. The fill is kept as time, so refills are exact on any clock.

use std::time::Duration;

use tokio::time::Instant;

#[derive(Debug)]
pub(crate) struct TokenBucket {
    burst: u32,
    interval: Duration,
    /// Time credited towards tokens: one token per `interval`, at most `burst`.
    credit: Duration,
    at: Instant,
}

impl TokenBucket {
    /// A bucket holding its whole burst at `now`.
    pub(crate) fn full(burst: u32, interval: Duration, now: Instant) -> TokenBucket {
        TokenBucket {
            burst,
            interval,
            credit: interval * burst,
            at: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at);
        self.credit = (self.credit + elapsed).min(self.interval * self.burst);
        self.at = now;
    }

    /// Takes a token if there is one.
    pub(crate) fn take(&mut self, now: Instant) -> bool {
        self.refill(now);
        if self.credit < self.interval {
            return false;
        }
        self.credit -= self.interval;
        true
    }

    /// Waits for a token and takes it.
    pub(crate) async fn wait(&mut self) {
        loop {
            let now = Instant::now();
            if self.take(now) {
                return;
            }
            tokio::time::sleep_until(now + (self.interval - self.credit)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_one_token_per_interval() {
        let start = Instant::now();
        let interval = Duration::from_secs(300);
        let mut bucket = TokenBucket::full(3, interval, start);
        assert!((0..3).all(|_| bucket.take(start)));
        assert!(!bucket.take(start));
        assert!(!bucket.take(start + interval - Duration::from_nanos(1)));
        assert!(bucket.take(start + interval));
        assert!(!bucket.take(start + interval));
        // A long quiet spell refills no more than the burst.
        let later = start + interval * 100;
        assert!((0..3).all(|_| bucket.take(later)));
        assert!(!bucket.take(later));
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_resumes_once_a_token_is_back() {
        let start = Instant::now();
        let interval = Duration::from_millis(20);
        let mut bucket = TokenBucket::full(1, interval, start);
        bucket.wait().await;
        bucket.wait().await;
        assert!(Instant::now() >= start + interval);
        assert!(!bucket.take(Instant::now()));
    }
}
