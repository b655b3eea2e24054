//! A small Prometheus registry: counters, gauges and histograms with labels, turned into
//! [`Family`] values at each scrape for the one text writer ([`super::text`]), so scrapers and
//! tests written against the upstream kubelet read the same bytes.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::text::{encode, Family, MetricType};

/// What upstream's component-base puts in front of each HELP text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stability {
    Alpha,
    Beta,
    Stable,
}

impl Stability {
    fn tag(self) -> &'static str {
        match self {
            Stability::Alpha => "[ALPHA]",
            Stability::Beta => "[BETA]",
            Stability::Stable => "[STABLE]",
        }
    }
}

/// Anything that reports metric families at a scrape.
pub trait Collector: Send + Sync {
    /// The families as of now (none when there is nothing to report yet).
    fn collect(&self) -> Vec<Family>;
}

/// Metric families, written sorted by name as Go's registry writes them.
#[derive(Default)]
pub struct Registry {
    collectors: Mutex<Vec<Arc<dyn Collector>>>,
}

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    pub fn register<C: Collector + 'static>(&self, collector: Arc<C>) -> Arc<C> {
        self.collectors
            .lock()
            .expect("metrics registry lock")
            .push(collector.clone());
        collector
    }

    /// The whole registry in the text exposition format.
    pub fn gather(&self) -> String {
        let collectors = self
            .collectors
            .lock()
            .expect("metrics registry lock")
            .clone();
        encode(collectors.iter().flat_map(|c| c.collect()))
    }
}

struct Desc {
    name: &'static str,
    help: &'static str,
    stability: Stability,
    labels: &'static [&'static str],
}

impl Desc {
    /// An empty family, its help text behind the stability tag as component-base puts it.
    fn family(&self, kind: MetricType) -> Family {
        Family::new(
            self.name,
            kind,
            format!("{} {}", self.stability.tag(), self.help),
        )
    }

    /// A series' label pairs from its values (in the declared order).
    fn labels(&self, values: &[String]) -> Vec<(&'static str, String)> {
        self.labels
            .iter()
            .copied()
            .zip(values.iter().cloned())
            .collect()
    }

    fn key(&self, values: &[&str]) -> Vec<String> {
        assert_eq!(
            values.len(),
            self.labels.len(),
            "metric {} takes labels {:?}",
            self.name,
            self.labels
        );
        values.iter().map(|v| v.to_string()).collect()
    }
}

/// A value per label combination; counters only go up, gauges are set.
pub struct Scalar {
    desc: Desc,
    kind: MetricType,
    values: Mutex<BTreeMap<Vec<String>, f64>>,
}

pub type Counter = Scalar;
pub type Gauge = Scalar;

impl Scalar {
    pub fn counter(
        name: &'static str,
        help: &'static str,
        stability: Stability,
        labels: &'static [&'static str],
    ) -> Scalar {
        Scalar::new(name, help, stability, labels, MetricType::Counter)
    }

    pub fn gauge(
        name: &'static str,
        help: &'static str,
        stability: Stability,
        labels: &'static [&'static str],
    ) -> Scalar {
        Scalar::new(name, help, stability, labels, MetricType::Gauge)
    }

    fn new(
        name: &'static str,
        help: &'static str,
        stability: Stability,
        labels: &'static [&'static str],
        kind: MetricType,
    ) -> Scalar {
        Scalar {
            desc: Desc {
                name,
                help,
                stability,
                labels,
            },
            kind,
            values: Mutex::new(BTreeMap::new()),
        }
    }

    pub fn add(&self, labels: &[&str], delta: f64) {
        let key = self.desc.key(labels);
        *self
            .values
            .lock()
            .expect("metric lock")
            .entry(key)
            .or_insert(0.0) += delta;
    }

    pub fn inc(&self, labels: &[&str]) {
        self.add(labels, 1.0);
    }

    pub fn set(&self, labels: &[&str], value: f64) {
        let key = self.desc.key(labels);
        self.values.lock().expect("metric lock").insert(key, value);
    }

    /// Replaces every series at once (a scrape sees the old set or the new one, never a
    /// half-written one).
    pub fn set_all(&self, series: &[(Vec<&str>, f64)]) {
        let values = series
            .iter()
            .map(|(labels, v)| (self.desc.key(labels), *v))
            .collect();
        *self.values.lock().expect("metric lock") = values;
    }

    /// Forgets every label combination (a gauge re-set from scratch each time).
    pub fn reset(&self) {
        self.values.lock().expect("metric lock").clear();
    }

    pub fn get(&self, labels: &[&str]) -> Option<f64> {
        let key = self.desc.key(labels);
        self.values.lock().expect("metric lock").get(&key).copied()
    }

    /// Forgets every series whose labels include all of `matching` (label name, value), as
    /// Go's `DeletePartialMatch`; returns how many went. Naming a label the metric does not
    /// have matches nothing.
    pub fn remove_matching(&self, matching: &[(&str, &str)]) -> usize {
        let positions: Option<Vec<(usize, &str)>> = matching
            .iter()
            .map(|(name, value)| {
                let i = self.desc.labels.iter().position(|l| l == name)?;
                Some((i, *value))
            })
            .collect();
        let Some(positions) = positions else {
            return 0;
        };
        let mut values = self.values.lock().expect("metric lock");
        let before = values.len();
        values.retain(|key, _| !positions.iter().all(|(i, v)| key[*i] == *v));
        before - values.len()
    }
}

impl Collector for Scalar {
    fn collect(&self) -> Vec<Family> {
        let values = self.values.lock().expect("metric lock");
        // Go's registry omits a labelled family with no children; an unlabelled one is
        // always present (at zero).
        if values.is_empty() && !self.desc.labels.is_empty() {
            return Vec::new();
        }
        let mut family = self.desc.family(self.kind);
        if values.is_empty() {
            family.sample(Vec::new(), 0.0, None);
        }
        for (key, v) in values.iter() {
            family.sample(self.desc.labels(key), *v, None);
        }
        vec![family]
    }
}

/// An unlabelled gauge computed at each scrape (Go's `GaugeFunc`), such as a certificate's
/// time to live; a family whose function gives `None` is not written (not registered yet
/// upstream: the client certificate's gauge exists only while it rotates).
pub struct GaugeFunc {
    desc: Desc,
    value: Box<dyn Fn() -> Option<f64> + Send + Sync>,
}

impl GaugeFunc {
    pub fn new(
        name: &'static str,
        help: &'static str,
        stability: Stability,
        value: impl Fn() -> Option<f64> + Send + Sync + 'static,
    ) -> GaugeFunc {
        GaugeFunc {
            desc: Desc {
                name,
                help,
                stability,
                labels: &[],
            },
            value: Box::new(value),
        }
    }
}

impl Collector for GaugeFunc {
    fn collect(&self) -> Vec<Family> {
        let Some(v) = (self.value)() else {
            return Vec::new();
        };
        let mut family = self.desc.family(MetricType::Gauge);
        family.sample(Vec::new(), v, None);
        vec![family]
    }
}

#[derive(Clone)]
struct HistogramState {
    /// Per bucket, not cumulative; made cumulative when written.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

pub struct Histogram {
    desc: Desc,
    buckets: Vec<f64>,
    values: Mutex<BTreeMap<Vec<String>, HistogramState>>,
}

/// Prometheus' `DefBuckets`.
pub const DEFAULT_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// `count` buckets starting at `start`, each `factor` times the previous one.
pub fn exponential_buckets(start: f64, factor: f64, count: usize) -> Vec<f64> {
    let mut v = Vec::with_capacity(count);
    let mut b = start;
    for _ in 0..count {
        v.push(b);
        b *= factor;
    }
    v
}

impl Histogram {
    pub fn new(
        name: &'static str,
        help: &'static str,
        stability: Stability,
        labels: &'static [&'static str],
        buckets: Vec<f64>,
    ) -> Histogram {
        Histogram {
            desc: Desc {
                name,
                help,
                stability,
                labels,
            },
            buckets,
            values: Mutex::new(BTreeMap::new()),
        }
    }

    pub fn observe(&self, labels: &[&str], value: f64) {
        let key = self.desc.key(labels);
        let mut values = self.values.lock().expect("metric lock");
        let state = values.entry(key).or_insert_with(|| HistogramState {
            counts: vec![0; self.buckets.len()],
            sum: 0.0,
            count: 0,
        });
        if let Some(i) = self.buckets.iter().position(|b| value <= *b) {
            state.counts[i] += 1;
        }
        state.sum += value;
        state.count += 1;
    }

    /// (count, sum) for one label combination.
    pub fn totals(&self, labels: &[&str]) -> Option<(u64, f64)> {
        let key = self.desc.key(labels);
        let values = self.values.lock().expect("metric lock");
        values.get(&key).map(|s| (s.count, s.sum))
    }
}

impl Collector for Histogram {
    fn collect(&self) -> Vec<Family> {
        let mut values = self.values.lock().expect("metric lock").clone();
        if values.is_empty() {
            if !self.desc.labels.is_empty() {
                return Vec::new();
            }
            values.insert(
                Vec::new(),
                HistogramState {
                    counts: vec![0; self.buckets.len()],
                    sum: 0.0,
                    count: 0,
                },
            );
        }
        let mut family = self.desc.family(MetricType::Histogram);
        for (key, state) in &values {
            let cumulative = state
                .counts
                .iter()
                .scan(0, |total, n| {
                    *total += n;
                    Some(*total)
                })
                .zip(&self.buckets)
                .map(|(total, bound)| (*bound, total))
                .collect();
            family.histogram(self.desc.labels(key), cumulative, state.sum, state.count);
        }
        vec![family]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_counters_gauges_and_histograms_in_text_format() {
        let r = Registry::new();
        let c = r.register(Arc::new(Scalar::counter(
            "b_total",
            "Things \"done\".",
            Stability::Alpha,
            &["kind", "path"],
        )));
        let g = r.register(Arc::new(Scalar::gauge(
            "a_gauge",
            "A gauge.",
            Stability::Stable,
            &[],
        )));
        let h = r.register(Arc::new(Histogram::new(
            "c_seconds",
            "Durations.",
            Stability::Alpha,
            &["op"],
            vec![0.5, 1.0],
        )));
        let empty = r.register(Arc::new(Scalar::counter(
            "d_total",
            "Never used.",
            Stability::Alpha,
            &["x"],
        )));
        c.inc(&["x", "a\"b"]);
        c.add(&["x", "a\"b"], 2.0);
        g.set(&[], 4206592.0);
        h.observe(&["pull"], 0.2);
        h.observe(&["pull"], 0.7);
        h.observe(&["pull"], 3.0);
        let _ = empty;
        assert_eq!(
            r.gather(),
            "# HELP a_gauge [STABLE] A gauge.\n\
             # TYPE a_gauge gauge\n\
             a_gauge 4.206592e+06\n\
             # HELP b_total [ALPHA] Things \"done\".\n\
             # TYPE b_total counter\n\
             b_total{kind=\"x\",path=\"a\\\"b\"} 3\n\
             # HELP c_seconds [ALPHA] Durations.\n\
             # TYPE c_seconds histogram\n\
             c_seconds_bucket{op=\"pull\",le=\"0.5\"} 1\n\
             c_seconds_bucket{op=\"pull\",le=\"1\"} 2\n\
             c_seconds_bucket{op=\"pull\",le=\"+Inf\"} 3\n\
             c_seconds_sum{op=\"pull\"} 3.9\n\
             c_seconds_count{op=\"pull\"} 3\n"
        );
    }

    #[test]
    fn unlabelled_families_appear_at_zero() {
        let r = Registry::new();
        r.register(Arc::new(Scalar::gauge("g", "G.", Stability::Alpha, &[])));
        r.register(Arc::new(Histogram::new(
            "h",
            "H.",
            Stability::Alpha,
            &[],
            vec![1.0],
        )));
        assert_eq!(
            r.gather(),
            "# HELP g [ALPHA] G.\n# TYPE g gauge\ng 0\n\
             # HELP h [ALPHA] H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 0\nh_bucket{le=\"+Inf\"} 0\nh_sum 0\nh_count 0\n"
        );
    }

    #[test]
    fn labels_are_written_sorted_by_name_with_le_last_and_gauge_funcs_at_scrape() {
        let r = Registry::new();
        let c = r.register(Arc::new(Scalar::counter(
            "w",
            "W.",
            Stability::Alpha,
            &["lifecycle", "config", "static"],
        )));
        let h = r.register(Arc::new(Histogram::new(
            "x_seconds",
            "X.",
            Stability::Alpha,
            &["verb", "host"],
            vec![1.0],
        )));
        let value = Arc::new(Mutex::new(None));
        let v2 = value.clone();
        r.register(Arc::new(GaugeFunc::new(
            "y_seconds",
            "Y.",
            Stability::Alpha,
            move || *v2.lock().unwrap(),
        )));
        c.inc(&["sync", "desired", "true"]);
        h.observe(&["GET", "h:1"], 0.5);
        let text = r.gather();
        assert!(text.contains("w{config=\"desired\",lifecycle=\"sync\",static=\"true\"} 1\n"));
        assert!(text.contains("x_seconds_bucket{host=\"h:1\",verb=\"GET\",le=\"1\"} 1\n"));
        assert!(text.contains("x_seconds_count{host=\"h:1\",verb=\"GET\"} 1\n"));
        assert!(
            !text.contains("y_seconds"),
            "absent while it has no value: {text}"
        );
        *value.lock().unwrap() = Some(f64::INFINITY);
        assert!(r
            .gather()
            .contains("# HELP y_seconds [ALPHA] Y.\n# TYPE y_seconds gauge\ny_seconds +Inf\n"));
    }

    #[test]
    fn exponential_buckets_multiply() {
        assert_eq!(exponential_buckets(1.0, 2.0, 4), vec![1.0, 2.0, 4.0, 8.0]);
    }
}
