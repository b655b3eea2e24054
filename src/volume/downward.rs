//! The content of downwardAPI volume files, as upstream renders it: pod metadata by
//! fieldRef (maps as sorted `key="value"` lines, values quoted the way Go's `%q` does) and
//! container resources by resourceFieldRef (a limit the container does not set falls back
//! to the pod-level limit, then to the node's allocatable; the value is divided by the
//! divisor and rounded up).

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::{Container, DownwardAPIVolumeFile, Pod, Volume};

use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;

use super::source::{SetUp, VolumeSource};
use super::{
    write_files, written_before, Allocatable, HostVolume, VolumeError, VolumeKind,
    DOWNWARD_API_PLUGIN,
};
use crate::vocabulary::quantity::Quantity;

/// Upstream's default file mode for downwardAPI and projected volumes.
pub const DEFAULT_MODE: i32 = 0o644;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileProjection {
    pub data: Vec<u8>,
    pub mode: u32,
    /// The file's owner when it must not be root's (a token read by the pod's one user).
    pub uid: Option<u32>,
}

/// Relative file path (cleaned) → content and mode.
pub type Payload = BTreeMap<String, FileProjection>;

/// A field at fault (relative to the volume, e.g. `items[1].path`) and why.
pub type FieldError = (String, String);

/// Why a file of a downwardAPI, configMap, secret or projected volume cannot be written as
/// asked (a mode, an item's path, a field a volume cannot show).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ItemError {
    #[error("{0:#o} is not a valid file mode (must be between 0 and 0777)")]
    Mode(i32),
    #[error("must not be empty")]
    EmptyPath,
    #[error("{0:?} must be a relative path")]
    NotRelative(String),
    #[error("{0:?} is longer than 4096 bytes")]
    PathTooLong(String),
    #[error("{0:?} must not contain '..'")]
    DotDot(String),
    #[error("{0:?} has an element longer than 255 bytes")]
    ElementTooLong(String),
    #[error("{0:?} names no file")]
    NoFile(String),
    #[error("{0:?} must not start with '..'")]
    StartsWithDotDot(String),
    #[error("path {parent:?} is a file but {path:?} needs it to be a directory")]
    Nesting { parent: String, path: String },
    #[error(
        "field path {0:?} is not supported in a volume (supported: metadata.name, \
         metadata.namespace, metadata.uid, metadata.labels, metadata.annotations, \
         and metadata.labels['KEY'] / metadata.annotations['KEY'])"
    )]
    UnsupportedField(String),
}

/// Renders `items` into files. `field` prefixes each error's field name.
pub fn collect(
    pod: &Pod,
    items: &[DownwardAPIVolumeFile],
    default_mode: Option<i32>,
    alloc: &Allocatable,
    field: &str,
    out: &mut Payload,
) -> Result<(), FieldError> {
    let default_mode = check_mode(default_mode.unwrap_or(DEFAULT_MODE))
        .map_err(|r| (format!("{field}.defaultMode"), r.to_string()))?;
    for (i, item) in items.iter().enumerate() {
        let f = format!("{field}.items[{i}]");
        let path = clean_path(&item.path).map_err(|r| (format!("{f}.path"), r.to_string()))?;
        let mode = match item.mode {
            Some(m) => check_mode(m).map_err(|r| (format!("{f}.mode"), r.to_string()))?,
            None => default_mode,
        };
        let value = match (&item.field_ref, &item.resource_field_ref) {
            (Some(fr), None) => {
                if let Some(v) = fr
                    .api_version
                    .as_deref()
                    .filter(|v| !v.is_empty() && *v != "v1")
                {
                    return Err((
                        format!("{f}.fieldRef.apiVersion"),
                        format!("unsupported API version {v:?} (only \"v1\")"),
                    ));
                }
                field_value(pod, &fr.field_path)
                    .map_err(|r| (format!("{f}.fieldRef.fieldPath"), r.to_string()))?
            }
            (None, Some(rr)) => {
                let container = rr.container_name.as_deref().unwrap_or("");
                if container.is_empty() {
                    return Err((
                        format!("{f}.resourceFieldRef.containerName"),
                        "is required in a volume".into(),
                    ));
                }
                resource_value(pod, container, &rr.resource, rr.divisor.as_ref(), alloc)
                    .map_err(|(sub, r)| (format!("{f}.resourceFieldRef.{sub}"), r))?
            }
            _ => {
                return Err((
                    f,
                    "exactly one of fieldRef and resourceFieldRef must be set".into(),
                ))
            }
        };
        if out.contains_key(&path) {
            return Err((
                format!("{f}.path"),
                format!("conflicting duplicate path {path:?}"),
            ));
        }
        out.insert(
            path,
            FileProjection {
                data: sort_lines(&value).into_bytes(),
                mode,
                uid: None,
            },
        );
    }
    check_nesting(out).map_err(|r| (format!("{field}.items"), r.to_string()))
}

pub(super) fn check_mode(m: i32) -> Result<u32, ItemError> {
    if (0..=0o777).contains(&m) {
        Ok(m as u32)
    } else {
        Err(ItemError::Mode(m))
    }
}

/// Validates an item path as upstream does (relative, no `..` element, not starting with
/// `..`, which the atomic writer reserves) and cleans it (`./a//b` → `a/b`).
pub fn clean_path(p: &str) -> Result<String, ItemError> {
    if p.is_empty() {
        return Err(ItemError::EmptyPath);
    }
    if p.starts_with('/') {
        return Err(ItemError::NotRelative(p.to_string()));
    }
    if p.len() > 4096 {
        return Err(ItemError::PathTooLong(p.to_string()));
    }
    let parts: Vec<&str> = p
        .split('/')
        .filter(|s| !s.is_empty() && *s != ".")
        .collect();
    if parts.contains(&"..") {
        return Err(ItemError::DotDot(p.to_string()));
    }
    if parts.iter().any(|s| s.len() > 255) {
        return Err(ItemError::ElementTooLong(p.to_string()));
    }
    match parts.first() {
        None => Err(ItemError::NoFile(p.to_string())),
        Some(first) if first.starts_with("..") => Err(ItemError::StartsWithDotDot(p.to_string())),
        Some(_) => Ok(parts.join("/")),
    }
}

/// A file cannot also be a directory of another item's path.
pub(super) fn check_nesting(payload: &Payload) -> Result<(), ItemError> {
    for p in payload.keys() {
        let mut prefix = p.as_str();
        while let Some((parent, _)) = prefix.rsplit_once('/') {
            if payload.contains_key(parent) {
                return Err(ItemError::Nesting {
                    parent: parent.to_string(),
                    path: p.clone(),
                });
            }
            prefix = parent;
        }
    }
    Ok(())
}

/// upstream sorts the lines of every value (it matters for the map fields).
fn sort_lines(v: &str) -> String {
    let mut lines: Vec<&str> = v.split('\n').collect();
    lines.sort_unstable();
    lines.join("\n")
}

/// The fields a downwardAPI volume may show (upstream's volume field set).
pub fn field_value(pod: &Pod, path: &str) -> Result<String, ItemError> {
    let meta = &pod.metadata;
    let subscript = |prefix: &str| {
        path.strip_prefix(prefix)
            .and_then(|r| r.strip_prefix("['"))
            .and_then(|r| r.strip_suffix("']"))
    };
    let empty = BTreeMap::new();
    let labels = meta.labels.as_ref().unwrap_or(&empty);
    let annotations = meta.annotations.as_ref().unwrap_or(&empty);
    Ok(match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_else(|| "default".into()),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "metadata.labels" => format_map(labels),
        "metadata.annotations" => format_map(annotations),
        _ => {
            if let Some(k) = subscript("metadata.labels") {
                labels.get(k).cloned().unwrap_or_default()
            } else if let Some(k) = subscript("metadata.annotations") {
                annotations.get(k).cloned().unwrap_or_default()
            } else {
                return Err(ItemError::UnsupportedField(path.to_string()));
            }
        }
    })
}

/// `key="value"` lines in key order, no trailing newline.
pub fn format_map(m: &BTreeMap<String, String>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k}={}", go_quote(v)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A string as Go's `strconv.Quote` writes it: printable characters as they are, the usual
/// C escapes, `\xNN` for other ASCII controls and `\uNNNN`/`\UNNNNNNNN` for non-printable
/// characters. Rust has no Unicode category table in std; the non-printable set here is
/// controls, non-ASCII spaces, format characters and private use, which covers what labels
/// and annotations carry in practice (unassigned code points are kept as they are).
pub fn go_quote(s: &str) -> String {
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
            c if printable(c) => out.push(c),
            c if (c as u32) < 0x80 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push('"');
    out
}

fn printable(c: char) -> bool {
    let u = c as u32;
    if c == ' ' {
        return true;
    }
    if c.is_control() || c.is_whitespace() {
        return false;
    }
    let format_or_private = matches!(u,
        0xAD | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x890..=0x891 | 0x8E2 | 0x180E
        | 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x2064 | 0x2066..=0x206F
        | 0xD800..=0xDFFF | 0xE000..=0xF8FF | 0xFEFF | 0xFFF9..=0xFFFB
        | 0x110BD | 0x110CD | 0x13430..=0x1343F | 0x1BCA0..=0x1BCA3 | 0x1D173..=0x1D17A
        | 0xE0001 | 0xE0020..=0xE007F | 0xF0000..=0x10FFFF);
    !format_or_private
}

/// Looks a container up among the pod's containers and init containers.
fn find_container<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    let spec = pod.spec.as_ref()?;
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == name)
}

/// A container's limit or request for a resourceFieldRef. Errors name the sub-field.
pub fn resource_value(
    pod: &Pod,
    container: &str,
    resource: &str,
    divisor: Option<&ApiQuantity>,
    alloc: &Allocatable,
) -> Result<String, FieldError> {
    let c = find_container(pod, container).ok_or_else(|| {
        (
            "containerName".to_string(),
            format!("no container named {container:?} in the pod"),
        )
    })?;
    let bad_resource = || {
        (
            "resource".to_string(),
            format!("unsupported container resource {resource:?}"),
        )
    };
    let (kind, name) = resource.split_once('.').ok_or_else(bad_resource)?;
    let res = c.resources.as_ref();
    let own = match kind {
        "limits" => res.and_then(|r| r.limits.as_ref()),
        "requests" => res.and_then(|r| r.requests.as_ref()),
        _ => return Err(bad_resource()),
    }
    .and_then(|m| m.get(name));
    // An unset limit means "as much as the pod may have": the pod-level limit when the pod
    // sets one, else what the node can give pods.
    let pod_limit = || {
        pod.spec
            .as_ref()
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.limits.as_ref())
            .and_then(|m| m.get(name))
    };
    let value = match own {
        Some(q) => Some(q),
        None if kind == "limits" => pod_limit(),
        None => None,
    };
    let parse = |q: Option<&ApiQuantity>| {
        q.map(|q| Quantity::from_api(q).map_err(|e| ("resource".to_string(), e.to_string())))
            .transpose()
    };
    let value = parse(value)?;
    // Upstream divides in float64 and rounds up; integers give the same result for every
    // value below 2^53 and stay exact above.
    match name {
        "cpu" => {
            let millis = match value {
                Some(q) => q.milli_value(),
                None if kind == "limits" => alloc.cpu_millis.unwrap_or(0),
                None => 0,
            };
            let div = divisor_of(divisor, &CPU_DIVISORS, "1m or 1")?.milli_value();
            Ok(ceil_div(millis, div).to_string())
        }
        "memory" | "ephemeral-storage" => {
            let b = match value {
                Some(q) => q.value(),
                None if kind == "limits" && name == "memory" => alloc.memory_bytes.unwrap_or(0),
                None if kind == "limits" => alloc.ephemeral_storage_bytes.unwrap_or(0),
                None => 0,
            };
            let div = divisor_of(divisor, &BYTE_DIVISORS, BYTE_DIVISORS_TEXT)?.value();
            Ok(ceil_div(b, div).to_string())
        }
        n if n.starts_with("hugepages-") => {
            let b = value.map_or(0, |q| q.value());
            let div = divisor_of(divisor, &BYTE_DIVISORS, BYTE_DIVISORS_TEXT)?.value();
            Ok(ceil_div(b, div).to_string())
        }
        _ => Err(bad_resource()),
    }
}

fn ceil_div(v: i64, d: i64) -> i64 {
    if v <= 0 {
        return 0;
    }
    v / d + i64::from(v % d != 0)
}

/// CPU divisors upstream accepts.
const CPU_DIVISORS: [&str; 2] = ["1m", "1"];
/// Byte divisors upstream accepts: 1 and one unit of every decimal and binary suffix.
const BYTE_DIVISORS: [&str; 13] = [
    "1", "1k", "1M", "1G", "1T", "1P", "1E", "1Ki", "1Mi", "1Gi", "1Ti", "1Pi", "1Ei",
];
const BYTE_DIVISORS_TEXT: &str = "1, 1k, 1M, ..., 1E, 1Ki, 1Mi, ..., 1Ei";

/// The divisor as upstream reads it: unset or zero means 1; otherwise it must equal one of
/// `allowed` by value ("1000m" is "1"), as upstream's validation compares them.
fn divisor_of(
    d: Option<&ApiQuantity>,
    allowed: &[&str],
    allowed_text: &str,
) -> Result<Quantity, FieldError> {
    let bad = |text: &str| {
        (
            "divisor".to_string(),
            format!("{text:?} is not a valid divisor ({allowed_text})"),
        )
    };
    let Some(d) = d else {
        return Ok(Quantity::from_value(1));
    };
    let q = Quantity::from_api(d).map_err(|_| bad(&d.0))?;
    if q.is_zero() {
        return Ok(Quantity::from_value(1));
    }
    allowed
        .iter()
        .filter_map(|a| Quantity::parse(a).ok())
        .find(|a| *a == q)
        .ok_or_else(|| bad(&d.0))
}

/// downwardAPI volumes: the pod's own fields as files, on a tmpfs.
pub(super) struct DownwardApi;

impl VolumeSource for DownwardApi {
    fn field(&self) -> &'static str {
        "downwardAPI"
    }

    fn set_up(&self, cx: &SetUp<'_>, vol: &Volume) -> Result<HostVolume, VolumeError> {
        let blame = cx.blame;
        let src = vol.downward_api.clone().unwrap_or_default();
        let mut payload = Payload::new();
        collect(
            cx.pod,
            src.items.as_deref().unwrap_or(&[]),
            src.default_mode,
            &cx.ctx.allocatable,
            "downwardAPI",
            &mut payload,
        )
        .map_err(|(f, r)| blame.invalid(&f, r))?;
        let own = cx.ownership()?;
        let dir = cx.volume_dir(DOWNWARD_API_PLUGIN)?;
        cx.memory(&dir)?;
        write_files(&dir, &payload, own, blame)?;
        Ok(HostVolume {
            path: dir,
            read_only: true,
            kind: VolumeKind::DownwardApi,
        })
    }

    fn set_up_before(&self, vol: &Volume, pod_dir: &Path) -> Option<HostVolume> {
        written_before(vol, pod_dir, DOWNWARD_API_PLUGIN, VolumeKind::DownwardApi)
    }

    fn plugin_of_spec(&self, _vol: &Volume) -> Option<String> {
        Some(VolumeKind::DownwardApi.plugin_name().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "u-1",
                "labels": {"b": "2", "a": "x\"y\n"},
                "annotations": {"note": "é\u{200b}\u{1}"}},
            "spec": {"containers": [
                {"name": "c", "image": "i", "resources": {
                    "limits": {"cpu": "250m", "memory": "64Mi"},
                    "requests": {"cpu": "100m", "memory": "32Mi"}}},
                {"name": "free", "image": "i"}
            ]}
        }))
        .unwrap()
    }

    fn alloc() -> Allocatable {
        Allocatable {
            cpu_millis: Some(4000),
            memory_bytes: Some(8 << 30),
            ephemeral_storage_bytes: Some(100 << 30),
        }
    }

    #[test]
    fn metadata_fields_render_as_upstream() {
        let p = pod();
        assert_eq!(field_value(&p, "metadata.name").unwrap(), "web");
        assert_eq!(field_value(&p, "metadata.namespace").unwrap(), "ns");
        assert_eq!(field_value(&p, "metadata.uid").unwrap(), "u-1");
        assert_eq!(
            field_value(&p, "metadata.labels").unwrap(),
            "a=\"x\\\"y\\n\"\nb=\"2\""
        );
        assert_eq!(
            field_value(&p, "metadata.annotations").unwrap(),
            "note=\"é\\u200b\\x01\""
        );
        assert_eq!(field_value(&p, "metadata.labels['b']").unwrap(), "2");
        assert_eq!(field_value(&p, "metadata.labels['zz']").unwrap(), "");
        let e = field_value(&p, "status.podIP").unwrap_err().to_string();
        assert!(e.contains("not supported in a volume"), "{e}");
    }

    #[test]
    fn go_quote_matches_strconv_quote() {
        assert_eq!(go_quote("plain"), "\"plain\"");
        assert_eq!(go_quote("a\\b\t\r\x07\x7f"), "\"a\\\\b\\t\\r\\a\\x7f\"");
        assert_eq!(go_quote("日本"), "\"日本\"");
        assert_eq!(go_quote("\u{a0}\u{feff}"), "\"\\u00a0\\ufeff\"");
        assert_eq!(go_quote("\u{f0000}"), "\"\\U000f0000\"");
    }

    #[test]
    fn resources_use_divisor_and_fall_back_to_allocatable() {
        let p = pod();
        let v = |c: &str, r: &str, d: Option<&str>| {
            let d = d.map(|d| ApiQuantity(d.into()));
            resource_value(&p, c, r, d.as_ref(), &alloc())
        };
        assert_eq!(v("c", "limits.cpu", None).unwrap(), "1");
        assert_eq!(v("c", "limits.cpu", Some("1m")).unwrap(), "250");
        assert_eq!(v("c", "requests.cpu", Some("1m")).unwrap(), "100");
        assert_eq!(v("c", "limits.memory", Some("1Mi")).unwrap(), "64");
        assert_eq!(v("c", "requests.memory", None).unwrap(), "33554432");
        assert_eq!(v("c", "limits.memory", Some("1M")).unwrap(), "68");
        assert_eq!(v("free", "limits.cpu", None).unwrap(), "4");
        assert_eq!(v("free", "limits.memory", Some("1Gi")).unwrap(), "8");
        assert_eq!(v("free", "requests.memory", None).unwrap(), "0");
        assert_eq!(
            v("free", "limits.ephemeral-storage", Some("1Gi")).unwrap(),
            "100"
        );
        assert_eq!(v("free", "limits.hugepages-2Mi", None).unwrap(), "0");
        assert_eq!(
            v("nope", "limits.cpu", None).unwrap_err().0,
            "containerName"
        );
        assert_eq!(v("c", "limits.gpu", None).unwrap_err().0, "resource");
        assert_eq!(v("c", "limits.cpu", Some("2")).unwrap_err().0, "divisor");
        assert_eq!(
            v("c", "limits.memory", Some("3Ki")).unwrap_err().0,
            "divisor"
        );
    }

    /// Values are exact and rounded up only once, after the division; divisors are
    /// compared by value, and a zero divisor means the default, as upstream.
    #[test]
    fn resource_values_are_exact_and_divisors_compared_by_value() {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web"},
            "spec": {"containers": [{"name": "c", "image": "i", "resources": {
                "limits": {"cpu": "2.007", "memory": "1.5Gi"},
                "requests": {"cpu": "7e-1", "memory": "1000001"}}}]}
        }))
        .unwrap();
        let v = |r: &str, d: Option<&str>| {
            let d = d.map(|d| ApiQuantity(d.into()));
            resource_value(&p, "c", r, d.as_ref(), &alloc())
        };
        assert_eq!(v("limits.cpu", Some("1m")).unwrap(), "2007");
        assert_eq!(v("limits.cpu", None).unwrap(), "3");
        assert_eq!(v("requests.cpu", Some("1m")).unwrap(), "700");
        assert_eq!(v("requests.cpu", Some("1000m")).unwrap(), "1");
        assert_eq!(v("requests.cpu", Some("0")).unwrap(), "1");
        assert_eq!(v("limits.memory", Some("1Mi")).unwrap(), "1536");
        assert_eq!(v("limits.memory", Some("1024Ki")).unwrap(), "1536");
        assert_eq!(v("requests.memory", Some("1M")).unwrap(), "2");
        assert_eq!(v("requests.memory", Some("0.001M")).unwrap(), "1001");
        for bad in ["0.5m", "1001m", "2"] {
            assert_eq!(
                v("limits.cpu", Some(bad)).unwrap_err().0,
                "divisor",
                "{bad}"
            );
        }
        assert_eq!(v("limits.memory", Some("1.5Ki")).unwrap_err().0, "divisor");
    }

    #[test]
    fn pod_level_limit_comes_before_allocatable() {
        let mut p = pod();
        p.spec.as_mut().unwrap().resources =
            Some(serde_json::from_value(json!({"limits": {"cpu": "2", "memory": "1Gi"}})).unwrap());
        assert_eq!(
            resource_value(&p, "free", "limits.cpu", None, &alloc()).unwrap(),
            "2"
        );
        assert_eq!(
            resource_value(
                &p,
                "free",
                "limits.memory",
                Some(&ApiQuantity("1Mi".into())),
                &alloc()
            )
            .unwrap(),
            "1024"
        );
    }

    #[test]
    fn item_paths_are_checked_and_cleaned() {
        assert_eq!(clean_path("./a//b/").unwrap(), "a/b");
        assert!(clean_path("/abs").is_err());
        assert!(clean_path("a/../b").is_err());
        assert!(clean_path("..data").is_err());
        assert!(clean_path("").is_err());
        assert!(clean_path(".").is_err());
        assert_eq!(clean_path("a/..b").unwrap(), "a/..b");
    }

    #[test]
    fn collect_builds_payload_with_modes_and_names_bad_items() {
        let p = pod();
        let items: Vec<DownwardAPIVolumeFile> = serde_json::from_value(json!([
            {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
            {"path": "sub/labels", "mode": 0o600, "fieldRef": {"fieldPath": "metadata.labels"}},
            {"path": "cpu", "resourceFieldRef": {"containerName": "c", "resource": "limits.cpu", "divisor": "1m"}}
        ]))
        .unwrap();
        let mut out = Payload::new();
        collect(&p, &items, None, &alloc(), "downwardAPI", &mut out).unwrap();
        assert_eq!(
            out["name"],
            FileProjection {
                data: b"web".to_vec(),
                mode: 0o644,
                uid: None,
            }
        );
        assert_eq!(out["sub/labels"].mode, 0o600);
        assert_eq!(out["cpu"].data, b"250");

        let bad: Vec<DownwardAPIVolumeFile> = serde_json::from_value(json!([
            {"path": "cpu", "resourceFieldRef": {"resource": "limits.cpu"}}
        ]))
        .unwrap();
        let e = collect(&p, &bad, None, &alloc(), "downwardAPI", &mut Payload::new()).unwrap_err();
        assert_eq!(e.0, "downwardAPI.items[0].resourceFieldRef.containerName");

        let nested: Vec<DownwardAPIVolumeFile> = serde_json::from_value(json!([
            {"path": "a", "fieldRef": {"fieldPath": "metadata.name"}},
            {"path": "a/b", "fieldRef": {"fieldPath": "metadata.name"}}
        ]))
        .unwrap();
        assert!(collect(&p, &nested, None, &alloc(), "d", &mut Payload::new()).is_err());
        let e = collect(&p, &items, Some(0o1777), &alloc(), "d", &mut Payload::new()).unwrap_err();
        assert_eq!(e.0, "d.defaultMode");
    }
}
