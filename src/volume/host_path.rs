//! hostPath volumes: upstream's type checks, with its messages. The checks follow
//! symlinks (a link to a directory passes `Directory`), as upstream's `stat` does.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Volume;

use super::source::{SetUp, VolumeSource};
use super::{HostVolume, VolumeError, VolumeKind};

/// Why a hostPath cannot be used, in upstream's words; the caller adds the pod and volume.
#[derive(Debug, thiserror::Error)]
pub enum HostPathError {
    #[error("hostPath type check failed: {} is not {what}", path.display())]
    TypeCheck {
        path: PathBuf,
        /// `a directory`, `a file`, `a socket file`, ...
        what: &'static str,
    },
    #[error("{0} is an invalid volume type")]
    InvalidType(String),
    #[error("cannot check hostPath {}: {source}", path.display())]
    Check {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot create hostPath directory {}: {source}", path.display())]
    CreateDir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot create hostPath file {}: {source}", path.display())]
    CreateFile {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("is required")]
    Required,
    #[error("{0:?} must be an absolute path")]
    NotAbsolute(String),
    #[error("{0:?} must not contain '..'")]
    DotDot(String),
}

/// Checks (and for the `…OrCreate` types, creates) `path` as `type_` demands. The error is
/// upstream's wording, for the caller to wrap with the pod and volume.
pub fn check_type(path: &Path, type_: &str) -> Result<(), HostPathError> {
    let stat = || fs::metadata(path).map(|m| m.file_type());
    let is = |want: &dyn Fn(fs::FileType) -> bool, what: &'static str| {
        if stat().map(want).unwrap_or(false) {
            Ok(())
        } else {
            Err(HostPathError::TypeCheck {
                path: path.to_path_buf(),
                what,
            })
        }
    };
    match type_ {
        // Unset: no check at all (the runtime creates a missing path as a directory).
        "" => Ok(()),
        "DirectoryOrCreate" if !exists(path)? => make_dir(path),
        "DirectoryOrCreate" | "Directory" => is(&|t| t.is_dir(), "a directory"),
        "FileOrCreate" if !exists(path)? => make_file(path),
        "FileOrCreate" | "File" => is(&|t| t.is_file(), "a file"),
        "Socket" => is(&|t| t.is_socket(), "a socket file"),
        "CharDevice" => is(&|t| t.is_char_device(), "a character device"),
        "BlockDevice" => is(&|t| t.is_block_device(), "a block device"),
        other => Err(HostPathError::InvalidType(other.to_string())),
    }
}

fn exists(path: &Path) -> Result<bool, HostPathError> {
    match fs::metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(HostPathError::Check {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// DirectoryOrCreate: the directory and its missing parents, mode 0755.
fn make_dir(path: &Path) -> Result<(), HostPathError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(path)
        .map_err(|source| HostPathError::CreateDir {
            path: path.to_path_buf(),
            source,
        })
}

/// FileOrCreate: an empty file, mode 0644. Like upstream, the parent directory is not
/// created: a missing parent fails the pod.
fn make_file(path: &Path) -> Result<(), HostPathError> {
    fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .open(path)
        .map(drop)
        .map_err(|source| HostPathError::CreateFile {
            path: path.to_path_buf(),
            source,
        })
}

/// Validates the path itself as the apiserver would: required, absolute (this agent has
/// no sensible base for a relative one) and without `..` elements.
pub fn check_path(path: &str) -> Result<(), HostPathError> {
    if path.is_empty() {
        return Err(HostPathError::Required);
    }
    if !path.starts_with('/') {
        return Err(HostPathError::NotAbsolute(path.to_string()));
    }
    if path.split('/').any(|s| s == "..") {
        return Err(HostPathError::DotDot(path.to_string()));
    }
    Ok(())
}

/// hostPath: a path of the node, used where it is after upstream's type checks.
pub(super) struct HostPath;

impl VolumeSource for HostPath {
    fn field(&self) -> &'static str {
        "hostPath"
    }

    fn set_up(&self, cx: &SetUp<'_>, vol: &Volume) -> Result<HostVolume, VolumeError> {
        let hp = vol.host_path.clone().unwrap_or_default();
        check_path(&hp.path).map_err(|r| cx.blame.invalid("hostPath.path", r.to_string()))?;
        let path = PathBuf::from(&hp.path);
        check_type(&path, hp.type_.as_deref().unwrap_or(""))
            .map_err(|r| cx.blame.failed(r.to_string()))?;
        Ok(HostVolume {
            path,
            read_only: false,
            kind: VolumeKind::HostPath,
        })
    }

    fn plugin_of_spec(&self, _vol: &Volume) -> Option<String> {
        Some(VolumeKind::HostPath.plugin_name().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::net::UnixListener;

    #[test]
    fn directory_types() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("d");
        let e = check_type(&dir, "Directory").unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "hostPath type check failed: {} is not a directory",
                dir.display()
            )
        );
        check_type(&dir.join("x/y"), "DirectoryOrCreate").unwrap();
        assert!(dir.join("x/y").is_dir());
        check_type(&dir, "Directory").unwrap();
        check_type(&dir, "DirectoryOrCreate").unwrap();
        let file = tmp.path().join("f");
        fs::write(&file, "x").unwrap();
        let e = check_type(&file, "DirectoryOrCreate")
            .unwrap_err()
            .to_string();
        assert!(e.ends_with("is not a directory"), "{e}");
    }

    #[test]
    fn file_types() {
        let tmp = tempfile::tempdir().unwrap();
        let f = tmp.path().join("f");
        assert!(check_type(&f, "File")
            .unwrap_err()
            .to_string()
            .ends_with("is not a file"));
        check_type(&f, "FileOrCreate").unwrap();
        let meta = fs::metadata(&f).unwrap();
        assert!(meta.is_file());
        assert_eq!(meta.len(), 0);
        // 0644 requested; the umask may only take bits away.
        assert_eq!(meta.permissions().mode() & 0o133, 0);
        fs::write(&f, "keep").unwrap();
        check_type(&f, "FileOrCreate").unwrap();
        assert_eq!(
            fs::read_to_string(&f).unwrap(),
            "keep",
            "existing file untouched"
        );
        check_type(&f, "File").unwrap();
        let e = check_type(tmp.path(), "File").unwrap_err().to_string();
        assert!(e.ends_with("is not a file"), "{e}");
        // The parent is not created, as upstream.
        assert!(check_type(&tmp.path().join("no/such"), "FileOrCreate").is_err());
    }

    #[test]
    fn socket_and_devices() {
        let tmp = tempfile::tempdir().unwrap();
        let sock = tmp.path().join("s.sock");
        let _l = UnixListener::bind(&sock).unwrap();
        check_type(&sock, "Socket").unwrap();
        let e = check_type(tmp.path(), "Socket").unwrap_err().to_string();
        assert!(e.ends_with("is not a socket file"), "{e}");
        check_type(Path::new("/dev/null"), "CharDevice").unwrap();
        let e = check_type(&sock, "CharDevice").unwrap_err().to_string();
        assert!(e.ends_with("is not a character device"), "{e}");
        let e = check_type(Path::new("/dev/null"), "BlockDevice")
            .unwrap_err()
            .to_string();
        assert!(e.ends_with("is not a block device"), "{e}");
        assert_eq!(
            check_type(&sock, "Pipe").unwrap_err().to_string(),
            "Pipe is an invalid volume type"
        );
        check_type(&tmp.path().join("missing"), "").unwrap();
    }

    #[test]
    fn symlinks_are_followed_by_checks() {
        let tmp = tempfile::tempdir().unwrap();
        let link = tmp.path().join("l");
        std::os::unix::fs::symlink("/dev/null", &link).unwrap();
        check_type(&link, "CharDevice").unwrap();
    }

    #[test]
    fn path_rules() {
        check_path("/var/log").unwrap();
        assert!(check_path("").is_err());
        assert!(check_path("rel").is_err());
        assert!(check_path("/a/../b").is_err());
    }
}
