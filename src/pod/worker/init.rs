//! Which init containers a pass starts, as upstream's computeInitContainerActions (the
//! SidecarContainers path of its SyncPod). Regular init containers run one at a time, each
//! to completion; a sidecar (`restartPolicy: Always`) counts as done once it has started
//! (running, its startupProbe succeeded if it has one; its postStart hook ran within its
//! start) and is then kept running: restarted whenever it is not, whatever the pod's
//! restart policy.
//!
//! As upstream, the walk goes from the last init container back to the first: the furthest
//! one that has a record is where the pod's initialization stands, and only sidecars before
//! it still matter (a regular init container that completed is never run again, even when
//! its record is gone). Once a main container runs (or was created) the pod has been
//! initialized, and only its sidecars are kept running.

use k8s_openapi::api::core::v1::PodSpec;

use crate::pod::sidecar::is_sidecar;
use crate::pod::status::attempts;
use crate::runtime::containers::{ContainerRecord, State};
use crate::runtime::labels::Kind;

/// What the pass does with the pod's init containers.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct InitPlan {
    /// Init containers to start, or start again, by index in `spec.initContainers`, in the
    /// spec's order.
    pub start: Vec<usize>,
    /// Every regular init container completed and every sidecar started (or a main
    /// container already ran): the main containers may run.
    pub initialized: bool,
    /// A regular init container failed and the restart policy is Never: the pod fails.
    pub failed: bool,
}

/// The plan for `spec`'s init containers given the pod's records; `started` says whether
/// a running sidecar's record has started (its startup probe succeeded, if it has one).
pub(super) fn plan(
    spec: &PodSpec,
    records: &[ContainerRecord],
    started: impl Fn(&ContainerRecord) -> bool,
) -> InitPlan {
    let init = spec.init_containers.as_deref().unwrap_or(&[]);
    let mut out = InitPlan::default();
    if init.is_empty() {
        out.initialized = true;
        return out;
    }
    // A main container that runs or was created means the init containers ran once (their
    // records may be gone since). An exited one does not: after a node reboot every record
    // is dead, and the new sandbox must be initialized again (upstream's same rule).
    out.initialized = spec.containers.iter().any(|c| {
        attempts(records, &c.name, Kind::App)
            .first()
            .is_some_and(|r| matches!(r.state, State::Running { .. } | State::Created))
    });
    let restart_on_failure = spec.restart_policy.as_deref() != Some("Never");
    // A later init container (or a main one) has begun: this one was initialized before.
    let mut later_begun = out.initialized;
    for (i, c) in init.iter().enumerate().rev() {
        let sidecar = is_sidecar(c);
        let last = i + 1 == init.len();
        let Some(newest) = attempts(records, &c.name, Kind::Init).first().copied() else {
            // Never ran, or its records are gone: a sidecar that should run is started
            // again; anything else waits for its turn.
            if later_begun && sidecar {
                out.start.push(i);
            }
            continue;
        };
        if later_begun && !sidecar {
            // Done once; after that only sidecars are kept running.
            continue;
        }
        match &newest.state {
            // Created but never started (the start failed half-way): start it again.
            State::Created => out.start.push(i),
            State::Running { .. } if sidecar => {
                if started(newest) {
                    if last {
                        out.initialized = true;
                    } else if !later_begun {
                        out.start.push(i + 1);
                    }
                }
                // Not started yet: the next one waits.
            }
            // A regular init container that runs: wait for its end.
            State::Running { .. } => {}
            State::Exited { .. } if sidecar => out.start.push(i),
            State::Exited { info, .. } if info.exit_code != 0 => {
                if !restart_on_failure {
                    out.failed = true;
                    out.start.clear();
                    return out;
                }
                out.start.push(i);
            }
            State::Exited { .. } => {
                if last {
                    out.initialized = true;
                } else {
                    out.start.push(i + 1);
                }
            }
        }
        later_begun = true;
    }
    if !later_begun {
        // Nothing ran yet: the first one starts.
        out.start.push(0);
    }
    out.start.reverse();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::containers::ExitInfo;
    use crate::runtime::labels::PodRef;
    use std::collections::HashMap;

    /// Init containers `names`; those starting with "side" are sidecars.
    fn spec(names: &[&str], policy: &str) -> PodSpec {
        serde_json::from_value(serde_json::json!({
            "restartPolicy": policy,
            "initContainers": names.iter().map(|n| {
                let mut c = serde_json::json!({"name": n, "image": "busybox"});
                if n.starts_with("side") {
                    c["restartPolicy"] = "Always".into();
                }
                c
            }).collect::<Vec<_>>(),
            "containers": [{"name": "app", "image": "busybox"}],
        }))
        .unwrap()
    }

    fn rec(kind: Kind, name: &str, state: State) -> ContainerRecord {
        ContainerRecord {
            id: format!("{name}-id"),
            pod: PodRef {
                uid: "u".into(),
                name: "p".into(),
                namespace: "d".into(),
            },
            kind,
            name: name.into(),
            attempt: 0,
            image: "busybox".into(),
            image_ref: String::new(),
            created_at: None,
            labels: HashMap::new(),
            state,
        }
    }

    fn running() -> State {
        State::Running {
            pid: 1,
            started_at: None,
        }
    }

    fn exited(code: i32) -> State {
        State::Exited {
            info: ExitInfo {
                exit_code: code,
                started_at: None,
                finished_at: None,
                reason: String::new(),
                message: String::new(),
            },
            finalized: true,
        }
    }

    fn init(name: &str, state: State) -> ContainerRecord {
        rec(Kind::Init, name, state)
    }

    fn all_started(_: &ContainerRecord) -> bool {
        true
    }

    #[test]
    fn the_first_init_container_starts_first() {
        let p = plan(&spec(&["side", "setup"], "Always"), &[], all_started);
        assert_eq!((p.start, p.initialized), (vec![0], false));
    }

    #[test]
    fn the_next_init_container_waits_until_the_sidecar_has_started() {
        let s = spec(&["side", "setup"], "Always");
        let records = [init("side", running())];
        let p = plan(&s, &records, |_| false);
        assert_eq!((p.start, p.initialized), (vec![], false));
        let p = plan(&s, &records, all_started);
        assert_eq!((p.start, p.initialized), (vec![1], false));
    }

    #[test]
    fn a_started_sidecar_last_initializes_the_pod() {
        let s = spec(&["setup", "side"], "Never");
        let records = [init("setup", exited(0)), init("side", running())];
        let p = plan(&s, &records, all_started);
        assert_eq!((p.start, p.initialized), (vec![], true));
        let p = plan(&s, &records, |_| false);
        assert_eq!((p.start, p.initialized), (vec![], false));
    }

    #[test]
    fn a_sidecar_that_ended_is_started_again_whatever_the_policy() {
        let s = spec(&["side-a", "setup", "side-b"], "Never");
        // The pod runs: both sidecars are kept running, the completed init container is
        // left alone even with its record gone.
        let records = [
            init("side-a", exited(1)),
            init("side-b", exited(0)),
            rec(Kind::App, "app", running()),
        ];
        let p = plan(&s, &records, all_started);
        assert_eq!(
            (p.start, p.initialized, p.failed),
            (vec![0, 2], true, false)
        );
    }

    #[test]
    fn an_earlier_sidecar_that_ended_does_not_hold_back_a_later_init_container() {
        let s = spec(&["side", "setup", "more"], "Always");
        let records = [init("side", exited(2)), init("setup", exited(0))];
        let p = plan(&s, &records, all_started);
        assert_eq!((p.start, p.initialized), (vec![0, 2], false));
    }

    #[test]
    fn a_regular_init_container_that_failed_under_never_fails_the_pod() {
        let s = spec(&["side", "setup"], "Never");
        let records = [init("side", running()), init("setup", exited(1))];
        let p = plan(&s, &records, all_started);
        assert!(p.failed);
        assert!(p.start.is_empty());
        let p = plan(
            &spec(&["side", "setup"], "OnFailure"),
            &records,
            all_started,
        );
        assert_eq!((p.start, p.failed), (vec![1], false));
    }

    #[test]
    fn a_pod_without_init_containers_is_initialized() {
        let p = plan(&spec(&[], "Always"), &[], all_started);
        assert_eq!(
            p,
            InitPlan {
                start: vec![],
                initialized: true,
                failed: false
            }
        );
    }

    #[test]
    fn exited_main_containers_do_not_mean_initialized() {
        let s = spec(&["side"], "Always");
        let records = [
            init("side", exited(137)),
            rec(Kind::App, "app", exited(137)),
        ];
        let p = plan(&s, &records, all_started);
        assert_eq!((p.start, p.initialized), (vec![0], false));
    }
}
