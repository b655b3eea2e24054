//! Timestamps as Go prints them, without allocating: the logger formats one per record.

use std::time::{SystemTime, UNIX_EPOCH};

/// Longest RFC3339Nano text in UTC: `2006-01-02T15:04:05.999999999Z`.
pub const MAX_RFC3339_NANO_LEN: usize = 30;

/// A UTC calendar time split into fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CivilTime {
    pub year: u32,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    pub nanos: u32,
}

impl CivilTime {
    /// Times before 1970 are clamped to the epoch: a logger never sees them unless the clock is
    /// broken, and a sane timestamp beats a panic there.
    pub(crate) fn from_system_time(t: SystemTime) -> Self {
        let since_epoch = t.duration_since(UNIX_EPOCH).unwrap_or_default();
        let secs = since_epoch.as_secs();
        let days = secs / 86_400;
        let rem = secs % 86_400;
        let (year, month, day) = civil_from_days(days);
        CivilTime {
            year,
            month,
            day,
            hour: (rem / 3600) as u32,
            minute: (rem % 3600 / 60) as u32,
            second: (rem % 60) as u32,
            nanos: since_epoch.subsec_nanos(),
        }
    }
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day), counting in 400-year eras
/// that start on March 1st so leap days fall at the end of each era-year.
fn civil_from_days(days: u64) -> (u32, u32, u32) {
    let z = days + 719_468; // shift the epoch to 0000-03-01
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153; // 0 = March
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year as u32, month as u32, day as u32)
}

fn put_digits(out: &mut [u8], mut value: u32) {
    for slot in out.iter_mut().rev() {
        *slot = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

/// Writes `t` in UTC as Go's `time.RFC3339Nano` does (`2006-01-02T15:04:05.999999999Z07:00`):
/// trailing zeros of the fraction are dropped, and the dot too when nothing is left. Returns the
/// number of bytes written. containerd's CRI logger uses this layout; the kubelet and log shippers
/// parse it back.
pub fn write_rfc3339_nano(t: SystemTime, out: &mut [u8; MAX_RFC3339_NANO_LEN]) -> usize {
    let c = CivilTime::from_system_time(t);
    // Years past 9999 print with more digits in Go; that is 8000 years away, so 4 digits it is.
    put_digits(&mut out[0..4], c.year.min(9999));
    out[4] = b'-';
    put_digits(&mut out[5..7], c.month);
    out[7] = b'-';
    put_digits(&mut out[8..10], c.day);
    out[10] = b'T';
    put_digits(&mut out[11..13], c.hour);
    out[13] = b':';
    put_digits(&mut out[14..16], c.minute);
    out[16] = b':';
    put_digits(&mut out[17..19], c.second);
    let mut len = 19;
    if c.nanos != 0 {
        let mut digits = 9;
        let mut frac = c.nanos;
        while frac.is_multiple_of(10) {
            frac /= 10;
            digits -= 1;
        }
        out[19] = b'.';
        put_digits(&mut out[20..20 + digits], frac);
        len = 20 + digits;
    }
    out[len] = b'Z';
    len + 1
}

/// [`write_rfc3339_nano`] into a `String`, for callers off the hot path.
pub fn format_rfc3339_nano(t: SystemTime) -> String {
    let mut buf = [0u8; MAX_RFC3339_NANO_LEN];
    let len = write_rfc3339_nano(t, &mut buf);
    // Only ASCII digits and separators were written.
    String::from_utf8_lossy(&buf[..len]).into_owned()
}

/// `YYYYMMDD-hhmmss` (Go layout `20060102-150405`), the suffix upstream gives rotated log files.
/// UTC rather than upstream's local time, so names sort in write order across DST changes.
pub fn rotation_suffix(t: SystemTime) -> String {
    let c = CivilTime::from_system_time(t);
    format!(
        "{:04}{:02}{:02}-{:02}{:02}{:02}",
        c.year, c.month, c.day, c.hour, c.minute, c.second
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Utc};
    use std::time::Duration;

    fn at(secs: u64, nanos: u32) -> SystemTime {
        UNIX_EPOCH + Duration::new(secs, nanos)
    }

    // 2006-01-02T15:04:05Z, Go's reference time.
    const GO_REFERENCE: u64 = 1_136_214_245;

    #[test]
    fn whole_seconds_have_no_fraction() {
        assert_eq!(
            format_rfc3339_nano(at(GO_REFERENCE, 0)),
            "2006-01-02T15:04:05Z"
        );
    }

    #[test]
    fn trailing_zeros_are_trimmed() {
        assert_eq!(
            format_rfc3339_nano(at(GO_REFERENCE, 100_000_000)),
            "2006-01-02T15:04:05.1Z"
        );
        assert_eq!(
            format_rfc3339_nano(at(GO_REFERENCE, 120_000)),
            "2006-01-02T15:04:05.00012Z"
        );
        assert_eq!(
            format_rfc3339_nano(at(GO_REFERENCE, 999_999_999)),
            "2006-01-02T15:04:05.999999999Z"
        );
        assert_eq!(
            format_rfc3339_nano(at(GO_REFERENCE, 1)),
            "2006-01-02T15:04:05.000000001Z"
        );
    }

    #[test]
    fn epoch_and_leap_day() {
        assert_eq!(format_rfc3339_nano(at(0, 0)), "1970-01-01T00:00:00Z");
        // 2024-02-29T23:59:59.5Z
        assert_eq!(
            format_rfc3339_nano(at(1_709_251_199, 500_000_000)),
            "2024-02-29T23:59:59.5Z"
        );
    }

    #[test]
    fn calendar_matches_chrono_over_many_days() {
        // One sample every ~3.7 days from 1970 to past 2100 covers leap years and century rules.
        let mut secs = 0u64;
        while secs < 4_200_000_000 {
            let t = at(secs, 7);
            let expected: DateTime<Utc> = t.into();
            let expected = expected.format("%Y-%m-%dT%H:%M:%S%.9fZ").to_string();
            assert_eq!(format_rfc3339_nano(t), expected, "at {secs}");
            secs += 321_987;
        }
    }

    #[test]
    fn rotation_suffix_uses_go_layout() {
        assert_eq!(rotation_suffix(at(GO_REFERENCE, 5)), "20060102-150405");
    }
}
