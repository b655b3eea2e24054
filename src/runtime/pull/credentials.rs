//! Registry credentials as the upstream kubelet finds them: docker config files on the node
//! (`config.json` with `auths`, or the legacy `.dockercfg` map) and, in cluster mode, the
//! pod's imagePullSecrets (`kubernetes.io/dockerconfigjson` / `kubernetes.io/dockercfg`),
//! both parsed by `parse_docker_config`. Keys are matched against an image the way the
//! kubelet's keyring does: host (with `*` wildcards per label, port exact), then a path
//! prefix on segment boundaries, most specific key first.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// One credential for one registry key (`https://index.docker.io/v1/`, `quay.io/org`, ...).
#[derive(Clone, PartialEq, Eq)]
pub struct RegistryCredential {
    /// The key exactly as written in the docker config.
    pub key: String,
    pub username: String,
    pub password: String,
    /// `registrytoken`: a bearer token sent as it is.
    pub registry_token: Option<String>,
    /// Where it came from (file path or `secret ns/name`), for logs and errors; never the secret.
    pub source: String,
}

impl std::fmt::Debug for RegistryCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Secrets must not reach logs through `{:?}`.
        f.debug_struct("RegistryCredential")
            .field("key", &self.key)
            .field("username", &self.username)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error("docker config {source_name}: {reason}")]
    Invalid { source_name: String, reason: String },
}

#[derive(Deserialize, Default)]
struct AuthEntry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    registrytoken: Option<String>,
}

/// Parses a docker config (`{"auths": {...}}`) or a legacy `.dockercfg` (the map itself).
/// `source_name` names the file or secret in errors and in `RegistryCredential::source`.
pub fn parse_docker_config(
    bytes: &[u8],
    source_name: &str,
) -> Result<Vec<RegistryCredential>, CredentialError> {
    let invalid = |reason: String| CredentialError::Invalid {
        source_name: source_name.to_string(),
        reason,
    };
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| invalid(format!("not JSON: {e}")))?;
    let map = match value.get("auths") {
        Some(auths) => auths.clone(),
        None => value,
    };
    let map = map
        .as_object()
        .ok_or_else(|| invalid("\"auths\" is not an object".into()))?;
    let mut out = Vec::new();
    for (key, entry) in map {
        // Other top-level fields of a legacy file (or a stray credsStore) are not entries.
        if !entry.is_object() {
            continue;
        }
        let entry: AuthEntry = serde_json::from_value(entry.clone())
            .map_err(|e| invalid(format!("entry {key:?}: {e}")))?;
        let (mut username, mut password) = (
            entry.username.unwrap_or_default(),
            entry.password.unwrap_or_default(),
        );
        if let Some(auth) = entry.auth.filter(|a| !a.is_empty()) {
            let decoded = base64_decode(&auth)
                .map_err(|e| invalid(format!("entry {key:?}: \"auth\" is not base64: {e}")))?;
            let text = String::from_utf8(decoded)
                .map_err(|_| invalid(format!("entry {key:?}: \"auth\" is not UTF-8")))?;
            let (u, p) = text
                .split_once(':')
                .ok_or_else(|| invalid(format!("entry {key:?}: \"auth\" is not user:password")))?;
            username = u.to_string();
            password = p.to_string();
        }
        out.push(RegistryCredential {
            key: key.clone(),
            username,
            password,
            registry_token: entry.registrytoken.filter(|t| !t.is_empty()),
            source: source_name.to_string(),
        });
    }
    Ok(out)
}

/// The node's docker config files in the upstream kubelet's order of preference: the
/// configured path (a file, or a directory holding `config.json`), else the agent's root dir
/// (upstream's preferred path is the kubelet's root dir), `./config.json`,
/// `$HOME/.docker/config.json`, `/.docker/config.json`, then the legacy `.dockercfg` in the
/// root dir and in `$HOME`.
pub fn node_config_candidates(configured: Option<&Path>, root_dir: Option<&Path>) -> Vec<PathBuf> {
    if let Some(p) = configured {
        return if p.is_dir() {
            vec![p.join("config.json"), p.join(".dockercfg")]
        } else {
            vec![p.to_path_buf()]
        };
    }
    let mut dirs: Vec<PathBuf> = root_dir.map(Path::to_path_buf).into_iter().collect();
    if let Ok(cwd) = std::env::current_dir() {
        dirs.push(cwd);
    }
    if let Some(home) = std::env::var_os("HOME") {
        dirs.push(PathBuf::from(home).join(".docker"));
    }
    dirs.push(PathBuf::from("/.docker"));
    let mut out: Vec<PathBuf> = dirs.iter().map(|d| d.join("config.json")).collect();
    out.extend(root_dir.map(|r| r.join(".dockercfg")));
    if let Some(home) = std::env::var_os("HOME") {
        out.push(PathBuf::from(home).join(".dockercfg"));
    }
    out
}

/// Reads the first node docker config that exists. A file that exists but cannot be parsed
/// is an error (a silently ignored typo means anonymous pulls nobody can explain).
pub fn load_node_credentials(
    configured: Option<&Path>,
    root_dir: Option<&Path>,
) -> Result<Vec<RegistryCredential>, CredentialError> {
    for path in node_config_candidates(configured, root_dir) {
        match std::fs::read(&path) {
            Ok(bytes) => return parse_docker_config(&bytes, &path.display().to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                return Err(CredentialError::Invalid {
                    source_name: path.display().to_string(),
                    reason: e.to_string(),
                })
            }
        }
    }
    Ok(Vec::new())
}

/// The host under which Docker Hub credentials and images are compared.
const DOCKER_HUB: &str = "docker.io";

/// Folds Docker Hub's aliases into one name, lower-cases the rest.
pub fn canonical_host(host: &str) -> String {
    let h = host.to_ascii_lowercase();
    match h.as_str() {
        "docker.io" | "index.docker.io" | "registry-1.docker.io" | "registry.hub.docker.com" => {
            DOCKER_HUB.to_string()
        }
        _ => h,
    }
}

/// A config key split into (canonical host, path without slashes at either end).
fn parse_key(key: &str) -> (String, String) {
    let k = key
        .trim()
        .trim_start_matches("https://")
        .trim_start_matches("http://");
    let (host, path) = match k.split_once('/') {
        Some((h, p)) => (h, p.trim_matches('/')),
        None => (k, ""),
    };
    let host = canonical_host(host);
    // Docker Hub's keys carry the old API version as a path (`/v1/`), which restricts nothing.
    let path = if host == DOCKER_HUB && (path == "v1" || path == "v2") {
        ""
    } else {
        path
    };
    (host, path.to_string())
}

fn host_matches(pattern: &str, host: &str) -> bool {
    let (pat_name, pat_port) = split_port(pattern);
    let (name, port) = split_port(host);
    if pat_port != port {
        return false;
    }
    let pl: Vec<&str> = pat_name.split('.').collect();
    let hl: Vec<&str> = name.split('.').collect();
    pl.len() == hl.len()
        && pl
            .iter()
            .zip(&hl)
            .all(|(p, h)| *p == "*" || p.eq_ignore_ascii_case(h))
}

fn split_port(host: &str) -> (&str, &str) {
    // `[::1]:5000` and `host:5000`; a bare IPv6 literal has no port.
    if let Some(rest) = host.strip_prefix('[') {
        if let Some((addr, after)) = rest.split_once(']') {
            return (addr, after.strip_prefix(':').unwrap_or(""));
        }
    }
    match host.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => (h, p),
        _ => (host, ""),
    }
}

fn path_matches(prefix: &str, repository: &str) -> bool {
    prefix.is_empty()
        || repository == prefix
        || repository
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// The credentials that apply to `repository` on `host` (host as in the image reference,
/// e.g. `docker.io`), most specific first: exact host before wildcard, longer path first.
pub fn matching<'a>(
    creds: &'a [RegistryCredential],
    host: &str,
    repository: &str,
) -> Vec<&'a RegistryCredential> {
    let host = canonical_host(host);
    let mut hits: Vec<(bool, usize, usize, &RegistryCredential)> = creds
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let (kh, kp) = parse_key(&c.key);
            (host_matches(&kh, &host) && path_matches(&kp, repository)).then_some((
                kh.contains('*'),
                usize::MAX - kp.len(),
                i,
                c,
            ))
        })
        .collect();
    hits.sort_by_key(|(wild, path_rank, i, _)| (*wild, *path_rank, *i));
    let mut out: Vec<&RegistryCredential> = Vec::new();
    for (_, _, _, c) in hits {
        // The same user/password under two keys (docker.io and index.docker.io) is one try.
        if !out.iter().any(|o| {
            o.username == c.username
                && o.password == c.password
                && o.registry_token == c.registry_token
        }) {
            out.push(c);
        }
    }
    out
}

/// Standard base64 with or without padding, line breaks ignored (Go's decoder skips them,
/// and hand-edited config files carry them).
pub(crate) fn base64_decode(input: &str) -> Result<Vec<u8>, base64::DecodeError> {
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    use base64::Engine as _;
    const LENIENT: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    let clean: String = input.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    LENIENT.decode(clean)
}

/// Credentials grouped by source, for a one-line summary in logs.
pub fn describe(creds: &[&RegistryCredential]) -> String {
    let mut by: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for c in creds {
        by.entry(c.source.as_str())
            .or_default()
            .push(c.key.as_str());
    }
    by.iter()
        .map(|(s, k)| format!("{} from {s}", k.join(",")))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cred(key: &str, user: &str) -> RegistryCredential {
        RegistryCredential {
            key: key.into(),
            username: user.into(),
            password: format!("{user}-pw"),
            registry_token: None,
            source: "test".into(),
        }
    }

    #[test]
    fn base64_round_trips_known_values() {
        assert_eq!(base64_decode("dGVzdDp0ZXN0").unwrap(), b"test:test");
        assert_eq!(base64_decode("YQ==").unwrap(), b"a");
        assert_eq!(base64_decode("YWI=").unwrap(), b"ab");
        assert_eq!(base64_decode("YWI").unwrap(), b"ab");
        assert_eq!(base64_decode("dGVz\ndDp0\r\nZXN0").unwrap(), b"test:test");
        assert!(base64_decode("Y!==").is_err());
        assert!(base64_decode("Y").is_err());
    }

    #[test]
    fn parses_auth_and_username_password_forms() {
        let cfg = br#"{"auths": {
            "https://index.docker.io/v1/": {"auth": "dXNlcjpwYTpzcw=="},
            "registry.example.com:5000": {"username": "bob", "password": "secret"},
            "tok.example.com": {"registrytoken": "abc"}
        }, "credsStore": "desktop"}"#;
        let mut c = parse_docker_config(cfg, "/x/config.json").unwrap();
        c.sort_by(|a, b| a.key.cmp(&b.key));
        assert_eq!(c.len(), 3);
        assert_eq!(c[0].key, "https://index.docker.io/v1/");
        // The password may itself contain ':'; only the first one splits.
        assert_eq!(
            (c[0].username.as_str(), c[0].password.as_str()),
            ("user", "pa:ss")
        );
        assert_eq!(
            (c[1].username.as_str(), c[1].password.as_str()),
            ("bob", "secret")
        );
        assert_eq!(c[2].registry_token.as_deref(), Some("abc"));
        assert_eq!(c[1].source, "/x/config.json");
    }

    #[test]
    fn parses_legacy_dockercfg() {
        let cfg = br#"{"quay.io": {"auth": "YTpi", "email": "x@y"}}"#;
        let c = parse_docker_config(cfg, "secret default/pull").unwrap();
        assert_eq!((c[0].username.as_str(), c[0].password.as_str()), ("a", "b"));
    }

    #[test]
    fn bad_auth_names_the_source_and_key() {
        let err = parse_docker_config(br#"{"auths":{"r.io":{"auth":"%%%"}}}"#, "/etc/cfg.json")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("/etc/cfg.json") && err.contains("r.io"),
            "{err}"
        );
        let err = parse_docker_config(br#"{"auths":{"r.io":{"auth":"bm9jb2xvbg=="}}}"#, "f")
            .unwrap_err()
            .to_string();
        assert!(err.contains("user:password"), "{err}");
    }

    #[test]
    fn debug_hides_secrets() {
        let c = cred("r.io", "u");
        assert!(!format!("{c:?}").contains("u-pw"));
    }

    #[test]
    fn docker_hub_keys_match_docker_io_images() {
        let creds = vec![
            cred("https://index.docker.io/v1/", "hub"),
            cred("quay.io", "quay"),
        ];
        let m = matching(&creds, "docker.io", "library/busybox");
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].username, "hub");
        for key in ["index.docker.io", "docker.io", "registry-1.docker.io"] {
            let creds = vec![cred(key, "hub")];
            assert_eq!(matching(&creds, "docker.io", "a/b").len(), 1, "{key}");
        }
        assert!(matching(&creds, "ghcr.io", "a/b").is_empty());
    }

    #[test]
    fn more_specific_keys_come_first() {
        let creds = vec![
            cred("*.example.com", "wild"),
            cred("reg.example.com", "host"),
            cred("reg.example.com/team", "team"),
            cred("reg.example.com/other", "other"),
            cred("reg.example.com/te", "prefix-not-segment"),
        ];
        let users: Vec<&str> = matching(&creds, "reg.example.com", "team/app")
            .iter()
            .map(|c| c.username.as_str())
            .collect();
        assert_eq!(users, ["team", "host", "wild"]);
        // A wildcard covers one label only.
        assert!(matching(&creds, "a.b.example.com", "x").is_empty());
    }

    #[test]
    fn ports_must_match() {
        let creds = vec![
            cred("127.0.0.1:5000", "p"),
            cred("http://[::1]:5000/", "v6"),
        ];
        assert_eq!(matching(&creds, "127.0.0.1:5000", "x").len(), 1);
        assert!(matching(&creds, "127.0.0.1:5001", "x").is_empty());
        assert!(matching(&creds, "127.0.0.1", "x").is_empty());
        assert_eq!(matching(&creds, "[::1]:5000", "x")[0].username, "v6");
    }

    #[test]
    fn node_config_reads_first_existing_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("config.json"),
            br#"{"auths":{"r.io":{"username":"u","password":"p"}}}"#,
        )
        .unwrap();
        let c = load_node_credentials(Some(dir.path()), None).unwrap();
        assert_eq!(c[0].username, "u");
        let missing = dir.path().join("nope.json");
        assert!(load_node_credentials(Some(&missing), None)
            .unwrap()
            .is_empty());
        std::fs::write(&missing, b"{").unwrap();
        assert!(load_node_credentials(Some(&missing), None).is_err());
    }

    #[test]
    fn node_config_search_starts_at_the_root_dir() {
        let root = Path::new("/srv/agent-root");
        let c = node_config_candidates(None, Some(root));
        assert_eq!(c[0], root.join("config.json"));
        assert!(c.contains(&root.join(".dockercfg")));
        assert!(
            !c.iter().any(|p| p.starts_with("/var/lib/kubelet")),
            "{c:?}"
        );
        let without = node_config_candidates(None, None);
        assert!(!without.iter().any(|p| p.starts_with(root)), "{without:?}");
        assert_eq!(without.len(), c.len() - 2);
        // An explicit file beats the search.
        let f = Path::new("/etc/creds.json");
        assert_eq!(node_config_candidates(Some(f), Some(root)), [f]);

        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("config.json"),
            br#"{"auths":{"r.io":{"username":"root-dir","password":"p"}}}"#,
        )
        .unwrap();
        let c = load_node_credentials(None, Some(dir.path())).unwrap();
        assert_eq!(c[0].username, "root-dir");
    }
}
