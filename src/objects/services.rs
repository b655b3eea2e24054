//! Every Service of the cluster, kept current by one list+watch, as upstream's kubelet keeps
//! its service informer: the containers' service environment variables are made from it
//! (`runtime::spec::service_env`). Managed fields are dropped on the way in, as nothing
//! reads them.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, watcher};
use kube::runtime::WatchStreamExt;
use tokio::task::AbortHandle;
use tracing::warn;

use super::{ObjectError, ServicesWait};

/// How long a container start waits for the first listing before it fails with upstream's
/// "not yet read" error (and its worker retries): only the agent's first moments.
const FIRST_LIST_WAIT: Duration = Duration::from_secs(5);

pub(crate) struct Services {
    store: Store<Service>,
    task: AbortHandle,
}

impl Services {
    /// Starts the list+watch (in the runtime this is called in).
    pub(crate) fn watch(client: kube::Client) -> Self {
        let (store, writer) = reflector::store();
        let api: Api<Service> = Api::all(client);
        let events = watcher(api, watcher::Config::default())
            .default_backoff()
            .modify(|s| {
                s.metadata.managed_fields = None;
            })
            .reflect(writer)
            .touched_objects();
        let task = tokio::spawn(async move {
            let mut events = std::pin::pin!(events);
            while let Some(e) = events.next().await {
                if let Err(e) = e {
                    warn!(error = %e, "watch of Services failed; retrying");
                }
            }
        });
        Services {
            store,
            task: task.abort_handle(),
        }
    }

    /// The Services as last seen. Without a wait (a static pod), before the first listing
    /// that is none.
    pub(crate) async fn list(&self, wait: ServicesWait) -> Result<Vec<Arc<Service>>, ObjectError> {
        if wait == ServicesWait::No {
            return Ok(self.store.state());
        }
        match tokio::time::timeout(FIRST_LIST_WAIT, self.store.wait_until_ready()).await {
            Ok(Ok(())) => Ok(self.store.state()),
            _ => Err(ObjectError::ServicesNotSynced),
        }
    }
}

impl Drop for Services {
    fn drop(&mut self) {
        self.task.abort();
    }
}
