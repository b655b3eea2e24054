//! What the manager reads and frees on a real node: the stats collector's Summary; the dead
//! containers of ended pods and every unused image.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tracing::warn;

use super::{NodeReclaim, SummarySource};
use crate::pod::evictions::PodEvictions;
use crate::stats::{Collector, PodLister, Summary};

/// The collector's cache; a fresh Summary samples the node and the running pods again.
pub struct CollectorSummaries {
    pub collector: Arc<Collector>,
    pub pods: Arc<dyn PodLister>,
}

impl SummarySource for CollectorSummaries {
    fn latest(&self) -> Option<Summary> {
        self.collector.summary(false)
    }

    fn fresh(&self) -> Option<Summary> {
        self.collector.collect(&self.pods.running_pods());
        self.collector.summary(false)
    }
}

/// How long a removal of every unused image may take before the pass goes on to evict.
const IMAGE_REMOVAL_TIMEOUT: Duration = Duration::from_secs(300);

/// How long the workers of ended pods get to remove their containers.
const CONTAINER_REMOVAL_TIMEOUT: Duration = Duration::from_secs(60);

/// The node-level reclaim: the workers of ended pods remove their dead containers
/// (`pod::evictions`), and the image GC task (`gc::ImageGc::run`) every unused image.
pub struct Reclaim {
    pub pods: Arc<PodEvictions>,
    pub images: mpsc::Sender<oneshot::Sender<Vec<String>>>,
}

#[async_trait::async_trait]
impl NodeReclaim for Reclaim {
    async fn delete_unused_containers(&self) {
        let pods = self
            .pods
            .reclaim_ended_pods(CONTAINER_REMOVAL_TIMEOUT)
            .await;
        if pods > 0 {
            tracing::info!(pods, "removed the dead containers of ended pods");
        }
    }

    async fn delete_unused_images(&self) {
        let (reply, removed) = oneshot::channel();
        if self.images.send(reply).await.is_err() {
            warn!("the image garbage collector is not running; no image removed");
            return;
        }
        if tokio::time::timeout(IMAGE_REMOVAL_TIMEOUT, removed)
            .await
            .is_err()
        {
            warn!("removing unused images takes more than 5 minutes; evicting meanwhile");
        }
    }
}
