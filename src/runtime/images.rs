//! Image references and what the agent needs from a local image: its unpacked snapshot
//! (chain ID) and its config (entrypoint, cmd, env, working dir, user).
//!
//! Pulling from registries is not here yet; images come in through `ctr images import`
//! (hack/build-images.sh) and are used as they are.

use containerd_client::services::v1::snapshots::StatSnapshotRequest;
use containerd_client::services::v1::{GetImageRequest, ReadContentRequest};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::client::{call, CALL_TIMEOUT};
use super::{Containerd, Result, RuntimeError};

pub const SNAPSHOTTER: &str = "overlayfs";

/// An image resolved to what a container needs.
#[derive(Debug, Clone, Default)]
pub struct ImageInfo {
    /// The normalized reference, e.g. docker.io/library/busybox:1.36.
    pub name: String,
    /// `<repo>@<digest of the image's target>`, as upstream reports `imageID`.
    pub image_ref: String,
    /// Top chain ID: the committed snapshot a container's rootfs is prepared from.
    pub chain_id: String,
    pub config: ImageConfig,
}

/// The runtime part of an image config (OCI image-spec `config`).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "PascalCase")]
pub struct ImageConfig {
    #[serde(default)]
    pub entrypoint: Option<Vec<String>>,
    #[serde(default)]
    pub cmd: Option<Vec<String>>,
    #[serde(default)]
    pub env: Option<Vec<String>>,
    #[serde(default)]
    pub working_dir: Option<String>,
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default)]
    pub stop_signal: Option<String>,
}

#[derive(Deserialize)]
struct ImageConfigFile {
    #[serde(default)]
    config: Option<ImageConfig>,
    rootfs: RootFs,
}

#[derive(Deserialize)]
struct RootFs {
    diff_ids: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    digest: String,
    #[serde(default)]
    platform: Option<Platform>,
}

#[derive(Deserialize)]
struct Platform {
    architecture: String,
    os: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ManifestOrIndex {
    #[serde(default)]
    config: Option<Descriptor>,
    #[serde(default)]
    manifests: Option<Vec<Descriptor>>,
}

/// Normalizes a reference as Docker does: `busybox` → `docker.io/library/busybox:latest`.
pub fn normalize_reference(image: &str) -> String {
    let image = image.trim();
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    let (domain, rest) = match name.split_once('/') {
        Some((first, rest))
            if first.contains('.') || first.contains(':') || first == "localhost" =>
        {
            (first.to_string(), rest.to_string())
        }
        Some(_) => ("docker.io".to_string(), name.to_string()),
        None => ("docker.io".to_string(), format!("library/{name}")),
    };
    let rest = if domain == "docker.io" && !rest.contains('/') {
        format!("library/{rest}")
    } else {
        rest
    };
    let last = rest.rsplit('/').next().unwrap_or("");
    let mut full = format!("{domain}/{rest}");
    if !last.contains(':') && digest.is_none() {
        full.push_str(":latest");
    }
    if let Some(d) = digest {
        full.push('@');
        full.push_str(d);
    }
    full
}

/// The repository part of a normalized reference (no tag, no digest).
pub fn repository(normalized: &str) -> &str {
    let no_digest = normalized.split('@').next().unwrap_or(normalized);
    match no_digest.rfind(':') {
        Some(i) if !no_digest[i..].contains('/') => &no_digest[..i],
        _ => no_digest,
    }
}

/// True when a reference names no tag or the tag `latest` (and no digest): upstream's
/// rule for defaulting imagePullPolicy to Always.
pub fn is_latest(image: &str) -> bool {
    let n = normalize_reference(image);
    !n.contains('@') && n.ends_with(":latest")
}

/// The chain IDs of a layer stack: chain[0] = diff[0], chain[i] = sha256(chain[i-1] + " " + diff[i]).
pub fn chain_ids(diff_ids: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(diff_ids.len());
    for d in diff_ids {
        let next = match out.last() {
            None => d.clone(),
            Some(prev) => format!(
                "sha256:{}",
                hex::encode(Sha256::digest(format!("{prev} {d}").as_bytes()))
            ),
        };
        out.push(next);
    }
    out
}

fn node_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// The most read of a manifest or an index, from a registry or the content store: 4 MiB,
/// containerd's own bound on the manifests it fetches.
pub(crate) const MAX_MANIFEST: u64 = 4 << 20;
/// The most read of an image config: 4 MiB, as containers/image (CRI-O's puller) bounds
/// configs; a config holds the environment, labels and history, far less in real images,
/// and the whole of it is parsed in memory.
pub(crate) const MAX_CONFIG: u64 = 4 << 20;

/// Which kind of document a blob read is for, and so its bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlobKind {
    /// A manifest or an index.
    Manifest,
    Config,
}

impl BlobKind {
    pub(crate) fn limit(self) -> u64 {
        match self {
            BlobKind::Manifest => MAX_MANIFEST,
            BlobKind::Config => MAX_CONFIG,
        }
    }

    fn what(self) -> &'static str {
        match self {
            BlobKind::Manifest => "manifest",
            BlobKind::Config => "image config",
        }
    }
}

impl Containerd {
    /// Reads a whole manifest, index or config from the content store, up to its kind's
    /// bound: whoever imported or pulled it, a larger one is refused, and the read stops
    /// at the first chunk past the bound (the stream dropped cancels the call).
    pub async fn read_blob(&self, digest: &str, kind: BlobKind) -> Result<Vec<u8>> {
        let limit = kind.limit();
        let mut stream = call(
            "read content",
            digest,
            CALL_TIMEOUT,
            self.client().content().read(self.req(ReadContentRequest {
                digest: digest.to_string(),
                offset: 0,
                size: 0,
            })),
        )
        .await?;
        let mut out = Vec::new();
        loop {
            match tokio::time::timeout(CALL_TIMEOUT, stream.message()).await {
                Ok(Ok(Some(chunk))) => {
                    out.extend_from_slice(&chunk.data);
                    if out.len() as u64 > limit {
                        return Err(RuntimeError::BlobTooLarge {
                            what: kind.what(),
                            digest: digest.to_string(),
                            limit,
                        });
                    }
                }
                Ok(Ok(None)) => return Ok(out),
                Ok(Err(status)) => {
                    return Err(RuntimeError::Call {
                        op: "read content",
                        object: digest.to_string(),
                        status: Box::new(status),
                    })
                }
                Err(_) => {
                    return Err(RuntimeError::Timeout {
                        op: "read content",
                        object: digest.to_string(),
                        secs: CALL_TIMEOUT.as_secs(),
                    })
                }
            }
        }
    }

    /// Looks an image up by reference; `ImageNotFound` when containerd does not have it.
    pub async fn resolve_image(&self, image: &str) -> Result<ImageInfo> {
        let name = normalize_reference(image);
        let got = call(
            "get image",
            name.clone(),
            CALL_TIMEOUT,
            self.client()
                .images()
                .get(self.req(GetImageRequest { name: name.clone() })),
        )
        .await;
        let img = match got {
            Ok(r) => r
                .image
                .ok_or_else(|| RuntimeError::ImageNotFound(name.clone()))?,
            Err(e) if e.is_not_found() => return Err(RuntimeError::ImageNotFound(name)),
            Err(e) => return Err(e),
        };
        let target = img.target.ok_or_else(|| RuntimeError::BadImage {
            image: name.clone(),
            reason: "image record has no target".into(),
        })?;
        let bad = |reason: String| RuntimeError::BadImage {
            image: name.clone(),
            reason,
        };
        let mut digest = target.digest.clone();
        // An index names one manifest per platform; follow the one for this node.
        let manifest = loop {
            let bytes = self.read_blob(&digest, BlobKind::Manifest).await?;
            let m: ManifestOrIndex = serde_json::from_slice(&bytes)
                .map_err(|e| bad(format!("blob {digest} is not a manifest: {e}")))?;
            match m.manifests {
                Some(list) if m.config.is_none() => {
                    let pick = list
                        .iter()
                        .find(|d| {
                            d.platform
                                .as_ref()
                                .is_some_and(|p| p.os == "linux" && p.architecture == node_arch())
                        })
                        .or_else(|| list.iter().find(|d| d.platform.is_none()))
                        .ok_or_else(|| {
                            bad(format!(
                                "no manifest for linux/{} in the index",
                                node_arch()
                            ))
                        })?;
                    digest = pick.digest.clone();
                }
                _ => break m,
            }
        };
        let config_desc = manifest
            .config
            .ok_or_else(|| bad(format!("manifest {digest} has no config")))?;
        let config_bytes = self
            .read_blob(&config_desc.digest, BlobKind::Config)
            .await?;
        let config: ImageConfigFile = serde_json::from_slice(&config_bytes)
            .map_err(|e| bad(format!("config {} is invalid: {e}", config_desc.digest)))?;
        let chain_id = chain_ids(&config.rootfs.diff_ids)
            .pop()
            .ok_or_else(|| bad("image has no layers".into()))?;
        let stat = call(
            "stat snapshot",
            chain_id.clone(),
            CALL_TIMEOUT,
            self.client()
                .snapshots()
                .stat(self.req(StatSnapshotRequest {
                    snapshotter: SNAPSHOTTER.into(),
                    key: chain_id.clone(),
                })),
        )
        .await;
        if let Err(e) = stat {
            return Err(if e.is_not_found() {
                bad(format!(
                    "image is not unpacked for the {SNAPSHOTTER} snapshotter (snapshot {chain_id} missing)"
                ))
            } else {
                e
            });
        }
        Ok(ImageInfo {
            image_ref: format!("{}@{}", repository(&name), target.digest),
            name,
            chain_id,
            config: config.config.unwrap_or_default(),
        })
    }
}

/// Parses `KEY=VALUE` entries into pairs, keeping order (for env merging).
pub fn split_env(env: &[String]) -> Vec<(String, String)> {
    env.iter()
        .map(|e| match e.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (e.clone(), String::new()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_like_docker() {
        assert_eq!(
            normalize_reference("busybox"),
            "docker.io/library/busybox:latest"
        );
        assert_eq!(
            normalize_reference("busybox:1.36"),
            "docker.io/library/busybox:1.36"
        );
        assert_eq!(normalize_reference("foo/bar"), "docker.io/foo/bar:latest");
        assert_eq!(
            normalize_reference("registry.k8s.io/pause:3.10"),
            "registry.k8s.io/pause:3.10"
        );
        assert_eq!(
            normalize_reference("localhost:5000/x"),
            "localhost:5000/x:latest"
        );
        assert_eq!(
            normalize_reference("busybox@sha256:abc"),
            "docker.io/library/busybox@sha256:abc"
        );
    }

    #[test]
    fn repository_strips_tag_and_digest() {
        assert_eq!(
            repository("docker.io/library/busybox:1.36"),
            "docker.io/library/busybox"
        );
        assert_eq!(repository("localhost:5000/x:latest"), "localhost:5000/x");
        assert_eq!(repository("localhost:5000/x"), "localhost:5000/x");
        assert_eq!(repository("docker.io/a/b@sha256:1"), "docker.io/a/b");
    }

    #[test]
    fn latest_rule() {
        assert!(is_latest("busybox"));
        assert!(is_latest("busybox:latest"));
        assert!(!is_latest("busybox:1.36"));
        assert!(!is_latest("busybox@sha256:abc"));
    }

    #[test]
    fn chain_ids_follow_the_image_spec() {
        let d = vec!["sha256:a".to_string(), "sha256:b".to_string()];
        let c = chain_ids(&d);
        assert_eq!(c[0], "sha256:a");
        let expect = format!(
            "sha256:{}",
            hex::encode(Sha256::digest(b"sha256:a sha256:b"))
        );
        assert_eq!(c[1], expect);
    }
}
