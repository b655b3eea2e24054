//! The pod manager on the fake runtime: orphans found at start, and pods their source
//! drops while they start.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use super::{harness, pod, UID};
use crate::pod::PodManager;
use crate::runtime::labels::PodRef;
use crate::source::{SourceKind, SourceUpdate, SourcedPod};

fn update(pods: &[&Pod]) -> SourceUpdate {
    SourceUpdate {
        source: SourceKind::File,
        pods: pods
            .iter()
            .map(|p| SourcedPod {
                pod: (*p).clone(),
                origin: "web.yaml".into(),
            })
            .collect(),
    }
}

#[tokio::test(start_paused = true)]
async fn orphans_found_at_start_are_removed_once_the_sources_have_reported() {
    let h = harness();
    let orphan = PodRef {
        uid: "orphan-uid".into(),
        name: "old".into(),
        namespace: "default".into(),
    };
    h.fake
        .leave_running_sandbox(&orphan, "sandbox-of-the-orphan");
    let mut m = PodManager::new(h.shared.clone(), &[SourceKind::File]);
    m.recover().await;
    assert!(m.pods.orphan("orphan-uid").is_some());
    let kept = pod(&[], &["app"], "Always");
    m.apply(update(&[&kept])).await;
    let done = tokio::time::timeout(Duration::from_secs(300), m.done_rx.recv())
        .await
        .expect("the orphan's worker finishes");
    assert_eq!(done.map(|d| d.pod.uid).as_deref(), Some("orphan-uid"));
    assert!(h.fake.records("orphan-uid").is_empty());
    assert_eq!(
        h.fake.calls_of("kill POD#0 9").len(),
        1,
        "{:?}",
        h.fake.calls()
    );
    assert!(h.shared.statuses.get("orphan-uid").is_none());
}

#[tokio::test(start_paused = true)]
async fn a_pod_whose_source_drops_it_while_it_starts_is_cleaned_up() {
    let h = harness();
    h.fake.hang("start_task");
    let mut m = PodManager::new(h.shared.clone(), &[SourceKind::File]);
    let p = pod(&[], &["app"], "Always");
    m.apply(update(&[&p])).await;
    // Wait until the worker is inside the sandbox start, then drop the pod.
    while h.fake.calls_of("start_task").is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    m.apply(update(&[])).await;
    h.fake.unhang("start_task");
    let done = tokio::time::timeout(Duration::from_secs(300), m.done_rx.recv())
        .await
        .expect("the worker finishes");
    assert_eq!(done.map(|d| d.pod.uid).as_deref(), Some(UID));
    assert!(h.fake.records(UID).is_empty(), "{:?}", h.fake.records(UID));
    assert!(h.fake.calls_of("create_container app").is_empty());
    assert!(h.shared.statuses.get(UID).is_none());
    assert!(!h.shared.cfg.root_dir.join("pods").join(UID).exists());
}

#[tokio::test(start_paused = true)]
async fn a_deleted_pod_sent_again_after_its_worker_finished_starts_nothing() {
    let h = harness();
    let mut m = PodManager::new(h.shared.clone(), &[SourceKind::File]);
    let p = pod(&[], &["app"], "Always");
    m.apply(update(&[&p])).await;
    while h.fake.calls_of("start_task app").is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut gone = p.clone();
    gone.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::now(),
    ));
    gone.metadata.deletion_grace_period_seconds = Some(1);
    m.apply(update(&[&gone])).await;
    let done = tokio::time::timeout(Duration::from_secs(300), m.done_rx.recv())
        .await
        .expect("the worker finishes");
    assert_eq!(done.map(|d| d.pod.uid).as_deref(), Some(UID));
    // Until the status sync deletes the object, the API keeps sending it.
    gone.metadata.resource_version = Some("43".into());
    m.apply(update(&[&gone])).await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(
        h.fake.calls_of("start_task").len(),
        2,
        "{:?}",
        h.fake.calls()
    );
    assert!(h.fake.records(UID).is_empty());
    assert!(h.shared.statuses.get(UID).is_none());
}
