//! Kubernetes resource quantities ("10Mi", "1Gi", "100M", "1e3", plain bytes) as byte counts,
//! for size fields such as containerLogMaxSize.

/// Parses a quantity into a whole number of units (bytes for sizes). A fractional result is
/// rounded up, as a Kubernetes `Quantity.Value()` is. Negative quantities are refused: no size
/// the agent reads may be negative.
pub fn parse_quantity(text: &str) -> Result<u64, String> {
    let s = text.trim();
    if s.is_empty() {
        return Err("an empty quantity; expected e.g. \"10Mi\", \"100M\" or a byte count".into());
    }
    let (negative, s) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let int_len = s.bytes().take_while(u8::is_ascii_digit).count();
    let mut rest = &s[int_len..];
    let mut digits = s[..int_len].to_string();
    let mut frac_digits = 0u32;
    if let Some(after_dot) = rest.strip_prefix('.') {
        let frac_len = after_dot.bytes().take_while(u8::is_ascii_digit).count();
        digits.push_str(&after_dot[..frac_len]);
        frac_digits = frac_len as u32;
        rest = &after_dot[frac_len..];
    }
    if digits.is_empty() {
        return Err("expected a number (e.g. \"10Mi\")".into());
    }
    // value = mantissa * num / den, kept exact in 128-bit integers.
    let significant = digits.trim_start_matches('0');
    let mantissa: u128 = if significant.is_empty() {
        0
    } else {
        significant
            .parse()
            .map_err(|_| "number too large".to_string())?
    };
    let mut num: u128 = 1;
    let mut den: u128 = 10u128
        .checked_pow(frac_digits)
        .ok_or_else(|| "too many decimal digits".to_string())?;
    match rest {
        "" => {}
        "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => {
            let power = "KMGTPE".find(&rest[..1]).unwrap() as u32 + 1;
            num = 1u128 << (10 * power);
        }
        "n" => den *= 1_000_000_000,
        "u" => den *= 1_000_000,
        "m" => den *= 1_000,
        "k" | "M" | "G" | "T" | "P" | "E" => {
            let power = "kMGTPE".find(rest).unwrap() as u32 + 1;
            num = 1000u128.pow(power);
        }
        _ => {
            let exponent = rest
                .strip_prefix('e')
                .or_else(|| rest.strip_prefix('E'))
                .ok_or_else(|| {
                    format!(
                        "unknown suffix \"{rest}\" (one of Ki, Mi, Gi, Ti, Pi, Ei, n, u, m, k, M, G, T, P, E)"
                    )
                })?;
            let exp: i32 = exponent
                .parse()
                .map_err(|_| format!("bad exponent \"{rest}\""))?;
            let factor = 10u128
                .checked_pow(exp.unsigned_abs())
                .ok_or_else(|| "exponent too large".to_string())?;
            if exp >= 0 {
                num = factor;
            } else {
                den = den
                    .checked_mul(factor)
                    .ok_or_else(|| "exponent too small".to_string())?;
            }
        }
    }
    if negative && mantissa != 0 {
        return Err("a negative quantity is not allowed".into());
    }
    let scaled = mantissa
        .checked_mul(num)
        .ok_or_else(|| "quantity too large".to_string())?;
    let value = scaled.div_ceil(den);
    u64::try_from(value).map_err(|_| "quantity too large".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_binary_decimal_and_plain_quantities() {
        assert_eq!(parse_quantity("10Mi").unwrap(), 10 * 1024 * 1024);
        assert_eq!(parse_quantity("1Gi").unwrap(), 1 << 30);
        assert_eq!(parse_quantity("1Ki").unwrap(), 1024);
        assert_eq!(parse_quantity("100M").unwrap(), 100_000_000);
        assert_eq!(parse_quantity("5k").unwrap(), 5_000);
        assert_eq!(parse_quantity("1048576").unwrap(), 1_048_576);
        assert_eq!(parse_quantity("1.5Mi").unwrap(), 1_572_864);
        assert_eq!(parse_quantity("1e3").unwrap(), 1_000);
        assert_eq!(parse_quantity("1E6").unwrap(), 1_000_000);
        assert_eq!(parse_quantity("0").unwrap(), 0);
        assert_eq!(parse_quantity("+2Ki").unwrap(), 2048);
    }

    #[test]
    fn rounds_fractions_up() {
        assert_eq!(parse_quantity("100m").unwrap(), 1);
        assert_eq!(parse_quantity("1500m").unwrap(), 2);
        assert_eq!(parse_quantity("0.1").unwrap(), 1);
        assert_eq!(parse_quantity("15e-1").unwrap(), 2);
    }

    #[test]
    fn rejects_bad_quantities() {
        for bad in [
            "", "Mi", "10MB", "10 Mi", "ten", "-1Mi", "1.2.3", "1e", "99999Ei",
        ] {
            assert!(parse_quantity(bad).is_err(), "{bad:?} should be rejected");
        }
        assert!(parse_quantity("10MB")
            .unwrap_err()
            .contains("unknown suffix \"MB\""));
    }
}
