//! Every RuntimeClass of the cluster, kept by one list+watch as upstream's runtimeclass
//! manager keeps its informer (resync off), so resolving a pod's `runtimeClassName` to its
//! handler reads memory. RuntimeClasses are cluster-scoped and few, and the Node authorizer
//! lets a node list and watch them.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::node::v1::RuntimeClass;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, watcher};
use kube::runtime::WatchStreamExt;
use tokio::task::AbortHandle;
use tracing::warn;

use super::ObjectError;

/// How long a sandbox creation waits for the first listing (only the agent's first
/// moments); after it the lookup fails and the pod's worker tries again.
const FIRST_LIST_WAIT: Duration = Duration::from_secs(5);

pub(crate) struct RuntimeClasses {
    store: Store<RuntimeClass>,
    task: AbortHandle,
}

impl RuntimeClasses {
    /// Starts the list+watch (in the runtime this is called in).
    pub(crate) fn watch(client: kube::Client) -> Self {
        let (store, writer) = reflector::store();
        let api: Api<RuntimeClass> = Api::all(client);
        let events = watcher(api, watcher::Config::default())
            .default_backoff()
            .modify(|rc| {
                rc.metadata.managed_fields = None;
            })
            .reflect(writer)
            .touched_objects();
        let task = tokio::spawn(async move {
            let mut events = std::pin::pin!(events);
            while let Some(e) = events.next().await {
                if let Err(e) = e {
                    warn!(error = %e, "watch of RuntimeClasses failed; retrying");
                }
            }
        });
        RuntimeClasses {
            store,
            task: task.abort_handle(),
        }
    }

    /// The handler of the named RuntimeClass, as upstream's LookupRuntimeHandler: the API's
    /// NotFound when there is none.
    pub(crate) async fn handler(&self, name: &str) -> Result<String, ObjectError> {
        if tokio::time::timeout(FIRST_LIST_WAIT, self.store.wait_until_ready())
            .await
            .is_err()
        {
            return Err(ObjectError::RuntimeClassesNotSynced { name: name.into() });
        }
        match self.store.get(&ObjectRef::new(name)) {
            Some(rc) => Ok(rc.handler.clone()),
            None => Err(ObjectError::RuntimeClassNotFound { name: name.into() }),
        }
    }
}

impl Drop for RuntimeClasses {
    fn drop(&mut self) {
        self.task.abort();
    }
}
