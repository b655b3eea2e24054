//! The QoS parents' values (upstream's QoS container manager with memory QoS and
//! qosReserved off): BestEffort always gets the minimum cpu shares, Burstable the shares of
//! its pods' summed cpu requests. Neither gets a memory or pids limit; Guaranteed pods sit
//! directly under kubepods.

use crate::cgroups::{milli_cpu_to_shares, ResourceConfig, MIN_SHARES};

pub(crate) fn besteffort_config() -> ResourceConfig {
    ResourceConfig {
        cpu_shares: Some(MIN_SHARES),
        ..ResourceConfig::default()
    }
}

/// `burstable_cpu_requests`: the cpu requests (millicores, overhead included) of every
/// active Burstable pod.
pub(crate) fn burstable_config(
    burstable_cpu_requests: impl IntoIterator<Item = i64>,
) -> ResourceConfig {
    let total = burstable_cpu_requests
        .into_iter()
        .fold(0i64, i64::saturating_add);
    ResourceConfig {
        cpu_shares: Some(milli_cpu_to_shares(total)),
        ..ResourceConfig::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn besteffort_is_two_shares_and_burstable_the_sum_of_requests() {
        assert_eq!(besteffort_config().cpu_shares, Some(2));
        assert_eq!(besteffort_config().memory, None);
        assert_eq!(
            burstable_config([]).cpu_shares,
            Some(2),
            "no pods: the minimum"
        );
        assert_eq!(burstable_config([100, 250, 650]).cpu_shares, Some(1024));
        assert_eq!(burstable_config([1500]).cpu_shares, Some(1536));
        let c = burstable_config([500]);
        assert_eq!((c.memory, c.pids, c.cpu_quota), (None, None, None));
    }
}
