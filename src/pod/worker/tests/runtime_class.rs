//! RuntimeClasses: a pod's runtimeClassName resolved to its handler, the handler to the
//! containerd runtime every container of the pod is created with, and upstream's
//! FailedCreatePodSandBox when either cannot be found (the pod stays Pending,
//! ContainerCreating, and nothing is created).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Event, Pod};
use tokio::sync::mpsc;

use super::{pod, pod_status, status_of, test_shared, worker, Harness, UID};
use crate::events::Recorder;
use crate::objects::fake::FakeObjects;
use crate::runtime::events::OomSeen;
use crate::runtime::fake::FakeRuntime;
use crate::runtime::handlers::{ContainerRuntime, RuntimeHandlers};
use crate::runtime::labels;

const CONTAINERD_CONFIG: &str = r#"
version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun]
  runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun.options]
    BinaryName = "/usr/bin/crun"
"#;

/// A harness whose node has the RuntimeClasses `classes` (name → handler; `None`: no API
/// server) and the handlers of [`CONTAINERD_CONFIG`].
fn harness(classes: Option<&[(&str, &str)]>) -> (Harness, mpsc::Receiver<Event>) {
    let dir = tempfile::tempdir().unwrap();
    let oom_seen = OomSeen::default();
    let fake = FakeRuntime::new(&["pause", "busybox"], oom_seen.clone());
    let (recorder, events) = Recorder::capturing();
    let shared = test_shared(dir.path(), fake.clone(), oom_seen, |_| {}, recorder);
    let mut shared = Arc::into_inner(shared).expect("the only reference");
    let objects = FakeObjects::default();
    *objects.runtime_classes.lock().unwrap() = classes.map(|c| {
        c.iter()
            .map(|(n, h)| (n.to_string(), h.to_string()))
            .collect::<HashMap<_, _>>()
    });
    shared.objects = Arc::new(objects);
    shared.handlers = Arc::new(
        RuntimeHandlers::parse(Path::new("/etc/containerd/config.toml"), CONTAINERD_CONFIG)
            .unwrap(),
    );
    let h = Harness {
        fake,
        shared: Arc::new(shared),
        _dir: dir,
    };
    (h, events)
}

fn with_class(class: &str) -> Pod {
    let mut p = pod(&[], &["app"], "Always");
    p.spec.as_mut().unwrap().runtime_class_name = Some(class.into());
    p
}

fn sandbox_failures(events: &mut mpsc::Receiver<Event>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    while let Ok(e) = events.try_recv() {
        if e.reason.as_deref() == Some("FailedCreatePodSandBox") {
            out.push((e.type_.unwrap_or_default(), e.message.unwrap_or_default()));
        }
    }
    out
}

#[tokio::test(start_paused = true)]
async fn every_container_of_the_pod_gets_its_handlers_runtime() {
    let (h, _events) = harness(Some(&[("fast", "crun")]));
    let p = with_class("fast");
    let mut w = worker(&h, &p);
    w.pass(&p).await;
    assert!(status_of(&h, "app").state.unwrap().running.is_some());
    for name in [labels::SANDBOX_NAME, "app"] {
        let rt = h.fake.runtime_of(name).expect("created");
        assert_eq!(rt.name, "io.containerd.runc.v2", "{name}");
        assert_eq!(rt.binary_name().as_deref(), Some("/usr/bin/crun"), "{name}");
    }
    let sandbox = h
        .fake
        .records(UID)
        .into_iter()
        .find(|r| r.name == labels::SANDBOX_NAME)
        .unwrap();
    assert_eq!(
        sandbox
            .labels
            .get(labels::RUNTIME_HANDLER)
            .map(String::as_str),
        Some("crun")
    );
    // A restarted container is created again with the sandbox's runtime, read back from
    // its record (a new worker, as after an agent restart).
    h.fake.exit("app", 1);
    let mut again = worker(&h, &p);
    again.pass(&p).await;
    again.pass(&p).await;
    assert!(h
        .fake
        .calls_of("create_container")
        .contains(&"create_container app#1".to_string()));
    assert_eq!(
        h.fake.runtime_of("app").unwrap().binary_name().as_deref(),
        Some("/usr/bin/crun")
    );
}

#[tokio::test(start_paused = true)]
async fn a_pod_without_a_class_gets_the_default_runtime() {
    let (h, _events) = harness(Some(&[("fast", "crun")]));
    let p = pod(&[], &["app"], "Always");
    let mut w = worker(&h, &p);
    w.pass(&p).await;
    for name in [labels::SANDBOX_NAME, "app"] {
        assert_eq!(h.fake.runtime_of(name), Some(ContainerRuntime::runc_v2()));
    }
}

#[tokio::test(start_paused = true)]
async fn a_missing_runtime_class_fails_the_sandbox_with_upstreams_event() {
    let (h, mut events) = harness(Some(&[("fast", "crun")]));
    let p = with_class("missing");
    let mut w = worker(&h, &p);
    w.pass(&p).await;
    assert_eq!(
        sandbox_failures(&mut events),
        [(
            "Warning".to_string(),
            "Failed to create pod sandbox: runtimeclass.node.k8s.io \"missing\" not found"
                .to_string()
        )]
    );
    assert!(h.fake.calls_of("create_container").is_empty());
    assert_eq!(pod_status(&h).phase.as_deref(), Some("Pending"));
    let waiting = status_of(&h, "app").state.unwrap().waiting.unwrap();
    assert_eq!(waiting.reason.as_deref(), Some("ContainerCreating"));
}

#[tokio::test(start_paused = true)]
async fn a_handler_without_a_runtime_fails_the_sandbox_in_containerds_words() {
    let (h, mut events) = harness(Some(&[("secure", "kata")]));
    let p = with_class("secure");
    let mut w = worker(&h, &p);
    w.pass(&p).await;
    w.pass(&p).await;
    assert_eq!(
        sandbox_failures(&mut events)
            .into_iter()
            .map(|(_, m)| m)
            .collect::<Vec<_>>(),
        ["Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get \
             sandbox runtime: no runtime for \"kata\" is configured"; 2]
    );
    assert!(h.fake.calls_of("create_container").is_empty());
    assert_eq!(pod_status(&h).phase.as_deref(), Some("Pending"));
    let waiting = status_of(&h, "app").state.unwrap().waiting.unwrap();
    assert_eq!(waiting.reason.as_deref(), Some("ContainerCreating"));
}

#[tokio::test(start_paused = true)]
async fn without_an_api_server_the_class_is_not_read_and_the_default_runs() {
    // Upstream's standalone kubelet has no runtimeclass manager: the default handler.
    let (h, mut events) = harness(None);
    let p = with_class("fast");
    let mut w = worker(&h, &p);
    w.pass(&p).await;
    assert_eq!(sandbox_failures(&mut events), []);
    assert_eq!(h.fake.runtime_of("app"), Some(ContainerRuntime::runc_v2()));
}
