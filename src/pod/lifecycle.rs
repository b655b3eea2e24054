//! Where each pod the manager knows of stands: one state per UID, so that a pod cannot be
//! both refused and running, or finished and found on the node. A UID the map does not hold
//! is one the manager has nothing to remember of: a new pod, or one forgotten.

use std::collections::HashMap;

use crate::runtime::labels::PodRef;

use super::WorkerHandle;

/// One pod's place in the manager's lifecycle.
pub(super) enum PodState {
    /// Found in the runtime or the root dir at start, claimed by no source yet: once every
    /// source has reported without it, a worker removes it.
    Orphan(PodRef),
    /// A worker runs the pod, stops it, or removes what is left of it.
    Working(WorkerHandle),
    /// Refused at admission: shown Failed until its source drops it (its status is then
    /// withdrawn) or it is deleted (it then gets a worker, whose finish lets the status sync
    /// remove it from the API server).
    Rejected,
    /// Deleted, its worker done, while the API server still lists it (until the status sync
    /// removes it there): never started again. Forgotten once its source drops it.
    Finished,
    /// The API server already reported it ended (Succeeded or Failed) when it came, with
    /// nothing of it on the node: not started, until it is deleted. `refused`: it was
    /// rejected first, so the refusal's status is still shown and goes when its source
    /// drops it.
    Ended { refused: bool },
}

impl PodState {
    /// Desired but not to run: kubelet_active_pods leaves it out.
    pub(super) fn held_back(&self) -> bool {
        matches!(
            self,
            PodState::Rejected | PodState::Finished | PodState::Ended { .. }
        )
    }

    /// Forgotten when its source no longer lists it; `Some(true)` when the status shown for
    /// it (a refusal) goes with it, `None` when it stays while unlisted (an orphan waits for
    /// the sources, a worker is told its pod is gone).
    pub(super) fn forgotten_when_unlisted(&self) -> Option<bool> {
        match self {
            PodState::Rejected | PodState::Ended { refused: true } => Some(true),
            PodState::Finished | PodState::Ended { refused: false } => Some(false),
            PodState::Orphan(_) | PodState::Working(_) => None,
        }
    }
}

/// The pods the manager knows of, by UID.
#[derive(Default)]
pub(super) struct Pods(HashMap<String, PodState>);

impl Pods {
    pub(super) fn get(&self, uid: &str) -> Option<&PodState> {
        self.0.get(uid)
    }

    pub(super) fn set(&mut self, uid: String, state: PodState) {
        self.0.insert(uid, state);
    }

    pub(super) fn forget(&mut self, uid: &str) -> Option<PodState> {
        self.0.remove(uid)
    }

    /// Keeps the pods `keep` says yes to.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&str, &PodState) -> bool) {
        self.0.retain(|uid, s| keep(uid, s));
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&str, &PodState)> {
        self.0.iter().map(|(uid, s)| (uid.as_str(), s))
    }

    pub(super) fn worker(&self, uid: &str) -> Option<&WorkerHandle> {
        match self.0.get(uid) {
            Some(PodState::Working(w)) => Some(w),
            _ => None,
        }
    }

    pub(super) fn workers(&self) -> impl Iterator<Item = (&str, &WorkerHandle)> {
        self.iter().filter_map(|(uid, s)| match s {
            PodState::Working(w) => Some((uid, w)),
            _ => None,
        })
    }

    pub(crate) fn orphan(&self, uid: &str) -> Option<&PodRef> {
        match self.0.get(uid) {
            Some(PodState::Orphan(r)) => Some(r),
            _ => None,
        }
    }

    pub(super) fn orphans(&self) -> impl Iterator<Item = (&str, &PodRef)> {
        self.iter().filter_map(|(uid, s)| match s {
            PodState::Orphan(r) => Some((uid, r)),
            _ => None,
        })
    }

    /// Takes the orphans out of the map.
    pub(super) fn take_orphans(&mut self) -> Vec<PodRef> {
        let uids: Vec<String> = self.orphans().map(|(uid, _)| uid.to_string()).collect();
        uids.iter()
            .filter_map(|uid| match self.0.remove(uid) {
                Some(PodState::Orphan(r)) => Some(r),
                _ => None,
            })
            .collect()
    }

    pub(super) fn is(&self, uid: &str, want: fn(&PodState) -> bool) -> bool {
        self.0.get(uid).is_some_and(want)
    }

    pub(super) fn count(&self, want: fn(&PodState) -> bool) -> usize {
        self.0.values().filter(|s| want(s)).count()
    }
}
