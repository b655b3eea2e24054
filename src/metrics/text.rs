//! The Prometheus text exposition format (version 0.0.4), written the way Go's client
//! (client_golang's gatherer and prometheus/common's expfmt) writes it, byte for byte: the
//! upstream kubelet's four endpoints (/metrics, /metrics/probes, /metrics/resource,
//! /metrics/cadvisor) go through that writer, and scrapers, recording rules and tests were
//! written against its bytes. Every endpoint here builds [`Family`] values and hands them to
//! [`encode`]; nothing else in the crate writes HELP/TYPE lines, escapes or formats a sample.

use std::cmp::Ordering;
use std::fmt::Write as _;

/// The content type every metrics endpoint answers with.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The types the agent's families use (Go's text writer also knows summary and untyped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricType {
    Counter,
    Gauge,
    Histogram,
}

impl MetricType {
    fn as_str(self) -> &'static str {
        match self {
            MetricType::Counter => "counter",
            MetricType::Gauge => "gauge",
            MetricType::Histogram => "histogram",
        }
    }
}

/// What one series carries.
#[derive(Debug, Clone, PartialEq)]
enum Value {
    Sample(f64),
    /// Cumulative counts by upper bound, in increasing order; a `+Inf` bucket is written
    /// after them when they lack one, as Go does.
    Histogram {
        buckets: Vec<(f64, u64)>,
        sum: f64,
        count: u64,
    },
}

/// One series: its label pairs (any order: written sorted by name), value and timestamp.
#[derive(Debug, Clone, PartialEq)]
struct Metric {
    labels: Vec<(&'static str, String)>,
    value: Value,
    timestamp_ms: Option<i64>,
}

/// One metric family: a name, its help text and type, and its series.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    name: &'static str,
    help: String,
    kind: MetricType,
    metrics: Vec<Metric>,
}

impl Family {
    pub fn new(name: &'static str, kind: MetricType, help: impl Into<String>) -> Family {
        Family {
            name,
            help: help.into(),
            kind,
            metrics: Vec::new(),
        }
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    pub fn is_empty(&self) -> bool {
        self.metrics.is_empty()
    }

    /// A counter's or gauge's series; `timestamp_ms` is written after the value when given.
    pub fn sample(
        &mut self,
        labels: Vec<(&'static str, String)>,
        value: f64,
        timestamp_ms: Option<i64>,
    ) {
        self.metrics.push(Metric {
            labels,
            value: Value::Sample(value),
            timestamp_ms,
        });
    }

    /// A histogram's series: `buckets` are (upper bound, cumulative count).
    pub fn histogram(
        &mut self,
        labels: Vec<(&'static str, String)>,
        buckets: Vec<(f64, u64)>,
        sum: f64,
        count: u64,
    ) {
        self.metrics.push(Metric {
            labels,
            value: Value::Histogram {
                buckets,
                sum,
                count,
            },
            timestamp_ms: None,
        });
    }

    fn write(mut self, out: &mut String) {
        for m in &mut self.metrics {
            m.labels.sort_by(|a, b| a.0.cmp(b.0));
        }
        self.metrics.sort_by(go_metric_order);
        let _ = writeln!(out, "# HELP {} {}", self.name, escape(&self.help, false));
        let _ = writeln!(out, "# TYPE {} {}", self.name, self.kind.as_str());
        for m in &self.metrics {
            match &m.value {
                Value::Sample(v) => write_sample(out, self.name, "", m, None, *v),
                Value::Histogram {
                    buckets,
                    sum,
                    count,
                } => {
                    for (bound, n) in buckets {
                        write_sample(out, self.name, "_bucket", m, Some(*bound), *n as f64);
                    }
                    if !buckets.last().is_some_and(|(b, _)| *b == f64::INFINITY) {
                        let inf = Some(f64::INFINITY);
                        write_sample(out, self.name, "_bucket", m, inf, *count as f64);
                    }
                    write_sample(out, self.name, "_sum", m, None, *sum);
                    write_sample(out, self.name, "_count", m, None, *count as f64);
                }
            }
        }
    }
}

/// The families as Go's gatherer writes them: sorted by name, families without series left
/// out, each family's series sorted by their label values (labels taken in name order).
pub fn encode(families: impl IntoIterator<Item = Family>) -> String {
    let mut families: Vec<Family> = families.into_iter().filter(|f| !f.is_empty()).collect();
    families.sort_by(|a, b| a.name.cmp(b.name));
    let mut out = String::new();
    for f in families {
        f.write(&mut out);
    }
    out
}

/// Go's order of a family's series (client_golang's metricSorter): fewer labels first, then
/// label values in turn, then timestamps with a missing one ("now") last.
fn go_metric_order(a: &Metric, b: &Metric) -> Ordering {
    a.labels
        .len()
        .cmp(&b.labels.len())
        .then_with(|| {
            let va = a.labels.iter().map(|(_, v)| v.as_str());
            va.cmp(b.labels.iter().map(|(_, v)| v.as_str()))
        })
        .then_with(|| match (a.timestamp_ms, b.timestamp_ms) {
            (Some(x), Some(y)) => x.cmp(&y),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        })
}

/// `name{a="x",b="y",le="0.5"} value timestamp`: `le` (a histogram bucket's bound) goes
/// after the sorted labels, as Go's writer appends it.
fn write_sample(
    out: &mut String,
    name: &str,
    suffix: &str,
    m: &Metric,
    le: Option<f64>,
    value: f64,
) {
    out.push_str(name);
    out.push_str(suffix);
    if !m.labels.is_empty() || le.is_some() {
        let mut separator = '{';
        for (k, v) in &m.labels {
            let _ = write!(out, "{separator}{k}=\"{}\"", escape(v, true));
            separator = ',';
        }
        if let Some(le) = le {
            let _ = write!(out, "{separator}le=\"{}\"", format_float(le));
        }
        out.push('}');
    }
    out.push(' ');
    out.push_str(&format_float(value));
    if let Some(ts) = m.timestamp_ms {
        let _ = write!(out, " {ts}");
    }
    out.push('\n');
}

/// Go's text escaping: backslash and newline always, the double quote in label values only
/// (HELP text keeps its quotes).
fn escape(text: &str, quote: bool) -> String {
    let mut s = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '\n' => s.push_str("\\n"),
            '"' if quote => s.push_str("\\\""),
            c => s.push(c),
        }
    }
    s
}

/// A sample value as Go's text writer prints it: `NaN`, `+Inf`, `-Inf`, `0` for either zero
/// (expfmt special-cases zero before formatting, so -0 loses its sign), otherwise
/// `strconv.FormatFloat(v, 'g', -1, 64)`: the shortest digits that read back as `v`, in
/// exponent form when the decimal exponent is below -4 or 6 and above (`4.206592e+06`,
/// `1e-05`, at least two exponent digits), plain otherwise (`123456`, `0.0001`).
pub fn format_float(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    if v == 0.0 {
        return "0".into();
    }
    // Rust's `{:e}` writes the same shortest round-trip digits, as `4.206592e6`.
    let sci = format!("{v:e}");
    let (mantissa, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("the exponent is an integer");
    if (-4..6).contains(&exp) {
        format!("{v}")
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
        pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
    }

    #[test]
    fn floats_print_like_go() {
        assert_eq!(format_float(0.0), "0");
        assert_eq!(format_float(1.0), "1");
        assert_eq!(format_float(-1.0), "-1");
        assert_eq!(format_float(110.0), "110");
        assert_eq!(format_float(123456.0), "123456");
        assert_eq!(format_float(999999.0), "999999");
        assert_eq!(format_float(4206592.0), "4.206592e+06");
        assert_eq!(format_float(1e6), "1e+06");
        assert_eq!(format_float(-1e6), "-1e+06");
        assert_eq!(format_float(1e21), "1e+21");
        assert_eq!(format_float(1.5e300), "1.5e+300");
        assert_eq!(format_float(0.005), "0.005");
        assert_eq!(format_float(0.0001), "0.0001");
        assert_eq!(format_float(0.00001), "1e-05");
        assert_eq!(format_float(-0.000123), "-0.000123");
        assert_eq!(format_float(1.25e-7), "1.25e-07");
        assert_eq!(format_float(5e-324), "5e-324");
        assert_eq!(format_float(f64::MAX), "1.7976931348623157e+308");
        assert_eq!(format_float(0.1 + 0.2), "0.30000000000000004");
        assert_eq!(format_float(44.356054006), "44.356054006");
        assert_eq!(format_float(6197.005020909), "6197.005020909");
        assert_eq!(format_float(1.137475584e9), "1.137475584e+09");
        assert_eq!(format_float(1.7506079464872775e9), "1.7506079464872775e+09");
        assert_eq!(format_float(u64::MAX as f64), "1.8446744073709552e+19");
        assert_eq!(format_float(f64::INFINITY), "+Inf");
        assert_eq!(format_float(f64::NEG_INFINITY), "-Inf");
        assert_eq!(format_float(f64::NAN), "NaN");
    }

    #[test]
    fn negative_zero_prints_as_zero_as_expfmt_writes_it() {
        // strconv alone would print "-0"; expfmt's writeFloat answers zero first.
        assert_eq!(format_float(-0.0), "0");
    }

    #[test]
    fn label_values_escape_backslash_quote_and_newline() {
        let mut f = Family::new("x", MetricType::Gauge, "X.");
        f.sample(labels(&[("v", "a\\b\"c\nd\te")]), 1.0, None);
        assert_eq!(
            encode([f]),
            "# HELP x X.\n# TYPE x gauge\nx{v=\"a\\\\b\\\"c\\nd\te\"} 1\n"
        );
    }

    #[test]
    fn help_escapes_backslash_and_newline_but_keeps_quotes() {
        let mut f = Family::new("x", MetricType::Counter, "a \\ \"quoted\"\nsecond line");
        f.sample(vec![], 2.0, None);
        assert_eq!(
            encode([f]),
            "# HELP x a \\\\ \"quoted\"\\nsecond line\n# TYPE x counter\nx 2\n"
        );
    }

    #[test]
    fn families_sort_by_name_and_empty_ones_are_left_out() {
        let mut b = Family::new("b", MetricType::Gauge, "B.");
        b.sample(vec![], 0.5, None);
        let mut a = Family::new("a", MetricType::Gauge, "A.");
        a.sample(vec![], -0.0, None);
        let empty = Family::new("c", MetricType::Gauge, "C.");
        assert_eq!(
            encode([b, empty, a]),
            "# HELP a A.\n# TYPE a gauge\na 0\n# HELP b B.\n# TYPE b gauge\nb 0.5\n"
        );
    }

    #[test]
    fn series_sort_by_label_values_in_label_name_order_then_timestamp() {
        let mut f = Family::new("s", MetricType::Gauge, "S.");
        // Declared in another order than names sort: values compare in name order (a, z).
        f.sample(labels(&[("z", "1"), ("a", "y")]), 1.0, None);
        f.sample(labels(&[("z", "2"), ("a", "x")]), 2.0, None);
        f.sample(labels(&[("z", "0"), ("a", "x")]), 3.0, Some(7));
        // Same labels: a timestamped one before one without (Go's "now" sorts last).
        f.sample(labels(&[("z", "0"), ("a", "x")]), 4.0, None);
        f.sample(labels(&[("z", "0"), ("a", "x")]), 5.0, Some(3));
        // Fewer labels first, whatever their values.
        f.sample(labels(&[("a", "zzz")]), 6.0, None);
        assert_eq!(
            encode([f]),
            "# HELP s S.\n# TYPE s gauge\n\
             s{a=\"zzz\"} 6\n\
             s{a=\"x\",z=\"0\"} 5 3\n\
             s{a=\"x\",z=\"0\"} 3 7\n\
             s{a=\"x\",z=\"0\"} 4\n\
             s{a=\"x\",z=\"2\"} 2\n\
             s{a=\"y\",z=\"1\"} 1\n"
        );
    }

    #[test]
    fn histograms_write_buckets_sum_and_count_with_le_last_and_counts_as_floats() {
        let mut h = Family::new("h_seconds", MetricType::Histogram, "H.");
        h.histogram(labels(&[("op", "b")]), vec![(0.5, 1), (1.0, 2)], 2.5e-5, 3);
        // A bucket list ending in +Inf gets no second one; counts past 1e6 print as Go's
        // float64 conversion prints them.
        h.histogram(
            labels(&[("op", "a")]),
            vec![(1e-5, 0), (f64::INFINITY, 1_234_567)],
            1e7,
            1_234_567,
        );
        assert_eq!(
            encode([h]),
            "# HELP h_seconds H.\n# TYPE h_seconds histogram\n\
             h_seconds_bucket{op=\"a\",le=\"1e-05\"} 0\n\
             h_seconds_bucket{op=\"a\",le=\"+Inf\"} 1.234567e+06\n\
             h_seconds_sum{op=\"a\"} 1e+07\n\
             h_seconds_count{op=\"a\"} 1.234567e+06\n\
             h_seconds_bucket{op=\"b\",le=\"0.5\"} 1\n\
             h_seconds_bucket{op=\"b\",le=\"1\"} 2\n\
             h_seconds_bucket{op=\"b\",le=\"+Inf\"} 3\n\
             h_seconds_sum{op=\"b\"} 2.5e-05\n\
             h_seconds_count{op=\"b\"} 3\n"
        );
    }

    #[test]
    fn unlabelled_histograms_write_le_alone() {
        let mut h = Family::new("h", MetricType::Histogram, "H.");
        h.histogram(vec![], vec![(1.0, 0)], 0.0, 0);
        assert_eq!(
            encode([h]),
            "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 0\nh_bucket{le=\"+Inf\"} 0\nh_sum 0\nh_count 0\n"
        );
    }

    #[test]
    fn the_output_parses_as_the_text_format() {
        let mut f = Family::new("p", MetricType::Gauge, "P \"q\" \\ r.");
        f.sample(labels(&[("k", "v\"\\\n")]), f64::NAN, Some(1));
        f.sample(labels(&[("k", "w")]), f64::NEG_INFINITY, None);
        let text = encode([f]);
        let parsed = openmetrics_parser::prometheus::parse_prometheus(&text)
            .unwrap_or_else(|e| panic!("{e:?}\n{text}"));
        assert_eq!(parsed.families.len(), 1, "{text}");
    }
}
