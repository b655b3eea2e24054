//! Every conversion between Kubernetes' amounts and the kernel's cgroup values, written
//! once. The cpu ones are upstream's (pkg/kubelet/cm helpers_linux.go: MilliCPUToShares,
//! MilliCPUToQuota; cgroup_manager_linux.go: CpuSharesToCpuWeight); the spellings of "no
//! limit" are the kernel's, as runc's libcontainer/cgroups writes them.

/// Upstream's CFS constants (pkg/kubelet/cm helpers_linux.go).
pub const MIN_SHARES: u64 = 2;
pub const MAX_SHARES: u64 = 262_144;
const SHARES_PER_CPU: i64 = 1024;
const MILLI_CPU_TO_CPU: i64 = 1000;
/// The CFS period in microseconds (100 ms).
pub const QUOTA_PERIOD: u64 = 100_000;
/// The smallest quota (1 ms).
pub const MIN_QUOTA_PERIOD: i64 = 1000;
/// cgroup v2 cpu.weight range.
pub const MIN_WEIGHT: u64 = 1;
pub const MAX_WEIGHT: u64 = 10_000;

/// Limits above 2^62 are "no limit" (v1 writes 9223372036854771712 for none), as cAdvisor
/// reads them.
pub const UNLIMITED_ABOVE: u64 = 1 << 62;

/// milliCPU as cpu.shares, upstream's MilliCPUToShares: the minimum for zero, clamped to
/// the kernel's range. The agent had two copies, one testing `== 0` and one `<= 0`;
/// upstream tests `== 0` and lets a negative value fall to the clamp, which gives the same
/// minimum, so both agree with it.
pub fn milli_cpu_to_shares(milli: i64) -> u64 {
    if milli == 0 {
        return MIN_SHARES;
    }
    let shares = milli.saturating_mul(SHARES_PER_CPU) / MILLI_CPU_TO_CPU;
    shares.clamp(MIN_SHARES as i64, MAX_SHARES as i64) as u64
}

/// milliCPU as a CFS quota over `period` microseconds, upstream's MilliCPUToQuota: 0 (no
/// quota) for zero, else at least 1 ms. Upstream tests `milliCPU == 0` only, so a negative
/// value (which validation never lets through) gets the 1 ms minimum; the agent's cm copy
/// tested `<= 0` and gave 0, the runtime's copy tested `== 0`: upstream's is kept.
pub fn milli_cpu_to_quota(milli: i64, period: u64) -> i64 {
    if milli == 0 {
        return 0;
    }
    let period = i64::try_from(period).unwrap_or(i64::MAX);
    (milli.saturating_mul(period) / MILLI_CPU_TO_CPU).max(MIN_QUOTA_PERIOD)
}

/// cgroup v1 cpu.shares as cgroup v2 cpu.weight, upstream's CpuSharesToCpuWeight (KEP 2254:
/// weight = 1 + (shares − 2) × 9999 / 262142). Shares outside the kernel's range are clamped
/// first (upstream never passes any: its shares come from MilliCPUToShares), so 0 and 1
/// give the minimum weight instead of wrapping.
pub fn shares_to_weight(shares: u64) -> u64 {
    let shares = shares.clamp(MIN_SHARES, MAX_SHARES);
    1 + (shares - 2) * 9999 / 262_142
}

/// cgroup v2 cpu.weight back to v1 shares, cAdvisor's conversion for its container spec;
/// None outside the kernel's weight range (cAdvisor reports 0 then).
pub fn weight_to_shares(weight: u64) -> Option<u64> {
    if !(MIN_WEIGHT..=MAX_WEIGHT).contains(&weight) {
        return None;
    }
    Some(2 + ((weight - 1) * 262_142) / 9999)
}

/// A CFS quota for v1's cpu.cfs_quota_us: anything but a positive quota is none (-1).
pub fn v1_quota(quota: i64) -> i64 {
    if quota > 0 {
        quota
    } else {
        -1
    }
}

/// cgroup v2's cpu.max: `<quota> <period>`, `max` for no (or a non-positive) quota.
pub fn v2_cpu_max(quota: Option<i64>, period: u64) -> String {
    match quota {
        Some(q) if q > 0 => format!("{q} {period}"),
        _ => format!("max {period}"),
    }
}

/// A pids limit: a positive count, else no limit (`max`, on v1 and v2 alike).
pub fn pids_max(limit: i64) -> String {
    if limit > 0 {
        limit.to_string()
    } else {
        "max".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_at_the_edges() {
        assert_eq!(milli_cpu_to_shares(i64::MIN), MIN_SHARES);
        assert_eq!(milli_cpu_to_shares(-1), MIN_SHARES);
        assert_eq!(milli_cpu_to_shares(0), MIN_SHARES);
        assert_eq!(milli_cpu_to_shares(1), MIN_SHARES);
        assert_eq!(milli_cpu_to_shares(2), MIN_SHARES);
        assert_eq!(milli_cpu_to_shares(100), 102);
        assert_eq!(milli_cpu_to_shares(1000), 1024);
        assert_eq!(milli_cpu_to_shares(2500), 2560);
        assert_eq!(milli_cpu_to_shares(256_000), MAX_SHARES);
        assert_eq!(milli_cpu_to_shares(1_000_000), MAX_SHARES);
        assert_eq!(milli_cpu_to_shares(i64::MAX), MAX_SHARES);
    }

    #[test]
    fn quota_at_the_edges() {
        assert_eq!(milli_cpu_to_quota(0, QUOTA_PERIOD), 0, "no limit");
        assert_eq!(
            milli_cpu_to_quota(-1, QUOTA_PERIOD),
            MIN_QUOTA_PERIOD,
            "upstream tests == 0 only"
        );
        assert_eq!(milli_cpu_to_quota(1, QUOTA_PERIOD), 1000, "at least 1 ms");
        assert_eq!(milli_cpu_to_quota(2, QUOTA_PERIOD), 1000);
        assert_eq!(milli_cpu_to_quota(5, QUOTA_PERIOD), 1000);
        assert_eq!(milli_cpu_to_quota(11, QUOTA_PERIOD), 1100);
        assert_eq!(milli_cpu_to_quota(250, QUOTA_PERIOD), 25_000);
        assert_eq!(milli_cpu_to_quota(1000, QUOTA_PERIOD), 100_000);
        assert_eq!(milli_cpu_to_quota(1500, 50_000), 75_000);
        assert_eq!(milli_cpu_to_quota(i64::MAX, QUOTA_PERIOD), i64::MAX / 1000);
        assert_eq!(milli_cpu_to_quota(1000, u64::MAX), i64::MAX / 1000);
    }

    #[test]
    fn weights_at_the_edges() {
        // KEP 2254's table: 2 -> 1, 1024 -> 39, 262144 -> 10000.
        assert_eq!(shares_to_weight(0), MIN_WEIGHT);
        assert_eq!(shares_to_weight(1), MIN_WEIGHT);
        assert_eq!(shares_to_weight(2), 1);
        assert_eq!(shares_to_weight(102), 4);
        assert_eq!(shares_to_weight(1024), 39);
        assert_eq!(shares_to_weight(2048), 79);
        assert_eq!(shares_to_weight(MAX_SHARES), MAX_WEIGHT);
        assert_eq!(shares_to_weight(u64::MAX), MAX_WEIGHT);
        assert_eq!(weight_to_shares(0), None);
        assert_eq!(weight_to_shares(1), Some(2));
        assert_eq!(weight_to_shares(2), Some(2 + 262_142 / 9999));
        assert_eq!(weight_to_shares(100), Some(2 + (99 * 262_142) / 9999));
        assert_eq!(weight_to_shares(MAX_WEIGHT), Some(MAX_SHARES));
        assert_eq!(weight_to_shares(MAX_WEIGHT + 1), None);
        assert_eq!(weight_to_shares(u64::MAX), None);
    }

    #[test]
    fn no_limit_spellings() {
        assert_eq!(v1_quota(i64::MIN), -1);
        assert_eq!(v1_quota(-1), -1);
        assert_eq!(v1_quota(0), -1);
        assert_eq!(v1_quota(1), 1);
        assert_eq!(v1_quota(50_000), 50_000);
        assert_eq!(v2_cpu_max(None, QUOTA_PERIOD), "max 100000");
        assert_eq!(v2_cpu_max(Some(-1), QUOTA_PERIOD), "max 100000");
        assert_eq!(v2_cpu_max(Some(0), QUOTA_PERIOD), "max 100000");
        assert_eq!(v2_cpu_max(Some(1), 1000), "1 1000");
        assert_eq!(v2_cpu_max(Some(150_000), QUOTA_PERIOD), "150000 100000");
        assert_eq!(pids_max(-1), "max");
        assert_eq!(pids_max(0), "max");
        assert_eq!(pids_max(1), "1");
        assert_eq!(pids_max(i64::MAX), i64::MAX.to_string());
    }
}
