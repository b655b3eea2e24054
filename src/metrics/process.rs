//! The `process_*` families the Go client's process collector writes on the upstream
//! kubelet's `/metrics` (component-base registers it raw: no stability prefix), read from
//! /proc/self at each scrape through procfs.

use super::registry::Collector;
use super::text::{Family, MetricType};

/// One collector for the seven families.
pub struct ProcessCollector;

/// (name, type, help, value).
fn families() -> Vec<(&'static str, MetricType, &'static str, f64)> {
    let mut out = Vec::new();
    let Ok(me) = procfs::process::Process::myself() else {
        return out;
    };
    let ticks = procfs::ticks_per_second() as f64;
    let stat = me.stat().ok();
    if let Some(s) = &stat {
        out.push((
            "process_cpu_seconds_total",
            MetricType::Counter,
            "Total user and system CPU time spent in seconds.",
            (s.utime + s.stime) as f64 / ticks,
        ));
    }
    let limits = me.limits().ok();
    let soft = |v: procfs::process::LimitValue| match v {
        // Go's procfs reads "unlimited" as the largest uint64.
        procfs::process::LimitValue::Unlimited => u64::MAX as f64,
        procfs::process::LimitValue::Value(v) => v as f64,
    };
    if let Some(l) = &limits {
        out.push((
            "process_max_fds",
            MetricType::Gauge,
            "Maximum number of open file descriptors.",
            soft(l.max_open_files.soft_limit),
        ));
    }
    if let Ok(n) = me.fd_count() {
        out.push((
            "process_open_fds",
            MetricType::Gauge,
            "Number of open file descriptors.",
            n as f64,
        ));
    }
    if let Some(s) = &stat {
        out.push((
            "process_resident_memory_bytes",
            MetricType::Gauge,
            "Resident memory size in bytes.",
            (s.rss * procfs::page_size()) as f64,
        ));
        if let Ok(boot) = procfs::boot_time_secs() {
            out.push((
                "process_start_time_seconds",
                MetricType::Gauge,
                "Start time of the process since unix epoch in seconds.",
                boot as f64 + s.starttime as f64 / ticks,
            ));
        }
        out.push((
            "process_virtual_memory_bytes",
            MetricType::Gauge,
            "Virtual memory size in bytes.",
            s.vsize as f64,
        ));
    }
    if let Some(l) = &limits {
        out.push((
            "process_virtual_memory_max_bytes",
            MetricType::Gauge,
            "Maximum amount of virtual memory available in bytes.",
            soft(l.max_address_space.soft_limit),
        ));
    }
    out
}

impl Collector for ProcessCollector {
    fn collect(&self) -> Vec<Family> {
        families()
            .into_iter()
            .map(|(name, kind, help, value)| {
                let mut family = Family::new(name, kind, help);
                family.sample(Vec::new(), value, None);
                family
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(text: &str, name: &str) -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name}: {text}"))
            .parse()
            .unwrap()
    }

    #[test]
    fn process_families_describe_this_process() {
        let text = crate::metrics::text::encode(ProcessCollector.collect());
        // Parses as the Prometheus text format, each family once.
        let parsed = openmetrics_parser::prometheus::parse_prometheus(&text)
            .unwrap_or_else(|e| panic!("{e:?}\n{text}"));
        assert_eq!(parsed.families.len(), 7, "{text}");
        // Other tests open and close files concurrently, so only bounds: stdio at least.
        let open = value(&text, "process_open_fds");
        assert!(open >= 3.0, "{open}");
        assert!(value(&text, "process_resident_memory_bytes") > 1e6);
        assert!(value(&text, "process_max_fds") >= open);
        let start = value(&text, "process_start_time_seconds");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        // This test process started within the last day, not at the epoch or in the future.
        assert!(
            start <= now + 1.0 && start > now - 86400.0,
            "{start} vs {now}"
        );
    }
}
