//! The image GC manager: a periodic pass that lists images and containers, updates the
//! in-memory records (`policy::ImageRecords`) and, above the high threshold, removes
//! candidates one by one, measuring the filesystem after each, until use is at the low
//! threshold or no candidate is left.

use std::collections::HashSet;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use super::policy::{
    aged_out, digests_named, group_by_digest, Candidate, FsUsage, Image, ImageGcPolicy,
    ImageRecords, ListedImage,
};
use super::GcError;
use crate::runtime::Runtime;

/// Requests to remove every unused image, each answered with the digests removed.
pub type DeleteUnusedRequests =
    tokio::sync::mpsc::Receiver<tokio::sync::oneshot::Sender<Vec<String>>>;

/// What the manager needs from the runtime; a trait so the pass is tested with a fake.
pub trait ImageRuntime {
    /// Every image record of the agent's namespace.
    fn list_images(&self) -> impl Future<Output = Result<Vec<ListedImage>, GcError>> + Send;
    /// The image of every container record, running or dead.
    fn container_images(&self) -> impl Future<Output = Result<Vec<String>, GcError>> + Send;
    /// Bytes of an image's content, for the log line.
    fn image_size(&self, digest: &str) -> impl Future<Output = Result<u64, GcError>> + Send;
    /// Removes every name of an image and returns once containerd has freed its content.
    fn remove_image(&self, image: &Candidate) -> impl Future<Output = Result<(), GcError>> + Send;
}

/// Measures the image filesystem.
pub trait UsageProbe {
    fn usage(&self) -> impl Future<Output = Result<FsUsage, GcError>> + Send;
}

/// How a pass ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Use is below the high threshold: nothing to do.
    BelowHigh { used_percent: u64 },
    /// Use reached the low threshold after removing these digests (none if it already was).
    ReachedLow { removed: Vec<String> },
    /// No candidate left and use is still above the low threshold.
    Exhausted { removed: Vec<String> },
}

pub struct ImageGc<R, P> {
    rt: R,
    probe: P,
    policy: ImageGcPolicy,
    /// References never collected: the pod infra (pause) image, which upstream pins.
    pinned: Vec<String>,
    records: ImageRecords,
    /// When the collector first listed images: imageMaximumGCAge counts from here at least.
    began: Option<Instant>,
}

impl<R: ImageRuntime, P: UsageProbe> ImageGc<R, P> {
    pub fn new(rt: R, probe: P, policy: ImageGcPolicy, pinned: Vec<String>) -> Self {
        ImageGc {
            rt,
            probe,
            policy,
            pinned,
            records: ImageRecords::default(),
            began: None,
        }
    }

    /// Runs until the task is dropped: images are detected at once (their age counts from
    /// now) and collected every `period` (unless the policy is off), the first time one
    /// period after start, so pods the agent recovers on start have their containers before
    /// any image may go. Between passes it serves `requests` to remove every unused image
    /// (the eviction manager's, under disk pressure), answering with the digests removed.
    pub async fn run(mut self, period: Duration, mut requests: DeleteUnusedRequests) {
        if let Err(e) = self.detect(Instant::now()).await {
            warn!(error = %e, "image garbage collection: listing images failed");
        }
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    if self.policy.is_disabled() {
                        continue;
                    }
                    if let Err(e) = self.collect(Instant::now()).await {
                        warn!(error = %e, "image garbage collection failed; retrying next period");
                    }
                }
                request = requests.recv() => {
                    let Some(reply) = request else { return };
                    let removed = self.delete_unused(Instant::now()).await.unwrap_or_else(|e| {
                        warn!(error = %e, "removing unused images failed");
                        Vec::new()
                    });
                    let _ = reply.send(removed);
                }
            }
        }
    }

    /// Removes every image no container uses, except pinned ones and those detected less
    /// than imageMinimumGCAge ago (upstream's DeleteUnusedImages); returns their digests.
    pub async fn delete_unused(&mut self, now: Instant) -> Result<Vec<String>, GcError> {
        let (images, in_use) = self.detect(now).await?;
        let pinned = digests_named(&images, &self.pinned);
        let candidates = self
            .records
            .candidates(&in_use, &pinned, self.policy.min_age, now);
        let mut usage = self.probe.usage().await?;
        let mut removed = Vec::new();
        for candidate in candidates {
            if let Some(after) = self.remove(&candidate, usage).await? {
                removed.push(candidate.digest);
                usage = after;
            }
        }
        info!(removed = removed.len(), "removed every unused image");
        Ok(removed)
    }

    /// Lists images and containers and updates the records; returns the images and the
    /// digests in use.
    async fn detect(&mut self, now: Instant) -> Result<(Vec<Image>, HashSet<String>), GcError> {
        let used_refs = self.rt.container_images().await?;
        let mut images = group_by_digest(&self.rt.list_images().await?);
        for image in &mut images {
            image.size = match self.records.size_of(&image.digest) {
                Some(size) if size != 0 => size,
                _ => self.size_or_zero(&image.digest).await,
            };
        }
        let in_use = digests_named(&images, &used_refs);
        self.records.observe(&images, &in_use, now);
        self.began.get_or_insert(now);
        Ok((images, in_use))
    }

    async fn size_or_zero(&self, digest: &str) -> u64 {
        self.rt.image_size(digest).await.unwrap_or_else(|e| {
            debug!(digest, error = %e, "image size unknown");
            0
        })
    }

    /// One pass at `now`: first the images unused for longer than imageMaximumGCAge (as
    /// upstream's freeOldImages, whatever the disk use), then the thresholds.
    pub async fn collect(&mut self, now: Instant) -> Result<Outcome, GcError> {
        let (images, in_use) = self.detect(now).await?;
        let mut usage = self.probe.usage().await?;
        if !self.policy.max_age.is_zero() {
            let pinned = digests_named(&images, &self.pinned);
            let candidates = self
                .records
                .candidates(&in_use, &pinned, self.policy.min_age, now);
            let began = self.began.unwrap_or(now);
            // Removed images leave the records, so the threshold pass below never sees them.
            for candidate in aged_out(&self.records, candidates, self.policy.max_age, began, now) {
                info!(image = %candidate.names.join(", "), digest = %candidate.digest, max_age = ?self.policy.max_age, "image unused for longer than imageMaximumGCAge");
                if let Some(after) = self.remove(&candidate, usage).await? {
                    usage = after;
                }
            }
        }
        let Some(to_free) = self.policy.bytes_to_free(usage) else {
            debug!(
                used_percent = usage.used_percent(),
                high = self.policy.high_percent,
                "image filesystem below the high threshold"
            );
            return Ok(Outcome::BelowHigh {
                used_percent: usage.used_percent(),
            });
        };
        let pinned = digests_named(&images, &self.pinned);
        let candidates = self
            .records
            .candidates(&in_use, &pinned, self.policy.min_age, now);
        info!(
            used_percent = usage.used_percent(),
            high = self.policy.high_percent,
            low = self.policy.low_percent,
            bytes_to_free = to_free,
            candidates = candidates.len(),
            "image filesystem above the high threshold: removing unused images"
        );
        let mut removed = Vec::new();
        for candidate in candidates {
            if usage.bytes_above(self.policy.low_percent) == 0 {
                break;
            }
            if let Some(after) = self.remove(&candidate, usage).await? {
                removed.push(candidate.digest);
                usage = after;
            }
        }
        if usage.bytes_above(self.policy.low_percent) == 0 {
            return Ok(Outcome::ReachedLow { removed });
        }
        warn!(
            used_percent = usage.used_percent(),
            low = self.policy.low_percent,
            still_to_free = usage.bytes_above(self.policy.low_percent),
            removed = removed.len(),
            "image garbage collection: no unused image left to remove; the image filesystem stays above the low threshold"
        );
        Ok(Outcome::Exhausted { removed })
    }

    /// Removes one candidate; `None` when containerd refused (logged, the pass goes on),
    /// else the filesystem measured afterwards.
    async fn remove(
        &mut self,
        candidate: &Candidate,
        before: FsUsage,
    ) -> Result<Option<FsUsage>, GcError> {
        let image = candidate.names.join(", ");
        if let Err(e) = self.rt.remove_image(candidate).await {
            warn!(%image, digest = %candidate.digest, error = %e, "image garbage collection: removal failed; trying the next image");
            return Ok(None);
        }
        self.records.forget(&candidate.digest);
        let after = self.probe.usage().await?;
        info!(
            %image,
            digest = %candidate.digest,
            size_bytes = candidate.size,
            freed_bytes = after.available.saturating_sub(before.available),
            used_percent = after.used_percent(),
            "image garbage collection: removed image"
        );
        Ok(Some(after))
    }
}

/// statvfs of the path on the image filesystem, off the async workers.
pub struct StatvfsProbe {
    pub path: PathBuf,
}

impl UsageProbe for StatvfsProbe {
    async fn usage(&self) -> Result<FsUsage, GcError> {
        let path = self.path.clone();
        let result = tokio::task::spawn_blocking(move || crate::stats::disk::statvfs(&path))
            .await
            .expect("statvfs does not panic");
        let fs = result.map_err(|source| GcError::Measure {
            path: self.path.clone(),
            source,
        })?;
        Ok(FsUsage {
            capacity: fs.capacity,
            available: fs.available,
        })
    }
}

/// Image GC goes through the agent's runtime seam; this maps its calls and errors.
impl ImageRuntime for Arc<dyn Runtime> {
    async fn list_images(&self) -> Result<Vec<ListedImage>, GcError> {
        Ok(self.as_ref().list_images().await?)
    }

    async fn container_images(&self) -> Result<Vec<String>, GcError> {
        Ok(self.as_ref().container_images().await?)
    }

    async fn image_size(&self, digest: &str) -> Result<u64, GcError> {
        Ok(self.as_ref().image_size(digest).await?)
    }

    async fn remove_image(&self, image: &Candidate) -> Result<(), GcError> {
        Ok(self
            .as_ref()
            .remove_image(&image.digest, &image.names)
            .await?)
    }
}

#[cfg(test)]
mod tests;
