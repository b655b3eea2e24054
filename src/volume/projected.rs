//! The files of a projected volume: its sources' files in one directory, as upstream's
//! projected plugin collects them. An invalid source stops the volume at once (the spec
//! must be fixed); sources whose objects are missing or lack a listed key are all reported
//! together (upstream's aggregate: one error as it is, several as `[a, b]`), so one event
//! shows everything the pod waits for.

use std::path::Path;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, ProjectedVolumeSource, Volume};

use super::downward::{self, FileProjection, Payload};
use super::fetch::{token_spec, Fetched};
use super::object_files::{self, FilesError};
use super::ownership::{self, Ownership, PRIVATE_TOKEN_MODE};
use super::source::{SetUp, VolumeSource};
use super::{
    set_fields, write_files, written_before, Blame, DownwardContext, HostVolume, VolumeError,
    VolumeKind, PROJECTED_PLUGIN,
};
use crate::objects::{ObjectError, ObjectKind};

/// What stops one source from giving its files, kept typed so a lone object error reaches
/// the caller with its cause.
enum SourceFailure {
    Object(Arc<ObjectError>),
    Message(String),
}

impl std::fmt::Display for SourceFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SourceFailure::Object(e) => e.fmt(f),
            SourceFailure::Message(m) => f.write_str(m),
        }
    }
}

pub(super) fn collect(
    pod: &Pod,
    src: &ProjectedVolumeSource,
    default_mode: u32,
    own: Ownership,
    ctx: &DownwardContext,
    fetched: &Fetched,
    blame: &Blame<'_>,
) -> Result<Payload, VolumeError> {
    let mut payload = Payload::new();
    let mut failures = Vec::new();
    // Upstream writes a token 0600 when a group or a single user is meant to read it (the
    // fsGroup's bits make it 0640 then), and hands it to that user.
    let fs_user = ownership::fs_user(pod);
    let token_mode = if fs_user.is_some() || own.fs_group.is_some() {
        PRIVATE_TOKEN_MODE
    } else {
        default_mode
    };
    for (j, s) in src.sources.iter().flatten().enumerate() {
        let field = format!("projected.sources[{j}]");
        let kinds = set_fields(s);
        let [kind] = kinds.as_slice() else {
            return Err(blame.invalid(
                &field,
                format!("exactly one source per projection (found {})", kinds.len()),
            ));
        };
        let field = format!("{field}.{kind}");
        let files = |kind, items, keys, optional, payload: &mut Payload| match object_files::collect(
            kind,
            items,
            &keys,
            default_mode,
            optional,
            &field,
            payload,
        ) {
            Ok(()) => Ok(None),
            Err(FilesError::MissingKey(m)) => Ok(Some(SourceFailure::Message(m))),
            Err(e) => Err(blame.files(e)),
        };
        match kind.as_str() {
            "downwardAPI" => {
                let items = s
                    .downward_api
                    .as_ref()
                    .and_then(|d| d.items.as_deref())
                    .unwrap_or(&[]);
                downward::collect(
                    pod,
                    items,
                    Some(default_mode as i32),
                    &ctx.allocatable,
                    &field,
                    &mut payload,
                )
                .map_err(|(f, r)| blame.invalid(&f, r))?;
            }
            "configMap" => {
                let cm = s.config_map.clone().unwrap_or_default();
                if cm.name.is_empty() {
                    return Err(blame.invalid(&format!("{field}.name"), "is required".into()));
                }
                let optional = cm.optional.unwrap_or(false);
                let read = fetched
                    .config_map(&cm.name, optional)
                    .ok_or_else(|| blame.not_read(ObjectKind::ConfigMap, &cm.name))?;
                match read {
                    Err(e) => failures.push(SourceFailure::Object(e)),
                    Ok(obj) => {
                        let keys = obj
                            .as_deref()
                            .map(object_files::config_map_keys)
                            .unwrap_or_default();
                        let items = cm.items.as_deref();
                        let kind = ObjectKind::ConfigMap;
                        failures.extend(files(kind, items, keys, optional, &mut payload)?);
                    }
                }
            }
            "secret" => {
                let sec = s.secret.clone().unwrap_or_default();
                if sec.name.is_empty() {
                    return Err(blame.invalid(&format!("{field}.name"), "is required".into()));
                }
                let optional = sec.optional.unwrap_or(false);
                let read = fetched
                    .secret(&sec.name, optional)
                    .ok_or_else(|| blame.not_read(ObjectKind::Secret, &sec.name))?;
                match read {
                    Err(e) => failures.push(SourceFailure::Object(e)),
                    Ok(obj) => {
                        let keys = obj
                            .as_deref()
                            .map(object_files::secret_keys)
                            .unwrap_or_default();
                        let items = sec.items.as_deref();
                        let kind = ObjectKind::Secret;
                        failures.extend(files(kind, items, keys, optional, &mut payload)?);
                    }
                }
            }
            "serviceAccountToken" => {
                let tp = s.service_account_token.clone().unwrap_or_default();
                let path = downward::clean_path(&tp.path)
                    .map_err(|r| blame.invalid(&format!("{field}.path"), r.to_string()))?;
                let spec = token_spec(pod, &tp);
                let read = fetched.token(&spec).ok_or_else(|| {
                    blame.failed(format!(
                        "the token of service account {:?} was not requested before the set-up",
                        spec.service_account
                    ))
                })?;
                match read {
                    Err(e) => failures.push(SourceFailure::Object(e)),
                    Ok(t) => {
                        payload.insert(
                            path,
                            FileProjection {
                                data: t.token.into_bytes(),
                                mode: token_mode,
                                uid: fs_user,
                            },
                        );
                    }
                }
            }
            other => return Err(blame.unsupported(&format!("{field}.{other}"))),
        }
    }
    match failures.len() {
        0 => {}
        1 => {
            return Err(match failures.remove(0) {
                SourceFailure::Object(e) => blame.object(e),
                SourceFailure::Message(m) => blame.failed(m),
            })
        }
        _ => {
            let all: Vec<String> = failures.iter().map(ToString::to_string).collect();
            return Err(blame.failed(format!("[{}]", all.join(", "))));
        }
    }
    downward::check_nesting(&payload)
        .map_err(|r| blame.invalid("projected.sources", r.to_string()))?;
    Ok(payload)
}

/// projected volumes: several sources' files in one folder, on a tmpfs.
pub(super) struct Projected;

impl VolumeSource for Projected {
    fn field(&self) -> &'static str {
        "projected"
    }

    fn set_up(&self, cx: &SetUp<'_>, vol: &Volume) -> Result<HostVolume, VolumeError> {
        let src = vol.projected.clone().unwrap_or_default();
        let mode = cx.default_mode("projected", src.default_mode)?;
        let own = cx.ownership()?;
        let payload = collect(cx.pod, &src, mode, own, cx.ctx, cx.fetched, cx.blame)?;
        let dir = cx.volume_dir(PROJECTED_PLUGIN)?;
        cx.memory(&dir)?;
        write_files(&dir, &payload, own, cx.blame)?;
        Ok(HostVolume {
            path: dir,
            read_only: true,
            kind: VolumeKind::Projected,
        })
    }

    fn set_up_before(&self, vol: &Volume, pod_dir: &Path) -> Option<HostVolume> {
        written_before(vol, pod_dir, PROJECTED_PLUGIN, VolumeKind::Projected)
    }

    fn plugin_of_spec(&self, _vol: &Volume) -> Option<String> {
        Some(VolumeKind::Projected.plugin_name().to_string())
    }
}
