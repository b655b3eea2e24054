//! Every RuntimeClass of the cluster, kept by one list+watch ([`Reflected`]) as upstream's
//! runtimeclass manager keeps its informer (resync off), so resolving a pod's
//! `runtimeClassName` to its handler reads memory.

use k8s_openapi::api::node::v1::RuntimeClass;

use super::reflected::Reflected;
use super::ObjectError;

pub(crate) struct RuntimeClasses(Reflected<RuntimeClass>);

impl RuntimeClasses {
    /// Starts the list+watch (in the runtime this is called in).
    pub(crate) fn watch(client: kube::Client) -> Self {
        RuntimeClasses(Reflected::watch(client, "RuntimeClasses"))
    }

    /// The handler of the named RuntimeClass, as upstream's LookupRuntimeHandler: the API's
    /// NotFound when there is none, an error while the first listing has not come (a
    /// sandbox creation waits for it a few seconds, then its worker tries again).
    pub(crate) async fn handler(&self, name: &str) -> Result<String, ObjectError> {
        if !self.0.listed().await {
            return Err(ObjectError::RuntimeClassesNotSynced { name: name.into() });
        }
        match self.0.get(name) {
            Some(rc) => Ok(rc.handler.clone()),
            None => Err(ObjectError::RuntimeClassNotFound { name: name.into() }),
        }
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
