//! containerd's content store from the pull's side: a lease that keeps everything a pull
//! writes safe from containerd's GC until the image record and GC labels hold it, and a
//! streaming blob writer over the bidirectional `Content.Write` call.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use containerd_client::services::v1::{
    CreateRequest as LeaseCreateRequest, DeleteRequest as LeaseDeleteRequest, Info as ContentInfo,
    UpdateRequest as ContentUpdateRequest, WriteAction, WriteContentRequest, WriteContentResponse,
};
use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use crate::runtime::client::{call, CALL_TIMEOUT};
use crate::runtime::{Containerd, RuntimeError};

/// Messages sent to containerd carry at most this much data: fewer round trips than the
/// HTTP chunks (~16 KiB), far below gRPC's 16 MiB message limit.
const WRITE_CHUNK: usize = 1 << 20;
/// A lease left behind by a crash expires on its own after this long.
const LEASE_EXPIRY: chrono::Duration = chrono::Duration::hours(1);

/// A containerd lease; `release` deletes it. Dropped unreleased (a cancelled pull), it is
/// deleted in the background.
pub struct Lease {
    rt: Containerd,
    pub id: String,
    released: bool,
}

impl Lease {
    pub async fn create(rt: &Containerd, purpose: &str) -> Result<Lease, RuntimeError> {
        let id = format!(
            "kubelet-rs-{purpose}-{}-{:08x}",
            chrono::Utc::now().timestamp_millis(),
            rand::random::<u32>()
        );
        let expire =
            (chrono::Utc::now() + LEASE_EXPIRY).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        call(
            "create lease",
            id.clone(),
            CALL_TIMEOUT,
            rt.client().leases().create(rt.req(LeaseCreateRequest {
                id: id.clone(),
                labels: HashMap::from([("containerd.io/gc.expire".to_string(), expire)]),
            })),
        )
        .await?;
        Ok(Lease {
            rt: rt.clone(),
            id,
            released: false,
        })
    }

    pub async fn release(mut self) {
        self.released = true;
        if let Err(e) = delete_lease(&self.rt, &self.id).await {
            warn!(lease = %self.id, error = %e, "cannot delete lease; it expires on its own");
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let (rt, id) = (self.rt.clone(), self.id.clone());
            handle.spawn(async move {
                let _ = delete_lease(&rt, &id).await;
            });
        }
    }
}

async fn delete_lease(rt: &Containerd, id: &str) -> Result<(), RuntimeError> {
    // Not `sync`: that would wait for a full GC pass; what the pull wrote is referenced by
    // the image record and labels by now, and leftovers are collected on the next pass.
    call(
        "delete lease",
        id.to_string(),
        CALL_TIMEOUT,
        rt.client().leases().delete(rt.req(LeaseDeleteRequest {
            id: id.to_string(),
            sync: false,
        })),
    )
    .await
    .map(|_| ())
}

/// Why a blob write failed.
#[derive(Debug)]
pub enum WriteError {
    /// The data source failed (network, digest check of the source, file read).
    Source(std::io::Error),
    /// The source ended with a size other than the descriptor's.
    Size {
        expected: i64,
        got: i64,
    },
    Runtime(RuntimeError),
}

impl From<RuntimeError> for WriteError {
    fn from(e: RuntimeError) -> Self {
        WriteError::Runtime(e)
    }
}

/// An open content ingest for one blob.
pub struct BlobWriter {
    digest: String,
    size: i64,
    tx: mpsc::Sender<WriteContentRequest>,
    responses: JoinHandle<Result<(), tonic::Status>>,
}

fn write_failed(digest: &str, status: tonic::Status) -> RuntimeError {
    RuntimeError::Call {
        op: "write content",
        object: digest.to_string(),
        status: Box::new(status),
    }
}

/// Opens an ingest for `digest`, or None when containerd already has the blob (it then
/// adds the blob to the lease, so the check itself protects it from GC).
pub async fn open_blob(
    rt: &Containerd,
    lease: &str,
    digest: &str,
    size: i64,
) -> Result<Option<BlobWriter>, RuntimeError> {
    // One ref per blob: a second writer of the same blob finds the ref locked and waits for
    // the first instead of downloading it twice.
    let reference = format!("kubelet-rs-{digest}");
    let mut delay = Duration::from_millis(100);
    loop {
        let (tx, rx) = mpsc::channel::<WriteContentRequest>(4);
        // The first message must be queued before the call: containerd answers (and tonic
        // resolves the call) only once it has read it.
        tx.send(WriteContentRequest {
            action: WriteAction::Stat as i32,
            r#ref: reference.clone(),
            total: size,
            expected: digest.to_string(),
            ..Default::default()
        })
        .await
        .expect("receiver is alive");
        let opened = tokio::time::timeout(
            CALL_TIMEOUT,
            rt.client()
                .content()
                .write(rt.req_leased(tokio_stream::wrappers::ReceiverStream::new(rx), lease)),
        )
        .await
        .map_err(|_| RuntimeError::Timeout {
            op: "write content",
            object: digest.to_string(),
            secs: CALL_TIMEOUT.as_secs(),
        })?;
        let first = match opened {
            Ok(resp) => {
                let mut stream = resp.into_inner();
                match tokio::time::timeout(CALL_TIMEOUT, stream.message()).await {
                    Ok(Ok(Some(_stat))) => Ok(stream),
                    Ok(Ok(None)) => Err(tonic::Status::unknown("write stream closed at open")),
                    Ok(Err(status)) => Err(status),
                    Err(_) => {
                        return Err(RuntimeError::Timeout {
                            op: "write content",
                            object: digest.to_string(),
                            secs: CALL_TIMEOUT.as_secs(),
                        })
                    }
                }
            }
            Err(status) => Err(status),
        };
        match first {
            Ok(mut stream) => {
                let responses = tokio::spawn(async move {
                    // containerd answers every message; reading them keeps its sends from
                    // blocking on flow control.
                    loop {
                        match stream.message().await {
                            Ok(Some(WriteContentResponse { .. })) => continue,
                            Ok(None) => return Ok(()),
                            Err(s) => return Err(s),
                        }
                    }
                });
                return Ok(Some(BlobWriter {
                    digest: digest.to_string(),
                    size,
                    tx,
                    responses,
                }));
            }
            Err(s) if s.code() == tonic::Code::AlreadyExists => return Ok(None),
            Err(s) if s.code() == tonic::Code::Unavailable && s.message().contains("locked") => {
                debug!(digest, "blob is being written by another pull; waiting");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
            }
            Err(s) => return Err(write_failed(digest, s)),
        }
    }
}

impl BlobWriter {
    /// Streams `data` into the ingest and commits it with `labels`. containerd checks size
    /// and digest again at commit. `progress` counts bytes as they go.
    pub async fn write_all<S>(
        self,
        mut data: S,
        labels: HashMap<String, String>,
        progress: &AtomicU64,
    ) -> Result<u64, WriteError>
    where
        S: Stream<Item = std::io::Result<Bytes>> + Unpin,
    {
        let BlobWriter {
            digest,
            size,
            tx,
            responses,
        } = self;
        let mut offset: i64 = 0;
        let mut buf: Vec<u8> = Vec::with_capacity(WRITE_CHUNK);
        let mut first = true;
        let send_failed = |responses: JoinHandle<Result<(), tonic::Status>>, digest: String| async move {
            match responses.await {
                Ok(Err(s)) => WriteError::Runtime(write_failed(&digest, s)),
                _ => WriteError::Runtime(write_failed(
                    &digest,
                    tonic::Status::unknown("containerd closed the write stream"),
                )),
            }
        };
        loop {
            let next = data.next().await;
            let done = match next {
                Some(Ok(chunk)) => {
                    progress.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                    buf.extend_from_slice(&chunk);
                    false
                }
                Some(Err(e)) => {
                    // Leave without committing: the ingest stays (under the lease) and the
                    // next attempt truncates it.
                    responses.abort();
                    return Err(WriteError::Source(e));
                }
                None => true,
            };
            if buf.len() >= WRITE_CHUNK || (done && !buf.is_empty()) {
                let len = buf.len() as i64;
                let msg = WriteContentRequest {
                    action: WriteAction::Write as i32,
                    total: size,
                    // Offset 0 on the first write also truncates a stale ingest of this ref.
                    offset: if first { 0 } else { offset },
                    data: std::mem::replace(&mut buf, Vec::with_capacity(WRITE_CHUNK)),
                    ..Default::default()
                };
                first = false;
                if tx.send(msg).await.is_err() {
                    return Err(send_failed(responses, digest).await);
                }
                offset += len;
            }
            if done {
                break;
            }
        }
        if offset != size {
            responses.abort();
            return Err(WriteError::Size {
                expected: size,
                got: offset,
            });
        }
        let commit = WriteContentRequest {
            action: WriteAction::Commit as i32,
            total: size,
            offset,
            expected: digest.clone(),
            labels,
            ..Default::default()
        };
        if tx.send(commit).await.is_err() {
            return Err(send_failed(responses, digest).await);
        }
        drop(tx);
        match tokio::time::timeout(Duration::from_secs(300), responses).await {
            Ok(Ok(Ok(()))) => Ok(offset as u64),
            // Another writer committed the same blob first.
            Ok(Ok(Err(s))) if s.code() == tonic::Code::AlreadyExists => Ok(offset as u64),
            Ok(Ok(Err(s))) => Err(WriteError::Runtime(write_failed(&digest, s))),
            Ok(Err(join)) => Err(WriteError::Runtime(write_failed(
                &digest,
                tonic::Status::unknown(join.to_string()),
            ))),
            Err(_) => Err(WriteError::Runtime(RuntimeError::Timeout {
                op: "commit content",
                object: digest,
                secs: 300,
            })),
        }
    }
}

/// Stores a small blob held in memory (manifests, indexes, synthesized configs).
pub async fn put_bytes(
    rt: &Containerd,
    lease: &str,
    digest: &str,
    bytes: Bytes,
    labels: HashMap<String, String>,
) -> Result<(), WriteError> {
    match open_blob(rt, lease, digest, bytes.len() as i64).await? {
        None => {
            // Present already: the labels still have to be there (an earlier import may
            // have stored the blob without them).
            set_labels(rt, lease, digest, labels).await?;
            Ok(())
        }
        Some(w) => {
            let progress = AtomicU64::new(0);
            w.write_all(
                futures::stream::iter([Ok::<_, std::io::Error>(bytes)]),
                labels,
                &progress,
            )
            .await
            .map(|_| ())
        }
    }
}

/// Sets (adds or replaces) labels on a blob, leaving its other labels alone.
pub async fn set_labels(
    rt: &Containerd,
    lease: &str,
    digest: &str,
    labels: HashMap<String, String>,
) -> Result<(), RuntimeError> {
    if labels.is_empty() {
        return Ok(());
    }
    let paths = labels.keys().map(|k| format!("labels.{k}")).collect();
    call(
        "label content",
        digest.to_string(),
        CALL_TIMEOUT,
        rt.client().content().update(rt.req_leased(
            ContentUpdateRequest {
                info: Some(ContentInfo {
                    digest: digest.to_string(),
                    labels,
                    ..Default::default()
                }),
                update_mask: Some(prost_types::FieldMask { paths }),
            },
            lease,
        )),
    )
    .await
    .map(|_| ())
}

/// The GC labels of a manifest: its config and its layers stay while it does.
pub fn manifest_gc_labels(config: &str, layers: &[String]) -> HashMap<String, String> {
    let mut l = HashMap::from([(
        "containerd.io/gc.ref.content.config".to_string(),
        config.to_string(),
    )]);
    for (i, d) in layers.iter().enumerate() {
        l.insert(format!("containerd.io/gc.ref.content.l.{i}"), d.clone());
    }
    l
}

/// The GC labels of an index, for the children that were stored (by their index position).
pub fn index_gc_labels(children: &[(usize, String)]) -> HashMap<String, String> {
    children
        .iter()
        .map(|(i, d)| (format!("containerd.io/gc.ref.content.m.{i}"), d.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gc_labels_follow_containerd_names() {
        let l = manifest_gc_labels("sha256:c", &["sha256:a".into(), "sha256:b".into()]);
        assert_eq!(l["containerd.io/gc.ref.content.config"], "sha256:c");
        assert_eq!(l["containerd.io/gc.ref.content.l.0"], "sha256:a");
        assert_eq!(l["containerd.io/gc.ref.content.l.1"], "sha256:b");
        let l = index_gc_labels(&[(2, "sha256:m".into())]);
        assert_eq!(l["containerd.io/gc.ref.content.m.2"], "sha256:m");
    }
}
