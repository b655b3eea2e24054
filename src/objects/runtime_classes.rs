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

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use bytes::Bytes;
    use http_body_util::StreamBody;
    use hyper::body::Frame;
    use hyper::{Request, Response};
    use kube::client::Body;
    use serde_json::json;
    use tokio::sync::mpsc;
    use tokio_stream::wrappers::ReceiverStream;

    use super::*;

    type Chunk = Result<Frame<Bytes>, Infallible>;
    type ResponseBody = StreamBody<ReceiverStream<Chunk>>;

    /// A client whose API server lists `classes` (name, handler) and keeps watches open
    /// without events; with `answer: false` it never answers at all.
    fn api(classes: &'static [(&'static str, &'static str)], answer: bool) -> kube::Client {
        let (service, mut handle) =
            tower_test::mock::pair::<Request<Body>, Response<ResponseBody>>();
        tokio::spawn(async move {
            let (mut unanswered, mut watches) = (Vec::new(), Vec::new());
            while let Some((request, respond)) = handle.next_request().await {
                assert_eq!(request.uri().path(), "/apis/node.k8s.io/v1/runtimeclasses");
                if !answer {
                    unanswered.push(respond);
                    continue;
                }
                let watch = request
                    .uri()
                    .query()
                    .unwrap_or_default()
                    .contains("watch=true");
                let (tx, rx) = mpsc::channel(1);
                if watch {
                    watches.push(tx);
                } else {
                    let items: Vec<_> = classes
                        .iter()
                        .map(|(name, handler)| {
                            json!({"metadata": {"name": name, "resourceVersion": "1"},
                                   "handler": handler})
                        })
                        .collect();
                    let list = json!({"kind": "RuntimeClassList", "apiVersion": "node.k8s.io/v1",
                        "metadata": {"resourceVersion": "1"}, "items": items});
                    let body = Bytes::from(serde_json::to_vec(&list).unwrap());
                    tx.try_send(Ok(Frame::data(body))).unwrap();
                }
                respond.send_response(Response::new(StreamBody::new(ReceiverStream::new(rx))));
            }
        });
        kube::Client::new(service, "default")
    }

    #[tokio::test(start_paused = true)]
    async fn a_class_resolves_to_its_handler_and_a_missing_one_reads_as_the_apis_not_found() {
        let classes = RuntimeClasses::watch(api(&[("fast", "crun"), ("plain", "")], true));
        assert_eq!(classes.handler("fast").await.unwrap(), "crun");
        assert_eq!(classes.handler("plain").await.unwrap(), "");
        let err = classes.handler("gone").await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "runtimeclass.node.k8s.io \"gone\" not found"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn before_the_first_listing_a_lookup_fails_instead_of_reading_not_found() {
        let classes = RuntimeClasses::watch(api(&[], false));
        let err = classes.handler("fast").await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "failed to lookup RuntimeClass fast: RuntimeClasses have not been listed yet"
        );
    }
}
