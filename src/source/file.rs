//! The file source: static pods from a manifest folder (`staticPodPath`), one pod per file.
//!
//! The folder is watched with inotify, and re-read in full every `period` as a safety net
//! (events can be lost: queue overflow, a folder replaced under the watch). Files ending in
//! .yaml, .yml or .json are read; dotfiles (editor swap files, atomic-write temporaries) and
//! other files are ignored. The path may also name a single manifest file.
//!
//! A manifest that stops parsing or validating does NOT remove its pod: the last good pod of
//! that file stays in the set (a broken edit must not kill a running pod), and an error naming
//! the file and the field is logged once per bad content. Deleting the file removes the pod.
//! A missing folder gives an empty set (as upstream) and is retried every period.

use std::collections::{BTreeMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use inotify::{EventMask, EventStream, Inotify, WatchMask};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::decode::{decode_manifest, Manifest};
use super::static_pod::{prepare_static_pod, SeenTimes};
use super::{drop_duplicate_names, ManifestError, SourceKind, SourceUpdate, SourcedPod};

const MANIFEST_EXTENSIONS: &[&str] = &["yaml", "yml", "json"];
/// Editors and `kubectl`-style tools write a file in several syscalls: a file created or
/// modified in place is waited for this long at most (until it is closed) before the re-read.
const EVENT_SETTLE: Duration = Duration::from_millis(100);

/// Starts the file source on `dir`. The task never exits on its own; it ends when `tx`'s
/// receiver is dropped.
pub fn spawn_file_source(
    dir: PathBuf,
    node_name: String,
    period: Duration,
    tx: mpsc::Sender<SourceUpdate>,
) -> JoinHandle<()> {
    tokio::spawn(async move { FileSource::new(dir, node_name).run(period, tx).await })
}

type Watch = EventStream<Vec<u8>>;

struct ManifestFile {
    content: Vec<u8>,
    last_good: Option<SourcedPod>,
}

struct FileSource {
    path: PathBuf,
    node_name: String,
    files: BTreeMap<PathBuf, ManifestFile>,
    ignored: HashSet<PathBuf>,
    seen: SeenTimes,
    missing_reported: bool,
}

/// What one burst of inotify events said about the folder's files.
#[derive(Default)]
struct Batch {
    /// Created or modified and not closed since.
    writing: HashSet<OsString>,
    /// Removed or moved away (whatever came after).
    removed: HashSet<OsString>,
}

impl FileSource {
    fn new(path: PathBuf, node_name: String) -> FileSource {
        FileSource {
            path,
            node_name,
            files: BTreeMap::new(),
            ignored: HashSet::new(),
            seen: SeenTimes::default(),
            missing_reported: false,
        }
    }

    async fn run(mut self, period: Duration, tx: mpsc::Sender<SourceUpdate>) {
        let mut watch: Option<Watch> = None;
        let mut last_sent: Option<Vec<SourcedPod>> = None;
        let mut ticker = tokio::time::interval(period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.reset();
        loop {
            if watch.is_none() {
                watch = self.start_watch();
            }
            if let Some(pods) = self.scan() {
                if last_sent.as_ref() != Some(&pods) {
                    let update = SourceUpdate {
                        source: SourceKind::File,
                        pods: pods.clone(),
                    };
                    if tx.send(update).await.is_err() {
                        return;
                    }
                    last_sent = Some(pods);
                }
            }
            tokio::select! {
                _ = ticker.tick() => {}
                event = next_event(&mut watch) => {
                    // A manifest moved in, closed after writing or removed is complete: the
                    // folder is read again at once. One being written in place (created or
                    // modified, not closed yet) is waited for, up to EVENT_SETTLE, so that a
                    // half-written file is not read. What else arrived meanwhile is covered
                    // by the same re-read.
                    let mut batch = Batch::default();
                    if !self.note_event(event, &mut batch) {
                        watch = None;
                    }
                    self.drain(&mut watch, &mut batch);
                    if !batch.writing.is_empty() {
                        let deadline = tokio::time::Instant::now() + EVENT_SETTLE;
                        while !batch.writing.is_empty() {
                            tokio::select! {
                                _ = tokio::time::sleep_until(deadline) => break,
                                event = next_event(&mut watch) => {
                                    if !self.note_event(event, &mut batch) {
                                        watch = None;
                                    }
                                }
                            }
                        }
                        self.drain(&mut watch, &mut batch);
                    }
                    // A removed manifest is its pod removed, even when a file of the same
                    // name (the same pod, the same UID) is back by the time the folder is
                    // read: upstream's source handles each inotify event in turn, so its pod
                    // is stopped and then started again (restart count 1), which the node
                    // e2e suite checks. The set without it goes first; the re-read adds it.
                    if let Some(sent) = &last_sent {
                        let without = self.without_removed(sent, &batch.removed);
                        if without.len() != sent.len() {
                            let update = SourceUpdate {
                                source: SourceKind::File,
                                pods: without.clone(),
                            };
                            if tx.send(update).await.is_err() {
                                return;
                            }
                            last_sent = Some(without);
                        }
                    }
                }
            }
        }
    }

    fn start_watch(&self) -> Option<Watch> {
        let mask = WatchMask::CREATE
            | WatchMask::MODIFY
            | WatchMask::CLOSE_WRITE
            | WatchMask::MOVED_FROM
            | WatchMask::MOVED_TO
            | WatchMask::DELETE
            | WatchMask::DELETE_SELF
            | WatchMask::MOVE_SELF
            | WatchMask::ATTRIB;
        let result = (|| -> io::Result<Watch> {
            let inotify = Inotify::init()?;
            inotify.watches().add(&self.path, mask)?;
            inotify.into_event_stream(vec![0u8; 4096])
        })();
        match result {
            Ok(watch) => Some(watch),
            Err(err) => {
                // A missing folder is reported by scan(); anything else is worth a warning.
                if err.kind() != io::ErrorKind::NotFound {
                    tracing::warn!(path = %self.path.display(), "cannot watch {} with inotify ({err}); re-reading it every period only", self.path.display());
                }
                None
            }
        }
    }

    /// `sent` without the pods of the manifests named in `removed`.
    fn without_removed(&self, sent: &[SourcedPod], removed: &HashSet<OsString>) -> Vec<SourcedPod> {
        let gone: HashSet<String> = removed
            .iter()
            .map(|name| self.path.join(name).display().to_string())
            .collect();
        sent.iter()
            .filter(|p| !gone.contains(&p.origin))
            .cloned()
            .collect()
    }

    /// Takes the events already queued, without waiting.
    fn drain(&self, watch: &mut Option<Watch>, batch: &mut Batch) {
        while let Some(w) = watch.as_mut() {
            match w.next().now_or_never() {
                Some(event) => {
                    if !self.note_event(event, batch) {
                        *watch = None;
                    }
                }
                None => break,
            }
        }
    }

    /// Keeps `batch` current with the event; returns `keep_watch`'s answer.
    fn note_event(
        &self,
        event: Option<io::Result<inotify::EventOwned>>,
        batch: &mut Batch,
    ) -> bool {
        if let Some(Ok(e)) = &event {
            if let Some(name) = &e.name {
                if e.mask.intersects(EventMask::DELETE | EventMask::MOVED_FROM) {
                    batch.removed.insert(name.to_os_string());
                }
                if e.mask
                    .intersects(EventMask::CLOSE_WRITE | EventMask::DELETE | EventMask::MOVED_FROM)
                {
                    batch.writing.remove(name.as_os_str());
                } else if e.mask.intersects(EventMask::CREATE | EventMask::MODIFY)
                    && !e.mask.contains(EventMask::ISDIR)
                {
                    batch.writing.insert(name.to_os_string());
                }
            }
        }
        self.keep_watch(event)
    }

    /// False when the watch no longer sees the folder (it was removed or moved, the queue
    /// overflowed, or the stream failed), so it is set up again.
    fn keep_watch(&self, event: Option<io::Result<inotify::EventOwned>>) -> bool {
        match event {
            Some(Ok(event)) => {
                tracing::trace!(path = %self.path.display(), mask = %event.mask.iter_names().map(|(n, _)| n).collect::<Vec<_>>().join("|"), name = event.name.as_deref().map(|n| n.to_string_lossy()).as_deref(), "inotify event");
                !event.mask.intersects(
                    EventMask::DELETE_SELF
                        | EventMask::MOVE_SELF
                        | EventMask::IGNORED
                        | EventMask::Q_OVERFLOW
                        | EventMask::UNMOUNT,
                )
            }
            Some(Err(err)) => {
                tracing::warn!(path = %self.path.display(), "inotify watch on {} failed: {err}", self.path.display());
                false
            }
            None => false,
        }
    }

    /// Reads the folder and returns the current set, or None when it could not be read and
    /// the previous set stands.
    fn scan(&mut self) -> Option<Vec<SourcedPod>> {
        let candidates = match self.list_manifests() {
            Ok(candidates) => {
                if self.missing_reported {
                    tracing::info!(path = %self.path.display(), "static pod path {} is present now", self.path.display());
                    self.missing_reported = false;
                }
                candidates
            }
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                if !self.missing_reported {
                    tracing::error!(path = %self.path.display(), "static pod path {} does not exist; no static pods from it until it appears (checked every period)", self.path.display());
                    self.missing_reported = true;
                } else {
                    tracing::debug!(path = %self.path.display(), "static pod path still missing");
                }
                self.files.clear();
                return Some(Vec::new());
            }
            Err(err) => {
                tracing::error!(path = %self.path.display(), "cannot read static pod path {}: {err}", self.path.display());
                return None;
            }
        };

        let mut present = BTreeMap::new();
        for path in candidates {
            let content = match std::fs::read(&path) {
                Ok(content) => content,
                Err(err) => {
                    // Removed between listing and reading: the next scan settles it. Other
                    // failures (permissions) are worth an error; the last good pod stays.
                    if err.kind() == io::ErrorKind::NotFound {
                        tracing::debug!(file = %path.display(), "{} vanished while being read", path.display());
                    } else {
                        let err = ManifestError::Read {
                            origin: path.display().to_string(),
                            source: err,
                        };
                        tracing::error!(file = %path.display(), "{err}");
                    }
                    if let Some(old) = self.files.remove(&path) {
                        present.insert(path, old);
                    }
                    continue;
                }
            };
            let entry = match self.files.remove(&path) {
                Some(old) if old.content == content => old,
                old => {
                    let last_good = old.and_then(|o| o.last_good);
                    match self.read_pod(&path, &content) {
                        Ok(pod) => ManifestFile {
                            content,
                            last_good: Some(pod),
                        },
                        Err(err) => {
                            if last_good.is_some() {
                                tracing::error!(file = %path.display(), "{err}; keeping the pod from its last good version");
                            } else {
                                tracing::error!(file = %path.display(), "{err}");
                            }
                            ManifestFile { content, last_good }
                        }
                    }
                }
            };
            present.insert(path, entry);
        }
        self.files = present;

        let pods: Vec<SourcedPod> = self
            .files
            .values()
            .filter_map(|f| f.last_good.clone())
            .collect();
        let mut pods = drop_duplicate_names(SourceKind::File, pods);
        self.seen.stamp(&mut pods);
        Some(pods)
    }

    /// Manifest files to read, sorted; logs each newly ignored file once at debug level.
    fn list_manifests(&mut self) -> io::Result<Vec<PathBuf>> {
        let metadata = std::fs::metadata(&self.path)?;
        if metadata.is_file() {
            return Ok(vec![self.path.clone()]);
        }
        let mut manifests = Vec::new();
        for entry in std::fs::read_dir(&self.path)? {
            let path = entry?.path();
            if is_manifest_name(&path) && path.is_file() {
                manifests.push(path);
            } else if self.ignored.insert(path.clone()) {
                tracing::debug!(file = %path.display(), "ignoring {}: not a .yaml, .yml or .json file, a dotfile, or not a regular file", path.display());
            }
        }
        manifests.sort();
        Ok(manifests)
    }

    fn read_pod(&self, path: &Path, content: &[u8]) -> Result<SourcedPod, ManifestError> {
        let origin = path.display().to_string();
        let pod = match decode_manifest(content) {
            Ok(Manifest::Pod(pod)) => *pod,
            Ok(Manifest::List(_)) => {
                return Err(ManifestError::Parse {
                    origin,
                    message:
                        "a PodList is not supported in a manifest file; write one Pod per file"
                            .into(),
                })
            }
            Err(source) => return Err(ManifestError::Decode { origin, source }),
        };
        let name = pod.metadata.name.clone().unwrap_or_default();
        let pod = prepare_static_pod(pod, SourceKind::File, &origin, &self.node_name).map_err(
            |errors| ManifestError::Invalid {
                origin: origin.clone(),
                pod: name,
                errors,
            },
        )?;
        Ok(SourcedPod { pod, origin })
    }
}

fn is_manifest_name(path: &Path) -> bool {
    let Some(name) = path.file_name().and_then(OsStr::to_str) else {
        return false;
    };
    !name.starts_with('.')
        && path
            .extension()
            .and_then(OsStr::to_str)
            .is_some_and(|ext| MANIFEST_EXTENSIONS.contains(&ext))
}

async fn next_event(watch: &mut Option<Watch>) -> Option<io::Result<inotify::EventOwned>> {
    match watch {
        Some(stream) => stream.next().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests;
