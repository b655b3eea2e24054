//! subPath and subPathExpr mounts that a container cannot redirect out of its volume.
//!
//! A container can write the volume its sibling mounts a subPath of, so any path string
//! checked here and resolved again later (by runc) can be swapped for a symlink in between
//! (CVE-2017-1002101, CVE-2021-25741). So, as upstream's `volume-subpaths`, the path is
//! checked once and then never resolved again:
//!
//! 1. the subPath is evaluated as a path (symlinks followed) and must stay inside the
//!    volume: a link within the volume pointing within it is fine;
//! 2. the evaluated path is opened from the volume root one component at a time with
//!    `openat(O_PATH|O_NOFOLLOW)`: a component swapped for a symlink since step 1 is found
//!    and refused, never followed; missing directories are made with `mkdirat` on the
//!    parent's descriptor and given the volume root's mode with `fchmod`;
//! 3. the opened descriptor (`/proc/self/fd/<fd>`, which the kernel resolves to that very
//!    inode) is bind-mounted onto `<pod_dir>/volume-subpaths/<volume>/<container>/<index>`,
//!    a file or directory only the agent can reach, and runc is handed that path.
//!
//! A target mounted by an earlier start (or an earlier run of the agent) is reused when it
//! holds the inode just opened, and unmounted and made again otherwise (the subPath now
//! names another file, e.g. a configMap's new version). The targets are unmounted and
//! removed with the pod's volumes (`teardown`).
//!
//! Everything here blocks (file system and mount syscalls): callers run on a blocking
//! thread.

use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{open, openat, OFlag};
use nix::sys::stat::{fstat, mkdirat, Mode, SFlag};
use tracing::info;

use super::mounter::Mounter;

/// The folder of a pod's dir holding the subPath bind mounts (upstream's name).
pub(crate) const SUBPATHS_DIR: &str = "volume-subpaths";

/// How often a target stacked with earlier mounts is unmounted before giving up.
const UNMOUNT_ROUNDS: usize = 8;

/// Why a subPath could not be mounted. The caller adds the pod, container, volume and
/// field; each variant names the subPath and the path at fault.
#[derive(Debug, thiserror::Error)]
pub enum SubPathError {
    #[error("{sub:?} must not be an absolute path")]
    Absolute { sub: String },
    #[error("{sub:?} must not contain '..'")]
    ParentDir { sub: String },
    #[error("{sub:?} leads outside the volume (through {path})")]
    Escapes { sub: String, path: PathBuf },
    #[error("{sub:?}: {path} is not a directory")]
    NotDirectory { sub: String, path: PathBuf },
    /// A component turned into a symlink between the check and the open: someone with
    /// write access to the volume is racing the agent.
    #[error("{sub:?}: {path} became a symlink while the subPath was being opened; refusing to follow it")]
    Swapped { sub: String, path: PathBuf },
    #[error("{sub:?}: cannot {op} {path}: {source}")]
    Io {
        sub: String,
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Where volumeMounts[`index`] of `container` binds its subPath of `volume`.
pub(crate) fn target_path(pod_dir: &Path, volume: &str, container: &str, index: usize) -> PathBuf {
    pod_dir
        .join(SUBPATHS_DIR)
        .join(volume)
        .join(container)
        .join(index.to_string())
}

/// Opens `base/sub` safely (making missing directories with the volume root's mode),
/// bind-mounts it onto `target` and returns `target`: the mount source for runc.
pub(crate) fn bind_sub_path(
    base: &Path,
    sub: &str,
    target: &Path,
    m: &dyn Mounter,
) -> Result<PathBuf, SubPathError> {
    let fd = open_sub_path(base, sub)?;
    bind_fd(&fd, sub, target, m)?;
    Ok(target.to_path_buf())
}

/// Maps an I/O error of `op` on `path` while resolving `sub`.
fn io_error(sub: &str, op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> SubPathError {
    let (sub, path) = (sub.to_string(), path.to_path_buf());
    move |source| SubPathError::Io {
        sub,
        op,
        path,
        source,
    }
}

/// `base/sub` opened without following any symlink that was not checked to stay inside
/// `base`; missing directories are made (mode of `base`, umask ignored, as upstream).
pub(crate) fn open_sub_path(base: &Path, sub: &str) -> Result<OwnedFd, SubPathError> {
    let io_err = |op: &'static str, path: &Path| io_error(sub, op, path);
    if sub.starts_with('/') {
        return Err(SubPathError::Absolute { sub: sub.into() });
    }
    let rel = Path::new(sub);
    if rel.components().any(|c| c == Component::ParentDir) {
        return Err(SubPathError::ParentDir { sub: sub.into() });
    }
    let base_real = fs::canonicalize(base).map_err(io_err("resolve the volume path", base))?;
    let base_mode = fs::metadata(&base_real)
        .map_err(io_err("read the volume path", &base_real))?
        .permissions()
        .mode()
        & 0o7777;
    let (existing, to_create) = evaluate(&base_real, sub)?;
    open_evaluated(&base_real, base_mode, &existing, &to_create, sub)
}

/// Step 2: opens what `evaluate` found from the volume root, one component at a time and
/// following no symlink (any found now was swapped in since), then makes `to_create`.
fn open_evaluated(
    base_real: &Path,
    base_mode: u32,
    existing: &Path,
    to_create: &[OsString],
    sub: &str,
) -> Result<OwnedFd, SubPathError> {
    let io_err = |op: &'static str, path: &Path| io_error(sub, op, path);
    // The volume root itself is the agent's (or the pod spec's hostPath): no container
    // can swap it, but it is opened without following a last-moment link anyway.
    let mut cur = open(
        base_real,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io_err("open", base_real)(e.into()))?;
    let mut path = base_real.to_path_buf();
    let rel_existing = existing
        .strip_prefix(base_real)
        .expect("evaluate keeps the path inside the volume")
        .to_path_buf();
    let n_existing = rel_existing.components().count();
    for (i, part) in rel_existing.components().enumerate() {
        path.push(part);
        let next = openat(
            cur.as_fd(),
            part.as_os_str(),
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io_err("open", &path)(e.into()))?;
        let st = fstat(next.as_fd()).map_err(|e| io_err("stat", &path)(e.into()))?;
        let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
        if kind == SFlag::S_IFLNK {
            return Err(SubPathError::Swapped {
                sub: sub.into(),
                path,
            });
        }
        let last = i + 1 == n_existing && to_create.is_empty();
        if !last && kind != SFlag::S_IFDIR {
            return Err(SubPathError::NotDirectory {
                sub: sub.into(),
                path,
            });
        }
        cur = next;
    }
    let mode = Mode::from_bits_truncate(base_mode);
    for part in to_create {
        path.push(part);
        let made = match mkdirat(cur.as_fd(), part.as_os_str(), mode) {
            Ok(()) => true,
            // Made meanwhile (by the container, or a sibling starting): used if it is a
            // real directory, refused below if it is anything else.
            Err(Errno::EEXIST) => false,
            Err(e) => return Err(io_err("create", &path)(e.into())),
        };
        let next = openat(
            cur.as_fd(),
            part.as_os_str(),
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            // O_DIRECTORY refuses a symlink with ENOTDIR, before O_NOFOLLOW's ELOOP.
            Errno::ELOOP | Errno::ENOTDIR if is_symlink_at(&cur, part) => SubPathError::Swapped {
                sub: sub.into(),
                path: path.clone(),
            },
            Errno::ENOTDIR => SubPathError::NotDirectory {
                sub: sub.into(),
                path: path.clone(),
            },
            e => io_err("open", &path)(e.into()),
        })?;
        if made {
            // mkdirat's mode went through the umask; the volume root's mode is wanted (a
            // group-writable volume stays so).
            nix::sys::stat::fchmod(next.as_fd(), mode)
                .map_err(|e| io_err("set the mode of", &path)(e.into()))?;
        }
        cur = next;
    }
    Ok(cur)
}

/// Whether `name` in the directory `dir` is a symlink (not following it).
fn is_symlink_at(dir: &OwnedFd, name: &std::ffi::OsStr) -> bool {
    nix::sys::stat::fstatat(dir.as_fd(), name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
        .is_ok_and(|st| SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK)
}

/// The subPath evaluated as a path: the longest existing prefix with its symlinks resolved
/// (checked to stay inside `base_real`), and the components after it that do not exist.
fn evaluate(base_real: &Path, sub: &str) -> Result<(PathBuf, Vec<OsString>), SubPathError> {
    let parts: Vec<OsString> = Path::new(sub)
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_os_string()),
            _ => None,
        })
        .collect();
    let mut cur = base_real.to_path_buf();
    for (i, part) in parts.iter().enumerate() {
        let next = cur.join(part);
        match fs::symlink_metadata(&next) {
            Ok(_) => {
                let real = fs::canonicalize(&next).map_err(|source| SubPathError::Io {
                    sub: sub.into(),
                    op: "resolve",
                    path: next.clone(),
                    source,
                })?;
                if !real.starts_with(base_real) {
                    return Err(SubPathError::Escapes {
                        sub: sub.into(),
                        path: next,
                    });
                }
                cur = real;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ok((cur, parts[i..].to_vec()));
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => {
                return Err(SubPathError::NotDirectory {
                    sub: sub.into(),
                    path: cur,
                })
            }
            Err(source) => {
                return Err(SubPathError::Io {
                    sub: sub.into(),
                    op: "read",
                    path: next,
                    source,
                })
            }
        }
    }
    Ok((cur, Vec::new()))
}

/// Binds what `fd` refers to onto `target` (made as a file or directory to match), reusing
/// a mount already there when it shows the same inode.
fn bind_fd(fd: &OwnedFd, sub: &str, target: &Path, m: &dyn Mounter) -> Result<(), SubPathError> {
    let io_err = |op: &'static str, path: &Path| io_error(sub, op, path);
    if !target.is_absolute() {
        return Err(io_err("bind onto", target)(io::Error::other(
            "the bind target must be an absolute path (the pod's dir is unknown)",
        )));
    }
    let st = fstat(fd.as_fd()).map_err(|e| io_err("stat the opened", target)(e.into()))?;
    let is_dir = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR;
    for round in 0..=UNMOUNT_ROUNDS {
        if m.mounted_fs(target)
            .map_err(io_err("check mounts at", target))?
            .is_none()
        {
            break;
        }
        if round == UNMOUNT_ROUNDS {
            return Err(io_err("unmount", target)(io::Error::other(
                "still mounted after repeated unmounts",
            )));
        }
        // The target is the agent's own path: stat may follow it.
        let now = fs::metadata(target).map_err(io_err("stat", target))?;
        if now.dev() == st.st_dev as u64 && now.ino() == st.st_ino as u64 {
            return Ok(());
        }
        m.unmount(target).map_err(io_err("unmount", target))?;
        info!(path = %target.display(), "unmounted a stale subPath bind mount");
    }
    if let Some(parent) = target.parent() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o750)
            .create(parent)
            .map_err(io_err("create", parent))?;
    }
    match fs::symlink_metadata(target) {
        Ok(meta) if meta.is_dir() == is_dir && !meta.file_type().is_symlink() => {}
        Ok(meta) => {
            // Made for a source of the other type (or never finished): not mounted, so
            // removing it touches nothing but the agent's placeholder.
            let removed = if meta.is_dir() {
                fs::remove_dir(target)
            } else {
                fs::remove_file(target)
            };
            removed.map_err(io_err("remove", target))?;
            make_target(target, is_dir).map_err(io_err("create", target))?;
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            make_target(target, is_dir).map_err(io_err("create", target))?;
        }
        Err(e) => return Err(io_err("stat", target)(e)),
    }
    let source = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    m.bind(&source, target)
        .map_err(io_err("bind-mount onto", target))?;
    Ok(())
}

/// The placeholder a bind mount covers: a directory for a directory, an empty file for
/// anything else (a file target takes any non-directory source).
fn make_target(target: &Path, is_dir: bool) -> io::Result<()> {
    if is_dir {
        fs::DirBuilder::new().mode(0o750).create(target)
    } else {
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o640)
            .open(target)
            .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::volume::mounter::{parse_mountinfo, FakeMounter, SysMounter};
    use std::os::unix::fs::symlink;

    /// A volume holding `x/inside` (a marker), and a scratch dir outside it standing for
    /// the host (`/etc`-like), holding `host-marker`.
    fn volume_and_host() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let vol = tmp.path().join("vol");
        fs::create_dir_all(vol.join("x")).unwrap();
        fs::write(vol.join("x/inside"), "volume").unwrap();
        let host = tmp.path().join("host");
        fs::create_dir_all(&host).unwrap();
        fs::write(host.join("host-marker"), "host").unwrap();
        (tmp, vol, host)
    }

    /// Replaces `dir` by a symlink to `to`, keeping the directory aside as `<dir>.moved`.
    fn swap_for_link(dir: &Path, to: &Path) {
        let aside = dir.with_extension("moved");
        fs::rename(dir, &aside).unwrap();
        symlink(to, dir).unwrap();
    }

    /// The path an fd stands for, as the kernel sees it.
    fn fd_path(fd: &OwnedFd) -> PathBuf {
        fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap()
    }

    fn mounts_at_or_below(dir: &Path) -> Vec<PathBuf> {
        let dir = fs::canonicalize(dir).unwrap();
        parse_mountinfo(&fs::read_to_string("/proc/self/mountinfo").unwrap())
            .into_iter()
            .map(|(p, _)| p)
            .filter(|p| p.starts_with(&dir))
            .collect()
    }

    /// Whether the mount on top at `point` is read-only (mountinfo's options).
    fn read_only_at(point: &Path) -> bool {
        let point = fs::canonicalize(point).unwrap();
        fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .rev()
            .find(|l| l.split(' ').nth(4).map(PathBuf::from) == Some(point.clone()))
            .and_then(|l| l.split(' ').nth(5))
            .is_some_and(|o| o.split(',').any(|o| o == "ro"))
    }

    #[test]
    fn a_symlink_leading_outside_is_refused_at_any_component() {
        let (tmp, vol, host) = volume_and_host();
        symlink(&host, vol.join("abs")).unwrap();
        symlink("../host", vol.join("rel")).unwrap();
        fs::create_dir(vol.join("d")).unwrap();
        symlink("../../host", vol.join("d/deep")).unwrap();
        for sub in ["abs", "rel", "abs/new", "d/deep", "d/deep/new/er"] {
            match open_sub_path(&vol, sub) {
                Err(SubPathError::Escapes { .. }) => {}
                other => panic!("{sub}: {other:?}"),
            }
        }
        assert_eq!(
            fs::read_dir(&host).unwrap().count(),
            1,
            "nothing made outside"
        );
        // A link inside the volume to inside it is evaluated, as upstream.
        symlink("x", vol.join("good")).unwrap();
        let fd = open_sub_path(&vol, "good").unwrap();
        assert_eq!(fd_path(&fd), fs::canonicalize(vol.join("x")).unwrap());
        drop(tmp);
    }

    /// The race itself: the subPath is checked, then a component becomes a symlink to the
    /// host before it is opened. The descriptor walk finds the link and refuses it.
    #[test]
    fn a_component_swapped_for_a_symlink_after_the_check_is_refused() {
        let (_tmp, vol, host) = volume_and_host();
        let base = fs::canonicalize(&vol).unwrap();
        for sub in ["x", "x/new", "x/inside"] {
            fs::create_dir_all(vol.join("x")).unwrap();
            let (existing, to_create) = evaluate(&base, sub).unwrap();
            swap_for_link(&vol.join("x"), &host);
            match open_evaluated(&base, 0o755, &existing, &to_create, sub) {
                Err(SubPathError::Swapped { path, .. }) => assert_eq!(path, base.join("x")),
                other => panic!("{sub}: {other:?}"),
            }
            assert!(
                !host.join("new").exists(),
                "{sub}: nothing made on the host"
            );
            fs::remove_file(vol.join("x")).unwrap();
            fs::rename(vol.join("x.moved"), vol.join("x")).unwrap();
        }
        // A directory to create that appears as a symlink before mkdirat.
        let (existing, to_create) = evaluate(&base, "x/late").unwrap();
        symlink(&host, vol.join("x/late")).unwrap();
        match open_evaluated(&base, 0o755, &existing, &to_create, "x/late") {
            Err(SubPathError::Swapped { .. }) => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn created_directories_get_the_volume_mode_despite_the_umask() {
        let (_tmp, vol, _) = volume_and_host();
        fs::set_permissions(&vol, fs::Permissions::from_mode(0o2775)).unwrap();
        let fd = open_sub_path(&vol, "a/b/c").unwrap();
        assert_eq!(fd_path(&fd), fs::canonicalize(vol.join("a/b/c")).unwrap());
        for d in ["a", "a/b", "a/b/c"] {
            let mode = fs::metadata(vol.join(d)).unwrap().permissions().mode() & 0o7777;
            assert_eq!(mode, 0o2775, "{d}");
        }
        // An existing directory keeps its own mode.
        fs::set_permissions(vol.join("a"), fs::Permissions::from_mode(0o700)).unwrap();
        open_sub_path(&vol, "a/b/d").unwrap();
        let mode = fs::metadata(vol.join("a")).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o700);
        match open_sub_path(&vol, "x/inside/under-a-file") {
            Err(SubPathError::NotDirectory { .. }) => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_target_matches_the_source_type_and_is_remade_when_it_does_not() {
        let (tmp, vol, _) = volume_and_host();
        let target = tmp.path().join("pod/volume-subpaths/v/c/0");
        let m = FakeMounter::default();
        bind_sub_path(&vol, "x/inside", &target, &m).unwrap();
        assert!(target.is_file(), "a file target for a file");
        m.mounted.lock().unwrap().clear();
        bind_sub_path(&vol, "x", &target, &m).unwrap();
        assert!(target.is_dir(), "remade as a directory");
        let binds = m.binds.lock().unwrap().clone();
        let x = fs::canonicalize(vol.join("x")).unwrap();
        assert_eq!(binds[0].0, x.join("inside"));
        assert_eq!(binds[1], (x, target.clone()));
    }

    fn is_root() -> bool {
        nix::unistd::geteuid().is_root()
    }

    /// Tears the pod's subPath mounts down however the test ends, so a failed assertion
    /// leaks no mount into the host's table.
    struct TearDownOnDrop(PathBuf);

    impl Drop for TearDownOnDrop {
        fn drop(&mut self) {
            let _ = super::super::teardown::teardown(&self.0, &SysMounter);
        }
    }

    /// resolve+open, then the directory is swapped for a symlink to a host dir, then the
    /// descriptor is bind-mounted: the mount shows the original directory.
    #[test]
    #[ignore = "needs root: run hack/test.sh"]
    fn a_swap_after_the_open_does_not_redirect_the_bind_mount() {
        assert!(is_root(), "bind mounts need root");
        let (tmp, vol, host) = volume_and_host();
        let pod_dir = tmp.path().join("pod");
        let _guard = TearDownOnDrop(pod_dir.clone());
        let fd = open_sub_path(&vol, "x").unwrap();
        swap_for_link(&vol.join("x"), &host);
        let target = target_path(&pod_dir, "v", "c", 0);
        bind_fd(&fd, "x", &target, &SysMounter).unwrap();
        drop(fd);
        let seen: Vec<_> = fs::read_dir(&target)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        super::super::teardown::teardown(&pod_dir, &SysMounter).unwrap();
        assert_eq!(seen, vec![OsString::from("inside")], "the volume's x");
        // What the path the check saw leads to now: a mount of it would show the host.
        assert!(vol.join("x/host-marker").exists());
    }

    /// A second start reuses the mount; a subPath now naming another inode is rebound;
    /// teardown leaves no mount and the volume's data.
    #[test]
    #[ignore = "needs root: run hack/test.sh"]
    fn binds_are_reused_rebound_and_torn_down_without_leaks() {
        assert!(is_root(), "bind mounts need root");
        let (tmp, vol, _) = volume_and_host();
        let pod_dir = tmp.path().join("pod");
        let _guard = TearDownOnDrop(pod_dir.clone());
        let sys = SysMounter;
        let dir_target = target_path(&pod_dir, "v", "c", 0);
        let file_target = target_path(&pod_dir, "v", "c", 1);
        bind_sub_path(&vol, "x", &dir_target, &sys).unwrap();
        bind_sub_path(&vol, "x/inside", &file_target, &sys).unwrap();
        assert_eq!(fs::read_to_string(file_target.clone()).unwrap(), "volume");
        // Marked (read-only) to tell the mount kept from one made again.
        nix::mount::mount(
            None::<&str>,
            &dir_target,
            None::<&str>,
            nix::mount::MsFlags::MS_REMOUNT
                | nix::mount::MsFlags::MS_BIND
                | nix::mount::MsFlags::MS_RDONLY,
            None::<&str>,
        )
        .unwrap();
        assert!(read_only_at(&dir_target));
        // Again, as a restarted container (or a restarted agent) does.
        bind_sub_path(&vol, "x", &dir_target, &sys).unwrap();
        bind_sub_path(&vol, "x/inside", &file_target, &sys).unwrap();
        let reused = read_only_at(&dir_target);
        assert_eq!(mounts_at_or_below(&pod_dir).len(), 2, "nothing stacked");
        assert!(reused, "the mount in place was reused");
        // The file now is another inode (a configMap's new version): rebound.
        fs::remove_file(vol.join("x/inside")).unwrap();
        fs::write(vol.join("x/inside"), "new").unwrap();
        bind_sub_path(&vol, "x/inside", &file_target, &sys).unwrap();
        assert_eq!(fs::read_to_string(&file_target).unwrap(), "new");
        assert_eq!(
            mounts_at_or_below(&pod_dir).len(),
            2,
            "rebound, not stacked"
        );

        super::super::teardown::teardown(&pod_dir, &sys).unwrap();
        assert_eq!(mounts_at_or_below(tmp.path()), Vec::<PathBuf>::new());
        assert!(!pod_dir.join(SUBPATHS_DIR).exists());
        assert_eq!(
            fs::read_to_string(vol.join("x/inside")).unwrap(),
            "new",
            "the volume's data stays"
        );
    }
}
