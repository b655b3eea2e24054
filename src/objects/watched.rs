//! One kind of object (ConfigMaps or Secrets) kept current by watches, as upstream's
//! watch-based manager: one list+watch per referenced object, restricted by
//! `fieldSelector=metadata.name=<name>` in the object's namespace (what the Node authorizer
//! lets a node list and watch), shared by every registered pod that references it and
//! stopped once none does. A watch costs one request when it opens and one when the server
//! ends it (every few minutes); an unchanged object costs nothing in between. As upstream, a
//! watch whose object nobody read for [`MAX_IDLE`] stops too (an env or pull-secret reference
//! is read when a container starts, not every pass) and the next read reopens it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::ResourceExt;
use tokio::task::AbortHandle;
use tokio::time::Instant;
use tracing::{debug, warn};

use super::{ObjectError, ObjectKind};

/// How long a watch outlives its last reference: a pod replaced by another of the same
/// workload (a rollout, a restarted worker) references the same objects moments later, and
/// reopening the watch would cost a list.
pub(crate) const RELEASE_GRACE: Duration = Duration::from_secs(30);

/// Upstream stops a watch nobody read for five sync periods (5 x the default 1 min
/// syncFrequency); volumes are read every period, so only other references idle out.
pub(crate) const MAX_IDLE: Duration = Duration::from_secs(5 * 60);

/// How often idle watches are looked for (upstream's period).
const IDLE_CHECK: Duration = Duration::from_secs(60);

/// What the watches need to know of a kind.
pub(crate) trait Watchable:
    kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    const KIND: ObjectKind;
    /// `immutable: true`: the object's data can no longer change, so its watch can stop.
    fn is_immutable(&self) -> bool;
}

impl Watchable for ConfigMap {
    const KIND: ObjectKind = ObjectKind::ConfigMap;
    fn is_immutable(&self) -> bool {
        self.immutable == Some(true)
    }
}

impl Watchable for Secret {
    const KIND: ObjectKind = ObjectKind::Secret;
    fn is_immutable(&self) -> bool {
        self.immutable == Some(true)
    }
}

/// Namespace and name.
type Key = (String, String);

/// What a watch has learnt of its object.
enum Slot<K> {
    /// Not listed yet (or the list failed): reads ask the API server.
    Unsynced,
    /// As of the last list or event; `None`: the object does not exist.
    Synced(Option<Arc<K>>),
}

struct Entry<K> {
    /// Registered pods referencing the object (each counts once).
    refs: usize,
    /// Bumped on every release, so a release timer acts only for the release it was set by.
    releases: u64,
    slot: Arc<Mutex<Slot<K>>>,
    /// `None`: stopped for idleness (the next read reopens it). A watch that ended by
    /// itself saw the object immutable, and its slot keeps it.
    watch: Option<AbortHandle>,
    last_read: Instant,
}

impl<K: Watchable> Entry<K> {
    fn stop(&mut self) {
        if let Some(w) = self.watch.take() {
            w.abort();
        }
    }
}

/// Told the namespace and name of an object whose watch saw it change (not its first
/// listing): the pods that read it are looked at again without waiting for their resync.
pub(crate) type Changed = Arc<dyn Fn(&str, &str) + Send + Sync>;

pub(crate) struct Watched<K: Watchable> {
    client: kube::Client,
    changed: Changed,
    entries: Arc<Mutex<HashMap<Key, Entry<K>>>>,
    /// The idle check runs from the first watch on (a task needs the runtime).
    idle_check: std::sync::Once,
}

impl<K: Watchable> Watched<K> {
    pub(crate) fn new(client: kube::Client, changed: Changed) -> Self {
        Watched {
            client,
            changed,
            entries: Arc::new(Mutex::new(HashMap::new())),
            idle_check: std::sync::Once::new(),
        }
    }

    /// Opens the object's watch into a fresh slot (an aborted task may still write its old
    /// one).
    fn open(&self, e: &mut Entry<K>, key: &Key) {
        let slot = Arc::new(Mutex::new(Slot::Unsynced));
        let api: Api<K> = Api::namespaced(self.client.clone(), &key.0);
        let task = tokio::spawn(keep_current(
            api,
            key.clone(),
            slot.clone(),
            self.changed.clone(),
        ));
        debug!(kind = %K::KIND, namespace = %key.0, name = %key.1, "watching");
        e.slot = slot;
        e.watch = Some(task.abort_handle());
    }

    /// One more registered pod references the object: the first opens its watch.
    pub(crate) fn add_ref(&self, namespace: &str, name: &str) {
        let key = (namespace.to_string(), name.to_string());
        let mut entries = self.entries.lock().unwrap();
        if let Some(e) = entries.get_mut(&key) {
            e.refs += 1;
            return;
        }
        self.idle_check.call_once(|| {
            tokio::spawn(stop_idle_watches::<K>(Arc::downgrade(&self.entries)));
        });
        let mut e = Entry {
            refs: 1,
            releases: 0,
            slot: Arc::new(Mutex::new(Slot::Unsynced)),
            watch: None,
            last_read: Instant::now(),
        };
        self.open(&mut e, &key);
        entries.insert(key, e);
    }

    /// A registered pod no longer references the object: after the last, its watch stops
    /// (a short while later, see [`RELEASE_GRACE`]).
    pub(crate) fn release(&self, namespace: &str, name: &str) {
        let key = (namespace.to_string(), name.to_string());
        let mut entries = self.entries.lock().unwrap();
        let Some(e) = entries.get_mut(&key) else {
            return;
        };
        e.refs = e.refs.saturating_sub(1);
        if e.refs > 0 {
            return;
        }
        e.releases += 1;
        let release = e.releases;
        let entries = Arc::downgrade(&self.entries);
        tokio::spawn(async move {
            tokio::time::sleep(RELEASE_GRACE).await;
            let Some(entries) = entries.upgrade() else {
                return;
            };
            let mut entries = entries.lock().unwrap();
            if entries
                .get(&key)
                .is_some_and(|e| e.refs == 0 && e.releases == release)
            {
                let mut e = entries.remove(&key).expect("the entry just looked up");
                e.stop();
                debug!(kind = %K::KIND, namespace = %key.0, name = %key.1, "no pod references it any more; watch stopped");
            }
        });
    }

    /// The object as its watch last saw it; asked of the API server when no watch has listed
    /// it yet (or none is open), so a pod's first pass never waits for a watch.
    pub(crate) async fn get(&self, namespace: &str, name: &str) -> Result<Arc<K>, ObjectError> {
        let key = (namespace.to_string(), name.to_string());
        let slot = self.entries.lock().unwrap().get_mut(&key).map(|e| {
            e.last_read = Instant::now();
            if e.watch.is_none() {
                self.open(e, &key);
            }
            e.slot.clone()
        });
        if let Some(slot) = slot {
            if let Slot::Synced(object) = &*slot.lock().unwrap() {
                return object
                    .clone()
                    .ok_or_else(|| not_found::<K>(namespace, name));
            }
        }
        self.fetch(namespace, name).await
    }

    async fn fetch(&self, namespace: &str, name: &str) -> Result<Arc<K>, ObjectError> {
        let api: Api<K> = Api::namespaced(self.client.clone(), namespace);
        match api.get_opt(name).await {
            Ok(Some(o)) => Ok(Arc::new(o)),
            Ok(None) => Err(not_found::<K>(namespace, name)),
            Err(source) => Err(ObjectError::Api {
                kind: K::KIND,
                namespace: namespace.into(),
                name: name.into(),
                source,
            }),
        }
    }

    /// The objects currently watched (or still in their release grace), for tests.
    #[cfg(test)]
    pub(crate) fn watched(&self) -> Vec<Key> {
        let mut keys: Vec<Key> = self.entries.lock().unwrap().keys().cloned().collect();
        keys.sort();
        keys
    }

    /// Whether reads of the object come from its watch's cache, for tests.
    #[cfg(test)]
    pub(crate) fn synced(&self, namespace: &str, name: &str) -> bool {
        self.entries
            .lock()
            .unwrap()
            .get(&(namespace.to_string(), name.to_string()))
            .is_some_and(|e| matches!(*e.slot.lock().unwrap(), Slot::Synced(_)))
    }
}

impl<K: Watchable> Drop for Watched<K> {
    fn drop(&mut self) {
        for e in self.entries.lock().unwrap().values_mut() {
            e.stop();
        }
    }
}

/// Every [`IDLE_CHECK`], stops the watches whose object nobody read for [`MAX_IDLE`] (their
/// pods still reference them), until the objects are dropped.
async fn stop_idle_watches<K: Watchable>(entries: Weak<Mutex<HashMap<Key, Entry<K>>>>) {
    loop {
        tokio::time::sleep(IDLE_CHECK).await;
        let Some(entries) = entries.upgrade() else {
            return;
        };
        let now = Instant::now();
        for (key, e) in entries.lock().unwrap().iter_mut() {
            let running = e.watch.as_ref().is_some_and(|w| !w.is_finished());
            if running && now.duration_since(e.last_read) >= MAX_IDLE {
                e.stop();
                e.slot = Arc::new(Mutex::new(Slot::Unsynced));
                debug!(kind = %K::KIND, namespace = %key.0, name = %key.1, "not read for a while; watch stopped until the next read");
            }
        }
    }
}

fn not_found<K: Watchable>(namespace: &str, name: &str) -> ObjectError {
    ObjectError::NotFound {
        kind: K::KIND,
        namespace: namespace.into(),
        name: name.into(),
    }
}

/// The watch of one object: list it, then follow its events (the watcher relists after a
/// lost watch and backs off after errors), until the object is immutable or the task is
/// aborted. Every change after the first listing is reported to `changed` (a relist that
/// finds the same version is not a change).
async fn keep_current<K: Watchable>(
    api: Api<K>,
    key: Key,
    slot: Arc<Mutex<Slot<K>>>,
    changed: Changed,
) {
    let (namespace, name) = (&key.0, &key.1);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher::watcher(api, config).default_backoff().boxed();
    // The server filters by name in the namespace of the request; checking again costs
    // nothing and means a mistaken answer can never serve another namespace's object.
    let is_it =
        |o: &K| o.namespace().as_deref() == Some(namespace.as_str()) && o.name_any() == *name;
    let mut listed = None;
    while let Some(event) = events.next().await {
        let seen = match event {
            Ok(Event::Init) => {
                listed = None;
                continue;
            }
            Ok(Event::InitApply(o)) => {
                if is_it(&o) {
                    listed = Some(Arc::new(o));
                }
                continue;
            }
            Ok(Event::InitDone) => listed.take(),
            Ok(Event::Apply(o)) if is_it(&o) => Some(Arc::new(o)),
            Ok(Event::Delete(o)) if is_it(&o) => None,
            Ok(Event::Apply(o) | Event::Delete(o)) => {
                warn!(kind = %K::KIND, namespace, name, other_namespace = ?o.namespace(), other_name = %o.name_any(), "watch sent another object; ignored");
                continue;
            }
            Err(e) => {
                // The cache keeps what it had (or reads keep asking the server).
                warn!(kind = %K::KIND, namespace, name, error = %e, "watch failed; retrying");
                continue;
            }
        };
        let immutable = seen.as_deref().is_some_and(K::is_immutable);
        let version = |o: &Option<Arc<K>>| o.as_ref().map(|o| o.resource_version());
        let before = std::mem::replace(&mut *slot.lock().unwrap(), Slot::Synced(seen.clone()));
        if let Slot::Synced(before) = before {
            if version(&before) != version(&seen) {
                changed(namespace, name);
            }
        }
        if immutable {
            debug!(kind = %K::KIND, namespace, name, "object is immutable; stopped watching it");
            return;
        }
    }
}
