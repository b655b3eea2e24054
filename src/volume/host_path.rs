//! hostPath volumes: upstream's type checks, with its messages. The checks follow
//! symlinks (a link to a directory passes `Directory`), as upstream's `stat` does.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Checks (and for the `…OrCreate` types, creates) `path` as `type_` demands. The error is
/// upstream's wording, for the caller to wrap with the pod and volume.
pub fn check_type(path: &Path, type_: &str) -> Result<(), String> {
    let p = path.display();
    let stat = || fs::metadata(path).map(|m| m.file_type());
    let is = |want: &dyn Fn(fs::FileType) -> bool| stat().map(want).unwrap_or(false);
    match type_ {
        // Unset: no check at all (the runtime creates a missing path as a directory).
        "" => Ok(()),
        "DirectoryOrCreate" if !exists(path)? => make_dir(path),
        "DirectoryOrCreate" | "Directory" => is(&|t| t.is_dir())
            .then_some(())
            .ok_or_else(|| format!("hostPath type check failed: {p} is not a directory")),
        "FileOrCreate" if !exists(path)? => make_file(path),
        "FileOrCreate" | "File" => is(&|t| t.is_file())
            .then_some(())
            .ok_or_else(|| format!("hostPath type check failed: {p} is not a file")),
        "Socket" => is(&|t| t.is_socket())
            .then_some(())
            .ok_or_else(|| format!("hostPath type check failed: {p} is not a socket file")),
        "CharDevice" => is(&|t| t.is_char_device())
            .then_some(())
            .ok_or_else(|| format!("hostPath type check failed: {p} is not a character device")),
        "BlockDevice" => is(&|t| t.is_block_device())
            .then_some(())
            .ok_or_else(|| format!("hostPath type check failed: {p} is not a block device")),
        other => Err(format!("{other} is an invalid volume type")),
    }
}

fn exists(path: &Path) -> Result<bool, String> {
    match fs::metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(format!("cannot check hostPath {}: {e}", path.display())),
    }
}

/// DirectoryOrCreate: the directory and its missing parents, mode 0755.
fn make_dir(path: &Path) -> Result<(), String> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(path)
        .map_err(|e| format!("cannot create hostPath directory {}: {e}", path.display()))
}

/// FileOrCreate: an empty file, mode 0644. Like upstream, the parent directory is not
/// created: a missing parent fails the pod.
fn make_file(path: &Path) -> Result<(), String> {
    fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .open(path)
        .map(drop)
        .map_err(|e| format!("cannot create hostPath file {}: {e}", path.display()))
}

/// Validates the path itself as the apiserver would: required, absolute (this agent has
/// no sensible base for a relative one) and without `..` elements.
pub fn check_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("is required".into());
    }
    if !path.starts_with('/') {
        return Err(format!("{path:?} must be an absolute path"));
    }
    if path.split('/').any(|s| s == "..") {
        return Err(format!("{path:?} must not contain '..'"));
    }
    Ok(())
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
        let e = check_type(&dir, "Directory").unwrap_err();
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
        let e = check_type(&file, "DirectoryOrCreate").unwrap_err();
        assert!(e.ends_with("is not a directory"), "{e}");
    }

    #[test]
    fn file_types() {
        let tmp = tempfile::tempdir().unwrap();
        let f = tmp.path().join("f");
        assert!(check_type(&f, "File")
            .unwrap_err()
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
        let e = check_type(tmp.path(), "File").unwrap_err();
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
        let e = check_type(tmp.path(), "Socket").unwrap_err();
        assert!(e.ends_with("is not a socket file"), "{e}");
        check_type(Path::new("/dev/null"), "CharDevice").unwrap();
        let e = check_type(&sock, "CharDevice").unwrap_err();
        assert!(e.ends_with("is not a character device"), "{e}");
        let e = check_type(Path::new("/dev/null"), "BlockDevice").unwrap_err();
        assert!(e.ends_with("is not a block device"), "{e}");
        assert_eq!(
            check_type(&sock, "Pipe").unwrap_err(),
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
