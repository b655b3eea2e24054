//! The user a container runs as, resolved against its image's /etc/passwd and /etc/group
//! as the kubelet and containerd's CRI plugin resolve it together: the kubelet turns the
//! image's USER (or runAsUser) into a uid or a user name, containerd looks up the name, a
//! bare uid's primary group and the user's supplementary groups in the image's rootfs.
//!
//! An image's files never change, so they are read once per image (see
//! `Containerd::image_accounts`) from a read-only view of its top snapshot.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};

use containerd_client::services::v1::snapshots::ViewSnapshotRequest;
use containerd_client::types::Mount;
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use tracing::{debug, warn};

use super::client::{call, CALL_TIMEOUT};
use super::images::{ImageInfo, SNAPSHOTTER};
use super::{Containerd, Result, RuntimeError};

/// The most of an image's /etc/passwd or /etc/group read for a user lookup: 8 MiB is
/// about 140,000 users, far beyond a real image, and bounds what a hostile image can make
/// the agent hold in memory. containerd's CRI plugin reads the files without a bound.
pub(crate) const MAX_ACCOUNTS_FILE: u64 = 8 << 20;

/// Why an image's account files could not be read.
#[derive(Debug, thiserror::Error)]
pub enum AccountsFileError {
    #[error("{file} is larger than {limit} bytes, the most read for a user lookup")]
    TooLarge { file: &'static str, limit: u64 },
    #[error("cannot read {file}: {source}")]
    Io {
        file: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// The file's bytes, or None when it holds more than `limit` (only `limit + 1` bytes are
/// read to know). O_NOFOLLOW: a symlink put in place after the caller's check is refused
/// rather than followed into the host.
fn read_bounded(path: &Path, limit: u64) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)?;
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes)?;
    Ok((bytes.len() as u64 <= limit).then_some(bytes))
}

/// One line of /etc/passwd.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PasswdEntry {
    name: String,
    uid: u32,
    gid: u32,
}

/// One line of /etc/group.
#[derive(Debug, Clone, PartialEq, Eq)]
struct GroupEntry {
    name: String,
    gid: u32,
    members: Vec<String>,
}

/// The users and groups an image defines; empty for an image without the files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Accounts {
    users: Vec<PasswdEntry>,
    groups: Vec<GroupEntry>,
}

/// Who the container runs as before any lookup: runAsUser, else the image's user part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserRef {
    Id(u32),
    Name(String),
}

/// The OCI spec's process user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedUser {
    pub uid: u32,
    pub gid: u32,
    /// Sorted, without duplicates; holds the primary group, as containerd sets it.
    pub additional_gids: Vec<u32>,
}

/// The colon-separated fields of a passwd or group line; None for a comment, a line with
/// fewer than `min` fields or one without a name.
fn fields(line: &str, min: usize) -> Option<Vec<&str>> {
    let f: Vec<&str> = line.split(':').collect();
    (f.len() >= min && !f[0].is_empty() && !line.starts_with('#')).then_some(f)
}

impl Accounts {
    /// Parses the two files; lines that do not parse are skipped, as libc's readers skip them.
    pub fn parse(passwd: &str, group: &str) -> Accounts {
        let users = passwd
            .lines()
            .filter_map(|l| {
                let f = fields(l, 4)?;
                Some(PasswdEntry {
                    name: f[0].to_string(),
                    uid: f[2].trim().parse().ok()?,
                    gid: f[3].trim().parse().ok()?,
                })
            })
            .collect();
        let groups = group
            .lines()
            .filter_map(|l| {
                let f = fields(l, 3)?;
                Some(GroupEntry {
                    name: f[0].to_string(),
                    gid: f[2].trim().parse().ok()?,
                    members: f
                        .get(3)
                        .map(|m| {
                            m.split(',')
                                .map(str::trim)
                                .filter(|s| !s.is_empty())
                                .map(String::from)
                                .collect()
                        })
                        .unwrap_or_default(),
                })
            })
            .collect();
        Accounts { users, groups }
    }

    /// Reads `<root>/etc/passwd` and `<root>/etc/group`. A missing file counts as empty; a
    /// symlink is not followed (it would resolve against the host, not the image) and
    /// counts as missing too. Each file is read up to [`MAX_ACCOUNTS_FILE`]: an image's
    /// files are the image author's, and a larger one is refused, not read into memory.
    pub fn read(root: &Path) -> std::result::Result<Accounts, AccountsFileError> {
        let read = |rel: &'static str| -> std::result::Result<String, AccountsFileError> {
            let file = if rel == "passwd" {
                "/etc/passwd"
            } else {
                "/etc/group"
            };
            let io = |source| AccountsFileError::Io { file, source };
            let etc = root.join("etc");
            match std::fs::symlink_metadata(&etc) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => return Ok(String::new()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(String::new()),
                Err(e) => return Err(io(e)),
            }
            let path = etc.join(rel);
            match std::fs::symlink_metadata(&path) {
                Ok(m) if m.is_file() => {
                    let bytes = read_bounded(&path, MAX_ACCOUNTS_FILE).map_err(io)?;
                    let Some(bytes) = bytes else {
                        return Err(AccountsFileError::TooLarge {
                            file,
                            limit: MAX_ACCOUNTS_FILE,
                        });
                    };
                    Ok(String::from_utf8_lossy(&bytes).into_owned())
                }
                Ok(_) => Ok(String::new()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
                Err(e) => Err(io(e)),
            }
        };
        Ok(Accounts::parse(&read("passwd")?, &read("group")?))
    }

    fn by_name(&self, name: &str) -> Option<&PasswdEntry> {
        self.users.iter().find(|u| u.name == name)
    }

    fn by_uid(&self, uid: u32) -> Option<&PasswdEntry> {
        self.users.iter().find(|u| u.uid == uid)
    }

    /// Resolves `user` (with `group` from runAsGroup) into the process user, then adds
    /// `supplemental` (supplementalGroups and fsGroup). A user name the image does not
    /// define is an error; a uid it does not define runs with gid 0 unless a group is given.
    pub fn resolve(
        &self,
        user: &UserRef,
        group: Option<u32>,
        supplemental: &[u32],
    ) -> std::result::Result<ResolvedUser, String> {
        let (uid, own_gid, name) = match user {
            UserRef::Id(uid) => {
                let entry = self.by_uid(*uid);
                (
                    *uid,
                    entry.map_or(0, |e| e.gid),
                    entry.map(|e| e.name.as_str()),
                )
            }
            UserRef::Name(n) => {
                let e = self.by_name(n).ok_or_else(|| {
                    format!("unable to find user {n}: no matching entries in passwd file")
                })?;
                (e.uid, e.gid, Some(n.as_str()))
            }
        };
        let gid = group.unwrap_or(own_gid);
        let mut additional = vec![gid];
        if let Some(name) = name {
            additional.extend(
                self.groups
                    .iter()
                    .filter(|g| g.name != name && g.members.iter().any(|m| m == name))
                    .map(|g| g.gid),
            );
        }
        additional.extend_from_slice(supplemental);
        additional.sort_unstable();
        additional.dedup();
        Ok(ResolvedUser {
            uid,
            gid,
            additional_gids: additional,
        })
    }
}

type AccountsCell = tokio::sync::OnceCell<Arc<Accounts>>;

/// One read of an image's accounts and the images (target digests) that asked for it:
/// images sharing a top snapshot share the entry.
struct CacheEntry {
    cell: Arc<AccountsCell>,
    digests: HashSet<String>,
}

/// The accounts of each image top snapshot (chain id) read so far. An entry lives as long
/// as one of its images does: image GC forgets the images it removes, and each GC pass drops
/// entries whose images are all gone from containerd, so the cache does not grow with every
/// image the node ever ran.
#[derive(Default)]
pub struct AccountsCache {
    entries: Mutex<HashMap<String, CacheEntry>>,
}

impl AccountsCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, CacheEntry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cell for `chain_id`, recording `digest` as one of its images.
    fn cell(&self, chain_id: &str, digest: &str) -> Arc<AccountsCell> {
        let mut entries = self.lock();
        let entry = entries
            .entry(chain_id.to_string())
            .or_insert_with(|| CacheEntry {
                cell: Arc::default(),
                digests: HashSet::new(),
            });
        entry.digests.insert(digest.to_string());
        entry.cell.clone()
    }

    /// Drops the entries of the image with this target digest; returns how many went. An
    /// entry shared with another image goes too: that image's next container reads again.
    pub fn forget_image(&self, digest: &str) -> usize {
        let mut entries = self.lock();
        let before = entries.len();
        entries.retain(|_, e| !e.digests.contains(digest));
        before - entries.len()
    }

    /// Keeps only entries with at least one image among `present` (target digests).
    pub fn retain_images(&self, present: &HashSet<&str>) -> usize {
        let mut entries = self.lock();
        let before = entries.len();
        entries.retain(|_, e| e.digests.iter().any(|d| present.contains(d.as_str())));
        before - entries.len()
    }

    /// Top snapshots with an entry, sorted.
    pub fn chain_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.lock().keys().cloned().collect();
        ids.sort();
        ids
    }
}

/// The target digest of `image_ref` (`<repo>@<digest>`), or "" without one.
fn target_digest(image_ref: &str) -> &str {
    image_ref.rsplit_once('@').map_or("", |(_, d)| d)
}

impl Containerd {
    /// The image's accounts, read once per image (its top snapshot) and then cached: the
    /// files of an unpacked image never change. Containers of one image starting together
    /// wait for one read.
    pub async fn image_accounts(&self, image: &ImageInfo) -> Result<Arc<Accounts>> {
        let cell = self
            .accounts_cache()
            .cell(&image.chain_id, target_digest(&image.image_ref));
        cell.get_or_try_init(|| async { self.read_image_accounts(image).await.map(Arc::new) })
            .await
            .cloned()
    }

    /// Mounts a read-only view of the image's top snapshot, reads the two files, and
    /// removes the view. The view needs no lease: its mount reads only the image's own
    /// committed layers, which the image holds, so a collector pass that takes the view
    /// away half-way changes nothing.
    async fn read_image_accounts(&self, image: &ImageInfo) -> Result<Accounts> {
        let key = format!(
            "kubelet-rs-accounts-{}",
            hex::encode(rand::random::<[u8; 8]>())
        );
        let viewed = call(
            "view snapshot",
            image.chain_id.clone(),
            CALL_TIMEOUT,
            self.client()
                .snapshots()
                .view(self.req(ViewSnapshotRequest {
                    snapshotter: SNAPSHOTTER.into(),
                    key: key.clone(),
                    parent: image.chain_id.clone(),
                    labels: Default::default(),
                })),
        )
        .await;
        let result = match viewed {
            Ok(v) => {
                let mounts = v.mounts;
                tokio::task::spawn_blocking(move || read_mounted(&mounts))
                    .await
                    .map_err(|e| e.to_string())
                    .and_then(|r| r)
                    .map_err(|reason| RuntimeError::BadImage {
                        image: image.name.clone(),
                        reason: format!("cannot read /etc/passwd and /etc/group: {reason}"),
                    })
            }
            Err(e) => Err(e),
        };
        if let Err(e) = self.remove_snapshot(&key).await {
            warn!(key, error = %e, "cannot remove the accounts view");
        }
        result
    }
}

/// Mounts `mounts` (a view: one bind or one lower-only overlay) on a fresh directory,
/// reads the accounts and unmounts.
fn read_mounted(mounts: &[Mount]) -> std::result::Result<Accounts, String> {
    let [m] = mounts else {
        return Err(format!(
            "expected one mount for the view, got {}",
            mounts.len()
        ));
    };
    let dir = std::env::temp_dir().join(format!(
        "kubelet-rs-accounts-{}",
        hex::encode(rand::random::<[u8; 8]>())
    ));
    std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let result = mount_view(m, &dir).and_then(|()| {
        let read = Accounts::read(&dir).map_err(|e| e.to_string());
        if let Err(e) = umount2(&dir, MntFlags::MNT_DETACH) {
            debug!(dir = %dir.display(), error = %e, "cannot unmount the accounts view");
        }
        read
    });
    let _ = std::fs::remove_dir(&dir);
    result
}

fn mount_view(m: &Mount, target: &Path) -> std::result::Result<(), String> {
    let mut flags = MsFlags::empty();
    let mut data: Vec<&str> = Vec::new();
    for o in &m.options {
        match o.as_str() {
            "ro" => flags |= MsFlags::MS_RDONLY,
            "rw" => {}
            "bind" => flags |= MsFlags::MS_BIND,
            "rbind" => flags |= MsFlags::MS_BIND | MsFlags::MS_REC,
            other => data.push(other),
        }
    }
    let fstype = (m.r#type != "bind").then_some(m.r#type.as_str());
    if m.r#type == "bind" {
        flags |= MsFlags::MS_BIND;
    }
    let data = data.join(",");
    mount(
        Some(m.source.as_str()),
        target,
        fstype,
        flags,
        (!data.is_empty()).then_some(data.as_str()),
    )
    .map_err(|e| format!("cannot mount {} ({}): {e}", m.source, m.r#type))
}

/// The user part of an image's USER ("user", "uid", "user:group", "uid:gid"), as the
/// kubelet reads it from the image status: the group part is dropped (upstream runs an
/// image's `uid:gid` with the uid's primary group unless runAsGroup says otherwise).
pub fn image_user(user: &str) -> Option<UserRef> {
    let part = user.split(':').next().unwrap_or_default().trim();
    if part.is_empty() {
        return None;
    }
    Some(match part.parse::<u32>() {
        Ok(uid) => UserRef::Id(uid),
        Err(_) => UserRef::Name(part.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_forgets_removed_and_vanished_images() {
        let cache = AccountsCache::default();
        let a = cache.cell("sha256:chain-a", "sha256:img-a");
        // Two images on one top snapshot share the read.
        let shared = cache.cell("sha256:chain-b", "sha256:img-b1");
        assert!(Arc::ptr_eq(
            &shared,
            &cache.cell("sha256:chain-b", "sha256:img-b2")
        ));
        cache.cell("sha256:chain-c", "sha256:img-c");
        assert!(a.set(Arc::new(Accounts::default())).is_ok());
        assert_eq!(
            cache.chain_ids(),
            ["sha256:chain-a", "sha256:chain-b", "sha256:chain-c"]
        );

        assert_eq!(cache.forget_image("sha256:img-a"), 1);
        assert_eq!(cache.forget_image("sha256:img-a"), 0);
        assert_eq!(cache.chain_ids(), ["sha256:chain-b", "sha256:chain-c"]);
        // A read after forgetting starts afresh.
        assert!(cache.cell("sha256:chain-a", "sha256:img-a").get().is_none());

        // One of the two images of chain-b is still there: the entry stays.
        let present: HashSet<&str> = ["sha256:img-b2"].into();
        assert_eq!(cache.retain_images(&present), 2);
        assert_eq!(cache.chain_ids(), ["sha256:chain-b"]);
        assert_eq!(cache.retain_images(&HashSet::new()), 1);
        assert!(cache.chain_ids().is_empty());
    }

    #[test]
    fn target_digest_is_the_part_after_the_at() {
        assert_eq!(
            target_digest("docker.io/library/busybox@sha256:abc"),
            "sha256:abc"
        );
        assert_eq!(target_digest(""), "");
    }

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\n\
        # a comment\n\
        daemon:x:1:1::/:/bin/false\n\
        broken line\n\
        www:x:33:33:www:/var/www:/bin/false\n\
        app:x:1000:1000::/home/app:/bin/sh\n";
    const GROUP: &str = "root:x:0:\n\
        daemon:x:1:app\n\
        www:x:33:app,root\n\
        app:x:1000:app\n\
        staff:x:50: app , other\n\
        bad:x:notanumber:app\n";

    fn accounts() -> Accounts {
        Accounts::parse(PASSWD, GROUP)
    }

    fn user(uid: u32, gid: u32, additional: &[u32]) -> ResolvedUser {
        ResolvedUser {
            uid,
            gid,
            additional_gids: additional.to_vec(),
        }
    }

    #[test]
    fn parse_skips_comments_and_broken_lines() {
        let a = accounts();
        assert_eq!(a.users.len(), 4);
        assert_eq!(a.groups.len(), 5);
        let staff = a.groups.iter().find(|g| g.name == "staff").unwrap();
        assert_eq!(staff.members, ["app", "other"]);
    }

    #[test]
    fn a_name_gets_its_ids_and_its_groups() {
        let r = accounts()
            .resolve(&UserRef::Name("app".into()), None, &[])
            .unwrap();
        // daemon, www and staff list app; app's own group is its primary group.
        assert_eq!(r, user(1000, 1000, &[1, 33, 50, 1000]));
    }

    #[test]
    fn a_uid_gets_its_primary_group_from_passwd_or_zero() {
        let a = accounts();
        assert_eq!(
            a.resolve(&UserRef::Id(33), None, &[]).unwrap(),
            user(33, 33, &[33])
        );
        assert_eq!(
            a.resolve(&UserRef::Id(0), None, &[]).unwrap(),
            user(0, 0, &[0, 33])
        );
        assert_eq!(
            a.resolve(&UserRef::Id(4242), None, &[]).unwrap(),
            user(4242, 0, &[0])
        );
    }

    #[test]
    fn run_as_group_and_supplemental_groups_are_added() {
        let r = accounts()
            .resolve(&UserRef::Name("app".into()), Some(7), &[2000, 50, 7])
            .unwrap();
        assert_eq!(r, user(1000, 7, &[1, 7, 33, 50, 2000]));
    }

    #[test]
    fn an_unknown_name_is_an_error_and_no_files_means_no_users() {
        let e = accounts()
            .resolve(&UserRef::Name("nobody".into()), None, &[])
            .unwrap_err();
        assert!(e.contains("unable to find user nobody"), "{e}");
        let empty = Accounts::default();
        assert!(empty
            .resolve(&UserRef::Name("app".into()), None, &[])
            .is_err());
        assert_eq!(
            empty.resolve(&UserRef::Id(5), None, &[3]).unwrap(),
            user(5, 0, &[0, 3])
        );
    }

    #[test]
    fn image_user_keeps_only_the_user_part() {
        assert_eq!(image_user(""), None);
        assert_eq!(image_user("1000"), Some(UserRef::Id(1000)));
        assert_eq!(image_user("1000:50"), Some(UserRef::Id(1000)));
        assert_eq!(image_user("app:staff"), Some(UserRef::Name("app".into())));
        assert_eq!(image_user(":50"), None);
    }

    /// A hostile image's huge /etc/passwd is refused with a message naming the file, and
    /// only a bounded part of it is read.
    #[test]
    fn an_oversize_account_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("etc")).unwrap();
        let passwd = dir.path().join("etc/passwd");
        let f = std::fs::File::create(&passwd).unwrap();
        // Sparse: the size costs no disk.
        f.set_len(MAX_ACCOUNTS_FILE + 1).unwrap();
        let e = Accounts::read(dir.path()).unwrap_err();
        assert!(
            matches!(
                e,
                AccountsFileError::TooLarge {
                    file: "/etc/passwd",
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("/etc/passwd is larger than"), "{e}");
        // At the limit it is read.
        std::fs::write(&passwd, PASSWD).unwrap();
        let group = std::fs::File::create(dir.path().join("etc/group")).unwrap();
        group.set_len(MAX_ACCOUNTS_FILE).unwrap();
        assert_eq!(Accounts::read(dir.path()).unwrap().users.len(), 4);
        group.set_len(MAX_ACCOUNTS_FILE + 4096).unwrap();
        let e = Accounts::read(dir.path()).unwrap_err();
        assert!(e.to_string().starts_with("/etc/group is larger"), "{e}");
    }

    #[test]
    fn read_takes_files_and_ignores_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Accounts::read(dir.path()).unwrap(), Accounts::default());
        std::fs::create_dir(dir.path().join("etc")).unwrap();
        std::fs::write(dir.path().join("etc/passwd"), PASSWD).unwrap();
        std::os::unix::fs::symlink("/etc/group", dir.path().join("etc/group")).unwrap();
        let a = Accounts::read(dir.path()).unwrap();
        assert_eq!(a.users.len(), 4);
        assert!(a.groups.is_empty(), "the symlink must not be followed");
    }
}
