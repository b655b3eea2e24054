//! The certificate managers' families. Upstream registers them when a manager is made: the
//! client's with client certificate rotation, the serving pair's with serverTLSBootstrap,
//! so a node with neither serves none of them. Here they are registered the first time
//! `certificates::rotation` reports on a pair.
//!
//! The TTL gauges are computed at each scrape from the current pair's notAfter, in whole
//! seconds (negative once expired), +Inf while there is no pair, as upstream's GaugeFuncs.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

use super::{registry, Counter, GaugeFunc, Histogram, Scalar, Stability};

/// Which pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pair {
    Client,
    Serving,
}

struct Families {
    not_after: Arc<Mutex<Option<SystemTime>>>,
    renew_errors: Arc<Counter>,
    /// The serving pair only: how long the replaced certificate lived.
    rotation: Option<Arc<Histogram>>,
}

fn families(pair: Pair) -> &'static Families {
    static CLIENT: OnceLock<Families> = OnceLock::new();
    static SERVING: OnceLock<Families> = OnceLock::new();
    match pair {
        Pair::Client => CLIENT.get_or_init(|| {
            let not_after = Arc::new(Mutex::new(None));
            registry().register(Arc::new(ttl_gauge(
                "kubelet_certificate_manager_client_ttl_seconds",
                "Gauge of the TTL (time-to-live) of the Kubelet's client certificate. The value is in seconds until certificate expiry (negative if already expired). If client certificate is invalid or unused, the value will be +INF.",
                not_after.clone(),
            )));
            Families {
                not_after,
                renew_errors: registry().register(Arc::new(Scalar::counter(
                    "kubelet_certificate_manager_client_expiration_renew_errors",
                    "Counter of certificate renewal errors.",
                    Stability::Alpha,
                    &[],
                ))),
                rotation: None,
            }
        }),
        Pair::Serving => SERVING.get_or_init(|| {
            let not_after = Arc::new(Mutex::new(None));
            registry().register(Arc::new(ttl_gauge(
                "kubelet_certificate_manager_server_ttl_seconds",
                "Gauge of the shortest TTL (time-to-live) of the Kubelet's serving certificate. The value is in seconds until certificate expiry (negative if already expired). If serving certificate is invalid or unused, the value will be +INF.",
                not_after.clone(),
            )));
            Families {
                not_after,
                renew_errors: registry().register(Arc::new(Scalar::counter(
                    "kubelet_server_expiration_renew_errors",
                    "Counter of certificate renewal errors.",
                    Stability::Alpha,
                    &[],
                ))),
                rotation: Some(registry().register(Arc::new(Histogram::new(
                    "kubelet_certificate_manager_server_rotation_seconds",
                    "Histogram of the number of seconds the previous certificate lived before being rotated.",
                    Stability::Alpha,
                    &[],
                    // A minute, an hour, 4 hours, a day, a week, 1, 3 and 6 months, 1 and 4 years.
                    vec![
                        60.0,
                        3600.0,
                        14400.0,
                        86400.0,
                        604800.0,
                        2592000.0,
                        7776000.0,
                        15552000.0,
                        31104000.0,
                        124416000.0,
                    ],
                )))),
            }
        }),
    }
}

fn ttl_gauge(
    name: &'static str,
    help: &'static str,
    not_after: Arc<Mutex<Option<SystemTime>>>,
) -> GaugeFunc {
    GaugeFunc::new(name, help, Stability::Alpha, move || {
        let at = *not_after.lock().unwrap_or_else(|p| p.into_inner());
        Some(ttl_seconds(at, SystemTime::now()))
    })
}

/// Whole seconds from `now` to `not_after` (truncated toward zero, negative once past), +Inf
/// without a certificate.
pub fn ttl_seconds(not_after: Option<SystemTime>, now: SystemTime) -> f64 {
    match not_after {
        None => f64::INFINITY,
        Some(at) => match at.duration_since(now) {
            Ok(left) => left.as_secs_f64().trunc(),
            Err(past) => -past.duration().as_secs_f64().trunc(),
        },
    }
}

/// The manager read its current pair (`None`: there is none, or it does not load).
pub fn certificate_current(pair: Pair, not_after: Option<SystemTime>) {
    *families(pair)
        .not_after
        .lock()
        .unwrap_or_else(|p| p.into_inner()) = not_after;
}

/// A renewal failed (the request, its signing, or storing the new pair).
pub fn certificate_renew_failed(pair: Pair) {
    families(pair).renew_errors.inc(&[]);
}

/// A new pair replaced one valid from `previous_not_before`.
pub fn certificate_rotated(pair: Pair, previous_not_before: SystemTime) {
    if let Some(h) = &families(pair).rotation {
        let lived = SystemTime::now()
            .duration_since(previous_not_before)
            .unwrap_or_default();
        h.observe(&[], lived.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn ttl_is_whole_seconds_negative_when_expired_and_infinite_without_a_pair() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert_eq!(
            ttl_seconds(Some(now + Duration::from_millis(3_600_900)), now),
            3600.0
        );
        assert_eq!(
            ttl_seconds(Some(now - Duration::from_millis(1_500)), now),
            -1.0
        );
        assert_eq!(ttl_seconds(None, now), f64::INFINITY);
    }
}
