//! The image store as image GC needs it: every image with its target digest, the image
//! of every container record, an image's size, and removing an image by all its names.

use std::collections::HashSet;
use std::time::Duration;

use containerd_client::services::v1::{
    DeleteImageRequest, ListContainersRequest, ListImagesRequest,
};
use containerd_client::types::Descriptor;
use serde::Deserialize;
use tracing::debug;

use super::client::{call, CALL_TIMEOUT};
use super::{Containerd, Result, RuntimeError};

/// A delete with `sync` waits for containerd's GC; on a busy node that takes longer than an
/// ordinary call.
const DELETE_TIMEOUT: Duration = Duration::from_secs(120);

/// One image name and the digest of its target (manifest or index).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedImage {
    pub name: String,
    pub digest: String,
}

#[derive(Deserialize)]
struct Blob {
    #[serde(default)]
    digest: String,
    #[serde(default)]
    size: u64,
}

#[derive(Deserialize)]
struct Document {
    #[serde(default)]
    config: Option<Blob>,
    #[serde(default)]
    layers: Vec<Blob>,
    #[serde(default)]
    manifests: Vec<Blob>,
}

impl Containerd {
    /// The blob's own bytes plus its config and layers; for an index, plus the manifests
    /// stored here (a pull stores only this node's, so the others are skipped).
    async fn content_size(&self, digest: &str, in_index: bool) -> Result<u64> {
        let bytes = self
            .read_blob(digest, super::images::BlobKind::Manifest)
            .await?;
        let doc: Document = serde_json::from_slice(&bytes).map_err(|e| RuntimeError::BadImage {
            image: digest.to_string(),
            reason: format!("not a manifest or index: {e}"),
        })?;
        let mut total = bytes.len() as u64;
        total += doc
            .config
            .iter()
            .chain(&doc.layers)
            .map(|b| b.size)
            .sum::<u64>();
        if !in_index {
            for child in &doc.manifests {
                if let Ok(size) = Box::pin(self.content_size(&child.digest, true)).await {
                    total += size;
                }
            }
        }
        Ok(total)
    }

    /// Every image record of the agent's namespace. Each listing also prunes the image
    /// accounts cache of images that are gone, however they went (image GC, `ctr images
    /// rm`, another client).
    pub async fn list_images(&self) -> Result<Vec<ListedImage>> {
        let list = call(
            "list images",
            self.namespace(),
            CALL_TIMEOUT,
            self.client()
                .images()
                .list(self.req(ListImagesRequest { filters: vec![] })),
        )
        .await?;
        let present: HashSet<&str> = list
            .images
            .iter()
            .filter_map(|i| Some(i.target.as_ref()?.digest.as_str()))
            .collect();
        let pruned = self.accounts_cache().retain_images(&present);
        if pruned > 0 {
            debug!(pruned, "image accounts of removed images forgotten");
        }
        Ok(list
            .images
            .into_iter()
            .filter_map(|i| {
                Some(ListedImage {
                    digest: i.target?.digest,
                    name: i.name,
                })
            })
            .collect())
    }

    /// The image of every container record in the namespace, the agent's or not (upstream
    /// counts the images of every container).
    pub async fn container_images(&self) -> Result<Vec<String>> {
        let list = call(
            "list containers",
            self.namespace(),
            CALL_TIMEOUT,
            self.client()
                .containers()
                .list(self.req(ListContainersRequest { filters: vec![] })),
        )
        .await?;
        Ok(list
            .containers
            .into_iter()
            .map(|c| c.image)
            .filter(|i| !i.is_empty())
            .collect())
    }

    /// Bytes of an image's content (manifest or index, config, layers).
    pub async fn image_size(&self, digest: &str) -> Result<u64> {
        self.content_size(digest, false).await
    }

    /// Removes every name of the image with this digest and returns once containerd has
    /// freed its content; a name already gone is not an error.
    pub async fn remove_image(&self, digest: &str, names: &[String]) -> Result<()> {
        let last = names.len().saturating_sub(1);
        for (i, name) in names.iter().enumerate() {
            let request = DeleteImageRequest {
                name: name.clone(),
                // One synchronous GC, after the last name, so the space is really returned.
                sync: i == last,
                // Newer containerd refuses when the name moved to other content since the
                // listing; 1.6 ignores the field.
                target: Some(Descriptor {
                    digest: digest.to_string(),
                    ..Default::default()
                }),
            };
            let deleted = call(
                "delete image",
                name.clone(),
                DELETE_TIMEOUT,
                self.client().images().delete(self.req(request)),
            )
            .await;
            match deleted {
                Err(e) if !e.is_not_found() => return Err(e),
                _ => {}
            }
        }
        self.accounts_cache().forget_image(digest);
        Ok(())
    }
}
