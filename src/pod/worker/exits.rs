//! How containers ended, and container GC. An exit is written into the record's labels
//! (code, reason, times) before its task is deleted and before any status shows it, so a
//! status never carries a raw exit without its reason (OOMKilled above all). Container
//! GC keeps the newest dead record of each container, as upstream's maxPerPodContainer 1.

use std::collections::HashMap;
use std::path::PathBuf;

use chrono::Utc;
use tracing::{debug, info, warn};

use super::{blocking, Worker};
use crate::logs;
use crate::pod::termination_message;
use crate::runtime::containers::{format_time, ContainerRecord, ExitInfo, State};
use crate::runtime::labels::{self, Kind};
use crate::runtime::RuntimeError;

impl Worker {
    /// Writes how each exited task ended into its record's labels, then deletes the task.
    /// Records already finalized cost nothing, so this runs again before every publish.
    pub(super) async fn finalize_exits(
        &self,
        records: &mut [ContainerRecord],
    ) -> Result<(), RuntimeError> {
        for r in records.iter_mut() {
            let State::Exited { info, finalized } = &mut r.state else {
                continue;
            };
            if *finalized {
                continue;
            }
            let oom_event = self.shared.oom_seen.contains(&r.id);
            if r.kind != Kind::Sandbox {
                let parent = r
                    .labels
                    .get(labels::CGROUP_PARENT)
                    .cloned()
                    .unwrap_or_default();
                let cgroup = format!("{parent}/{}", r.id);
                if oom_event || blocking(move || crate::cgroups::oom::killed_on_host(&cgroup)).await
                {
                    info.reason = "OOMKilled".into();
                }
                if info.finished_at.is_none() {
                    info.finished_at = Some(Utc::now());
                }
                let set = exit_labels(info);
                self.shared.rt.set_labels(&r.id, set.clone()).await?;
                r.labels.extend(set);
                info!(pod = %self.pod_ref.display(), container = %r.name, exit_code = info.exit_code,
                      reason = %info.reason, "container exited");
            }
            self.shared.rt.delete_task(&r.id).await?;
            self.shared.oom_seen.forget(&r.id);
            // After the task is gone: the shim holds the output pipe until then, so the log
            // writer flushes a last line without a newline only now. A start that failed has
            // no output to tell (upstream's ContainerCannotRun).
            if r.kind != Kind::Sandbox && info.reason != "StartError" {
                let written = termination_message(&r.labels, info.exit_code).await;
                if !written.is_empty() {
                    // Enriches what the agent recorded (a probe's or hook's reason).
                    if !info.message.is_empty() {
                        info.message.push_str(": ");
                    }
                    info.message.push_str(&written);
                    let set = HashMap::from([(labels::MESSAGE.to_string(), info.message.clone())]);
                    self.shared.rt.set_labels(&r.id, set.clone()).await?;
                    r.labels.extend(set);
                }
            }
            *finalized = true;
        }
        Ok(())
    }

    /// Finalizes exits in the pass's view (those this pass caused: kills, failed hooks).
    pub(super) async fn finalize_view(&mut self) -> Result<(), RuntimeError> {
        let Some(mut view) = self.view.take() else {
            return Ok(());
        };
        let done = self.finalize_exits(&mut view).await;
        self.view = Some(view);
        done
    }

    /// Container GC within the pod, as upstream's with maxPerPodContainer 1: of each
    /// container's dead records only the newest stays (the one its lastState shows); older
    /// ones go with their snapshots and log files. Running records are never touched, and
    /// only the newest sandbox is kept. Removed records leave the view.
    pub(super) async fn collect_garbage(&mut self) {
        let Some(view) = &self.view else { return };
        let old: Vec<ContainerRecord> = dead_beyond_the_newest(view).into_iter().cloned().collect();
        for old in old {
            if let Err(e) = self.shared.rt.remove_container(&old.id).await {
                warn!(pod = %self.pod_ref.display(), container = %old.name, error = %e, "cannot remove old container");
                continue;
            }
            self.forget_record(&old.id);
            debug!(pod = %self.pod_ref.display(), container = %old.name, attempt = old.attempt,
                   container_id = %old.id, "removed a dead container");
            let log = old.labels.get(labels::LOG_PATH).cloned();
            let link = logs::container_log_symlink(
                &self.shared.cfg.container_logs_dir,
                &self.pod_ref.name,
                &self.pod_ref.namespace,
                &old.name,
                &old.id,
            );
            blocking(move || {
                if let Some(p) = log {
                    logs::remove_log_files(std::path::Path::new(&p));
                }
                let _ = std::fs::remove_file(link);
            })
            .await;
        }
    }

    /// The record left the runtime (removed by this pass).
    pub(super) fn forget_record(&mut self, id: &str) {
        if let Some(v) = self.view.as_mut() {
            v.retain(|r| r.id != id);
        }
    }

    /// This pass saw the record's task exit (it stopped it, or waited for it).
    pub(super) fn saw_exit(&mut self, id: &str, status: u32) {
        let Some(r) = self
            .view
            .as_mut()
            .and_then(|v| v.iter_mut().find(|r| r.id == id))
        else {
            return;
        };
        let started_at = match &r.state {
            State::Running { started_at, .. } => *started_at,
            _ => return,
        };
        let code = status as i32;
        r.state = State::Exited {
            info: ExitInfo {
                exit_code: code,
                started_at,
                finished_at: Some(Utc::now()),
                reason: crate::runtime::containers::exit_reason(code).to_string(),
                message: r.labels.get(labels::MESSAGE).cloned().unwrap_or_default(),
            },
            finalized: false,
        };
    }
}

/// The instance's termination message (`pod::termination_message`), from the files its
/// labels name.
async fn termination_message(set: &HashMap<String, String>, exit_code: i32) -> String {
    let file = set.get(labels::TERMINATION_MESSAGE_FILE).map(PathBuf::from);
    let log = set.get(labels::LOG_PATH).map(PathBuf::from);
    let fallback_to_logs = set
        .get(labels::TERMINATION_MESSAGE_POLICY)
        .is_some_and(|p| p == "FallbackToLogsOnError");
    // The log writer is a process of its own that drains the container's output after the
    // task is deleted: a tail read at once can miss the last bytes (an `echo -n` has no
    // newline to flush on). An empty answer that may come from the log is read again for
    // up to a second.
    let from_log = fallback_to_logs && exit_code != 0;
    let mut tries = 0;
    loop {
        let (file, log) = (file.clone(), log.clone());
        let message = blocking(move || {
            termination_message::read(&termination_message::Ended {
                file: file.as_deref(),
                fallback_to_logs,
                exit_code,
                log: log.as_deref(),
            })
        })
        .await;
        tries += 1;
        if !message.is_empty() || !from_log || tries == 10 {
            return message;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// The labels that record how a container ended.
fn exit_labels(info: &ExitInfo) -> HashMap<String, String> {
    let mut set = HashMap::from([
        (labels::EXIT_CODE.to_string(), info.exit_code.to_string()),
        (labels::REASON.to_string(), info.reason.clone()),
        (
            labels::FINISHED_AT.to_string(),
            format_time(info.finished_at.unwrap_or_else(Utc::now)),
        ),
    ]);
    if let Some(s) = info.started_at {
        set.insert(labels::STARTED_AT.to_string(), format_time(s));
    }
    set
}

/// The records container GC removes: per (kind, name), every exited record but the newest
/// exited one (sandboxes: every exited record but the newest sandbox). Records that are
/// running or only created are never chosen.
pub(super) fn dead_beyond_the_newest(records: &[ContainerRecord]) -> Vec<&ContainerRecord> {
    let mut by_name: HashMap<(Kind, &str), Vec<&ContainerRecord>> = HashMap::new();
    for r in records {
        by_name
            .entry((r.kind, r.name.as_str()))
            .or_default()
            .push(r);
    }
    let mut out = Vec::new();
    for ((kind, _), mut list) in by_name {
        list.sort_by_key(|r| std::cmp::Reverse(r.attempt));
        let exited = |r: &&ContainerRecord| matches!(r.state, State::Exited { .. });
        if kind == Kind::Sandbox {
            out.extend(list.into_iter().skip(1).filter(exited));
        } else {
            out.extend(list.into_iter().filter(exited).skip(1));
        }
    }
    out
}

#[cfg(test)]
mod container_gc_tests {
    use super::*;
    use crate::runtime::labels::PodRef;

    fn rec(kind: Kind, name: &str, attempt: u32, state: State) -> ContainerRecord {
        ContainerRecord {
            id: format!("{name}-{attempt}"),
            pod: PodRef {
                uid: "u".into(),
                namespace: "ns".into(),
                name: "p".into(),
            },
            kind,
            name: name.into(),
            attempt,
            image: String::new(),
            image_ref: String::new(),
            created_at: None,
            labels: HashMap::new(),
            state,
        }
    }

    fn dead() -> State {
        State::Exited {
            info: ExitInfo {
                exit_code: 1,
                started_at: None,
                finished_at: None,
                reason: "Error".into(),
                message: String::new(),
            },
            finalized: true,
        }
    }

    fn running() -> State {
        State::Running {
            pid: 1,
            started_at: None,
        }
    }

    fn ids(v: Vec<&ContainerRecord>) -> Vec<String> {
        let mut out: Vec<String> = v.into_iter().map(|r| r.id.clone()).collect();
        out.sort();
        out
    }

    #[test]
    fn one_dead_record_per_container_stays() {
        let records = vec![
            rec(Kind::Sandbox, "POD", 1, running()),
            rec(Kind::Sandbox, "POD", 0, dead()),
            rec(Kind::App, "crash", 3, dead()),
            rec(Kind::App, "crash", 2, dead()),
            rec(Kind::App, "crash", 1, dead()),
            rec(Kind::App, "web", 2, running()),
            rec(Kind::App, "web", 1, dead()),
            rec(Kind::App, "web", 0, dead()),
            rec(Kind::Init, "setup", 0, dead()),
            rec(Kind::App, "new", 1, State::Created),
            rec(Kind::App, "new", 0, dead()),
        ];
        assert_eq!(
            ids(dead_beyond_the_newest(&records)),
            ["POD-0", "crash-1", "crash-2", "web-0"]
        );
    }
}
