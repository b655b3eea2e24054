//! containerd's task event stream turned into pod-worker wake-ups: an exit or OOM of a
//! task wakes the worker of the pod it belongs to. The stream is the fast path; workers
//! also re-check on their own timer, so a lost event only delays, never loses, a change.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use containerd_client::events::{TaskExit, TaskOom};
use containerd_client::services::v1::{GetContainerRequest, SubscribeRequest};
use prost::Message;
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::client::{call, CALL_TIMEOUT};
use super::labels;
use super::Containerd;

/// Ids of containers whose task containerd reported an OOM for. The cgroup's own counter
/// can miss a kill (the cgroup may already be gone, or the kill counted elsewhere), while
/// the shim watches the cgroup from the start: the event is the record to trust.
#[derive(Clone, Default)]
pub struct OomSeen(Arc<Mutex<HashMap<String, Instant>>>);

/// How long an OOM report waits for its exit to be recorded; a report whose container went
/// without one (removed with its pod) is dropped after this.
const OOM_REPORT_TTL: Duration = Duration::from_secs(600);

impl OomSeen {
    pub fn record(&self, container_id: &str) {
        if let Ok(mut seen) = self.0.lock() {
            let now = Instant::now();
            seen.retain(|_, at| now.duration_since(*at) < OOM_REPORT_TTL);
            seen.insert(container_id.to_string(), now);
        }
    }

    pub fn contains(&self, container_id: &str) -> bool {
        self.0
            .lock()
            .is_ok_and(|seen| seen.contains_key(container_id))
    }

    /// Once the exit is recorded the report has served its purpose.
    pub fn forget(&self, container_id: &str) {
        if let Ok(mut seen) = self.0.lock() {
            seen.remove(container_id);
        }
    }
}

/// Subscribes (re-subscribing with back-off) and sends the pod UID of every task that
/// exited or hit OOM; an empty UID after a reconnect asks every worker to look again.
/// OOM reports of the agent's own containers are kept in `oom_seen` for the worker that
/// records the exit.
pub fn spawn_task_events(
    rt: Containerd,
    tx: mpsc::Sender<String>,
    oom_seen: OomSeen,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut delay = Duration::from_millis(500);
        loop {
            let filter = format!(
                "namespace=={},topic~=\"^/tasks/(exit|oom)\"",
                rt.namespace()
            );
            let mut events = rt.client().events();
            // subscribe() resolves only once the first event arrives, so it lives here,
            // in its own task, never inline in a sync.
            match events
                .subscribe(SubscribeRequest {
                    filters: vec![filter],
                })
                .await
            {
                Ok(resp) => {
                    delay = Duration::from_millis(500);
                    let _ = tx.send(String::new()).await;
                    let mut stream = resp.into_inner();
                    loop {
                        match stream.message().await {
                            Ok(Some(env)) => {
                                let Some(ev) = env.event else { continue };
                                let id = match env.topic.as_str() {
                                    "/tasks/exit" => TaskExit::decode(ev.value.as_slice())
                                        .ok()
                                        .map(|e| e.container_id),
                                    "/tasks/oom" => TaskOom::decode(ev.value.as_slice())
                                        .ok()
                                        .map(|e| e.container_id),
                                    _ => None,
                                };
                                let Some(id) = id else { continue };
                                if let Some(uid) = pod_of(&rt, &id).await {
                                    if env.topic == "/tasks/oom" {
                                        oom_seen.record(&id);
                                    }
                                    debug!(container_id = %id, pod_uid = %uid, topic = %env.topic, "task event");
                                    if tx.send(uid).await.is_err() {
                                        return;
                                    }
                                }
                            }
                            Ok(None) => break,
                            Err(e) => {
                                warn!(error = %e, "containerd event stream broke");
                                break;
                            }
                        }
                    }
                }
                Err(e) => {
                    warn!(error = %e, retry_in = ?delay, "cannot subscribe to containerd events")
                }
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(10));
        }
    })
}

async fn pod_of(rt: &Containerd, container_id: &str) -> Option<String> {
    let got = call(
        "get container",
        container_id,
        CALL_TIMEOUT,
        rt.client().containers().get(rt.req(GetContainerRequest {
            id: container_id.to_string(),
        })),
    )
    .await
    .ok()?;
    got.container?.labels.get(labels::POD_UID).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oom_reports_are_kept_until_forgotten() {
        let seen = OomSeen::default();
        seen.record("a");
        seen.record("b");
        assert!(seen.contains("a") && seen.contains("b"));
        seen.forget("a");
        assert!(!seen.contains("a") && seen.contains("b"));
    }
}
