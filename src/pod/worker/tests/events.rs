//! The Events workers record, as upstream's kubelet records them: one per occurrence, with
//! the pod as involved object and the container's field path.

use k8s_openapi::api::core::v1::Event;
use tokio::sync::mpsc;

use super::{harness_recording_into, pod, worker, Harness, UID};
use crate::events::Recorder;
use crate::runtime::fake::Script;

fn recording() -> (Harness, mpsc::Receiver<Event>) {
    let (recorder, events) = Recorder::capturing();
    (harness_recording_into(|_| {}, recorder), events)
}

/// (reason, fieldPath, message) of every Event recorded so far.
fn drain(events: &mut mpsc::Receiver<Event>) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    while let Ok(e) = events.try_recv() {
        assert_eq!(e.involved_object.uid.as_deref(), Some(UID));
        assert_eq!(e.involved_object.kind.as_deref(), Some("Pod"));
        out.push((
            e.reason.unwrap_or_default(),
            e.involved_object.field_path.unwrap_or_default(),
            e.message.unwrap_or_default(),
        ));
    }
    out
}

fn ev(reason: &str, field: &str, message: &str) -> (String, String, String) {
    (reason.into(), field.into(), message.into())
}

#[tokio::test(start_paused = true)]
async fn starting_a_container_records_pulled_created_started_once() {
    let (h, mut events) = recording();
    let p = pod(&[], &["app"], "Always");
    let mut w = worker(&h, &p);
    w.pass(&p).await;
    let app = "spec.containers{app}";
    assert_eq!(
        drain(&mut events),
        [
            ev(
                "Pulled",
                app,
                "Container image \"busybox\" already present on machine"
            ),
            ev("Created", app, "Created container: app"),
            ev("Started", app, "Started container app"),
        ]
    );
    // A pass with nothing to do records nothing.
    w.pass(&p).await;
    assert_eq!(drain(&mut events), []);
}

#[tokio::test(start_paused = true)]
async fn a_crash_looping_init_container_records_back_off_with_its_field_path() {
    let (h, mut events) = recording();
    h.fake.script("setup", [Script::Exit(1), Script::Exit(1)]);
    let p = pod(&["setup"], &["app"], "Always");
    let mut w = worker(&h, &p);
    w.pass(&p).await;
    w.pass(&p).await;
    w.pass(&p).await; // in back-off now
    let recorded = drain(&mut events);
    let back_off: Vec<_> = recorded.iter().filter(|e| e.0 == "BackOff").collect();
    assert_eq!(back_off.len(), 1, "{recorded:?}");
    assert_eq!(back_off[0].1, "spec.initContainers{setup}");
    assert!(
        back_off[0]
            .2
            .starts_with("Back-off restarting failed container setup in pod "),
        "{back_off:?}"
    );
    assert_eq!(
        recorded.iter().filter(|e| e.0 == "Started").count(),
        2,
        "setup started twice: {recorded:?}"
    );
}

/// Where containerd would not label (SELinux off on the node or in its config), a pod whose
/// containers ask for SELinux labels runs without
/// them, as with containerd, and one Warning says so, however many containers ask and
/// however many passes there are. Before, the options vanished without a word.
#[tokio::test(start_paused = true)]
async fn selinux_options_on_a_node_without_selinux_are_said_once() {
    // The harness's containerd config leaves enable_selinux off (containerd's default), so
    // the labels are not applied whatever the host has.
    let (h, mut events) = recording();
    let mut p = pod(&[], &["a", "b"], "Always");
    let spec = p.spec.as_mut().unwrap();
    for c in &mut spec.containers {
        c.security_context = Some(k8s_openapi::api::core::v1::SecurityContext {
            se_linux_options: Some(k8s_openapi::api::core::v1::SELinuxOptions {
                level: Some("s0:c1,c2".into()),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    let mut w = worker(&h, &p);
    w.pass(&p).await;
    w.pass(&p).await;
    let recorded = drain(&mut events);
    let said: Vec<_> = recorded
        .iter()
        .filter(|e| e.0 == "SELinuxOptionsNotApplied")
        .collect();
    assert_eq!(said.len(), 1, "{recorded:?}");
    assert_eq!(said[0].1, "", "about the pod");
    assert!(
        said[0].2.contains("container \"a\"") && said[0].2.contains("not enabled"),
        "{said:?}"
    );
    assert_eq!(
        recorded.iter().filter(|e| e.0 == "Started").count(),
        2,
        "both run: {recorded:?}"
    );
}
