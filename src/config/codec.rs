//! The pieces a setting's declaration (`settings.rs`) is made of: how a flag's text is
//! parsed (`arg`), how the file's field is read (`read`), how /configz shows the value
//! (`show`) and the rule the value must keep (`rule`). Each keeps upstream's reading and the
//! messages the agent has always given, so declaring a setting changes nothing it does.

use super::duration::DurationError;
use super::node::NodeSettingError;
use super::IdentifierError;
use crate::vocabulary::quantity::QuantityError;

/// Why a flag's value was refused; shown after "invalid value ... for flag ...: ".
#[derive(Debug, thiserror::Error)]
pub(crate) enum ValueError {
    #[error("{0}")]
    Expected(&'static str),
    #[error(transparent)]
    Duration(#[from] DurationError),
    #[error(transparent)]
    Quantity(#[from] QuantityError),
    #[error(transparent)]
    Identifier(#[from] IdentifierError),
    #[error(transparent)]
    Node(#[from] NodeSettingError),
    #[error(transparent)]
    Check(#[from] super::flags::FlagCheckError),
    #[error(transparent)]
    CpuSet(#[from] super::schema::CpuSetError),
}

/// Flag values, as the kubelet's pflag types read them.
pub(crate) mod arg {
    use std::net::IpAddr;
    use std::path::PathBuf;
    use std::time::Duration;

    use super::ValueError;
    use crate::config::node;
    use crate::config::AuthorizationMode;

    type Parsed<T> = Result<T, ValueError>;

    pub(crate) fn boolean(text: &str) -> Parsed<bool> {
        crate::config::flags::parse_bool(text)
    }

    pub(crate) fn duration(text: &str) -> Parsed<Duration> {
        Ok(crate::config::parse_duration(text)?)
    }

    pub(crate) fn port(text: &str) -> Parsed<u16> {
        let n: i64 = text
            .parse()
            .map_err(|_| ValueError::Expected("expected an integer"))?;
        u16::try_from(n).map_err(|_| ValueError::Expected("must be between 0 and 65535"))
    }

    pub(crate) fn ip(text: &str) -> Parsed<IpAddr> {
        text.parse()
            .map_err(|_| ValueError::Expected("expected an IP address"))
    }

    /// --node-ip: "" is the default-route address.
    pub(crate) fn optional_ip(text: &str) -> Parsed<Option<IpAddr>> {
        if text.is_empty() {
            Ok(None)
        } else {
            ip(text).map(Some)
        }
    }

    fn count(text: &str, too_small: &'static str) -> Parsed<u32> {
        text.parse::<i64>()
            .map_err(|_| ValueError::Expected("expected an integer"))?
            .try_into()
            .map_err(|_| ValueError::Expected(too_small))
    }

    pub(crate) fn max_pods(text: &str) -> Parsed<u32> {
        count(text, "must be greater than 0")
    }

    pub(crate) fn log_files(text: &str) -> Parsed<u32> {
        count(text, "must be at least 2")
    }

    pub(crate) fn int32(text: &str) -> Parsed<i32> {
        text.parse()
            .map_err(|_| ValueError::Expected("expected an integer"))
    }

    pub(crate) fn int64(text: &str) -> Parsed<i64> {
        text.parse()
            .map_err(|_| ValueError::Expected("expected an integer"))
    }

    /// --eviction-max-pod-grace-period (surrounding blanks allowed).
    pub(crate) fn seconds(text: &str) -> Parsed<i32> {
        text.trim()
            .parse()
            .map_err(|_| ValueError::Expected("expected a 32-bit integer"))
    }

    pub(crate) fn size(text: &str) -> Parsed<u64> {
        Ok(crate::vocabulary::quantity::size_bytes(text)?)
    }

    pub(crate) fn text(text: &str) -> Parsed<String> {
        Ok(text.to_string())
    }

    pub(crate) fn non_empty_text(text: &str) -> Parsed<String> {
        if text.is_empty() {
            return Err(ValueError::Expected("must not be empty"));
        }
        Ok(text.to_string())
    }

    /// "" unsets it.
    pub(crate) fn optional_text(text: &str) -> Parsed<Option<String>> {
        Ok(Some(text.to_string()).filter(|s| !s.is_empty()))
    }

    pub(crate) fn path(text: &str) -> Parsed<PathBuf> {
        non_empty_text(text).map(PathBuf::from)
    }

    /// "" unsets it.
    pub(crate) fn optional_path(text: &str) -> Parsed<Option<PathBuf>> {
        Ok(Some(PathBuf::from(text)).filter(|_| !text.is_empty()))
    }

    /// pflag's stringSlice: comma-separated, blanks trimmed, empty items dropped.
    pub(crate) fn list(text: &str) -> Parsed<Vec<String>> {
        Ok(crate::config::comma_list(text).map(String::from).collect())
    }

    pub(crate) fn folders(text: &str) -> Parsed<Vec<PathBuf>> {
        let folders: Vec<PathBuf> = crate::config::comma_list(text).map(PathBuf::from).collect();
        if folders.is_empty() {
            return Err(ValueError::Expected(
                "expected one or more comma-separated folders",
            ));
        }
        Ok(folders)
    }

    pub(crate) fn containerd_namespace(text: &str) -> Parsed<String> {
        crate::config::check_containerd_namespace(text)?;
        Ok(text.to_string())
    }

    pub(crate) fn authorization_mode(text: &str) -> Parsed<AuthorizationMode> {
        AuthorizationMode::parse(text)
    }

    /// --resolv-conf: "" is no host resolver.
    pub(crate) fn resolv_conf(text: &str) -> Parsed<Option<PathBuf>> {
        Ok((!text.is_empty()).then(|| PathBuf::from(text)))
    }

    pub(crate) fn taints(text: &str) -> Parsed<Vec<k8s_openapi::api::core::v1::Taint>> {
        Ok(node::parse_taints(text)?)
    }
}

/// KubeletConfiguration fields. `None` is "not set, or set to the zero value upstream's
/// defaulting replaces" (non-pointer fields); pointer fields keep an explicit zero.
pub(crate) mod read {
    use std::net::IpAddr;
    use std::path::PathBuf;
    use std::time::Duration;

    use serde_json::Value;

    use crate::config::error::ConfigError;
    use crate::config::file::FieldReader;
    use crate::config::{AuthorizationMode, SwapBehavior};

    type Read<T> = Result<Option<T>, ConfigError>;

    pub(crate) fn boolean(r: &FieldReader<'_>, field: &str) -> Read<bool> {
        r.boolean(field)
    }

    /// A zero duration is the default.
    pub(crate) fn duration(r: &FieldReader<'_>, field: &str) -> Read<Duration> {
        r.duration(field)
    }

    /// A non-pointer port: 0 is the default.
    pub(crate) fn port_or_default(r: &FieldReader<'_>, field: &str) -> Read<u16> {
        Ok(port(r, field)?.filter(|n| *n != 0))
    }

    /// A pointer port: an explicit 0 is kept.
    pub(crate) fn port(r: &FieldReader<'_>, field: &str) -> Read<u16> {
        Ok(r.int_in(field, 0, 65535)?.map(|n| n as u16))
    }

    pub(crate) fn ip(r: &FieldReader<'_>, field: &str) -> Read<IpAddr> {
        r.ip(field)
    }

    /// A non-pointer count: 0 is the default.
    pub(crate) fn count_or_default(r: &FieldReader<'_>, field: &str) -> Read<u32> {
        Ok(count(r, field)?.filter(|n| *n != 0))
    }

    /// A pointer count: an explicit 0 is kept (and refused by its rule).
    pub(crate) fn count(r: &FieldReader<'_>, field: &str) -> Read<u32> {
        Ok(r.int_in(field, 0, i32::MAX as i64)?.map(|n| n as u32))
    }

    pub(crate) fn int32(r: &FieldReader<'_>, field: &str) -> Read<i32> {
        r.int32(field)
    }

    /// A non-pointer int32: 0 is the default.
    pub(crate) fn int32_or_default(r: &FieldReader<'_>, field: &str) -> Read<i32> {
        Ok(r.int32(field)?.filter(|n| *n != 0))
    }

    pub(crate) fn int64(r: &FieldReader<'_>, field: &str) -> Read<i64> {
        r.int_in(field, i64::MIN, i64::MAX)
    }

    pub(crate) fn size(r: &FieldReader<'_>, field: &str) -> Read<u64> {
        r.quantity(field)
    }

    /// "" is the default.
    pub(crate) fn text(r: &FieldReader<'_>, field: &str) -> Read<String> {
        r.string(field)
    }

    pub(crate) fn optional_text(r: &FieldReader<'_>, field: &str) -> Read<Option<String>> {
        Ok(r.string(field)?.map(Some))
    }

    pub(crate) fn path(r: &FieldReader<'_>, field: &str) -> Read<PathBuf> {
        Ok(r.string(field)?.map(PathBuf::from))
    }

    pub(crate) fn optional_path(r: &FieldReader<'_>, field: &str) -> Read<Option<PathBuf>> {
        Ok(r.string(field)?.map(|s| Some(PathBuf::from(s))))
    }

    /// An empty list is the default.
    pub(crate) fn list(r: &FieldReader<'_>, field: &str) -> Read<Vec<String>> {
        r.string_list(field)
    }

    /// An explicit empty list is kept.
    pub(crate) fn list_kept(r: &FieldReader<'_>, field: &str) -> Read<Vec<String>> {
        let Some(value) = r.get(field) else {
            return Ok(None);
        };
        serde_json::from_value::<Vec<String>>(value.clone())
            .map(Some)
            .map_err(|_| r.bad(field, value, "expected a list of strings"))
    }

    pub(crate) fn authorization_mode(r: &FieldReader<'_>, field: &str) -> Read<AuthorizationMode> {
        let Some(mode) = r.string(field)? else {
            return Ok(None);
        };
        AuthorizationMode::parse(&mode)
            .map(Some)
            .map_err(|reason| r.bad(field, &Value::String(mode.clone()), reason.to_string()))
    }

    /// "" is upstream's NoSwap.
    pub(crate) fn swap_behavior(r: &FieldReader<'_>, field: &str) -> Read<SwapBehavior> {
        let Some(text) = r.string(field)? else {
            return Ok(None);
        };
        SwapBehavior::parse(&text).map(Some).ok_or_else(|| {
            r.bad(
                field,
                &Value::String(text.clone()),
                "expected NoSwap or LimitedSwap",
            )
        })
    }

    /// A pointer upstream: an explicit "" is kept (no host resolver).
    pub(crate) fn resolv_conf(r: &FieldReader<'_>, field: &str) -> Read<Option<PathBuf>> {
        match r.get(field) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some((!s.is_empty()).then(|| PathBuf::from(s)))),
            Some(other) => Err(r.bad(field, other, "expected a string")),
        }
    }

    pub(crate) fn taints(
        r: &FieldReader<'_>,
        field: &str,
    ) -> Read<Vec<k8s_openapi::api::core::v1::Taint>> {
        r.taints(field)
    }
}

/// /configz values, as upstream's JSON shows them; `None` leaves the field out (omitempty).
pub(crate) mod show {
    use std::fmt::Display;
    use std::path::{Path, PathBuf};
    use std::time::Duration;

    use serde::Serialize;
    use serde_json::{json, Value};

    use crate::config::{AuthorizationMode, SwapBehavior};

    type Shown = Option<Value>;

    pub(crate) fn plain<T: Serialize>(value: &T) -> Shown {
        Some(json!(value))
    }

    pub(crate) fn displayed<T: Display>(value: &T) -> Shown {
        Some(json!(value.to_string()))
    }

    pub(crate) fn duration(value: &Duration) -> Shown {
        Some(json!(crate::config::format_duration(*value)))
    }

    pub(crate) fn path(value: &Path) -> Shown {
        Some(json!(value.display().to_string()))
    }

    pub(crate) fn optional_path(value: &Option<PathBuf>) -> Shown {
        value.as_deref().and_then(path)
    }

    pub(crate) fn optional<T: Serialize>(value: &Option<T>) -> Shown {
        value.as_ref().and_then(plain)
    }

    /// An omitempty bool: shown only when on.
    pub(crate) fn when_true(value: &bool) -> Shown {
        value.then(|| json!(true))
    }

    pub(crate) fn non_empty_text(value: &str) -> Shown {
        (!value.is_empty()).then(|| json!(value))
    }

    pub(crate) fn non_empty_list<T: Serialize>(value: &[T]) -> Shown {
        (!value.is_empty()).then(|| json!(value))
    }

    /// A byte count as a quantity in the largest binary unit that divides it ("10Mi").
    pub(crate) fn size(bytes: &u64) -> Shown {
        Some(json!(quantity(*bytes)))
    }

    pub(crate) fn quantity(bytes: u64) -> String {
        for (unit, size) in [("Gi", 1u64 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)] {
            if bytes >= size && bytes.is_multiple_of(size) {
                return format!("{}{unit}", bytes / size);
            }
        }
        bytes.to_string()
    }

    pub(crate) fn authorization_mode(value: &AuthorizationMode) -> Shown {
        Some(json!(value.as_str()))
    }

    pub(crate) fn swap_behavior(value: &SwapBehavior) -> Shown {
        Some(json!(value.as_str()))
    }

    /// Always there: "" when there is no host resolver.
    pub(crate) fn resolv_conf(value: &Option<PathBuf>) -> Shown {
        Some(json!(value
            .as_ref()
            .map_or(String::new(), |p| p.display().to_string())))
    }
}

/// A setting's own rule (rules across settings are in `mod.rs`'s `validate`).
pub(crate) mod rule {
    use std::net::IpAddr;
    use std::path::Path;
    use std::time::Duration;

    use crate::config::declare::Broken;
    use crate::config::{TLS_CIPHER_SUITES, TLS_VERSIONS};

    type Kept = Result<(), Broken>;

    pub(crate) fn positive_duration(value: &Duration) -> Kept {
        if value.is_zero() {
            return Err(Broken::new("0s", "must be greater than 0"));
        }
        Ok(())
    }

    pub(crate) fn positive_count(value: &u32) -> Kept {
        if *value == 0 {
            return Err(Broken::new(0, "must be greater than 0"));
        }
        Ok(())
    }

    pub(crate) fn positive_size(value: &u64) -> Kept {
        if *value == 0 {
            return Err(Broken::new(0, "must be greater than 0"));
        }
        Ok(())
    }

    pub(crate) fn positive_int32(value: &i32) -> Kept {
        if *value <= 0 {
            return Err(Broken::new(value, "must be greater than 0"));
        }
        Ok(())
    }

    pub(crate) fn serving_port(value: &u16) -> Kept {
        if *value == 0 {
            return Err(Broken::new(0, "must be between 1 and 65535"));
        }
        Ok(())
    }

    pub(crate) fn at_least_two(value: &u32) -> Kept {
        if *value < 2 {
            return Err(Broken::new(value, "must be at least 2"));
        }
        Ok(())
    }

    pub(crate) fn percent(value: &i32) -> Kept {
        if !(0..=100).contains(value) {
            return Err(Broken::new(value, "must be between 0 and 100, inclusive"));
        }
        Ok(())
    }

    pub(crate) fn absolute(value: &Path) -> Kept {
        if !value.is_absolute() {
            return Err(Broken::new(value.display(), "must be an absolute path"));
        }
        Ok(())
    }

    pub(crate) fn logging_format(value: &str) -> Kept {
        if value != "text" && value != "json" {
            return Err(Broken::new(
                format!("{value:?}"),
                "must be \"text\" or \"json\"",
            ));
        }
        Ok(())
    }

    pub(crate) fn tls_version(value: &Option<String>) -> Kept {
        match value {
            Some(version) if !TLS_VERSIONS.contains(&version.as_str()) => Err(Broken::new(
                version,
                "expected one of VersionTLS10, VersionTLS11, VersionTLS12, VersionTLS13",
            )),
            _ => Ok(()),
        }
    }

    pub(crate) fn cipher_suites(value: &[String]) -> Kept {
        match value
            .iter()
            .find(|suite| !TLS_CIPHER_SUITES.contains(&suite.as_str()))
        {
            Some(suite) => Err(Broken::new(
                suite,
                format!(
                    "unknown or unsupported cipher suite; supported: {}",
                    TLS_CIPHER_SUITES.join(", ")
                ),
            )),
            None => Ok(()),
        }
    }

    pub(crate) fn unsafe_sysctls(value: &[String]) -> Kept {
        crate::pod::admission::SysctlAllowlist::new(value, None)
            .map(|_| ())
            .map_err(|reason| Broken::new(value.join(","), reason.to_string()))
    }

    /// The HTTP source fetches http:// and https:// URLs; catching others at start-up gives
    /// the user an immediate, clear error instead of a log line every period.
    pub(crate) fn manifest_url(value: &Option<String>) -> Kept {
        match value {
            Some(url) if !url.starts_with("http://") && !url.starts_with("https://") => {
                Err(Broken::new(url, "expected an http:// or https:// URL"))
            }
            _ => Ok(()),
        }
    }

    pub(crate) fn node_ip(value: &Option<IpAddr>) -> Kept {
        match value {
            Some(ip) => crate::config::node::check_node_ip(*ip)
                .map_err(|reason| Broken::new(ip, reason.to_string())),
            None => Ok(()),
        }
    }
}
