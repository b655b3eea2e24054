//! The one writer of pod statuses. Pod workers (and admission, for pods it refuses) hand
//! the manager each pod with its latest status; the manager keeps the latest per UID with a
//! version, and readers either read it (`pods`, `get`: the HTTP server's /pods) or
//! subscribe to changes (the apiserver status sync in cluster mode).
//!
//! Versions come from one counter, bumped only when what a reader would see changes: a
//! worker that publishes the same status every pass costs its subscribers nothing, and a
//! subscriber that falls behind gets each pod's latest state once (latest wins), never a
//! queue of stale ones.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::watch;

/// A pod with its status as last handed to the manager.
#[derive(Debug, Clone)]
pub struct Versioned {
    pub pod: Arc<Pod>,
    /// The manager's counter when this pod last changed; larger is newer.
    pub version: u64,
}

/// What changed since a subscriber last looked.
#[derive(Debug, Clone)]
pub enum StatusChange {
    /// The pod is new or its spec or status changed.
    Set(Versioned),
    /// The pod is gone from the node (its worker finished, or its source dropped it).
    /// `last` is the pod as it was last set: a subscriber that did not see that final Set
    /// (latest wins) still gets the final status, which the API must show before the pod
    /// is deleted there.
    Removed {
        uid: String,
        version: u64,
        last: Arc<Pod>,
    },
}

#[derive(Default)]
struct Inner {
    pods: BTreeMap<String, Versioned>,
    /// Removals, by version, with the pod as last set, kept until every subscriber has
    /// seen them.
    removed: BTreeMap<u64, (String, Arc<Pod>)>,
    version: u64,
    /// Each live subscriber's last seen version (a dropped subscriber's entry goes).
    cursors: Vec<std::sync::Weak<std::sync::atomic::AtomicU64>>,
}

/// See the module documentation.
pub struct StatusManager {
    inner: RwLock<Inner>,
    changed: watch::Sender<u64>,
}

impl Default for StatusManager {
    fn default() -> Self {
        StatusManager {
            inner: RwLock::default(),
            changed: watch::Sender::new(0),
        }
    }
}

impl StatusManager {
    pub fn new() -> Arc<StatusManager> {
        Arc::new(StatusManager::default())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the map half-written (every update is
        // one insert or remove), so a poisoned lock is still usable.
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the pod (with its status) as the latest for its UID and returns its version,
    /// which stays the same when nothing changed. A pod without a UID is ignored (every
    /// source gives one).
    pub fn set(&self, pod: Pod) -> u64 {
        let Some(uid) = pod.metadata.uid.clone() else {
            return 0;
        };
        let mut inner = self.write();
        if let Some(v) = inner.pods.get(&uid) {
            if *v.pod == pod {
                return v.version;
            }
        }
        inner.version += 1;
        let version = inner.version;
        inner.pods.insert(
            uid,
            Versioned {
                pod: Arc::new(pod),
                version,
            },
        );
        drop(inner);
        self.changed.send_replace(version);
        version
    }

    /// Forgets the pod; subscribers see it removed.
    pub fn remove(&self, uid: &str) {
        let mut inner = self.write();
        let Some(last) = inner.pods.remove(uid) else {
            return;
        };
        inner.version += 1;
        let version = inner.version;
        inner.removed.insert(version, (uid.to_string(), last.pod));
        inner.prune_removed();
        drop(inner);
        self.changed.send_replace(version);
    }

    pub fn get(&self, uid: &str) -> Option<Versioned> {
        self.read().pods.get(uid).cloned()
    }

    /// Every pod with its status, by UID.
    pub fn pods(&self) -> Vec<Arc<Pod>> {
        self.read().pods.values().map(|v| v.pod.clone()).collect()
    }

    /// The pod with this namespace and name, if the node has it.
    pub fn find(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        self.read()
            .pods
            .values()
            .find(|v| {
                v.pod.metadata.name.as_deref() == Some(name)
                    && v.pod.metadata.namespace.as_deref().unwrap_or("default") == namespace
            })
            .map(|v| v.pod.clone())
    }

    /// A subscription that first delivers every pod the manager holds, then the changes.
    pub fn subscribe(self: &Arc<Self>) -> StatusSubscription {
        let cursor = Arc::new(std::sync::atomic::AtomicU64::new(0));
        self.write().cursors.push(Arc::downgrade(&cursor));
        StatusSubscription {
            manager: self.clone(),
            changed: self.changed.subscribe(),
            cursor,
        }
    }

    /// Everything newer than `seen`: each UID once, in version order.
    fn changes_since(&self, seen: u64) -> (Vec<StatusChange>, u64) {
        let inner = self.read();
        let mut out: Vec<StatusChange> = inner
            .pods
            .values()
            .filter(|v| v.version > seen)
            .map(|v| StatusChange::Set(v.clone()))
            .collect();
        out.extend(
            inner
                .removed
                .range(seen + 1..)
                .filter(|(version, (uid, _))| {
                    // Re-added since: the Set above is newer.
                    inner.pods.get(uid).is_none_or(|v| v.version < **version)
                })
                .map(|(version, (uid, last))| StatusChange::Removed {
                    uid: uid.clone(),
                    version: *version,
                    last: last.clone(),
                }),
        );
        out.sort_by_key(|c| match c {
            StatusChange::Set(v) => v.version,
            StatusChange::Removed { version, .. } => *version,
        });
        (out, inner.version)
    }
}

impl Inner {
    /// Drops removals every live subscriber has seen.
    fn prune_removed(&mut self) {
        self.cursors.retain(|c| c.strong_count() > 0);
        let oldest_seen = self
            .cursors
            .iter()
            .filter_map(|c| c.upgrade())
            .map(|c| c.load(std::sync::atomic::Ordering::Acquire))
            .min()
            .unwrap_or(u64::MAX);
        self.removed = self.removed.split_off(&oldest_seen.saturating_add(1));
    }
}

/// A reader's view of the changes; see `StatusManager::subscribe`.
pub struct StatusSubscription {
    manager: Arc<StatusManager>,
    changed: watch::Receiver<u64>,
    cursor: Arc<std::sync::atomic::AtomicU64>,
}

impl StatusSubscription {
    /// Waits until something changed since the last call, then returns what did (each pod
    /// once, its latest state). `None` once the manager is gone.
    pub async fn changes(&mut self) -> Option<Vec<StatusChange>> {
        loop {
            let seen = self.cursor.load(std::sync::atomic::Ordering::Acquire);
            let (changes, now) = self.manager.changes_since(seen);
            self.changed.borrow_and_update();
            if !changes.is_empty() || now > seen {
                self.cursor.store(now, std::sync::atomic::Ordering::Release);
                if !changes.is_empty() {
                    return Some(changes);
                }
            }
            self.changed.changed().await.ok()?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodStatus;

    fn pod(uid: &str, phase: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.uid = Some(uid.into());
        p.metadata.name = Some(format!("pod-{uid}"));
        p.status = Some(PodStatus {
            phase: Some(phase.into()),
            ..Default::default()
        });
        p
    }

    fn phase(c: &StatusChange) -> (String, Option<String>) {
        match c {
            StatusChange::Set(v) => (
                v.pod.metadata.uid.clone().unwrap(),
                v.pod.status.as_ref().and_then(|s| s.phase.clone()),
            ),
            StatusChange::Removed { uid, .. } => (uid.clone(), None),
        }
    }

    #[test]
    fn the_same_status_twice_keeps_its_version() {
        let m = StatusManager::new();
        let v1 = m.set(pod("a", "Pending"));
        assert_eq!(m.set(pod("a", "Pending")), v1);
        let v2 = m.set(pod("a", "Running"));
        assert!(v2 > v1);
        assert_eq!(m.get("a").unwrap().version, v2);
    }

    #[tokio::test]
    async fn a_subscriber_gets_each_pods_latest_state_once() {
        let m = StatusManager::new();
        m.set(pod("a", "Pending"));
        let mut sub = m.subscribe();
        // What the manager held when the subscription began comes first.
        let first = sub.changes().await.unwrap();
        assert_eq!(
            first.iter().map(phase).collect::<Vec<_>>(),
            vec![("a".into(), Some("Pending".into()))]
        );
        // Three writes while the reader is busy: it sees the latest only.
        m.set(pod("a", "Running"));
        m.set(pod("b", "Pending"));
        m.set(pod("a", "Succeeded"));
        let next = sub.changes().await.unwrap();
        assert_eq!(
            next.iter().map(phase).collect::<Vec<_>>(),
            vec![
                ("b".into(), Some("Pending".into())),
                ("a".into(), Some("Succeeded".into()))
            ]
        );
        m.remove("b");
        let gone = sub.changes().await.unwrap();
        assert_eq!(
            gone.iter().map(phase).collect::<Vec<_>>(),
            vec![("b".into(), None)]
        );
    }

    #[tokio::test]
    async fn an_unchanged_status_wakes_no_subscriber() {
        let m = StatusManager::new();
        m.set(pod("a", "Running"));
        let mut sub = m.subscribe();
        sub.changes().await.unwrap();
        m.set(pod("a", "Running"));
        let waited =
            tokio::time::timeout(std::time::Duration::from_millis(50), sub.changes()).await;
        assert!(
            waited.is_err(),
            "an identical status must not be delivered: {waited:?}"
        );
    }

    #[tokio::test]
    async fn removals_are_kept_until_every_subscriber_saw_them() {
        let m = StatusManager::new();
        m.set(pod("a", "Running"));
        let mut fast = m.subscribe();
        let mut slow = m.subscribe();
        fast.changes().await.unwrap();
        m.remove("a");
        fast.changes().await.unwrap();
        // Another removal prunes what both saw; `slow` has seen nothing yet.
        m.set(pod("b", "Running"));
        m.remove("b");
        let seen: Vec<_> = slow.changes().await.unwrap().iter().map(phase).collect();
        assert_eq!(seen, vec![("a".into(), None), ("b".into(), None)]);
        drop(slow);
        drop(fast);
        m.set(pod("c", "Running"));
        m.remove("c");
        assert!(
            m.read().removed.is_empty(),
            "no subscriber is left to need removals"
        );
    }

    #[tokio::test]
    async fn a_removal_carries_the_last_status_a_subscriber_did_not_see() {
        let m = StatusManager::new();
        let mut sub = m.subscribe();
        m.set(pod("a", "Running"));
        m.set(pod("a", "Failed"));
        m.remove("a");
        let changes = sub.changes().await.unwrap();
        let [StatusChange::Removed { uid, last, .. }] = changes.as_slice() else {
            panic!("expected one removal: {changes:?}");
        };
        assert_eq!(uid, "a");
        assert_eq!(
            last.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Failed")
        );
    }

    #[test]
    fn a_pod_removed_and_added_again_shows_as_set() {
        let m = StatusManager::new();
        m.set(pod("a", "Running"));
        m.remove("a");
        m.set(pod("a", "Pending"));
        let (changes, _) = m.changes_since(0);
        assert_eq!(
            changes.iter().map(phase).collect::<Vec<_>>(),
            vec![("a".into(), Some("Pending".into()))]
        );
    }
}
