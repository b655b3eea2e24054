//! Kubernetes resource quantities ("500m", "1.5", "128Mi", "1G", "1e3") as the two forms the
//! agent needs: CPU in millicores and memory in bytes.

/// Parses a quantity into its value times `scale` (1000 for millicores, 1 for bytes),
/// rounded up as upstream rounds requests and limits. `None` on malformed input.
fn scaled(q: &str, scale: f64) -> Option<i64> {
    let q = q.trim();
    if q.is_empty() {
        return None;
    }
    let suffixes: [(&str, f64); 14] = [
        ("Ki", 1024f64),
        ("Mi", 1024f64.powi(2)),
        ("Gi", 1024f64.powi(3)),
        ("Ti", 1024f64.powi(4)),
        ("Pi", 1024f64.powi(5)),
        ("Ei", 1024f64.powi(6)),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
    ];
    let (num, mult) = suffixes
        .iter()
        .find_map(|(s, m)| q.strip_suffix(s).map(|n| (n, *m)))
        .or_else(|| q.strip_suffix('E').map(|n| (n, 1e18)))
        .unwrap_or((q, 1.0));
    if num.is_empty() || num.starts_with('+') && num.len() == 1 {
        return None;
    }
    let v: f64 = num.parse().ok()?;
    if !v.is_finite() {
        return None;
    }
    Some((v * mult * scale).ceil() as i64)
}

/// CPU quantity in millicores ("250m" → 250, "2" → 2000).
pub fn cpu_millis(q: &str) -> Option<i64> {
    scaled(q, 1000.0)
}

/// Memory (or any byte) quantity in bytes ("128Mi" → 134217728).
pub fn bytes(q: &str) -> Option<i64> {
    scaled(q, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu() {
        assert_eq!(cpu_millis("250m"), Some(250));
        assert_eq!(cpu_millis("2"), Some(2000));
        assert_eq!(cpu_millis("0.5"), Some(500));
        assert_eq!(cpu_millis("1.0001"), Some(1001));
        assert_eq!(cpu_millis("x"), None);
        assert_eq!(cpu_millis(""), None);
    }

    #[test]
    fn memory() {
        assert_eq!(bytes("128Mi"), Some(128 << 20));
        assert_eq!(bytes("1G"), Some(1_000_000_000));
        assert_eq!(bytes("1e3"), Some(1000));
        assert_eq!(bytes("100"), Some(100));
        assert_eq!(bytes("1Ki"), Some(1024));
        assert_eq!(bytes("5E"), Some(5_000_000_000_000_000_000));
    }
}
