//! Which file containerd's shim executes as a container's log writer.
//!
//! The shim is a host process: it executes the path of a task's `binary://` URI in the host's
//! mount namespace. When the agent runs on the host, its own executable is that path. When it
//! runs in a container (the Dockerfile's DaemonSet mode), its executable lives in the image's
//! rootfs, which the host cannot see; the agent then installs a copy of itself under the root
//! dir, which the DaemonSet mounts from the host at the same path, and names that copy.
//!
//! The copy is replaced by write-then-rename only when its bytes differ, so a log writer
//! already running keeps its (unlinked) inode across an agent upgrade and a new container's
//! writer starts the new binary.

use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
use tracing::info;

/// The directory under `--root-dir` holding the installed copy.
pub const LOGGER_BINARY_DIR: &str = "bin";
/// The installed copy's file name.
pub const LOGGER_BINARY_NAME: &str = "kubelet-rs";
const TEMP_PREFIX: &str = ".kubelet-rs.tmp-";

#[derive(Debug, thiserror::Error)]
pub enum LoggerBinaryError {
    #[error("cannot read the agent's own executable {path}")]
    ReadOwn {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot install the container log writer at {path}")]
    Install {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// The log writer's path as the shim sees it: the agent's own executable when containerd
/// (whose mount namespace its shims inherit) sees that very file at the same path, else a
/// copy installed under `root_dir`.
///
/// containerd is found as the peer of its socket `runtime_socket`. When it cannot be seen
/// (a container without hostPID reads its pid as 0) or its root cannot be read, the copy is
/// the safe side: the root dir is a host path in every supported setup.
pub fn logger_executable(
    root_dir: &Path,
    runtime_socket: &Path,
) -> Result<PathBuf, LoggerBinaryError> {
    // /proc/self/exe opens the running binary even when its file was replaced or removed.
    let own = Path::new("/proc/self/exe");
    let exe = std::env::current_exe().map_err(|source| LoggerBinaryError::ReadOwn {
        path: own.to_path_buf(),
        source,
    })?;
    if let Some(pid) = socket_peer_pid(runtime_socket) {
        if visible_at(
            &Path::new("/proc").join(pid.to_string()).join("root"),
            &exe,
            own,
        ) {
            return Ok(exe);
        }
    }
    let installed = install_copy(own, &root_dir.join(LOGGER_BINARY_DIR))?;
    info!(
        own = %exe.display(),
        logger = %installed.display(),
        "containerd cannot see the agent's executable: containers' log writer is the installed copy"
    );
    Ok(installed)
}

/// The pid of the process serving a Unix socket, as this process's pid namespace numbers it.
fn socket_peer_pid(socket: &Path) -> Option<i32> {
    let stream = std::os::unix::net::UnixStream::connect(socket).ok()?;
    let cred = getsockopt(&stream, PeerCredentials).ok()?;
    // 0: the peer lives in a pid namespace this one cannot see.
    (cred.pid() > 0).then_some(cred.pid())
}

/// Whether `path` under `root` is the same file as `own` (device and inode).
fn visible_at(root: &Path, path: &Path, own: &Path) -> bool {
    let Ok(relative) = path.strip_prefix("/") else {
        return false;
    };
    match (fs::metadata(root.join(relative)), fs::metadata(own)) {
        (Ok(seen), Ok(own)) => seen.dev() == own.dev() && seen.ino() == own.ino(),
        _ => false,
    }
}

/// Makes `dir/kubelet-rs` hold the bytes of `source` and returns its path. An existing copy
/// with the same bytes is kept (same inode); a different one is replaced atomically.
fn install_copy(source: &Path, dir: &Path) -> Result<PathBuf, LoggerBinaryError> {
    let target = dir.join(LOGGER_BINARY_NAME);
    let install_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| LoggerBinaryError::Install { path, source }
    };
    fs::create_dir_all(dir).map_err(install_err(dir))?;
    remove_stale_temps(dir);
    if same_bytes(source, &target).map_err(|e| LoggerBinaryError::ReadOwn {
        path: source.to_path_buf(),
        source: e,
    })? {
        return Ok(target);
    }
    let temp = dir.join(format!("{TEMP_PREFIX}{}", std::process::id()));
    let written = write_copy(source, &temp);
    if let Err(e) = written {
        let _ = fs::remove_file(&temp);
        return Err(e);
    }
    fs::rename(&temp, &target).map_err(|e| {
        let _ = fs::remove_file(&temp);
        LoggerBinaryError::Install {
            path: target.clone(),
            source: e,
        }
    })?;
    // The rename is durable only once the directory is.
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(install_err(dir))?;
    Ok(target)
}

fn write_copy(source: &Path, temp: &Path) -> Result<(), LoggerBinaryError> {
    let mut from = File::open(source).map_err(|e| LoggerBinaryError::ReadOwn {
        path: source.to_path_buf(),
        source: e,
    })?;
    let install = |e| LoggerBinaryError::Install {
        path: temp.to_path_buf(),
        source: e,
    };
    let mut to = File::create(temp).map_err(install)?;
    io::copy(&mut from, &mut to).map_err(install)?;
    to.set_permissions(fs::Permissions::from_mode(0o755))
        .map_err(install)?;
    to.sync_all().map_err(install)
}

/// Temp files left by an agent that died while copying.
fn remove_stale_temps(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_name().to_string_lossy().starts_with(TEMP_PREFIX) {
            let _ = fs::remove_file(e.path());
        }
    }
}

/// Whether `target` exists with exactly the bytes of `source`. A missing or unreadable
/// target is "no" (it gets replaced); an unreadable source is an error.
fn same_bytes(source: &Path, target: &Path) -> io::Result<bool> {
    let mut a = File::open(source)?;
    let Ok(mut b) = File::open(target) else {
        return Ok(false);
    };
    let (Ok(mb), Ok(ma)) = (b.metadata(), a.metadata()) else {
        return Ok(false);
    };
    // /proc/self/exe reports the real size; a size mismatch settles it without reading.
    if ma.len() != mb.len() {
        return Ok(false);
    }
    let (mut ba, mut bb) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    loop {
        let n = read_full(&mut a, &mut ba)?;
        let Ok(m) = read_full(&mut b, &mut bb) else {
            return Ok(false);
        };
        if n != m || ba[..n] != bb[..m] {
            return Ok(false);
        }
        if n == 0 {
            return Ok(true);
        }
    }
}

/// Reads until `buf` is full or end-of-file.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match r.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_exe(path: &Path, bytes: &[u8]) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, bytes).unwrap();
    }

    #[test]
    fn own_file_at_the_same_path_is_visible() {
        let d = tempfile::tempdir().unwrap();
        let exe = d.path().join("usr/bin/agent");
        write_exe(&exe, b"agent");
        // The root "/" sees the file at its own path.
        assert!(visible_at(Path::new("/"), &exe, &exe));
    }

    #[test]
    fn a_host_root_without_the_file_or_with_another_file_is_not_visible() {
        let image = tempfile::tempdir().unwrap();
        let host = tempfile::tempdir().unwrap();
        let own = image.path().join("usr/local/bin/kubelet-rs");
        write_exe(&own, b"agent");
        let path = Path::new("/usr/local/bin/kubelet-rs");
        assert!(!visible_at(host.path(), path, &own), "missing on the host");
        // Same path and same bytes, but another file: the host would run its own binary.
        write_exe(&host.path().join("usr/local/bin/kubelet-rs"), b"agent");
        assert!(!visible_at(host.path(), path, &own), "another inode");
        assert!(!visible_at(host.path(), Path::new("relative"), &own));
    }

    #[test]
    fn installs_an_executable_copy() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("src");
        // Larger than one compare buffer, so the chunked comparison is exercised.
        let bytes: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        write_exe(&src, &bytes);
        let dir = d.path().join("root/bin");
        let installed = install_copy(&src, &dir).unwrap();
        assert_eq!(installed, dir.join(LOGGER_BINARY_NAME));
        assert_eq!(fs::read(&installed).unwrap(), bytes);
        let mode = fs::metadata(&installed).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o755);
    }

    #[test]
    fn an_identical_copy_is_kept_and_a_changed_one_replaced_without_touching_readers() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("src");
        let dir = d.path().join("bin");
        write_exe(&src, b"version one");
        let installed = install_copy(&src, &dir).unwrap();
        let first_ino = fs::metadata(&installed).unwrap().ino();
        // A log writer running the first version holds its file open.
        let mut running = File::open(&installed).unwrap();

        install_copy(&src, &dir).unwrap();
        assert_eq!(fs::metadata(&installed).unwrap().ino(), first_ino, "kept");

        // Same length, other bytes: an upgrade must not be mistaken for the same binary.
        write_exe(&src, b"version two");
        install_copy(&src, &dir).unwrap();
        assert_ne!(fs::metadata(&installed).unwrap().ino(), first_ino);
        assert_eq!(fs::read(&installed).unwrap(), b"version two");
        let mut old = String::new();
        running.read_to_string(&mut old).unwrap();
        assert_eq!(old, "version one", "the running writer's file is untouched");
    }

    #[test]
    fn temp_files_of_an_interrupted_copy_are_removed() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("src");
        let dir = d.path().join("bin");
        write_exe(&src, b"agent");
        write_exe(&dir.join(format!("{TEMP_PREFIX}4242")), b"half");
        install_copy(&src, &dir).unwrap();
        let names: Vec<String> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec![LOGGER_BINARY_NAME.to_string()]);
    }

    #[test]
    fn an_unreadable_source_names_the_file() {
        let d = tempfile::tempdir().unwrap();
        let missing = d.path().join("gone");
        let err = install_copy(&missing, &d.path().join("bin")).unwrap_err();
        assert!(
            matches!(&err, LoggerBinaryError::ReadOwn { path, .. } if path == &missing),
            "{err}"
        );
    }

    #[test]
    fn when_the_runtime_sees_the_executable_it_is_named_as_it_is() {
        // The socket's peer is this very process, which sees its own executable.
        let d = tempfile::tempdir().unwrap();
        let socket = d.path().join("runtime.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        assert_eq!(socket_peer_pid(&socket), Some(std::process::id() as i32));
        let path = logger_executable(d.path(), &socket).unwrap();
        assert_eq!(path, std::env::current_exe().unwrap());
        assert!(
            !d.path().join(LOGGER_BINARY_DIR).exists(),
            "nothing installed"
        );
    }

    #[test]
    fn when_the_runtime_cannot_be_seen_a_copy_is_installed() {
        let d = tempfile::tempdir().unwrap();
        let path = logger_executable(d.path(), &d.path().join("no.sock")).unwrap();
        assert_eq!(path, d.path().join("bin/kubelet-rs"));
        let own = fs::read("/proc/self/exe").unwrap();
        assert!(
            fs::read(&path).unwrap() == own,
            "a copy of the running binary"
        );
    }
}
