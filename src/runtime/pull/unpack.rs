//! From stored blobs to a usable image: layers applied into committed snapshots named by
//! their chain IDs, the GC labels that keep those snapshots alive, and the image record.

use std::collections::HashMap;
use std::time::Duration;

use containerd_client::services::v1::snapshots::{
    CommitSnapshotRequest, PrepareSnapshotRequest, RemoveSnapshotRequest, StatSnapshotRequest,
};
use containerd_client::services::v1::{
    ApplyRequest, CreateImageRequest, Image, UpdateImageRequest,
};
use containerd_client::types::Descriptor;
use tracing::debug;

use crate::runtime::client::{call, CALL_TIMEOUT};
use crate::runtime::images::chain_ids;
use crate::runtime::{Containerd, RuntimeError};

use super::content::set_labels;

/// Applying a layer decompresses and writes all of it; big layers take minutes.
const APPLY_TIMEOUT: Duration = Duration::from_secs(600);

/// A layer to apply: its blob descriptor and the digest of its uncompressed tar.
#[derive(Debug, Clone)]
pub struct Layer {
    pub blob: Descriptor,
    pub diff_id: String,
}

/// Why an unpack failed.
#[derive(Debug)]
pub enum UnpackError {
    Runtime(RuntimeError),
    /// The applied layer's uncompressed digest is not the config's diff ID.
    DiffMismatch {
        layer: String,
        expected: String,
        got: String,
    },
}

impl From<RuntimeError> for UnpackError {
    fn from(e: RuntimeError) -> Self {
        UnpackError::Runtime(e)
    }
}

async fn snapshot_exists(
    rt: &Containerd,
    snapshotter: &str,
    key: &str,
) -> Result<bool, RuntimeError> {
    let r = call(
        "stat snapshot",
        key.to_string(),
        CALL_TIMEOUT,
        rt.client().snapshots().stat(rt.req(StatSnapshotRequest {
            snapshotter: snapshotter.to_string(),
            key: key.to_string(),
        })),
    )
    .await;
    match r {
        Ok(_) => Ok(true),
        Err(e) if e.is_not_found() => Ok(false),
        Err(e) => Err(e),
    }
}

/// Applies the layers in order (skipping chains that already exist), labels each layer blob
/// with its uncompressed digest and the config blob with the top snapshot, and returns the
/// top chain ID. `on_layer(i)` is called after each layer, for progress logs.
pub async fn unpack(
    rt: &Containerd,
    lease: &str,
    snapshotter: &str,
    config_digest: &str,
    layers: &[Layer],
    mut on_layer: impl FnMut(usize, bool),
) -> Result<String, UnpackError> {
    let diff_ids: Vec<String> = layers.iter().map(|l| l.diff_id.clone()).collect();
    let chains = chain_ids(&diff_ids);
    for (i, layer) in layers.iter().enumerate() {
        let chain = &chains[i];
        if snapshot_exists(rt, snapshotter, chain).await? {
            on_layer(i, false);
            continue;
        }
        let parent = if i == 0 {
            String::new()
        } else {
            chains[i - 1].clone()
        };
        apply_layer(rt, lease, snapshotter, layer, chain, &parent).await?;
        set_labels(
            rt,
            lease,
            &layer.blob.digest,
            HashMap::from([(
                "containerd.io/uncompressed".to_string(),
                layer.diff_id.clone(),
            )]),
        )
        .await?;
        on_layer(i, true);
    }
    let top = chains.last().cloned().unwrap_or_default();
    set_labels(
        rt,
        lease,
        config_digest,
        HashMap::from([(
            format!("containerd.io/gc.ref.snapshot.{snapshotter}"),
            top.clone(),
        )]),
    )
    .await?;
    Ok(top)
}

async fn apply_layer(
    rt: &Containerd,
    lease: &str,
    snapshotter: &str,
    layer: &Layer,
    chain: &str,
    parent: &str,
) -> Result<(), UnpackError> {
    // containerd's own unpack key format: unique, with the chain for humans.
    let key = format!(
        "extract-{}-{:08x} {chain}",
        chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default(),
        rand::random::<u32>()
    );
    let mounts = call(
        "prepare snapshot",
        key.clone(),
        CALL_TIMEOUT,
        rt.client().snapshots().prepare(rt.req_leased(
            PrepareSnapshotRequest {
                snapshotter: snapshotter.to_string(),
                key: key.clone(),
                parent: parent.to_string(),
                labels: HashMap::new(),
            },
            lease,
        )),
    )
    .await?
    .mounts;
    let result = async {
        let applied = call(
            "apply layer",
            layer.blob.digest.clone(),
            APPLY_TIMEOUT,
            rt.client().diff().apply(rt.req_leased(
                ApplyRequest {
                    diff: Some(layer.blob.clone()),
                    mounts,
                    payloads: HashMap::new(),
                    sync_fs: false,
                },
                lease,
            )),
        )
        .await?
        .applied
        .map(|d| d.digest)
        .unwrap_or_default();
        if applied != layer.diff_id {
            return Err(UnpackError::DiffMismatch {
                layer: layer.blob.digest.clone(),
                expected: layer.diff_id.clone(),
                got: applied,
            });
        }
        let committed = call(
            "commit snapshot",
            chain.to_string(),
            CALL_TIMEOUT,
            rt.client().snapshots().commit(rt.req_leased(
                CommitSnapshotRequest {
                    snapshotter: snapshotter.to_string(),
                    name: chain.to_string(),
                    key: key.clone(),
                    labels: HashMap::from([(
                        "containerd.io/snapshot.ref".to_string(),
                        chain.to_string(),
                    )]),
                },
                lease,
            )),
        )
        .await;
        committed.map(|_| ()).map_err(UnpackError::Runtime)
    }
    .await;
    match result {
        Ok(()) => Ok(()),
        // A concurrent unpack of another image with this layer committed it first.
        Err(UnpackError::Runtime(e)) if e.is_already_exists() => {
            remove_active(rt, snapshotter, &key).await;
            Ok(())
        }
        Err(e) => {
            remove_active(rt, snapshotter, &key).await;
            Err(e)
        }
    }
}

async fn remove_active(rt: &Containerd, snapshotter: &str, key: &str) {
    let r = call(
        "remove snapshot",
        key.to_string(),
        CALL_TIMEOUT,
        rt.client()
            .snapshots()
            .remove(rt.req(RemoveSnapshotRequest {
                snapshotter: snapshotter.to_string(),
                key: key.to_string(),
            })),
    )
    .await;
    if let Err(e) = r {
        debug!(key, error = %e, "cannot remove unpack snapshot");
    }
}

/// Creates the image record, or points an existing one at the new target.
pub async fn put_image(
    rt: &Containerd,
    lease: &str,
    name: &str,
    target: Descriptor,
) -> Result<(), RuntimeError> {
    let image = Image {
        name: name.to_string(),
        target: Some(target),
        ..Default::default()
    };
    let created = call(
        "create image",
        name.to_string(),
        CALL_TIMEOUT,
        rt.client().images().create(rt.req_leased(
            CreateImageRequest {
                image: Some(image.clone()),
                ..Default::default()
            },
            lease,
        )),
    )
    .await;
    match created {
        Ok(_) => Ok(()),
        Err(e) if e.is_already_exists() => call(
            "update image",
            name.to_string(),
            CALL_TIMEOUT,
            rt.client().images().update(rt.req_leased(
                UpdateImageRequest {
                    image: Some(image),
                    ..Default::default()
                },
                lease,
            )),
        )
        .await
        .map(|_| ()),
        Err(e) => Err(e),
    }
}
