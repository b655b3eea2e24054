//! The node log query's parameters (`/logs/?query=...`): parsed and validated with upstream's
//! rules (pkg/kubelet/kubelet_server_journal.go), and its error texts, which are
//! apimachinery's field errors joined the way its aggregate joins them.

use std::collections::HashMap;
use std::path::Path;

use chrono::{DateTime, FixedOffset, SecondsFormat};

use super::files::{self, OpenError};

/// At most this many lines from the end (upstream's maxTailLines).
const MAX_TAIL_LINES: i64 = 100_000;
/// Longest service name (upstream's maxServiceLength).
const MAX_SERVICE_LENGTH: usize = 256;
/// Most services in one query (upstream's maxServices).
const MAX_SERVICES: usize = 4;

/// One field error as apimachinery's `field.Error` prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FieldError(String);

impl FieldError {
    /// `field.Invalid`: `<field>: Invalid value: <value>: <detail>`.
    fn invalid(field: &str, value: &str, detail: &str) -> Self {
        FieldError(format!("{field}: Invalid value: {value}: {detail}"))
    }
}

/// The errors as one text, as `ErrorList.ToAggregate().Error()` gives it: a single message
/// alone, several in brackets, duplicates once.
pub(crate) fn aggregate(errors: &[FieldError]) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for e in errors {
        if !seen.contains(&e.0.as_str()) {
            seen.push(&e.0);
        }
    }
    if seen.len() == 1 {
        seen[0].to_string()
    } else {
        format!("[{}]", seen.join(", "))
    }
}

/// What the query's options ask of a service's log.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Options {
    pub since: Option<DateTime<FixedOffset>>,
    pub until: Option<DateTime<FixedOffset>>,
    pub tail_lines: Option<i64>,
    pub boot: Option<i64>,
    pub pattern: String,
}

impl Options {
    pub fn is_empty(&self) -> bool {
        *self == Options::default()
    }
}

/// A parsed query: services (names) or files (a value with a slash), and the options.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct NodeLogQuery {
    pub services: Vec<String>,
    pub files: Vec<String>,
    pub options: Options,
}

/// Why a number parameter is not one, in Go's strconv.Atoi wording (the field error quotes
/// it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum AtoiError {
    #[error("strconv.Atoi: parsing {}: invalid syntax", go_quote(.0))]
    Syntax(String),
    #[error("strconv.Atoi: parsing {}: value out of range", go_quote(.0))]
    Range(String),
}

/// Go's strconv.Atoi.
fn atoi(value: &str) -> Result<i64, AtoiError> {
    let digits = value.strip_prefix(['+', '-']).unwrap_or(value);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(AtoiError::Syntax(value.to_string()));
    }
    value
        .parse::<i64>()
        .map_err(|_| AtoiError::Range(value.to_string()))
}

/// The parameters upstream knows. `Ok(None)`: none of them was given, so the request is a
/// plain file-server one. Errors answer 400.
pub(crate) fn parse(
    params: &HashMap<String, Vec<String>>,
) -> Result<Option<NodeLogQuery>, Vec<FieldError>> {
    let mut errors = Vec::new();
    let mut q = NodeLogQuery::default();
    let first = |key: &str| {
        params
            .get(key)
            .and_then(|v| v.first())
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    };
    if let Some(values) = params.get("query") {
        for v in values {
            // A slash (either kind) means a file; blank values count for nothing.
            if v.contains(['/', '\\']) {
                q.files.push(v.clone());
            } else if !v.trim().is_empty() {
                q.services.push(v.clone());
            }
        }
        if q.files.is_empty() && q.services.is_empty() {
            errors.push(FieldError::invalid(
                "query",
                &json_strings(values),
                "may not be empty",
            ));
        }
    }
    for (key, slot) in [
        ("sinceTime", &mut q.options.since),
        ("untilTime", &mut q.options.until),
    ] {
        if let Some(v) = first(key) {
            match DateTime::parse_from_rfc3339(v) {
                Ok(t) => *slot = Some(t),
                Err(_) => errors.push(FieldError::invalid(
                    key,
                    &go_quote(v),
                    "invalid time format",
                )),
            }
        }
    }
    for (key, slot) in [
        ("boot", &mut q.options.boot),
        ("tailLines", &mut q.options.tail_lines),
    ] {
        if let Some(v) = first(key) {
            match atoi(v) {
                Ok(n) => *slot = Some(n),
                Err(e) => errors.push(FieldError::invalid(key, &go_quote(v), &e.to_string())),
            }
        }
    }
    if let Some(p) = first("pattern") {
        q.options.pattern = p.to_string();
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    if q == NodeLogQuery::default() {
        return Ok(None);
    }
    Ok(Some(q))
}

fn safe_service_name(s: &str) -> Result<(), &'static str> {
    if s.len() > MAX_SERVICE_LENGTH {
        // Upstream's words, whatever the limit.
        return Err("length must be less than 100");
    }
    let safe = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':' | '@');
    if !s.chars().all(safe) {
        return Err("input contains unsupported characters");
    }
    Ok(())
}

impl NodeLogQuery {
    /// Upstream's validation; errors answer 406. A single file must exist under `root`
    /// (found without leaving it, as Go's os.Root finds it).
    pub fn validate(&self, root: &Path) -> Vec<FieldError> {
        let mut errors = Vec::new();
        for s in &self.services {
            if let Err(e) = safe_service_name(s) {
                errors.push(FieldError::invalid("query", &go_quote(s), e));
            }
        }
        if self.services.len() > MAX_SERVICES {
            errors.push(FieldError(format!(
                "query: Too many: {}: must have at most {MAX_SERVICES} items",
                self.services.len()
            )));
        }
        let files = json_strings(&self.files);
        match (self.files.len(), self.services.len()) {
            (0, 0) => errors.push(FieldError(
                "query: Required value: cannot be empty with options".into(),
            )),
            (f, s) if f > 0 && s > 0 => errors.push(FieldError::invalid(
                "query",
                &go_quote(&format!(
                    "[{}], [{}]",
                    self.files.join(" "),
                    self.services.join(" ")
                )),
                "cannot specify a file and service",
            )),
            (f, _) if f > 1 => errors.push(FieldError::invalid(
                "query",
                &files,
                "cannot specify more than one file",
            )),
            (1, _) if !self.options.is_empty() => errors.push(FieldError::invalid(
                "query",
                &files,
                "cannot specify file with options",
            )),
            (1, _) => {
                if let Err(e) = files::stat_in_root(root, &self.files[0]) {
                    errors.push(FieldError::invalid(
                        "query",
                        &files,
                        &format!("statat {}: {}", self.files[0], e.go_text()),
                    ));
                }
            }
            _ => {}
        }
        if let (Some(since), Some(until)) = (self.options.since, self.options.until) {
            if since > until {
                errors.push(FieldError::invalid(
                    "untilTime",
                    &format!("\"{}\"", rfc3339_nano(until)),
                    "must be after `sinceTime`",
                ));
            }
        }
        if let Some(boot) = self.options.boot.filter(|b| *b > 0) {
            errors.push(FieldError::invalid(
                "boot",
                &boot.to_string(),
                "must be less than 1",
            ));
        }
        if let Some(n) = self
            .options
            .tail_lines
            .filter(|n| !(0..=MAX_TAIL_LINES).contains(n))
        {
            errors.push(FieldError::invalid(
                "tailLines",
                &n.to_string(),
                &format!("must be between 0 and {MAX_TAIL_LINES}, inclusive"),
            ));
        }
        // Upstream parses it as a Go (RE2, Perl flags) regexp; regex-syntax takes the same
        // family of syntax and refuses what RE2 refuses (backreferences, look-around).
        if let Err(e) = regex_syntax::Parser::new().parse(&self.options.pattern) {
            errors.push(FieldError::invalid(
                "pattern",
                &go_quote(&self.options.pattern),
                &format!("error parsing regexp: {}", first_line(&e.to_string())),
            ));
        }
        errors
    }
}

fn first_line(text: &str) -> String {
    // regex-syntax's messages draw the pattern with a caret over several lines: the last
    // line names the problem ("error: unclosed group").
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(|l| l.trim().trim_start_matches("error: ").to_string())
        .unwrap_or_default()
}

/// time.Time's JSON: RFC 3339 with the fraction's trailing zeros dropped, in its own offset.
fn rfc3339_nano(t: DateTime<FixedOffset>) -> String {
    let whole = t.to_rfc3339_opts(SecondsFormat::Secs, true);
    let nanos = t.timestamp_subsec_nanos();
    if nanos == 0 {
        return whole;
    }
    let fraction = format!("{nanos:09}");
    let fraction = fraction.trim_end_matches('0');
    // Insert the fraction before the offset (`Z` or `+hh:mm`).
    let at = whole
        .rfind(['Z', '+', '-'])
        .filter(|i| *i > 10)
        .unwrap_or(whole.len());
    format!("{}.{fraction}{}", &whole[..at], &whole[at..])
}

/// A string list as Go's json.Marshal writes it (how field errors show a []string).
fn json_strings(values: &[String]) -> String {
    serde_json::to_string(values).unwrap_or_default()
}

/// A string as Go's `%q` writes it, for the ASCII range a query carries; other characters
/// are kept as they are (Go keeps printable ones too).
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\x07' => out.push_str("\\a"),
            '\x08' => out.push_str("\\b"),
            '\x0c' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\x0b' => out.push_str("\\v"),
            c if c.is_ascii_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl OpenError {
    /// The error as Go's syscall and os packages word it.
    pub fn go_text(&self) -> String {
        match self {
            OpenError::Escapes => "path escapes from parent".into(),
            OpenError::NotRegular => "not a regular file".into(),
            OpenError::Os(errno) => {
                let desc = errno.desc();
                let mut chars = desc.chars();
                match chars.next() {
                    Some(c) => c.to_lowercase().chain(chars).collect(),
                    None => String::new(),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(query: &str) -> HashMap<String, Vec<String>> {
        crate::server::container_logs::parse_query(query)
    }

    fn parse_err(query: &str) -> String {
        aggregate(&parse(&params(query)).unwrap_err())
    }

    fn validate_err(root: &Path, query: &str) -> String {
        let q = parse(&params(query)).unwrap().unwrap();
        aggregate(&q.validate(root))
    }

    #[test]
    fn parse_errors_are_upstreams() {
        assert_eq!(
            parse_err("query="),
            r#"query: Invalid value: [""]: may not be empty"#
        );
        assert_eq!(
            parse_err("query=%20&query="),
            r#"query: Invalid value: [" ",""]: may not be empty"#
        );
        assert_eq!(
            parse_err("query=a&sinceTime=yesterday"),
            r#"sinceTime: Invalid value: "yesterday": invalid time format"#
        );
        assert_eq!(
            parse_err("query=a&tailLines=ten&boot=-x"),
            concat!(
                r#"[boot: Invalid value: "-x": strconv.Atoi: parsing "-x": invalid syntax, "#,
                r#"tailLines: Invalid value: "ten": strconv.Atoi: parsing "ten": invalid syntax]"#
            )
        );
        assert_eq!(
            parse_err("query=a&tailLines=99999999999999999999"),
            r#"tailLines: Invalid value: "99999999999999999999": strconv.Atoi: parsing "99999999999999999999": value out of range"#
        );
    }

    #[test]
    fn no_known_parameter_is_no_query() {
        assert_eq!(parse(&params("")).unwrap(), None);
        assert_eq!(parse(&params("foo=bar&tailLines=")).unwrap(), None);
        let q = parse(&params("tailLines=5")).unwrap().unwrap();
        assert_eq!(q.options.tail_lines, Some(5));
        let q = parse(&params("query=kubelet&query=apt/history.log&query=a%5Cb"))
            .unwrap()
            .unwrap();
        assert_eq!(q.services, vec!["kubelet"]);
        assert_eq!(q.files, vec!["apt/history.log", "a\\b"]);
    }

    #[test]
    fn validation_errors_are_upstreams() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("x.log"), "x\n").unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/y.log"), "y\n").unwrap();
        for (query, want) in [
            ("tailLines=5", "query: Required value: cannot be empty with options".to_string()),
            ("query=a%20b", r#"query: Invalid value: "a b": input contains unsupported characters"#.into()),
            ("query=a&query=b&query=c&query=d&query=e", "query: Too many: 5: must have at most 4 items".into()),
            ("query=sub/y.log&query=kubelet", r#"query: Invalid value: "[sub/y.log], [kubelet]": cannot specify a file and service"#.into()),
            ("query=sub/y.log&query=./x.log", r#"query: Invalid value: ["sub/y.log","./x.log"]: cannot specify more than one file"#.into()),
            ("query=sub/y.log&tailLines=1", r#"query: Invalid value: ["sub/y.log"]: cannot specify file with options"#.into()),
            ("query=sub/none.log", r#"query: Invalid value: ["sub/none.log"]: statat sub/none.log: no such file or directory"#.into()),
            ("query=../x.log", r#"query: Invalid value: ["../x.log"]: statat ../x.log: path escapes from parent"#.into()),
            // Go's os.Root refuses absolute names as escaping.
            ("query=/x.log", r#"query: Invalid value: ["/x.log"]: statat /x.log: path escapes from parent"#.into()),
            ("query=k&sinceTime=2024-01-02T00:00:00Z&untilTime=2024-01-01T00:00:00.5%2B02:00",
             r#"untilTime: Invalid value: "2024-01-01T00:00:00.5+02:00": must be after `sinceTime`"#.into()),
            ("query=k&boot=1", "boot: Invalid value: 1: must be less than 1".into()),
            ("query=k&tailLines=100001", "tailLines: Invalid value: 100001: must be between 0 and 100000, inclusive".into()),
            ("query=k&tailLines=-1", "tailLines: Invalid value: -1: must be between 0 and 100000, inclusive".into()),
        ] {
            assert_eq!(validate_err(root, query), want, "?{query}");
        }
        let bad_pattern = validate_err(root, "query=k&pattern=(a");
        assert!(
            bad_pattern.starts_with(r#"pattern: Invalid value: "(a": error parsing regexp: "#),
            "{bad_pattern}"
        );
        for ok in ["query=sub/y.log", "query=./x.log", "query=kubelet&query=containerd&tailLines=0&boot=-1&pattern=err(or)?&sinceTime=2024-01-01T00:00:00Z"] {
            let q = parse(&params(ok)).unwrap().unwrap();
            assert_eq!(q.validate(root), Vec::new(), "?{ok}");
        }
    }

    mod properties {
        use super::*;
        use chrono::TimeZone;
        use proptest::prelude::*;

        /// Times RFC 3339 can write: years 0000 to 9999, offsets in whole minutes.
        pub(crate) fn time() -> impl Strategy<Value = DateTime<FixedOffset>> {
            (
                -62_167_132_800i64..253_402_214_400,
                0u32..1_000_000_000,
                -1439i32..1440,
            )
                .prop_map(|(secs, nanos, minutes)| {
                    FixedOffset::east_opt(minutes * 60)
                        .unwrap()
                        .timestamp_opt(secs, nanos)
                        .unwrap()
                })
        }

        /// A value for one of the query's keys: numbers near and past i64, times, names,
        /// files, patterns, and anything else.
        fn value() -> impl Strategy<Value = String> {
            prop_oneof![
                any::<i64>().prop_map(|n| n.to_string()),
                "[+-]?[0-9]{18,22}",
                time().prop_map(|t| t.to_rfc3339()),
                "[a-z0-9._@:-]{0,10}",
                "[a-z./\\\\]{0,12}",
                "[()a-z|*+?{}0-9,\\[\\]\\\\^$]{0,12}",
                ".{0,12}",
            ]
        }

        fn query() -> impl Strategy<Value = String> {
            let key = prop::sample::select(vec![
                "query",
                "sinceTime",
                "untilTime",
                "boot",
                "tailLines",
                "pattern",
                "other",
            ]);
            crate::test_support::query_of(key, value())
        }

        proptest! {
            #![proptest_config(crate::test_support::proptest_config(256))]

            /// Any query parses or is refused, and what parses validates or is refused,
            /// with errors that join into one text.
            #[test]
            fn any_query_parses_and_validates_or_errs(q in prop_oneof![query(), ".{0,40}"]) {
                let dir = tempfile::tempdir().unwrap();
                match parse(&params(&q)) {
                    Err(errors) => prop_assert!(!aggregate(&errors).is_empty()),
                    Ok(None) => {}
                    Ok(Some(parsed)) => {
                        let _ = aggregate(&parsed.validate(dir.path()));
                    }
                }
            }

            /// A query that validates gives journalctl only options of its own choosing:
            /// no client text can start an argument of its own.
            #[test]
            fn a_valid_query_gives_journalctl_only_its_own_options(q in query()) {
                let Ok(Some(parsed)) = parse(&params(&q)) else {
                    return Ok(());
                };
                if !parsed.files.is_empty() || !parsed.validate(Path::new("/nonexistent")).is_empty() {
                    return Ok(());
                }
                let args = crate::server::node_logs::journal::journalctl_args(&parsed.options, &parsed.services);
                let mut after_boot = false;
                for a in &args {
                    let fixed = ["--utc", "--no-pager", "--output=short-precise", "--pager-end", "--boot"];
                    let prefixed = ["--since=", "--until=", "--lines=", "--unit=", "--grep="];
                    if after_boot {
                        prop_assert!(a.parse::<i64>().is_ok_and(|b| b <= 0), "{:?}", args);
                    } else {
                        prop_assert!(fixed.contains(&a.as_str()) || prefixed.iter().any(|p| a.starts_with(p)), "{:?}", args);
                    }
                    after_boot = a == "--boot";
                }
            }

            /// The options a client sends are the options parsed.
            #[test]
            fn options_round_trip(
                services in prop::collection::vec("[a-z0-9._@:-]{1,10}", 1..5),
                since in proptest::option::of(time()),
                until in proptest::option::of(time()),
                tail in proptest::option::of(any::<i64>()),
                boot in proptest::option::of(any::<i64>()),
                pattern in "[a-z|()]{0,8}",
            ) {
                let mut s = form_urlencoded::Serializer::new(String::new());
                for service in &services {
                    s.append_pair("query", service);
                }
                for (key, t) in [("sinceTime", since), ("untilTime", until)] {
                    if let Some(t) = t {
                        s.append_pair(key, &rfc3339_nano(t));
                    }
                }
                for (key, n) in [("tailLines", tail), ("boot", boot)] {
                    if let Some(n) = n {
                        s.append_pair(key, &n.to_string());
                    }
                }
                s.append_pair("pattern", &pattern);
                let parsed = parse(&params(&s.finish())).unwrap().unwrap();
                prop_assert_eq!(parsed.services, services);
                prop_assert_eq!(parsed.options, Options { since, until, tail_lines: tail, boot, pattern });
            }

            /// The time an error names reads back as the time.
            #[test]
            fn error_times_read_back(t in time()) {
                prop_assert_eq!(DateTime::parse_from_rfc3339(&rfc3339_nano(t)), Ok(t));
            }

            #[test]
            fn atoi_reads_every_i64_and_refuses_the_rest(n in any::<i64>(), junk in "[+-]?[0-9a-z]{0,25}") {
                prop_assert_eq!(atoi(&n.to_string()), Ok(n));
                prop_assert_eq!(atoi(&junk).ok(), junk.parse::<i64>().ok());
            }
        }
    }
}
