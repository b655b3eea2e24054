//! A small API server for the objects' unit tests, behind kube's client over a mocked tower
//! service: ConfigMaps and Secrets that a test puts and deletes (lists, gets and watches
//! filtered by `metadata.name`, watch events pushed to the open watches), TokenRequests
//! answered from a script, and every request recorded.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::StreamBody;
use hyper::body::Frame;
use hyper::{Request, Response};
use kube::client::Body;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

type Chunk = Result<Frame<Bytes>, Infallible>;
type ResponseBody = StreamBody<ReceiverStream<Chunk>>;

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub method: String,
    pub path: String,
    /// The raw query string.
    pub query: String,
    pub body: Value,
}

impl Seen {
    pub(crate) fn is_watch(&self) -> bool {
        self.query.split('&').any(|p| p == "watch=true")
    }
}

/// A token the script hands out, or the HTTP status of a refusal.
pub(crate) enum TokenAnswer {
    Issue {
        token: String,
        expires: chrono::DateTime<chrono::Utc>,
    },
    Fail(u16),
}

struct OpenWatch {
    plural: String,
    namespace: String,
    name: String,
    tx: mpsc::Sender<Chunk>,
}

#[derive(Default)]
struct State {
    objects: HashMap<(String, String, String), Value>,
    resource_version: u64,
    watches: Vec<OpenWatch>,
    requests: Vec<Seen>,
    tokens: VecDeque<TokenAnswer>,
}

#[derive(Clone)]
pub(crate) struct FakeApi {
    state: Arc<Mutex<State>>,
}

fn plural_of(kind: &str) -> &'static str {
    match kind {
        "ConfigMap" => "configmaps",
        "Secret" => "secrets",
        other => panic!("the fake API serves no {other}"),
    }
}

fn body_of(bytes: Vec<u8>) -> ResponseBody {
    let (tx, rx) = mpsc::channel(1);
    tx.try_send(Ok(Frame::data(Bytes::from(bytes))))
        .expect("room for one chunk");
    StreamBody::new(ReceiverStream::new(rx))
}

fn reply(status: u16, body: &Value) -> Response<ResponseBody> {
    Response::builder()
        .status(status)
        .body(body_of(serde_json::to_vec(body).unwrap()))
        .unwrap()
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

impl FakeApi {
    /// A client talking to a new fake server (served by a task of the current runtime).
    pub(crate) fn start() -> (kube::Client, FakeApi) {
        let (service, mut handle) =
            tower_test::mock::pair::<Request<Body>, Response<ResponseBody>>();
        let api = FakeApi {
            state: Arc::new(Mutex::new(State::default())),
        };
        let server = api.clone();
        tokio::spawn(async move {
            while let Some((request, respond)) = handle.next_request().await {
                let response = server.serve(request).await;
                respond.send_response(response);
            }
        });
        (kube::Client::new(service, "default"), api)
    }

    /// Creates or replaces the object (its kind, namespace and name from the JSON) and sends
    /// the change to the watches open on it.
    pub(crate) async fn put(&self, mut object: Value) {
        let kind = object["kind"].as_str().expect("a kind").to_string();
        let namespace = object["metadata"]["namespace"]
            .as_str()
            .unwrap()
            .to_string();
        let name = object["metadata"]["name"].as_str().unwrap().to_string();
        let plural = plural_of(&kind).to_string();
        let event = {
            let mut s = self.state.lock().unwrap();
            s.resource_version += 1;
            object["metadata"]["resourceVersion"] = json!(s.resource_version.to_string());
            let key = (plural.clone(), namespace.clone(), name.clone());
            let existed = s.objects.insert(key, object.clone()).is_some();
            json!({"type": if existed { "MODIFIED" } else { "ADDED" }, "object": object})
        };
        self.push(&plural, &namespace, &name, event).await;
    }

    pub(crate) async fn delete(&self, kind: &str, namespace: &str, name: &str) {
        let plural = plural_of(kind);
        let removed = self.state.lock().unwrap().objects.remove(&(
            plural.to_string(),
            namespace.to_string(),
            name.to_string(),
        ));
        if let Some(object) = removed {
            self.push(
                plural,
                namespace,
                name,
                json!({"type": "DELETED", "object": object}),
            )
            .await;
        }
    }

    /// Sends `event` on every open watch of that object. Each send waits for room, so once
    /// it returns, the watch's reader has taken every event sent before the previous one.
    pub(crate) async fn push(&self, plural: &str, namespace: &str, name: &str, event: Value) {
        let senders: Vec<_> = self
            .state
            .lock()
            .unwrap()
            .watches
            .iter()
            .filter(|w| w.plural == plural && w.namespace == namespace && w.name == name)
            .map(|w| w.tx.clone())
            .collect();
        let mut line = serde_json::to_vec(&event).unwrap();
        line.push(b'\n');
        for tx in senders {
            // A watch closed meanwhile just misses it.
            let _ = tx.send(Ok(Frame::data(Bytes::from(line.clone())))).await;
        }
    }

    /// A bookmark on the object's watches: moves nothing, but lets a test know (with
    /// [`push`](Self::push)'s rule) that the events before it were read.
    pub(crate) async fn bookmark(&self, kind: &str, namespace: &str, name: &str) {
        let rv = self.state.lock().unwrap().resource_version.to_string();
        let event = json!({"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": "v1",
                            "metadata": {"resourceVersion": rv}}});
        self.push(plural_of(kind), namespace, name, event).await;
    }

    pub(crate) fn script_token(&self, answer: TokenAnswer) {
        self.state.lock().unwrap().tokens.push_back(answer);
    }

    pub(crate) fn requests(&self) -> Vec<Seen> {
        self.state.lock().unwrap().requests.clone()
    }

    /// Watches whose client still reads them.
    pub(crate) fn open_watches(&self, plural: &str, namespace: &str, name: &str) -> usize {
        self.state
            .lock()
            .unwrap()
            .watches
            .iter()
            .filter(|w| w.plural == plural && w.namespace == namespace && w.name == name)
            .filter(|w| !w.tx.is_closed())
            .count()
    }

    async fn serve(&self, request: Request<Body>) -> Response<ResponseBody> {
        let method = request.method().to_string();
        let path = request.uri().path().to_string();
        let query = request.uri().query().unwrap_or_default().to_string();
        let bytes = request.into_body().collect_bytes().await.unwrap();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap()
        };
        let seen = Seen {
            method: method.clone(),
            path: path.clone(),
            query: query.clone(),
            body: body.clone(),
        };
        let mut s = self.state.lock().unwrap();
        s.requests.push(seen.clone());
        let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        match (method.as_str(), parts.as_slice()) {
            ("POST", ["api", "v1", "namespaces", _, "serviceaccounts", _, "token"]) => {
                match s.tokens.pop_front().expect("a scripted token answer") {
                    TokenAnswer::Issue { token, expires } => {
                        let mut answer = body;
                        answer["status"] = json!({"token": token,
                            "expirationTimestamp": expires.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)});
                        reply(201, &answer)
                    }
                    TokenAnswer::Fail(code) => {
                        reply(code, &status(code, "InternalError", "scripted failure"))
                    }
                }
            }
            ("GET", ["api", "v1", "namespaces", ns, plural, name]) => {
                let key = (plural.to_string(), ns.to_string(), name.to_string());
                match s.objects.get(&key) {
                    Some(o) => reply(200, o),
                    None => reply(
                        404,
                        &status(404, "NotFound", &format!("{plural} \"{name}\" not found")),
                    ),
                }
            }
            ("GET", ["api", "v1", "namespaces", ns, plural]) => {
                let name = field_selector_name(&query);
                if seen.is_watch() {
                    let (tx, rx) = mpsc::channel(1);
                    s.watches.push(OpenWatch {
                        plural: plural.to_string(),
                        namespace: ns.to_string(),
                        name: name.clone(),
                        tx,
                    });
                    return Response::new(StreamBody::new(ReceiverStream::new(rx)));
                }
                let items: Vec<Value> = s
                    .objects
                    .iter()
                    .filter(|((p, n, m), _)| p == plural && n == ns && *m == name)
                    .map(|(_, o)| o.clone())
                    .collect();
                let list = json!({"kind": "List", "apiVersion": "v1",
                    "metadata": {"resourceVersion": s.resource_version.to_string()},
                    "items": items});
                reply(200, &list)
            }
            _ => reply(
                404,
                &status(404, "NotFound", "the fake API has no such path"),
            ),
        }
    }
}

/// The name in `fieldSelector=metadata.name%3D<name>` (names need no other escape).
fn field_selector_name(query: &str) -> String {
    query
        .split('&')
        .find_map(|p| p.strip_prefix("fieldSelector="))
        .map(|v| v.replace("%3D", "="))
        .and_then(|v| v.strip_prefix("metadata.name=").map(str::to_string))
        .expect("lists and watches select one object by name")
}
