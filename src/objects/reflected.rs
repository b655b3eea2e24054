//! Every object of one kind in the cluster, kept in memory by one list+watch: kube-rs's
//! reflector (a store keyed by namespace and name, fed by a watcher stream that relists after
//! a lost watch and backs off after errors), as upstream's kubelet keeps an informer with
//! resync off. Reads come from memory; managed fields are dropped on the way in, as nothing
//! reads them. The kinds read this way (Services, RuntimeClasses) are few enough, and the
//! Node authorizer lets a node list and watch them; what a node may only get by name goes
//! through [`super::watched`] instead.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, watcher};
use kube::runtime::WatchStreamExt;
use kube::Resource;
use serde::de::DeserializeOwned;
use tokio::task::AbortHandle;
use tracing::warn;

/// How long a read that needs the first listing waits for it (only the agent's first
/// moments); after it the read fails with its kind's "not yet listed" error and the pod's
/// worker tries again.
const FIRST_LIST_WAIT: Duration = Duration::from_secs(5);

/// What a kind needs to be reflected: listable across the cluster by its static type.
pub(crate) trait Reflectable:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
}

impl<K> Reflectable for K where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
}

pub(crate) struct Reflected<K: Reflectable> {
    store: Store<K>,
    task: AbortHandle,
}

impl<K: Reflectable> Reflected<K> {
    /// Starts the list+watch (in the runtime this is called in); `what` names the kind in
    /// the log (`Services`).
    pub(crate) fn watch(client: kube::Client, what: &'static str) -> Self {
        let (store, writer) = reflector::store();
        let api: Api<K> = Api::all(client);
        let events = watcher(api, watcher::Config::default())
            .default_backoff()
            .modify(|o| {
                o.meta_mut().managed_fields = None;
            })
            .reflect(writer)
            .touched_objects();
        let task = tokio::spawn(async move {
            let mut events = std::pin::pin!(events);
            while let Some(e) = events.next().await {
                if let Err(e) = e {
                    warn!(error = %e, "watch of {what} failed; retrying");
                }
            }
        });
        Reflected {
            store,
            task: task.abort_handle(),
        }
    }

    /// Waits (a bounded while, see [`FIRST_LIST_WAIT`]) for the first listing; false when
    /// it has not come, as an informer that has not synced.
    pub(crate) async fn listed(&self) -> bool {
        matches!(
            tokio::time::timeout(FIRST_LIST_WAIT, self.store.wait_until_ready()).await,
            Ok(Ok(()))
        )
    }

    /// Every object as last seen (none before the first listing).
    pub(crate) fn all(&self) -> Vec<Arc<K>> {
        self.store.state()
    }

    /// The cluster-scoped object of that name, as last seen.
    pub(crate) fn get(&self, name: &str) -> Option<Arc<K>> {
        self.store.get(&ObjectRef::new(name))
    }
}

impl<K: Reflectable> Drop for Reflected<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}
