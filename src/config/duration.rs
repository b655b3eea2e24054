//! Go duration strings (`time.ParseDuration` syntax), the format every duration field of a
//! KubeletConfiguration and every duration flag of the kubelet uses.

use std::time::Duration;

const NANOS_PER_UNIT: &[(&str, u128)] = &[
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("μs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60 * 1_000_000_000),
    ("h", 3600 * 1_000_000_000),
];

/// Why a text is not a Go duration, in a few words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("a negative duration is not allowed")]
    Negative,
    #[error("an empty duration; expected e.g. \"20s\", \"1m30s\", \"500ms\"")]
    Empty,
    #[error("expected a number before each unit (e.g. \"1h2m3.5s\")")]
    NumberBeforeUnit,
    #[error("missing unit (one of ns, us, ms, s, m, h)")]
    MissingUnit,
    #[error("unknown unit \"{0}\" (one of ns, us, ms, s, m, h)")]
    UnknownUnit(String),
    #[error("number too large")]
    NumberTooLarge,
    #[error("bad fraction")]
    BadFraction,
    #[error("duration too large")]
    TooLarge,
}

/// Parses "20s", "1m0s", "1h2m3.5s", "500ms", "0". Negative durations are refused because no
/// duration the agent reads may be negative; the error says why in a few words.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let mut rest = text;
    if let Some(stripped) = rest.strip_prefix('+') {
        rest = stripped;
    } else if let Some(stripped) = rest.strip_prefix('-') {
        // "-0" is zero in Go; anything else negative is of no use here.
        if stripped.chars().all(|c| c == '0') && !stripped.is_empty() {
            return Ok(Duration::ZERO);
        }
        return Err(DurationError::Negative);
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(DurationError::Empty);
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let int_part = &rest[..int_len];
        rest = &rest[int_len..];
        let mut frac_part = "";
        if let Some(after_dot) = rest.strip_prefix('.') {
            let frac_len = after_dot.bytes().take_while(u8::is_ascii_digit).count();
            frac_part = &after_dot[..frac_len];
            rest = &after_dot[frac_len..];
        }
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(DurationError::NumberBeforeUnit);
        }
        let unit_len = rest
            .char_indices()
            .find(|(_, c)| c.is_ascii_digit() || *c == '.')
            .map_or(rest.len(), |(i, _)| i);
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let per_unit = NANOS_PER_UNIT
            .iter()
            .find(|(name, _)| *name == unit)
            .map(|(_, n)| *n)
            .ok_or_else(|| {
                if unit.is_empty() {
                    DurationError::MissingUnit
                } else {
                    DurationError::UnknownUnit(unit.to_string())
                }
            })?;
        let whole: u128 = if int_part.is_empty() {
            0
        } else {
            int_part
                .parse()
                .map_err(|_| DurationError::NumberTooLarge)?
        };
        let mut nanos = whole.checked_mul(per_unit).ok_or(DurationError::TooLarge)?;
        if !frac_part.is_empty() {
            // Go truncates the fractional part to whole nanoseconds; only its first digits matter.
            let digits = &frac_part[..frac_part.len().min(18)];
            let frac: u128 = digits.parse().map_err(|_| DurationError::BadFraction)?;
            // The whole part's nanoseconds may sit just below u128::MAX: checked, not `+=`.
            nanos = nanos
                .checked_add(frac * per_unit / 10u128.pow(digits.len() as u32))
                .ok_or(DurationError::TooLarge)?;
        }
        total = total.checked_add(nanos).ok_or(DurationError::TooLarge)?;
    }
    // Go's durations are signed 64-bit nanoseconds; keep the same ceiling.
    if total > i64::MAX as u128 {
        return Err(DurationError::TooLarge);
    }
    Ok(Duration::from_nanos(total as u64))
}

/// Formats a duration as Go's `Duration.String()` does ("1m0s", "20s", "500ms", "0s"), so the
/// effective configuration can be shown in the form users wrote it.
pub fn format_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_string();
    }
    if nanos < 1_000_000_000 {
        let (unit, per) = if nanos < 1_000 {
            ("ns", 1)
        } else if nanos < 1_000_000 {
            ("µs", 1_000)
        } else {
            ("ms", 1_000_000)
        };
        return format!("{}{unit}", fraction(nanos, per));
    }
    let total_secs = nanos / 1_000_000_000;
    let sub_nanos = nanos % 1_000_000_000;
    let hours = total_secs / 3600;
    let minutes = (total_secs % 3600) / 60;
    let seconds = total_secs % 60;
    let secs = fraction(seconds * 1_000_000_000 + sub_nanos, 1_000_000_000);
    if hours > 0 {
        format!("{hours}h{minutes}m{secs}s")
    } else if minutes > 0 {
        format!("{minutes}m{secs}s")
    } else {
        format!("{secs}s")
    }
}

/// `value / per` written with the shortest exact decimal fraction.
fn fraction(value: u128, per: u128) -> String {
    let whole = value / per;
    let rem = value % per;
    if rem == 0 {
        return whole.to_string();
    }
    let width = per.to_string().len() - 1;
    let digits = format!("{rem:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_durations() {
        assert_eq!(parse_duration("20s").unwrap(), Duration::from_secs(20));
        assert_eq!(parse_duration("1m0s").unwrap(), Duration::from_secs(60));
        assert_eq!(parse_duration("1m").unwrap(), Duration::from_secs(60));
        assert_eq!(
            parse_duration("1h2m3.5s").unwrap(),
            Duration::from_millis(3_723_500)
        );
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1.5h").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration(".5s").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("10us").unwrap(), Duration::from_micros(10));
        assert_eq!(parse_duration("10µs").unwrap(), Duration::from_micros(10));
        assert_eq!(parse_duration("7ns").unwrap(), Duration::from_nanos(7));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert_eq!(parse_duration("0s").unwrap(), Duration::ZERO);
        assert_eq!(parse_duration("+5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("-0").unwrap(), Duration::ZERO);
    }

    #[test]
    fn rejects_bad_durations() {
        for bad in ["", "20", "s", "1x", "1.s.", "-5s", "1h 2m", "abc", "5m-3s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be rejected");
        }
        assert!(parse_duration("1000000000h").is_err());
        assert!(parse_duration("20")
            .unwrap_err()
            .to_string()
            .contains("missing unit"));
        assert!(parse_duration("3d")
            .unwrap_err()
            .to_string()
            .contains("unknown unit \"d\""));
    }

    #[test]
    fn formats_like_go() {
        assert_eq!(format_duration(Duration::ZERO), "0s");
        assert_eq!(format_duration(Duration::from_secs(20)), "20s");
        assert_eq!(format_duration(Duration::from_secs(60)), "1m0s");
        assert_eq!(
            format_duration(Duration::from_millis(3_723_500)),
            "1h2m3.5s"
        );
        assert_eq!(format_duration(Duration::from_millis(500)), "500ms");
        assert_eq!(format_duration(Duration::from_micros(1500)), "1.5ms");
        assert_eq!(format_duration(Duration::from_nanos(7)), "7ns");
        for text in ["20s", "1m0s", "1h2m3.5s", "500ms", "2h0m0s"] {
            assert_eq!(format_duration(parse_duration(text).unwrap()), text);
        }
    }

    /// Go's duration grammar: signed, several number-unit pairs, fractions, and numbers past
    /// u64 and u128.
    fn duration_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let unit = prop::sample::select(vec!["ns", "us", "µs", "μs", "ms", "s", "m", "h", "", "d"]);
        // Numbers just below u128::MAX over a unit's nanoseconds: the product fits, the
        // fraction added to it need not.
        let near_max = prop::sample::select(vec![
            1u128,
            1_000,
            1_000_000,
            1_000_000_000,
            60_000_000_000,
            3_600_000_000_000,
        ])
        .prop_flat_map(|per| (u128::MAX / per - 3..=u128::MAX / per).prop_map(|n| n.to_string()));
        let int = prop_oneof!["[0-9]{0,42}".boxed(), near_max.boxed()];
        let part = (
            int,
            prop_oneof![Just(String::new()), "\\.[0-9]{0,42}"],
            unit,
        )
            .prop_map(|(i, f, u)| format!("{i}{f}{u}"));
        let sign = prop_oneof![Just(""), Just("+"), Just("-")];
        (sign, prop::collection::vec(part, 1..5))
            .prop_map(|(s, parts)| format!("{s}{}", parts.concat()))
    }

    /// Found by `grammar_shaped_text_reads_back_from_its_go_form`: a whole part
    /// whose nanoseconds just fit a u128, plus its fraction, overflowed (a panic in debug
    /// builds; in release a wrapped, tiny duration).
    #[test]
    fn a_fraction_past_the_largest_number_is_too_large() {
        let whole = u128::MAX / 1_000;
        for text in [
            format!("{whole}.999us"),
            format!("{}.9h", u128::MAX / 3_600_000_000_000),
        ] {
            assert_eq!(
                parse_duration(&text).map_err(|e| e.to_string()),
                Err("duration too large".to_string()),
                "{text}"
            );
        }
    }

    proptest::proptest! {
        #![proptest_config(crate::test_support::proptest_config(512))]

        #[test]
        fn any_text_parses_or_errs(text in proptest::prelude::any::<String>()) {
            if let Ok(d) = parse_duration(&text) {
                proptest::prop_assert_eq!(parse_duration(&format_duration(d)), Ok(d));
            }
        }

        #[test]
        fn grammar_shaped_text_reads_back_from_its_go_form(text in duration_text()) {
            if let Ok(d) = parse_duration(&text) {
                proptest::prop_assert!(d.as_nanos() <= i64::MAX as u128, "{:?}", text);
                proptest::prop_assert_eq!(parse_duration(&format_duration(d)), Ok(d), "{:?}", text);
            }
        }

        #[test]
        fn every_go_duration_round_trips(nanos in 0..=i64::MAX as u64) {
            let d = Duration::from_nanos(nanos);
            proptest::prop_assert_eq!(parse_duration(&format_duration(d)), Ok(d));
        }

        #[test]
        fn hours_minutes_and_seconds_add_up(h in 0u64..2_000_000, m in 0u64..100_000, s in 0u64..100_000, ms in 0u64..1000) {
            let text = format!("{h}h{m}m{s}.{ms:03}s");
            let want = Duration::from_millis(((h * 60 + m) * 60 + s) * 1000 + ms);
            proptest::prop_assert_eq!(parse_duration(&text), Ok(want));
        }
    }
}
