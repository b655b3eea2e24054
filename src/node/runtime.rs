//! What the node's status needs from the container runtime: its version (which is also how
//! it answers at all) and its images with their sizes. A trait of its own so the status code
//! is tested with a fake and does not widen the pod workers' `Runtime` seam.

use std::collections::{BTreeMap, HashMap};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::ContainerImage;

use crate::runtime::image_store::ListedImage;
use crate::runtime::{ContainerdRuntime, Runtime, RuntimeError};

/// Upstream's nodeStatusMaxImages default.
pub(crate) const MAX_IMAGES: usize = 50;
/// Upstream's maxNamesPerImageInNodeStatus.
const MAX_NAMES_PER_IMAGE: usize = 5;

#[async_trait]
pub trait NodeRuntime: Send + Sync {
    /// The runtime's version (`1.7.24`); an error means the runtime does not answer.
    async fn version(&self) -> Result<String, RuntimeError>;
    /// Every image name with its target digest.
    async fn list_images(&self) -> Result<Vec<ListedImage>, RuntimeError>;
    /// Bytes of an image's content.
    async fn image_size(&self, digest: &str) -> Result<u64, RuntimeError>;
}

#[async_trait]
impl NodeRuntime for ContainerdRuntime {
    async fn version(&self) -> Result<String, RuntimeError> {
        self.containerd.version().await
    }

    async fn list_images(&self) -> Result<Vec<ListedImage>, RuntimeError> {
        Runtime::list_images(self).await
    }

    async fn image_size(&self, digest: &str) -> Result<u64, RuntimeError> {
        Runtime::image_size(self, digest).await
    }
}

/// containerd's CRI plugin reports its version without the leading `v`.
pub(crate) fn runtime_version(version: &str) -> String {
    format!("containerd://{}", version.trim_start_matches('v'))
}

/// The node's image list: the 50 largest images, each with up to 5 names (tags before
/// digests). Sizes are kept by digest across passes: content under a digest never changes,
/// and reading manifests for every image every 10 s would be waste.
#[derive(Default)]
pub(crate) struct ImageSizes(HashMap<String, u64>);

impl ImageSizes {
    pub(crate) async fn node_images(
        &mut self,
        rt: &dyn NodeRuntime,
    ) -> Result<Vec<ContainerImage>, RuntimeError> {
        let listed = rt.list_images().await?;
        let mut by_digest: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for image in listed {
            by_digest.entry(image.digest).or_default().push(image.name);
        }
        self.0.retain(|digest, _| by_digest.contains_key(digest));
        let mut images = Vec::with_capacity(by_digest.len());
        for (digest, mut names) in by_digest {
            let size = match self.0.get(&digest) {
                Some(size) => *size,
                None => match rt.image_size(&digest).await {
                    Ok(size) => {
                        self.0.insert(digest.clone(), size);
                        size
                    }
                    // An image being pulled or removed right now: left out this pass.
                    Err(e) => {
                        tracing::debug!(image = %digest, error = %e, "image size unknown");
                        continue;
                    }
                },
            };
            names.sort_by_key(|n| (n.contains('@'), n.clone()));
            names.truncate(MAX_NAMES_PER_IMAGE);
            images.push(ContainerImage {
                names: Some(names),
                size_bytes: Some(size as i64),
            });
        }
        images.sort_by_key(|image| std::cmp::Reverse(image.size_bytes));
        images.truncate(MAX_IMAGES);
        Ok(images)
    }
}

#[cfg(test)]
pub(crate) mod fake {
    use super::*;
    use std::sync::Mutex;

    /// A runtime that answers with a version (or is down) and holds images.
    #[derive(Default)]
    pub(crate) struct FakeNodeRuntime {
        pub down: Mutex<bool>,
        pub images: Mutex<Vec<(ListedImage, u64)>>,
        pub size_calls: Mutex<usize>,
    }

    fn down() -> RuntimeError {
        RuntimeError::Timeout {
            op: "version",
            object: "daemon".into(),
            secs: 10,
        }
    }

    #[async_trait]
    impl NodeRuntime for FakeNodeRuntime {
        async fn version(&self) -> Result<String, RuntimeError> {
            if *self.down.lock().unwrap() {
                return Err(down());
            }
            Ok("v1.7.24".into())
        }
        async fn list_images(&self) -> Result<Vec<ListedImage>, RuntimeError> {
            if *self.down.lock().unwrap() {
                return Err(down());
            }
            Ok(self
                .images
                .lock()
                .unwrap()
                .iter()
                .map(|(i, _)| i.clone())
                .collect())
        }
        async fn image_size(&self, digest: &str) -> Result<u64, RuntimeError> {
            *self.size_calls.lock().unwrap() += 1;
            self.images
                .lock()
                .unwrap()
                .iter()
                .find(|(i, _)| i.digest == digest)
                .map(|(_, s)| *s)
                .ok_or_else(|| RuntimeError::ImageNotFound(digest.into()))
        }
    }

    pub(crate) fn listed(name: &str, digest: &str) -> ListedImage {
        ListedImage {
            name: name.into(),
            digest: digest.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fake::{listed, FakeNodeRuntime};
    use super::*;

    #[tokio::test]
    async fn images_are_grouped_by_digest_largest_first_and_sizes_cached() {
        let rt = FakeNodeRuntime::default();
        *rt.images.lock().unwrap() = vec![
            (listed("docker.io/library/pause:3.10", "sha256:p"), 300),
            (listed("docker.io/library/nginx:1.27", "sha256:n"), 9000),
            (listed("docker.io/library/nginx@sha256:n", "sha256:n"), 9000),
            (listed("docker.io/library/nginx:latest", "sha256:n"), 9000),
        ];
        let mut sizes = ImageSizes::default();
        let images = sizes.node_images(&rt).await.unwrap();
        assert_eq!(images.len(), 2);
        assert_eq!(images[0].size_bytes, Some(9000));
        assert_eq!(
            images[0].names.as_deref().unwrap(),
            [
                "docker.io/library/nginx:1.27",
                "docker.io/library/nginx:latest",
                "docker.io/library/nginx@sha256:n"
            ]
        );
        assert_eq!(images[1].size_bytes, Some(300));
        sizes.node_images(&rt).await.unwrap();
        assert_eq!(
            *rt.size_calls.lock().unwrap(),
            2,
            "sizes are read once per digest"
        );
    }

    #[tokio::test]
    async fn at_most_fifty_images() {
        let rt = FakeNodeRuntime::default();
        *rt.images.lock().unwrap() = (0..60)
            .map(|i| {
                (
                    listed(&format!("img{i}:v"), &format!("sha256:{i}")),
                    i as u64,
                )
            })
            .collect();
        let images = ImageSizes::default().node_images(&rt).await.unwrap();
        assert_eq!(images.len(), MAX_IMAGES);
        assert_eq!(images[0].size_bytes, Some(59));
        assert_eq!(images[49].size_bytes, Some(10));
    }

    #[test]
    fn runtime_version_is_prefixed() {
        assert_eq!(runtime_version("v1.7.24"), "containerd://1.7.24");
        assert_eq!(runtime_version("1.6.20~ds1"), "containerd://1.6.20~ds1");
    }
}
