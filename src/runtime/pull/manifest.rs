//! The manifest and index documents a pull or an import walks, parsed only as far as the
//! pull needs (the exact bytes are what gets stored), and the node's platform choice.

use std::collections::HashMap;

use containerd_client::types::Descriptor as CtrDescriptor;
use serde::Deserialize;

pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub const DOCKER_CONFIG: &str = "application/vnd.docker.container.image.v1+json";
pub const DOCKER_LAYER: &str = "application/vnd.docker.image.rootfs.diff.tar";
pub const DOCKER_LAYER_GZIP: &str = "application/vnd.docker.image.rootfs.diff.tar.gzip";

/// What the pull asks registries for.
pub const ACCEPTED: &[&str] = &[OCI_INDEX, DOCKER_LIST, OCI_MANIFEST, DOCKER_MANIFEST];

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Platform {
    pub architecture: String,
    pub os: String,
    #[serde(default)]
    pub variant: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Desc {
    #[serde(default)]
    pub media_type: String,
    pub digest: String,
    pub size: i64,
    #[serde(default)]
    pub annotations: Option<HashMap<String, String>>,
    #[serde(default)]
    pub platform: Option<Platform>,
}

impl Desc {
    pub fn to_containerd(&self) -> CtrDescriptor {
        CtrDescriptor {
            media_type: self.media_type.clone(),
            digest: self.digest.clone(),
            size: self.size,
            annotations: self.annotations.clone().unwrap_or_default(),
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    #[serde(default)]
    schema_version: Option<i64>,
    #[serde(default)]
    media_type: Option<String>,
    #[serde(default)]
    config: Option<Desc>,
    #[serde(default)]
    layers: Option<Vec<Desc>>,
    #[serde(default)]
    manifests: Option<Vec<Desc>>,
}

#[derive(Debug)]
pub enum Document {
    Index {
        media_type: String,
        manifests: Vec<Desc>,
    },
    Manifest {
        media_type: String,
        config: Desc,
        layers: Vec<Desc>,
    },
}

impl Document {
    pub fn media_type(&self) -> &str {
        match self {
            Document::Index { media_type, .. } | Document::Manifest { media_type, .. } => {
                media_type
            }
        }
    }
}

/// Why bytes are no manifest or index this pull can walk.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("not a manifest: {0}")]
    Json(#[source] serde_json::Error),
    #[error(
        "Docker schema 1 manifests are not supported (push the image again with a current client)"
    )]
    Schema1,
    #[error("neither an image manifest nor an index")]
    Shape,
}

/// Parses a manifest or an index. `mediaType` may be absent in OCI documents; the shape
/// decides then.
pub fn parse(bytes: &[u8]) -> Result<Document, ManifestError> {
    let raw: Raw = serde_json::from_slice(bytes).map_err(ManifestError::Json)?;
    if raw.schema_version == Some(1) {
        return Err(ManifestError::Schema1);
    }
    match (raw.manifests, raw.config) {
        (Some(manifests), None) => Ok(Document::Index {
            media_type: raw.media_type.unwrap_or_else(|| OCI_INDEX.to_string()),
            manifests,
        }),
        (None, Some(config)) => Ok(Document::Manifest {
            media_type: raw.media_type.unwrap_or_else(|| OCI_MANIFEST.to_string()),
            config,
            layers: raw.layers.unwrap_or_default(),
        }),
        _ => Err(ManifestError::Shape),
    }
}

/// The node's architecture in OCI terms.
pub fn node_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "arm" => "arm",
        "powerpc64" => "ppc64le",
        "s390x" => "s390x",
        "riscv64" => "riscv64",
        other => other,
    }
}

/// The index entry for this node: the first linux/<arch> entry, else the first entry
/// without a platform. The same rule as `images::resolve_image`, which must find the
/// manifest this picked. Returns the entry's position too (for the index's GC labels).
pub fn pick_platform(manifests: &[Desc]) -> Option<(usize, &Desc)> {
    manifests
        .iter()
        .enumerate()
        .find(|(_, d)| {
            d.platform
                .as_ref()
                .is_some_and(|p| p.os == "linux" && p.architecture == node_arch())
        })
        .or_else(|| {
            manifests
                .iter()
                .enumerate()
                .find(|(_, d)| d.platform.is_none())
        })
}

/// The platforms an index offers, for the error when none fits.
pub fn platforms(manifests: &[Desc]) -> String {
    manifests
        .iter()
        .filter_map(|d| d.platform.as_ref())
        .map(|p| match &p.variant {
            Some(v) => format!("{}/{}/{v}", p.os, p.architecture),
            None => format!("{}/{}", p.os, p.architecture),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `diff_ids` and the runtime config of an image config blob.
#[derive(Deserialize)]
pub struct ConfigFile {
    #[serde(default)]
    pub config: Option<crate::runtime::images::ImageConfig>,
    pub rootfs: RootFs,
}

#[derive(Deserialize)]
pub struct RootFs {
    #[serde(default)]
    pub diff_ids: Vec<String>,
}

pub fn sha256_digest(bytes: &[u8]) -> String {
    use sha2::Digest;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_index_and_picks_node_platform() {
        let other = if node_arch() == "amd64" {
            "arm64"
        } else {
            "amd64"
        };
        let doc = format!(
            r#"{{"schemaVersion":2,"mediaType":"{DOCKER_LIST}","manifests":[
              {{"mediaType":"{DOCKER_MANIFEST}","digest":"sha256:a","size":1,"platform":{{"architecture":"{other}","os":"linux"}}}},
              {{"mediaType":"{DOCKER_MANIFEST}","digest":"sha256:b","size":2,"platform":{{"architecture":"{}","os":"linux"}}}}]}}"#,
            node_arch()
        );
        let Document::Index {
            manifests,
            media_type,
        } = parse(doc.as_bytes()).unwrap()
        else {
            panic!("not an index")
        };
        assert_eq!(media_type, DOCKER_LIST);
        let (i, d) = pick_platform(&manifests).unwrap();
        assert_eq!((i, d.digest.as_str()), (1, "sha256:b"));
        assert!(pick_platform(&manifests[..1]).is_none());
        assert!(platforms(&manifests).contains(&format!("linux/{other}")));
    }

    #[test]
    fn oci_manifest_without_media_type() {
        let doc = br#"{"schemaVersion":2,"config":{"digest":"sha256:c","size":3},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:l","size":4}]}"#;
        let d = parse(doc).unwrap();
        assert_eq!(d.media_type(), OCI_MANIFEST);
        let Document::Manifest { config, layers, .. } = d else {
            panic!()
        };
        assert_eq!(config.digest, "sha256:c");
        assert_eq!(layers[0].to_containerd().size, 4);
    }

    #[test]
    fn rejects_schema1_and_junk() {
        assert!(parse(br#"{"schemaVersion":1,"fsLayers":[]}"#)
            .unwrap_err()
            .to_string()
            .contains("schema 1"));
        assert!(parse(br#"{"schemaVersion":2}"#).is_err());
        assert!(parse(b"<html>").is_err());
    }
}
