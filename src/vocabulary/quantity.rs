//! Kubernetes resource quantities ("500m", "0.5", "7e-1", "128Mi", "1G") with upstream's
//! `resource.Quantity` semantics: the same grammar and errors as `ParseQuantity`, exact
//! decimal arithmetic (never floating point), values kept to the nano as upstream keeps
//! them (a finer non-zero value rounds away from zero, "0.1n" is 1n), binary-suffixed
//! values capped at 2^63-1 as upstream caps them, and `value()` / `milli_value()` rounding
//! up as `Value()` / `MilliValue()` do.
//!
//! Hand-written because no maintained crate matches upstream's rules: the crates on
//! crates.io convert through f64 (wrong for e.g. "2.007" CPUs) or through a 28-digit
//! decimal without upstream's nano rounding and binary cap, and their errors differ.
//!
//! Every quantity is held as a count of nano-units in an i128, which is exact for any value
//! up to about 1.7e29 units; upstream holds larger decimal values too, but its own int64
//! accessors overflow far below that, so a larger quantity is refused here as too large.

use std::cmp::Ordering;
use std::fmt;
use std::iter::Sum;
use std::ops::Add;
use std::str::FromStr;

use thiserror::Error;

/// Upstream's own description of the grammar, quoted in its format error.
const SPLIT_RE: &str = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$";

const NANOS_PER_UNIT: i128 = 1_000_000_000;
const NANOS_PER_MILLI: i128 = 1_000_000;
/// Upstream caps a binary-suffixed quantity at 2^63-1 units when parsing.
const MAX_BINARY_NANOS: i128 = i64::MAX as i128 * NANOS_PER_UNIT;

/// Why a quantity does not parse; each names the text at fault. The first three are
/// upstream's `ErrFormatWrong`, `ErrNumeric` and `ErrSuffix`, with its wording.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum QuantityError {
    #[error(
        "invalid quantity {text:?}: quantities must match the regular expression '{SPLIT_RE}'"
    )]
    Format { text: String },
    #[error("invalid quantity {text:?}: unable to parse numeric part of quantity")]
    Numeric { text: String },
    #[error("invalid quantity {text:?}: unable to parse quantity's suffix")]
    Suffix { text: String },
    #[error("invalid quantity {text:?}: too large (at most about 1.7e29)")]
    TooLarge { text: String },
    #[error("invalid quantity {text:?}: must not be negative")]
    Negative { text: String },
}

/// An exact resource quantity. Equality and ordering are by value, whatever the form it was
/// written in ("0.5" == "500m", "1Gi" == "1073741824").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Quantity {
    nanos: i128,
}

/// How a suffix scales the number: times 10^exp or times 2^exp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Base {
    Ten,
    Two,
}

/// The pieces upstream's scanner cuts a quantity into.
struct Scanned<'a> {
    negative: bool,
    /// Integer digits with leading zeros removed.
    num: &'a str,
    /// Digits after the '.', as written.
    denom: &'a str,
    suffix: &'a str,
    /// Whether the number part held any digit at all ("." and "" do not).
    any_digit: bool,
}

/// Upstream's scanner: sign, digits, optional '.' and digits, then suffix letters, an
/// optional sign and digits. Anything else is a format error.
fn scan(text: &str) -> Result<Scanned<'_>, ()> {
    let b = text.as_bytes();
    let mut pos = 0;
    let mut negative = false;
    match b.first() {
        Some(b'-') => {
            negative = true;
            pos = 1;
        }
        Some(b'+') => pos = 1,
        _ => {}
    }
    let zeros_start = pos;
    while pos < b.len() && b[pos] == b'0' {
        pos += 1;
    }
    let mut any_digit = pos > zeros_start;
    let num_start = pos;
    while pos < b.len() && b[pos].is_ascii_digit() {
        pos += 1;
    }
    let num = &text[num_start..pos];
    any_digit |= !num.is_empty();
    let mut denom = "";
    if pos < b.len() && b[pos] == b'.' {
        pos += 1;
        let start = pos;
        while pos < b.len() && b[pos].is_ascii_digit() {
            pos += 1;
        }
        denom = &text[start..pos];
        any_digit |= !denom.is_empty();
    }
    let suffix_start = pos;
    while pos < b.len() && b"eEinumkKMGTP".contains(&b[pos]) {
        pos += 1;
    }
    if pos < b.len() && (b[pos] == b'-' || b[pos] == b'+') {
        pos += 1;
    }
    while pos < b.len() && b[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos < b.len() {
        return Err(());
    }
    Ok(Scanned {
        negative,
        num,
        denom,
        suffix: &text[suffix_start..],
        any_digit,
    })
}

/// Upstream's suffixes: decimal SI, binary SI, then "e"/"E" with a signed exponent. The
/// exponent is read as an int64 and narrowed to int32 as upstream narrows it.
fn interpret(suffix: &str) -> Option<(Base, i32)> {
    let decimal = match suffix {
        "n" => Some(-9),
        "u" => Some(-6),
        "m" => Some(-3),
        "" => Some(0),
        "k" => Some(3),
        "M" => Some(6),
        "G" => Some(9),
        "T" => Some(12),
        "P" => Some(15),
        "E" => Some(18),
        _ => None,
    };
    if let Some(e) = decimal {
        return Some((Base::Ten, e));
    }
    let binary = match suffix {
        "Ki" => Some(10),
        "Mi" => Some(20),
        "Gi" => Some(30),
        "Ti" => Some(40),
        "Pi" => Some(50),
        "Ei" => Some(60),
        _ => None,
    };
    if let Some(e) = binary {
        return Some((Base::Two, e));
    }
    let rest = suffix
        .strip_prefix('e')
        .or_else(|| suffix.strip_prefix('E'))?;
    rest.parse::<i64>().ok().map(|e| (Base::Ten, e as i32))
}

/// `digits` × 2^`shift` × 10^`exp10`, rounded away from zero to an integer; None when
/// the result does not fit an i128. `digits` has no leading or trailing zeros.
fn scale_digits(digits: &str, shift: u32, exp10: i64) -> Option<i128> {
    let pow2 = 1i128 << shift;
    if exp10 >= 0 {
        if digits.len() as i64 + exp10 > 39 {
            return None;
        }
        let v: i128 = digits.parse().ok()?;
        return v
            .checked_mul(pow2)?
            .checked_mul(10i128.checked_pow(exp10 as u32)?);
    }
    // Split at the decimal point: the integer digits scale exactly; the fraction is
    // multiplied by 2^shift digit by digit (long multiplication from the right), which
    // gives its integer carry and whether anything is left below the point.
    let frac_len = exp10.unsigned_abs();
    let (int_part, frac) = if digits.len() as u64 > frac_len {
        digits.split_at(digits.len() - frac_len as usize)
    } else {
        ("", digits)
    };
    let mut carry: u128 = 0;
    let mut rest = false;
    for d in frac.bytes().rev() {
        let v = u128::from(d - b'0') * (1u128 << shift) + carry;
        rest |= !v.is_multiple_of(10);
        carry = v / 10;
    }
    // The zeros between the point and the written digits: only the carry moves on.
    let mut zeros = frac_len - frac.len() as u64;
    while zeros > 0 && carry > 0 {
        rest |= !carry.is_multiple_of(10);
        carry /= 10;
        zeros -= 1;
    }
    let int: i128 = if int_part.is_empty() {
        0
    } else if int_part.len() > 39 {
        return None;
    } else {
        int_part.parse().ok()?
    };
    int.checked_mul(pow2)?
        .checked_add(i128::try_from(carry).ok()?)?
        .checked_add(i128::from(rest))
}

impl Quantity {
    pub const ZERO: Quantity = Quantity { nanos: 0 };

    /// Parses `text` exactly as upstream's `ParseQuantity` (no surrounding spaces).
    pub fn parse(text: &str) -> Result<Quantity, QuantityError> {
        let err = |make: fn(String) -> QuantityError| make(text.to_string());
        if text.is_empty() {
            return Err(err(|text| QuantityError::Format { text }));
        }
        let s = scan(text).map_err(|()| err(|text| QuantityError::Format { text }))?;
        let (base, exponent) =
            interpret(s.suffix).ok_or_else(|| err(|text| QuantityError::Suffix { text }))?;
        // Upstream reads the number with a decimal parser only on its slow path (more than
        // 18 digits or a value below the nano); there a number without digits fails.
        if !s.any_digit && base == Base::Ten && i64::from(exponent) < -9 {
            return Err(err(|text| QuantityError::Numeric { text }));
        }
        let joined = format!("{}{}", s.num, s.denom);
        let trimmed_end = joined.trim_end_matches('0');
        let digits = trimmed_end.trim_start_matches('0');
        if digits.is_empty() {
            return Ok(Quantity::ZERO);
        }
        let trailing = (joined.len() - trimmed_end.len()) as i64;
        let (shift, exp10) = match base {
            Base::Ten => (0, i64::from(exponent)),
            Base::Two => (exponent as u32, 0),
        };
        let exp10 = exp10 - s.denom.len() as i64 + trailing + 9;
        let magnitude = match (scale_digits(digits, shift, exp10), base) {
            (Some(m), Base::Two) => m.min(MAX_BINARY_NANOS),
            (None, Base::Two) => MAX_BINARY_NANOS,
            (Some(m), Base::Ten) => m,
            (None, Base::Ten) => return Err(err(|text| QuantityError::TooLarge { text })),
        };
        Ok(Quantity {
            nanos: if s.negative { -magnitude } else { magnitude },
        })
    }

    /// Parses a quantity as it arrives in an API object: upstream's JSON decoding trims
    /// surrounding white space before parsing.
    pub fn from_api(
        q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity,
    ) -> Result<Quantity, QuantityError> {
        Quantity::parse(q.0.trim())
    }

    /// A whole number of units (bytes, cores).
    pub fn from_value(v: i64) -> Quantity {
        Quantity {
            nanos: i128::from(v) * NANOS_PER_UNIT,
        }
    }

    /// A number of thousandths (millicores).
    pub fn from_milli(v: i64) -> Quantity {
        Quantity {
            nanos: i128::from(v) * NANOS_PER_MILLI,
        }
    }

    /// The value rounded up to a whole unit, away from zero, as upstream's `Value()`.
    /// Upstream's result past the int64 range is undefined; here it saturates.
    pub fn value(&self) -> i64 {
        self.scaled(NANOS_PER_UNIT)
    }

    /// The value in thousandths rounded up, away from zero, as upstream's `MilliValue()`
    /// (saturating past the int64 range).
    pub fn milli_value(&self) -> i64 {
        self.scaled(NANOS_PER_MILLI)
    }

    fn scaled(&self, per: i128) -> i64 {
        let q = self.nanos / per;
        let q = if self.nanos % per == 0 {
            q
        } else {
            q + self.nanos.signum()
        };
        i64::try_from(q).unwrap_or(if q < 0 { i64::MIN } else { i64::MAX })
    }

    pub fn is_zero(&self) -> bool {
        self.nanos == 0
    }

    pub fn is_negative(&self) -> bool {
        self.nanos < 0
    }

    /// Compares with a whole number of units, as upstream's `CmpInt64`.
    pub fn cmp_value(&self, v: i64) -> Ordering {
        self.cmp(&Quantity::from_value(v))
    }
}

impl FromStr for Quantity {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Quantity::parse(s)
    }
}

/// Sums saturate rather than wrap: no resource total comes near the i128 range, and a
/// saturated total still compares as "too much". The floor is -i128::MAX, not i128::MIN, so
/// that every quantity's magnitude is an i128, as every parsed one's is (`canonical` takes
/// its absolute value).
impl Add for Quantity {
    type Output = Quantity;
    fn add(self, other: Quantity) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_add(other.nanos).max(-i128::MAX),
        }
    }
}

impl Sum for Quantity {
    fn sum<I: Iterator<Item = Quantity>>(iter: I) -> Quantity {
        iter.fold(Quantity::ZERO, Add::add)
    }
}

impl<'a> Sum<&'a Quantity> for Quantity {
    fn sum<I: Iterator<Item = &'a Quantity>>(iter: I) -> Quantity {
        iter.copied().sum()
    }
}

/// How upstream writes a quantity back out (`resource.Format`): the kind of suffix it was
/// parsed with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// "1e3", "5E-3"
    DecimalExponent,
    /// "1Ki", "128Mi"
    BinarySi,
    /// "500m", "1k", "2", "3G"
    DecimalSi,
}

impl Format {
    /// The format upstream's `ParseQuantity` gives `text` (DecimalSI when it does not parse).
    pub fn of(text: &str) -> Format {
        match scan(text.trim())
            .ok()
            .and_then(|s| Some((s.suffix, interpret(s.suffix)?)))
        {
            Some((_, (Base::Two, _))) => Format::BinarySi,
            // "E" alone is exa; "E3" or "e-3" an exponent.
            Some((suffix, _)) if suffix.len() > 1 && suffix.starts_with(['e', 'E']) => {
                Format::DecimalExponent
            }
            _ => Format::DecimalSi,
        }
    }
}

impl Quantity {
    /// Upstream's canonical text of the value in `format` (`Quantity.String()`): binary
    /// values as the largest exact power-of-1024 suffix ("1536Mi"; below 1024 or fractional
    /// they are written as DecimalSI), decimal ones with an exponent that is a multiple of 3
    /// ("1500k", "100m"), past the SI suffixes in e-notation.
    pub fn canonical(&self, format: Format) -> String {
        if self.nanos == 0 {
            return "0".to_string();
        }
        let whole = self.nanos % NANOS_PER_UNIT == 0;
        let small = self.nanos.abs() < 1024 * NANOS_PER_UNIT;
        if format == Format::BinarySi && whole && !small {
            let mut value = self.nanos / NANOS_PER_UNIT;
            let mut power = 0;
            while value % 1024 == 0 && power < 6 {
                value /= 1024;
                power += 1;
            }
            let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][power];
            return format!("{value}{suffix}");
        }
        // value = mantissa × 10^exponent, the exponent lowered to a multiple of 3.
        let mut mantissa = self.nanos;
        let mut exponent: i32 = -9;
        while mantissa % 10 == 0 {
            mantissa /= 10;
            exponent += 1;
        }
        let lower = exponent.rem_euclid(3);
        mantissa *= 10i128.pow(lower as u32);
        exponent -= lower;
        let si = match exponent {
            -9 => Some("n"),
            -6 => Some("u"),
            -3 => Some("m"),
            0 => Some(""),
            3 => Some("k"),
            6 => Some("M"),
            9 => Some("G"),
            12 => Some("T"),
            15 => Some("P"),
            18 => Some("E"),
            _ => None,
        };
        match (format, si) {
            (_, _) if exponent == 0 => format!("{mantissa}"),
            (Format::DecimalExponent, _) | (_, None) => format!("{mantissa}e{exponent}"),
            (_, Some(suffix)) => format!("{mantissa}{suffix}"),
        }
    }
}

/// The exact value in plain decimal notation ("0.5", "1073741824", "-0.000000001").
impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.nanos < 0 { "-" } else { "" };
        let abs = self.nanos.unsigned_abs();
        let int = abs / NANOS_PER_UNIT as u128;
        let frac = abs % NANOS_PER_UNIT as u128;
        if frac == 0 {
            write!(f, "{sign}{int}")
        } else {
            let frac = format!("{frac:09}");
            write!(f, "{sign}{int}.{}", frac.trim_end_matches('0'))
        }
    }
}

/// CPU quantity in millicores, rounded up ("250m" → 250, "2" → 2000, "0.0001" → 1); None
/// when malformed.
pub fn cpu_millis(q: &str) -> Option<i64> {
    Quantity::parse(q.trim()).ok().map(|q| q.milli_value())
}

/// A byte (or any whole-unit) quantity, rounded up ("128Mi" → 134217728); None when
/// malformed.
pub fn bytes(q: &str) -> Option<i64> {
    Quantity::parse(q.trim()).ok().map(|q| q.value())
}

/// A size such as containerLogMaxSize: the quantity's `Value()` in bytes; a negative size
/// is refused.
pub fn size_bytes(text: &str) -> Result<u64, QuantityError> {
    let q = Quantity::parse(text)?;
    u64::try_from(q.value()).map_err(|_| QuantityError::Negative {
        text: text.to_string(),
    })
}

/// Bytes in upstream's BinarySI canonical form: the largest power-of-1024 suffix that
/// divides exactly ("2Mi", "1Gi", "1536Ki"), plain bytes otherwise.
pub(crate) fn binary_size(bytes: i64) -> String {
    for (suffix, unit) in [
        ("Ei", 1i64 << 60),
        ("Pi", 1 << 50),
        ("Ti", 1 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
    ] {
        if bytes != 0 && bytes % unit == 0 {
            return format!("{}{suffix}", bytes / unit);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
    }

    #[test]
    fn cpu() {
        assert_eq!(cpu_millis("250m"), Some(250));
        assert_eq!(cpu_millis("2"), Some(2000));
        assert_eq!(cpu_millis("0.5"), Some(500));
        assert_eq!(cpu_millis("1.0001"), Some(1001));
        assert_eq!(cpu_millis("0.7"), Some(700));
        assert_eq!(cpu_millis("7e-1"), Some(700));
        assert_eq!(cpu_millis("2.007"), Some(2007), "f64 made this 2008");
        assert_eq!(cpu_millis("x"), None);
        assert_eq!(cpu_millis(""), None);
    }

    #[test]
    fn memory() {
        assert_eq!(bytes("128Mi"), Some(128 << 20));
        assert_eq!(bytes("1G"), Some(1_000_000_000));
        assert_eq!(bytes("1e3"), Some(1000));
        assert_eq!(bytes("1E3"), Some(1000));
        assert_eq!(bytes("100"), Some(100));
        assert_eq!(bytes("1Ki"), Some(1024));
        assert_eq!(bytes("1.5Mi"), Some(1_572_864));
        assert_eq!(bytes("0.5Ki"), Some(512));
        assert_eq!(bytes("5E"), Some(5_000_000_000_000_000_000));
        assert_eq!(bytes("9223372036854775807"), Some(i64::MAX));
    }

    #[test]
    fn every_milli_value_in_every_form_is_exact() {
        for m in 1..=4000i64 {
            let forms = [
                format!("{m}m"),
                format!("{}.{:03}", m / 1000, m % 1000),
                format!("{m}e-3"),
                format!("{m}E-3"),
                format!("{m}000u"),
                format!("{m}000000n"),
                format!("+{m}m"),
            ];
            for f in &forms {
                let v = q(f);
                assert_eq!(v.milli_value(), m, "{f}");
                assert_eq!(v, Quantity::from_milli(m), "{f}");
                // Value() rounds up to whole units.
                assert_eq!(v.value(), (m + 999) / 1000, "{f}");
            }
        }
    }

    #[test]
    fn rounding_is_upward_as_upstream() {
        // Below a milli: MilliValue rounds up; below a nano: parsing rounds up to 1n.
        assert_eq!(q("1u").milli_value(), 1);
        assert_eq!(q("1001u").milli_value(), 2);
        assert_eq!(q("0.1n"), q("1n"));
        assert_eq!(q("1e-30"), q("1n"));
        assert_eq!(q("100m").value(), 1);
        assert_eq!(q("1500m").value(), 2);
        assert_eq!(q("15e-1").value(), 2);
        assert_eq!(q("1.000000001").value(), 2);
        assert_eq!(q("1.0000000001"), q("1.000000001"));
        // Negative values round away from zero, as upstream's int64 form does.
        assert_eq!(q("-1.5").value(), -2);
        assert_eq!(q("-1500m").milli_value(), -1500);
    }

    #[test]
    fn forms_compare_by_value() {
        assert_eq!(q("0.5"), q("500m"));
        assert_eq!(q("1Gi"), q("1073741824"));
        assert_eq!(q("1Ki"), q("1.024k"));
        assert_eq!(q("1e3"), q("1k"));
        assert_eq!(q("0"), Quantity::ZERO);
        assert_eq!(q("-0"), Quantity::ZERO);
        assert_eq!(q("000.000"), Quantity::ZERO);
        assert!(q("1Mi") > q("1M"));
        assert!(q("999m") < q("1"));
        let total: Quantity = ["250m", "0.25", "5e-1"].iter().map(|s| q(s)).sum();
        assert_eq!(total, q("1"));
        assert_eq!(q("2.5").to_string(), "2.5");
        assert_eq!(q("1Ki").to_string(), "1024");
        assert_eq!(q("-1n").to_string(), "-0.000000001");
    }

    #[test]
    fn grammar_corners_follow_upstream() {
        // Upstream's scanner accepts these (its regular expression is only documentation).
        assert_eq!(q("."), Quantity::ZERO);
        assert_eq!(q("+"), Quantity::ZERO);
        assert_eq!(q("Mi"), Quantity::ZERO);
        assert_eq!(q("1."), q("1"));
        assert_eq!(q(".5"), q("500m"));
        assert_eq!(q("1.G"), q("1G"));
        assert_eq!(q("1e+3"), q("1k"));
        // Binary quantities are capped at 2^63-1; decimal ones are not.
        assert_eq!(q("8Ei").value(), i64::MAX);
        assert_eq!(q("100000000000000000000000Ei").value(), i64::MAX);
        assert_eq!(q("-8Ei").value(), -i64::MAX);
        assert_eq!(q("18446744073709551616"), q("18.446744073709551616E"));
        assert_eq!(q("1e20").value(), i64::MAX, "saturates past int64");
        // The int32 narrowing of a huge exponent, as upstream narrows it.
        assert_eq!(q("1e4294967296"), q("1"));
    }

    #[test]
    fn errors_are_upstreams_and_name_the_text() {
        let format = |s: &str| QuantityError::Format { text: s.into() };
        let suffix = |s: &str| QuantityError::Suffix { text: s.into() };
        for bad in [
            "", "10MB", "10 Mi", "ten", "1.2.3", " 1", "1 ", "1Mi5x", "--1",
        ] {
            let e = Quantity::parse(bad).unwrap_err();
            if bad == "--1" {
                assert_eq!(e, suffix(bad));
            } else {
                assert_eq!(e, format(bad), "{bad:?}");
            }
        }
        for bad in [
            "1e",
            "1K",
            "1ki",
            "1e+",
            "1ee5",
            "1Mi5",
            "1m5",
            "1e99999999999999999999",
        ] {
            assert_eq!(Quantity::parse(bad).unwrap_err(), suffix(bad), "{bad:?}");
        }
        assert_eq!(
            Quantity::parse("e-10").unwrap_err(),
            QuantityError::Numeric {
                text: "e-10".into()
            }
        );
        assert_eq!(q("e-9"), Quantity::ZERO);
        assert!(matches!(
            Quantity::parse("1e40").unwrap_err(),
            QuantityError::TooLarge { .. }
        ));
        let msg = Quantity::parse("10MB").unwrap_err().to_string();
        assert!(
            msg.contains("\"10MB\"") && msg.contains("regular expression"),
            "{msg}"
        );
    }

    #[test]
    fn sizes_round_up_and_refuse_negatives() {
        assert_eq!(size_bytes("10Mi"), Ok(10 << 20));
        assert_eq!(size_bytes("100m"), Ok(1));
        assert_eq!(size_bytes("0"), Ok(0));
        assert_eq!(
            size_bytes("-1Mi"),
            Err(QuantityError::Negative {
                text: "-1Mi".into()
            })
        );
        assert!(matches!(
            size_bytes("10MB"),
            Err(QuantityError::Format { .. })
        ));
    }

    #[test]
    fn api_quantities_are_trimmed_as_upstreams_json_decoding() {
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity as Api;
        assert_eq!(Quantity::from_api(&Api(" 1Gi\n".into())).unwrap(), q("1Gi"));
        assert!(Quantity::from_api(&Api("1 Gi".into())).is_err());
    }

    #[test]
    fn canonical_text_is_upstreams_string() {
        let c = |text: &str| q(text).canonical(Format::of(text));
        // Binary: the largest exact power of 1024; fractional or below 1024 goes decimal.
        assert_eq!(c("1024Ki"), "1Mi");
        assert_eq!(c("1536Mi"), "1536Mi");
        assert_eq!(c("1048576Ki"), "1Gi");
        assert_eq!(c("0.5Ki"), "512");
        assert_eq!(c("1.5Ki"), "1536");
        assert_eq!(c("0Mi"), "0");
        // Decimal SI: an exponent that is a multiple of 3.
        assert_eq!(c("1500000"), "1500k");
        assert_eq!(c("2000000"), "2M");
        assert_eq!(c("0.1"), "100m");
        assert_eq!(c("1.5"), "1500m");
        assert_eq!(c("100M"), "100M");
        assert_eq!(c("1000M"), "1G");
        assert_eq!(c("123"), "123");
        // Decimal exponent keeps the e-notation.
        assert_eq!(c("1e6"), "1e6");
        assert_eq!(c("15e5"), "1500e3");
        // A sum written in the first addend's format, as upstream's Add keeps it.
        let sum = q("1Mi") + q("1Gi");
        assert_eq!(sum.canonical(Format::BinarySi), "1025Mi");
        assert_eq!(Format::of("5G"), Format::DecimalSi);
        assert_eq!(Format::of("5Gi"), Format::BinarySi);
        assert_eq!(Format::of("5E3"), Format::DecimalExponent);
        assert_eq!(Format::of("5E"), Format::DecimalSi, "exa");
    }

    /// A quantity that parsed reads back as itself from its canonical text in every format
    /// and from its plain decimal text.
    fn assert_round_trips(text: &str, v: Quantity) {
        for format in [
            Format::DecimalSi,
            Format::BinarySi,
            Format::DecimalExponent,
            Format::of(text),
        ] {
            // Past 2^63-1 units a binary text reads back capped, as upstream's does (its
            // String() writes the same text): no round trip to ask for there.
            if format == Format::BinarySi && v.nanos.abs() > MAX_BINARY_NANOS {
                continue;
            }
            let canonical = v.canonical(format);
            assert_eq!(
                Quantity::parse(&canonical),
                Ok(v),
                "{text:?} as {format:?}: {canonical:?}"
            );
        }
        assert_eq!(Quantity::parse(&v.to_string()), Ok(v), "{text:?} as {v}");
    }

    /// The grammar's pieces, including exponents past i32 and i64 and numbers past i128.
    fn quantity_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let sign = prop_oneof![Just(""), Just("-"), Just("+")];
        let int = "[0-9]{0,45}";
        let frac = prop_oneof![Just(String::new()), "\\.[0-9]{0,45}"];
        let suffix = prop_oneof![
            prop::sample::select(vec![
                "", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi",
                "Ei",
            ])
            .prop_map(str::to_string),
            (prop::sample::select(vec!["e", "E"]), any::<i64>())
                .prop_map(|(e, x)| format!("{e}{x}")),
            (prop::sample::select(vec!["e", "E"]), -60i64..60).prop_map(|(e, x)| format!("{e}{x}")),
            "[eEinumkKMGTP]{0,3}[-+]?[0-9]{0,25}",
        ];
        (sign, int, frac, suffix).prop_map(|(s, i, f, x)| format!("{s}{i}{f}{x}"))
    }

    /// Found by `sums_of_parsed_quantities_write_out_and_read_back`'s reasoning: two large
    /// negative quantities saturated to i128::MIN, whose `abs()` in `canonical` overflowed
    /// (a panic in debug builds, a negative "absolute" value in release).
    #[test]
    fn a_saturated_negative_sum_writes_out() {
        let sum = q("-1e29") + q("-1e29");
        assert_eq!(sum.nanos, -i128::MAX);
        for format in [Format::DecimalSi, Format::BinarySi, Format::DecimalExponent] {
            assert_eq!(
                Quantity::parse(&sum.canonical(format)),
                Ok(sum),
                "{format:?}"
            );
        }
        assert_eq!(Quantity::parse(&sum.to_string()), Ok(sum));
    }

    proptest::proptest! {
        #![proptest_config(crate::test_support::proptest_config(512))]

        #[test]
        fn any_text_parses_or_errs_and_what_parses_round_trips(text in proptest::prelude::any::<String>()) {
            if let Ok(v) = Quantity::parse(&text) {
                assert_round_trips(&text, v);
            }
        }

        #[test]
        fn grammar_shaped_text_round_trips(text in quantity_text()) {
            if let Ok(v) = Quantity::parse(&text) {
                assert_round_trips(&text, v);
                let _ = (v.value(), v.milli_value(), Format::of(&text));
            }
        }

        #[test]
        fn whole_numbers_keep_their_value(n in proptest::prelude::any::<i64>(), shift in 0u32..7) {
            let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][shift as usize];
            let v = q(&format!("{n}{suffix}"));
            let exact = i128::from(n) << (10 * shift);
            // Binary quantities are capped at 2^63-1 units, as upstream caps them.
            let want = if shift == 0 { exact } else { exact.clamp(-i128::from(i64::MAX), i128::from(i64::MAX)) };
            proptest::prop_assert_eq!(i128::from(v.value()), want);
            assert_round_trips(&n.to_string(), v);
        }

        #[test]
        fn sums_of_parsed_quantities_write_out_and_read_back(a in quantity_text(), b in quantity_text()) {
            let (Ok(a), Ok(b)) = (Quantity::parse(&a), Quantity::parse(&b)) else {
                return Ok(());
            };
            let sum = a + b;
            // A sum past the parseable range saturates; its text still parses back.
            assert_round_trips("", sum);
            proptest::prop_assert_eq!(sum, b + a);
        }
    }

    #[test]
    fn binary_sizes_use_the_largest_exact_suffix() {
        assert_eq!(binary_size(2 << 20), "2Mi");
        assert_eq!(binary_size(1 << 30), "1Gi");
        assert_eq!(binary_size(1536 * 1024), "1536Ki");
        assert_eq!(binary_size(1000), "1000");
        assert_eq!(binary_size(0), "0");
    }
}
