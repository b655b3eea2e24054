//! Upstream's descriptor lock on a mapped raw block device (its AttachFileDevice and
//! DetachFileDevice): a loop device set up over the pod's map file holds the device open for
//! as long as the pod may use it, so the kernel cannot drop the device and give its name to
//! another disk under a running container (the runtime resolves the name only at start).
//!
//! The loop device is found again by its backing file in sysfs, so an agent restarted finds
//! the locks its predecessor took. `losetup` (util-linux, on every node, and what upstream
//! runs) sets them up and detaches them: the loop ioctls are the whole job, and the crates
//! that wrap them generate their bindings with libclang at build time.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

const SYS_BLOCK: &str = "/sys/block";
const LOSETUP: &str = "losetup";

/// A loop device over `file` (a map file holding the device), unless one is there already.
pub(super) fn attach(file: &Path) -> io::Result<()> {
    if find(Path::new(SYS_BLOCK), file)?.is_some() {
        return Ok(());
    }
    losetup(&["-f".as_ref(), file.as_os_str()])
}

/// The loop device over `file` detached; nothing to do when there is none (never taken, or
/// the file is gone).
pub(super) fn detach(file: &Path) -> io::Result<()> {
    let Some(device) = find(Path::new(SYS_BLOCK), file)? else {
        return Ok(());
    };
    match losetup(&["-d".as_ref(), device.as_os_str()]) {
        // Detached by someone else in between.
        Err(_) if !device.exists() => Ok(()),
        other => other,
    }
}

fn losetup(args: &[&std::ffi::OsStr]) -> io::Result<()> {
    let out = Command::new(LOSETUP).args(args).output()?;
    if out.status.success() {
        return Ok(());
    }
    let shown: Vec<_> = args.iter().map(|a| a.to_string_lossy()).collect();
    Err(io::Error::other(format!(
        "{LOSETUP} {} failed: {}",
        shown.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    )))
}

/// The loop device (`/dev/loopN`) whose backing file is `file`, its symlinks resolved, as
/// `<sys_block>/loopN/loop/backing_file` says.
fn find(sys_block: &Path, file: &Path) -> io::Result<Option<PathBuf>> {
    let real = match fs::canonicalize(file) {
        Ok(p) => p,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let entries = match fs::read_dir(sys_block) {
        Ok(rd) => rd,
        // No loop devices at all (no sysfs in a minimal container).
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("loop") {
            continue;
        }
        // Only set-up loop devices have a backing file.
        let Ok(backing) = fs::read_to_string(e.path().join("loop/backing_file")) else {
            continue;
        };
        if Path::new(backing.trim_end_matches('\n')) == real {
            return Ok(Some(Path::new("/dev").join(name)));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loop_device_is_found_by_its_backing_file_with_symlinks_resolved() {
        let tmp = tempfile::tempdir().unwrap();
        let map_file = tmp.path().join("dev/uid-1");
        fs::create_dir_all(map_file.parent().unwrap()).unwrap();
        fs::write(&map_file, "").unwrap();
        let other = tmp.path().join("dev/uid-2");
        fs::write(&other, "").unwrap();
        std::os::unix::fs::symlink(&map_file, tmp.path().join("link")).unwrap();

        let sys = tmp.path().join("sys/block");
        for (dev, backing) in [("loop0", Some(&other)), ("loop3", Some(&map_file))] {
            fs::create_dir_all(sys.join(dev).join("loop")).unwrap();
            if let Some(b) = backing {
                fs::write(
                    sys.join(dev).join("loop/backing_file"),
                    format!("{}\n", b.display()),
                )
                .unwrap();
            }
        }
        // A free loop device (no backing file) and a disk are passed over.
        fs::create_dir_all(sys.join("loop7")).unwrap();
        fs::create_dir_all(sys.join("vda")).unwrap();

        assert_eq!(
            find(&sys, &map_file).unwrap(),
            Some(PathBuf::from("/dev/loop3"))
        );
        assert_eq!(
            find(&sys, &tmp.path().join("link")).unwrap(),
            Some(PathBuf::from("/dev/loop3")),
            "the path given may be a link to the map file"
        );
        assert_eq!(
            find(&sys, &other).unwrap(),
            Some(PathBuf::from("/dev/loop0"))
        );
        assert_eq!(find(&sys, &tmp.path().join("dev/gone")).unwrap(), None);
        assert_eq!(find(&tmp.path().join("no-sysfs"), &map_file).unwrap(), None);
    }
}
