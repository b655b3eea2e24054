//! A small Prometheus registry: counters, gauges and histograms with labels, written in the
//! text exposition format (version 0.0.4) the way Go's client library writes it, so scrapers
//! and tests written against the upstream kubelet read the same bytes.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

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

/// Anything that writes one metric family.
pub trait Collector: Send + Sync {
    fn name(&self) -> &str;
    fn write_to(&self, out: &mut String);
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
        let mut collectors = self
            .collectors
            .lock()
            .expect("metrics registry lock")
            .clone();
        collectors.sort_by(|a, b| a.name().cmp(b.name()));
        let mut out = String::new();
        for c in collectors {
            c.write_to(&mut out);
        }
        out
    }
}

/// Go's `strconv.FormatFloat(v, 'g', -1, 64)`, which the Prometheus text format uses:
/// shortest digits, exponent form when the decimal exponent is below -4 or 6 and above
/// (`4.206592e+06`, `1e-05`), plain otherwise (`123456`, `0.0001`).
pub fn format_float(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    if v == 0.0 {
        return if v.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    let sci = format!("{v:e}");
    let (mantissa, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("exponent is an integer");
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    } else {
        format!("{v}")
    }
}

fn escape_label(value: &str) -> String {
    let mut s = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

fn escape_help(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\n', "\\n")
}

/// `{a="x",b="y"}` or nothing, the labels sorted by name as Go's client sorts a series'
/// label pairs whatever order the metric declares them in; `extra` is appended last (the
/// histogram's `le`, as Go's text writer puts it).
fn label_set(names: &[&str], values: &[String], extra: Option<(&str, &str)>) -> String {
    let mut sorted: Vec<(&str, &String)> = names.iter().copied().zip(values).collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    let mut pairs: Vec<String> = sorted
        .into_iter()
        .map(|(n, v)| format!("{n}=\"{}\"", escape_label(v)))
        .collect();
    if let Some((n, v)) = extra {
        pairs.push(format!("{n}=\"{}\"", escape_label(v)));
    }
    if pairs.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", pairs.join(","))
    }
}

struct Desc {
    name: &'static str,
    help: &'static str,
    stability: Stability,
    labels: &'static [&'static str],
}

impl Desc {
    fn header(&self, out: &mut String, kind: &str) {
        let _ = writeln!(
            out,
            "# HELP {} {} {}",
            self.name,
            self.stability.tag(),
            escape_help(self.help)
        );
        let _ = writeln!(out, "# TYPE {} {kind}", self.name);
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
    kind: &'static str,
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
        Scalar::new(name, help, stability, labels, "counter")
    }

    pub fn gauge(
        name: &'static str,
        help: &'static str,
        stability: Stability,
        labels: &'static [&'static str],
    ) -> Scalar {
        Scalar::new(name, help, stability, labels, "gauge")
    }

    fn new(
        name: &'static str,
        help: &'static str,
        stability: Stability,
        labels: &'static [&'static str],
        kind: &'static str,
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
    fn name(&self) -> &str {
        self.desc.name
    }

    fn write_to(&self, out: &mut String) {
        let values = self.values.lock().expect("metric lock");
        // Go's registry omits a labelled family with no children; an unlabelled one is
        // always present (at zero).
        if values.is_empty() && !self.desc.labels.is_empty() {
            return;
        }
        self.desc.header(out, self.kind);
        if values.is_empty() {
            let _ = writeln!(out, "{} 0", self.desc.name);
        }
        for (key, v) in values.iter() {
            let _ = writeln!(
                out,
                "{}{} {}",
                self.desc.name,
                label_set(self.desc.labels, key, None),
                format_float(*v)
            );
        }
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
    fn name(&self) -> &str {
        self.desc.name
    }

    fn write_to(&self, out: &mut String) {
        let Some(v) = (self.value)() else {
            return;
        };
        self.desc.header(out, "gauge");
        let _ = writeln!(out, "{} {}", self.desc.name, format_float(v));
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
    fn name(&self) -> &str {
        self.desc.name
    }

    fn write_to(&self, out: &mut String) {
        let mut values = self.values.lock().expect("metric lock").clone();
        if values.is_empty() {
            if !self.desc.labels.is_empty() {
                return;
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
        self.desc.header(out, "histogram");
        let name = self.desc.name;
        for (key, state) in &values {
            let mut cumulative = 0;
            for (bound, n) in self.buckets.iter().zip(&state.counts) {
                cumulative += n;
                let le = format_float(*bound);
                let labels = label_set(self.desc.labels, key, Some(("le", &le)));
                let _ = writeln!(out, "{name}_bucket{labels} {cumulative}");
            }
            let labels = label_set(self.desc.labels, key, Some(("le", "+Inf")));
            let _ = writeln!(out, "{name}_bucket{labels} {}", state.count);
            let labels = label_set(self.desc.labels, key, None);
            let _ = writeln!(out, "{name}_sum{labels} {}", format_float(state.sum));
            let _ = writeln!(out, "{name}_count{labels} {}", state.count);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_like_go() {
        assert_eq!(format_float(0.0), "0");
        assert_eq!(format_float(1.0), "1");
        assert_eq!(format_float(110.0), "110");
        assert_eq!(format_float(123456.0), "123456");
        assert_eq!(format_float(4206592.0), "4.206592e+06");
        assert_eq!(format_float(1e6), "1e+06");
        assert_eq!(format_float(0.005), "0.005");
        assert_eq!(format_float(0.0001), "0.0001");
        assert_eq!(format_float(0.00001), "1e-05");
        assert_eq!(format_float(44.356054006), "44.356054006");
        assert_eq!(format_float(1.7506079464872775e9), "1.7506079464872775e+09");
        assert_eq!(format_float(f64::INFINITY), "+Inf");
    }

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
