//! The node's Lease heartbeat (upstream's nodelease controller and
//! component-helpers/apimachinery/lease): kube-node-lease/<node>, held by the node, renewed
//! every quarter of its duration. An update starts from the lease last written; when that
//! fails the lease is read (or created) again, with a back-off capped at 7 s, and updated
//! up to five times, re-reading it after a conflict.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use tracing::{debug, error, warn};

use super::NodeError;

pub(crate) const LEASE_NAMESPACE: &str = "kube-node-lease";
const MAX_UPDATE_RETRIES: usize = 5;
const MAX_BACKOFF: Duration = Duration::from_secs(7);

pub(crate) struct LeaseKeeper {
    leases: Api<Lease>,
    nodes: Api<Node>,
    node: String,
    duration_seconds: i32,
    timeout: Duration,
    latest: Option<Lease>,
}

impl LeaseKeeper {
    pub(crate) fn new(
        client: kube::Client,
        node: String,
        duration_seconds: i32,
        timeout: Duration,
    ) -> LeaseKeeper {
        LeaseKeeper {
            leases: Api::namespaced(client.clone(), LEASE_NAMESPACE),
            nodes: Api::all(client),
            node,
            duration_seconds,
            timeout,
            latest: None,
        }
    }

    /// Upstream's renew interval: a quarter of the lease duration.
    pub(crate) fn renew_interval(&self) -> Duration {
        Duration::from_secs(self.duration_seconds.max(1) as u64) / 4
    }

    /// Renews forever.
    pub(crate) async fn run(mut self) {
        let mut tick = tokio::time::interval(self.renew_interval());
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.sync().await;
        }
    }

    fn api_error(&self, op: &'static str, source: kube::Error) -> NodeError {
        NodeError::LeaseApi {
            node: self.node.clone(),
            op,
            source,
        }
    }

    async fn timed<T>(
        &self,
        op: &'static str,
        f: impl std::future::Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, NodeError> {
        super::timed(&self.node, self.timeout, op, f, |e| self.api_error(op, e)).await
    }

    /// One renewal.
    pub(crate) async fn sync(&mut self) {
        if let Some(latest) = self.latest.clone() {
            match self.update(&latest).await {
                Ok(lease) => {
                    self.latest = Some(lease);
                    return;
                }
                Err(e) => {
                    warn!(node = %self.node, error = %e, "failed to update lease using latest lease, fallback to ensure lease")
                }
            }
        }
        let (lease, created) = self.backoff_ensure().await;
        if created {
            self.latest = Some(lease);
            return;
        }
        if let Err(e) = self.retry_update(lease).await {
            error!(node = %self.node, error = %e, retry_in = ?self.renew_interval(), "lease not renewed");
        }
    }

    async fn update(&self, base: &Lease) -> Result<Lease, NodeError> {
        let lease = self.new_lease(Some(base)).await;
        self.timed(
            "update lease",
            self.leases
                .replace(&self.node, &PostParams::default(), &lease),
        )
        .await
    }

    async fn retry_update(&mut self, mut base: Lease) -> Result<(), NodeError> {
        for attempt in 0..MAX_UPDATE_RETRIES {
            match self.update(&base).await {
                Ok(lease) => {
                    self.latest = Some(lease);
                    return Ok(());
                }
                Err(e) => {
                    error!(node = %self.node, attempt, error = %e, "failed to update lease");
                    if e.is_conflict() {
                        base = self.backoff_ensure().await.0;
                    }
                }
            }
        }
        Err(NodeError::LeaseRetries {
            node: self.node.clone(),
            attempts: MAX_UPDATE_RETRIES,
        })
    }

    /// Reads the lease, creating it when missing; retries with back-off until one works.
    async fn backoff_ensure(&self) -> (Lease, bool) {
        let mut sleep = Duration::from_millis(100);
        loop {
            match self.ensure().await {
                Ok(found) => return found,
                Err(e) => {
                    sleep = (sleep * 2).min(MAX_BACKOFF);
                    error!(node = %self.node, error = %e, retry_in = ?sleep, "failed to ensure lease exists");
                    tokio::time::sleep(sleep).await;
                }
            }
        }
    }

    async fn ensure(&self) -> Result<(Lease, bool), NodeError> {
        match self.timed("get lease", self.leases.get(&self.node)).await {
            Ok(lease) => Ok((lease, false)),
            Err(NodeError::LeaseApi {
                source: kube::Error::Api(status),
                ..
            }) if status.is_not_found() => {
                let lease = self.new_lease(None).await;
                let created = self
                    .timed(
                        "create lease",
                        self.leases.create(&PostParams::default(), &lease),
                    )
                    .await?;
                Ok((created, true))
            }
            Err(e) => Err(e),
        }
    }

    /// The lease to write: `base` (or a fresh one) held by the node, renewed now, owned by
    /// the Node once the Node's UID is known.
    async fn new_lease(&self, base: Option<&Lease>) -> Lease {
        let mut lease = base.cloned().unwrap_or_else(|| Lease {
            metadata: ObjectMeta {
                name: Some(self.node.clone()),
                namespace: Some(LEASE_NAMESPACE.into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.node.clone()),
                lease_duration_seconds: Some(self.duration_seconds),
                ..LeaseSpec::default()
            }),
        });
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = Some(self.node.clone());
        spec.lease_duration_seconds = Some(self.duration_seconds);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        if lease
            .metadata
            .owner_references
            .as_ref()
            .is_none_or(|o| o.is_empty())
        {
            match self.timed("get node", self.nodes.get(&self.node)).await {
                Ok(node) => {
                    lease.metadata.owner_references = Some(vec![OwnerReference {
                        api_version: "v1".into(),
                        kind: "Node".into(),
                        name: self.node.clone(),
                        uid: node.metadata.uid.unwrap_or_default(),
                        ..OwnerReference::default()
                    }])
                }
                Err(e) => {
                    debug!(node = %self.node, error = %e, "failed to get node when trying to set owner ref to the node lease")
                }
            }
        }
        lease
    }
}

#[cfg(test)]
mod tests;
