//! `kubelet-rs image import FILE`: loads an OCI image-layout tarball (`skopeo copy
//! oci-archive:`, hack/build-images.sh, `docker save` since Docker 25) or a classic `docker
//! save` tarball (manifest.json + layer.tar files) into containerd without a registry. The
//! blobs take the same path as a pull: streamed into the content store under a lease with
//! their digests checked, GC labels, unpack, image record.
//!
//! The archive is indexed once with the `tar` crate (member offsets and sizes, links
//! followed) and each needed member is then read by offset.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;

use bytes::Bytes;
use serde::Deserialize;
use sha2::{Digest as _, Sha256};
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tracing::{info, warn};

use crate::runtime::images::normalize_reference;
use crate::runtime::Containerd;

use super::content::{self, Lease};
use super::manifest::{self, Desc, Document};
use super::{finish_image, PullError};

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("importing {path}: {reason}")]
    Archive { path: PathBuf, reason: String },
    #[error("importing {path}: {source}")]
    Index {
        path: PathBuf,
        #[source]
        source: IndexError,
    },
    #[error("importing {path}: {source}")]
    Image {
        path: PathBuf,
        #[source]
        source: PullError,
    },
}

/// Why an archive could not be indexed.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error(transparent)]
    Open(std::io::Error),
    #[error("the archive is gzip-compressed; decompress it first (gunzip)")]
    Gzip,
    #[error("not a tar archive ({0})")]
    NotTar(#[source] std::io::Error),
}

/// One member of the archive: where its data starts and how long it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Member {
    offset: u64,
    size: u64,
}

/// Archive paths to members, links already followed.
#[derive(Debug, Default)]
struct TarIndex {
    members: HashMap<String, Member>,
}

fn clean_path(p: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            s => parts.push(s),
        }
    }
    parts.join("/")
}

/// Indexes the archive with the `tar` crate (ustar, GNU long names, pax paths and sizes,
/// base-256 sizes); `entries_with_seek` skips member data by seeking, so a multi-GiB archive
/// is indexed by reading its headers only.
fn index_tar<R: Read + Seek>(r: R) -> Result<TarIndex, IndexError> {
    let mut archive = tar::Archive::new(r);
    let mut index = TarIndex::default();
    let mut links: Vec<(String, String)> = Vec::new();
    let entries = archive.entries_with_seek().map_err(IndexError::NotTar)?;
    for entry in entries {
        let entry = entry.map_err(IndexError::NotTar)?;
        let name = clean_path(&String::from_utf8_lossy(&entry.path_bytes()));
        let link = || {
            entry
                .link_name_bytes()
                .map(|l| String::from_utf8_lossy(&l).into_owned())
                .unwrap_or_default()
        };
        match entry.header().entry_type() {
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                index.members.insert(
                    name,
                    Member {
                        offset: entry.raw_file_position(),
                        size: entry.size(),
                    },
                );
            }
            tar::EntryType::Link => links.push((name, clean_path(&link()))),
            tar::EntryType::Symlink => {
                let link = link();
                let dir = name.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
                let target = if link.starts_with('/') {
                    clean_path(&link)
                } else {
                    clean_path(&format!("{dir}/{link}"))
                };
                links.push((name, target));
            }
            _ => {}
        }
    }
    // Links may point at links; a few rounds settle any sane chain.
    for _ in 0..8 {
        let mut changed = false;
        for (name, target) in &links {
            if !index.members.contains_key(name) {
                if let Some(m) = index.members.get(target).copied() {
                    index.members.insert(name.clone(), m);
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    Ok(index)
}

struct Archive {
    path: PathBuf,
    index: TarIndex,
}

impl Archive {
    fn err(&self, reason: impl Into<String>) -> ImportError {
        ImportError::Archive {
            path: self.path.clone(),
            reason: reason.into(),
        }
    }

    fn member(&self, name: &str) -> Result<Member, ImportError> {
        self.index
            .members
            .get(&clean_path(name))
            .copied()
            .ok_or_else(|| self.err(format!("{name} is not in the archive")))
    }

    async fn read_member(&self, name: &str) -> Result<Vec<u8>, ImportError> {
        let m = self.member(name)?;
        if m.size > 64 << 20 {
            return Err(self.err(format!("{name} is too big for a manifest or config")));
        }
        let mut f = tokio::fs::File::open(&self.path)
            .await
            .map_err(|e| self.err(e.to_string()))?;
        f.seek(SeekFrom::Start(m.offset))
            .await
            .map_err(|e| self.err(e.to_string()))?;
        let mut buf = vec![0u8; m.size as usize];
        f.read_exact(&mut buf)
            .await
            .map_err(|e| self.err(format!("reading {name}: {e}")))?;
        Ok(buf)
    }

    /// A member as a stream of chunks that fails at the end when its sha256 is not
    /// `digest`, so a corrupt archive never commits.
    async fn stream_member(
        &self,
        name: &str,
        digest: &str,
    ) -> Result<impl futures::Stream<Item = std::io::Result<Bytes>> + Unpin, ImportError> {
        let m = self.member(name)?;
        let mut f = tokio::fs::File::open(&self.path)
            .await
            .map_err(|e| self.err(e.to_string()))?;
        f.seek(SeekFrom::Start(m.offset))
            .await
            .map_err(|e| self.err(e.to_string()))?;
        let state = (f, m.size, Sha256::new(), digest.to_string(), false);
        Ok(Box::pin(futures::stream::unfold(
            state,
            |(mut f, left, mut hash, want, done)| async move {
                if done {
                    return None;
                }
                if left == 0 {
                    let got = format!("sha256:{}", hex::encode(hash.finalize_reset()));
                    if got != want {
                        let e = std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            format!("content hashes to {got}, expected {want}"),
                        );
                        return Some((Err(e), (f, 0, hash, want, true)));
                    }
                    return None;
                }
                let mut buf = vec![0u8; left.min(1 << 20) as usize];
                match f.read_exact(&mut buf).await {
                    Ok(_) => {
                        hash.update(&buf);
                        let n = buf.len() as u64;
                        Some((Ok(Bytes::from(buf)), (f, left - n, hash, want, false)))
                    }
                    Err(e) => Some((Err(e), (f, 0, hash, want, true))),
                }
            },
        )))
    }

    /// sha256 of a member, for docker-archive layers that carry no digest.
    async fn hash_member(&self, name: &str) -> Result<String, ImportError> {
        let m = self.member(name)?;
        let mut f = tokio::fs::File::open(&self.path)
            .await
            .map_err(|e| self.err(e.to_string()))?;
        f.seek(SeekFrom::Start(m.offset))
            .await
            .map_err(|e| self.err(e.to_string()))?;
        let mut hash = Sha256::new();
        let mut left = m.size;
        let mut buf = vec![0u8; 1 << 20];
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            f.read_exact(&mut buf[..n])
                .await
                .map_err(|e| self.err(format!("reading {name}: {e}")))?;
            hash.update(&buf[..n]);
            left -= n as u64;
        }
        Ok(format!("sha256:{}", hex::encode(hash.finalize())))
    }

    async fn starts_with_gzip(&self, name: &str) -> Result<bool, ImportError> {
        let m = self.member(name)?;
        if m.size < 2 {
            return Ok(false);
        }
        let mut f = tokio::fs::File::open(&self.path)
            .await
            .map_err(|e| self.err(e.to_string()))?;
        f.seek(SeekFrom::Start(m.offset))
            .await
            .map_err(|e| self.err(e.to_string()))?;
        let mut magic = [0u8; 2];
        f.read_exact(&mut magic)
            .await
            .map_err(|e| self.err(e.to_string()))?;
        Ok(magic == [0x1f, 0x8b])
    }
}

/// Where an OCI layout keeps a blob.
fn blob_path(digest: &str) -> String {
    match digest.split_once(':') {
        Some((alg, hex)) => format!("blobs/{alg}/{hex}"),
        None => format!("blobs/{digest}"),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DockerArchiveEntry {
    config: String,
    #[serde(default)]
    repo_tags: Option<Vec<String>>,
    layers: Vec<String>,
}

/// Loads every named image of an archive; returns their names.
pub async fn import_archive(
    rt: &Containerd,
    path: &Path,
    snapshotter: &str,
) -> Result<Vec<String>, ImportError> {
    let owned = path.to_path_buf();
    let index = tokio::task::spawn_blocking(move || -> Result<TarIndex, IndexError> {
        let mut f = std::fs::File::open(&owned).map_err(IndexError::Open)?;
        let mut magic = [0u8; 2];
        if f.read_exact(&mut magic).is_ok() && magic == [0x1f, 0x8b] {
            return Err(IndexError::Gzip);
        }
        f.seek(SeekFrom::Start(0)).map_err(IndexError::Open)?;
        index_tar(std::io::BufReader::with_capacity(64 * 1024, f))
    })
    .await
    .map_err(|e| ImportError::Archive {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?
    .map_err(|source| ImportError::Index {
        path: path.to_path_buf(),
        source,
    })?;
    let archive = Archive {
        path: path.to_path_buf(),
        index,
    };
    let start = std::time::Instant::now();
    let lease = Lease::create(rt, "import")
        .await
        .map_err(|e| archive.err(e.to_string()))?;
    let imported = if archive.index.members.contains_key("index.json") {
        import_oci(rt, &lease.id, snapshotter, &archive).await
    } else if archive.index.members.contains_key("manifest.json") {
        import_docker(rt, &lease.id, snapshotter, &archive).await
    } else {
        Err(archive.err(
            "neither an OCI image layout (index.json) nor a docker save archive (manifest.json)",
        ))
    };
    lease.release().await;
    let names = imported?;
    if names.is_empty() {
        return Err(archive.err("no image in the archive has a name (io.containerd.image.name, a full org.opencontainers.image.ref.name, or RepoTags)"));
    }
    info!(archive = %path.display(), images = %names.join(","), duration_ms = start.elapsed().as_millis() as u64, "imported archive");
    Ok(names)
}

/// The name an OCI layout gives an index entry, if a full one.
fn oci_entry_name(d: &Desc) -> Option<String> {
    let a = d.annotations.as_ref()?;
    if let Some(n) = a.get("io.containerd.image.name") {
        return Some(normalize_reference(n));
    }
    let r = a.get("org.opencontainers.image.ref.name")?;
    // A bare tag ("1.36") names nothing by itself.
    (r.contains('/') || (r.contains(':') && !r.starts_with(':'))).then(|| normalize_reference(r))
}

/// Stores a manifest with the GC labels that keep its config and layers alive.
async fn store_manifest(
    rt: &Containerd,
    lease: &str,
    archive: &Archive,
    digest: &str,
    bytes: Vec<u8>,
    config: &Desc,
    layers: &[Desc],
) -> Result<(), ImportError> {
    let layer_digests: Vec<String> = layers.iter().map(|l| l.digest.clone()).collect();
    content::put_bytes(
        rt,
        lease,
        digest,
        Bytes::from(bytes),
        content::manifest_gc_labels(&config.digest, &layer_digests),
    )
    .await
    .map_err(|e| archive.err(format!("storing manifest {digest}: {e:?}")))
}

async fn store_member(
    rt: &Containerd,
    lease: &str,
    archive: &Archive,
    member: &str,
    d: &Desc,
    name: &str,
) -> Result<(), ImportError> {
    let wrap = |source: PullError| ImportError::Image {
        path: archive.path.clone(),
        source,
    };
    let Some(w) = content::open_blob(rt, lease, &d.digest, d.size)
        .await
        .map_err(|e| wrap(PullError::runtime(name, e)))?
    else {
        return Ok(());
    };
    let stream = archive.stream_member(member, &d.digest).await?;
    let progress = AtomicU64::new(0);
    w.write_all(stream, HashMap::new(), &progress)
        .await
        .map(|_| ())
        .map_err(|e| match e {
            content::WriteError::Source(io) => wrap(PullError::BadDigest {
                image: name.to_string(),
                digest: d.digest.clone(),
                detail: format!("archive member {member}: {io}"),
            }),
            content::WriteError::Size { expected, got } => wrap(PullError::BadDigest {
                image: name.to_string(),
                digest: d.digest.clone(),
                detail: format!("archive member {member} has {got} bytes, expected {expected}"),
            }),
            content::WriteError::Runtime(r) => wrap(PullError::runtime(name, r)),
        })
}

async fn import_oci(
    rt: &Containerd,
    lease: &str,
    snapshotter: &str,
    archive: &Archive,
) -> Result<Vec<String>, ImportError> {
    let wrap = |source: PullError| ImportError::Image {
        path: archive.path.clone(),
        source,
    };
    let index_bytes = archive.read_member("index.json").await?;
    let Document::Index { manifests, .. } =
        manifest::parse(&index_bytes).map_err(|e| archive.err(format!("index.json: {e}")))?
    else {
        return Err(archive.err("index.json is not an image index"));
    };
    let mut names = Vec::new();
    for top in &manifests {
        let Some(name) = oci_entry_name(top) else {
            warn!(archive = %archive.path.display(), digest = %top.digest, "image without a full name in the archive; skipped");
            continue;
        };
        let top_bytes = archive.read_member(&blob_path(&top.digest)).await?;
        if manifest::sha256_digest(&top_bytes) != top.digest {
            return Err(wrap(PullError::BadDigest {
                image: name,
                digest: top.digest.clone(),
                detail: "archive member does not hash to its name".into(),
            }));
        }
        let top_doc =
            manifest::parse(&top_bytes).map_err(|e| archive.err(format!("{}: {e}", top.digest)))?;
        let (man_bytes, man_digest, child) = match &top_doc {
            Document::Index { manifests: m, .. } => {
                let (i, c) = manifest::pick_platform(m).ok_or_else(|| {
                    wrap(PullError::other(
                        &name,
                        format!(
                            "no manifest for linux/{} (archive has: {})",
                            manifest::node_arch(),
                            manifest::platforms(m)
                        ),
                    ))
                })?;
                let b = archive.read_member(&blob_path(&c.digest)).await?;
                if manifest::sha256_digest(&b) != c.digest {
                    return Err(wrap(PullError::BadDigest {
                        image: name,
                        digest: c.digest.clone(),
                        detail: "archive member does not hash to its name".into(),
                    }));
                }
                (b, c.digest.clone(), Some((i, c.digest.clone())))
            }
            Document::Manifest { .. } => (top_bytes.clone(), top.digest.clone(), None),
        };
        let Document::Manifest { config, layers, .. } =
            manifest::parse(&man_bytes).map_err(|e| archive.err(format!("{man_digest}: {e}")))?
        else {
            return Err(archive.err(format!("{man_digest}: nested index")));
        };
        for d in std::iter::once(&config).chain(&layers) {
            store_member(rt, lease, archive, &blob_path(&d.digest), d, &name).await?;
        }
        store_manifest(rt, lease, archive, &man_digest, man_bytes, &config, &layers).await?;
        if let Some((i, c)) = &child {
            content::put_bytes(
                rt,
                lease,
                &top.digest,
                Bytes::from(top_bytes.clone()),
                content::index_gc_labels(&[(*i, c.clone())]),
            )
            .await
            .map_err(|e| archive.err(format!("storing index {}: {e:?}", top.digest)))?;
        }
        let media_type = if top.media_type.is_empty() {
            top_doc.media_type().to_string()
        } else {
            top.media_type.clone()
        };
        finish_image(
            rt,
            lease,
            snapshotter,
            &name,
            &config,
            &layers,
            &media_type,
            &top.digest,
            top_bytes.len() as i64,
        )
        .await
        .map_err(wrap)?;
        names.push(name);
    }
    Ok(names)
}

async fn import_docker(
    rt: &Containerd,
    lease: &str,
    snapshotter: &str,
    archive: &Archive,
) -> Result<Vec<String>, ImportError> {
    let wrap = |source: PullError| ImportError::Image {
        path: archive.path.clone(),
        source,
    };
    let entries: Vec<DockerArchiveEntry> =
        serde_json::from_slice(&archive.read_member("manifest.json").await?)
            .map_err(|e| archive.err(format!("manifest.json: {e}")))?;
    let mut names = Vec::new();
    for entry in entries {
        let tags: Vec<String> = entry
            .repo_tags
            .unwrap_or_default()
            .iter()
            .map(|t| normalize_reference(t))
            .collect();
        let Some(first) = tags.first().cloned() else {
            warn!(archive = %archive.path.display(), config = %entry.config, "image without RepoTags in the archive; skipped");
            continue;
        };
        let config_bytes = archive.read_member(&entry.config).await?;
        let config = Desc {
            media_type: manifest::DOCKER_CONFIG.into(),
            digest: manifest::sha256_digest(&config_bytes),
            size: config_bytes.len() as i64,
            annotations: None,
            platform: None,
        };
        let diff_ids = serde_json::from_slice::<manifest::ConfigFile>(&config_bytes)
            .map_err(|e| archive.err(format!("{}: {e}", entry.config)))?
            .rootfs
            .diff_ids;
        content::put_bytes(
            rt,
            lease,
            &config.digest,
            Bytes::from(config_bytes),
            HashMap::new(),
        )
        .await
        .map_err(|e| archive.err(format!("storing config {}: {e:?}", config.digest)))?;
        let mut layers = Vec::new();
        for (i, member) in entry.layers.iter().enumerate() {
            let size = archive.member(member)?.size as i64;
            let gzip = archive.starts_with_gzip(member).await?;
            let from_path = member
                .strip_prefix("blobs/sha256/")
                .filter(|h| h.len() == 64)
                .map(|h| format!("sha256:{h}"));
            let digest = match (from_path, gzip, diff_ids.get(i)) {
                (Some(d), _, _) => d,
                (None, false, Some(diff)) => diff.clone(),
                _ => archive.hash_member(member).await?,
            };
            let d = Desc {
                media_type: if gzip {
                    manifest::DOCKER_LAYER_GZIP.into()
                } else {
                    manifest::DOCKER_LAYER.into()
                },
                digest,
                size,
                annotations: None,
                platform: None,
            };
            store_member(rt, lease, archive, member, &d, &first).await?;
            layers.push(d);
        }
        // docker save has no manifest of the registry kind; containerd's import writes one
        // the same way.
        let man = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": manifest::DOCKER_MANIFEST,
            "config": {"mediaType": config.media_type, "digest": config.digest, "size": config.size},
            "layers": layers.iter().map(|l| serde_json::json!({
                "mediaType": l.media_type, "digest": l.digest, "size": l.size
            })).collect::<Vec<_>>(),
        });
        let man_bytes = serde_json::to_vec(&man).expect("JSON value serializes");
        let man_digest = manifest::sha256_digest(&man_bytes);
        let man_size = man_bytes.len() as i64;
        store_manifest(rt, lease, archive, &man_digest, man_bytes, &config, &layers).await?;
        for name in &tags {
            finish_image(
                rt,
                lease,
                snapshotter,
                name,
                &config,
                &layers,
                manifest::DOCKER_MANIFEST,
                &man_digest,
                man_size,
            )
            .await
            .map_err(wrap)?;
            names.push(name.clone());
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ustar header for `name` with `size` bytes and type `kind`.
    fn header(name: &str, size: usize, kind: u8, link: &str) -> [u8; 512] {
        let mut h = [0u8; 512];
        h[..name.len()].copy_from_slice(name.as_bytes());
        h[100..107].copy_from_slice(b"0000644");
        h[124..135].copy_from_slice(format!("{size:011o}").as_bytes());
        h[136..147].copy_from_slice(b"00000000000");
        h[156] = kind;
        h[157..157 + link.len()].copy_from_slice(link.as_bytes());
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        h[148..156].copy_from_slice(b"        ");
        let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
        h[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
        h
    }

    fn member(out: &mut Vec<u8>, name: &str, data: &[u8], kind: u8, link: &str) {
        out.extend_from_slice(&header(name, data.len(), kind, link));
        out.extend_from_slice(data);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }

    #[test]
    fn indexes_members_long_names_and_links() {
        let mut t = Vec::new();
        member(&mut t, "./index.json", b"{}", b'0', "");
        let long = format!("blobs/sha256/{}", "a".repeat(120));
        member(
            &mut t,
            "././@LongLink",
            format!("{long}\0").as_bytes(),
            b'L',
            "",
        );
        member(&mut t, "ignored", b"hello world", b'0', "");
        member(&mut t, "x/layer.tar", b"", b'2', "../y/layer.tar");
        member(&mut t, "y/layer.tar", b"abc", b'0', "");
        let pax = b"28 path=pax/named/file.json\n";
        member(&mut t, "PaxHeader", pax, b'x', "");
        member(&mut t, "short", b"pp", b'0', "");
        t.extend_from_slice(&[0u8; 1024]);
        let idx = index_tar(std::io::Cursor::new(&t)).unwrap();
        let get = |n: &str| {
            let m = idx.members[n];
            t[m.offset as usize..(m.offset + m.size) as usize].to_vec()
        };
        assert_eq!(get("index.json"), b"{}");
        assert_eq!(get(&long), b"hello world");
        assert_eq!(get("x/layer.tar"), b"abc");
        assert_eq!(get("pax/named/file.json"), b"pp");
        assert!(!idx.members.contains_key("short"));
    }

    #[test]
    fn rejects_non_tar() {
        let junk = vec![7u8; 1024];
        assert!(index_tar(std::io::Cursor::new(junk))
            .unwrap_err()
            .to_string()
            .contains("not a tar"));
    }

    #[test]
    fn oci_names() {
        let d = |k: &str, v: &str| Desc {
            media_type: String::new(),
            digest: "sha256:x".into(),
            size: 1,
            annotations: Some(HashMap::from([(k.to_string(), v.to_string())])),
            platform: None,
        };
        assert_eq!(
            oci_entry_name(&d("io.containerd.image.name", "busybox:1.36")).unwrap(),
            "docker.io/library/busybox:1.36"
        );
        assert_eq!(
            oci_entry_name(&d("org.opencontainers.image.ref.name", "reg.io/a/b:1")).unwrap(),
            "reg.io/a/b:1"
        );
        assert!(oci_entry_name(&d("org.opencontainers.image.ref.name", "1.36")).is_none());
        assert_eq!(blob_path("sha256:abc"), "blobs/sha256/abc");
    }
}
