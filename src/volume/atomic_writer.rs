//! Writes a set of files into a volume so that a container reading it never sees a mix of
//! old and new content, with upstream's layout (tools and users look at it):
//!
//! ```text
//! <dir>/..2024_05_01_10_00_00.123456789/   this version's files (the "timestamp dir")
//! <dir>/..data -> ..2024_05_01_10_00_00.123456789
//! <dir>/<top-level name> -> ..data/<top-level name>
//! ```
//!
//! An update writes a new timestamp dir, then swaps `..data` with one rename(2) of a
//! symlink made beside it, so every reader resolves either the whole old or the whole new
//! version. Nothing is rewritten when content, modes and owners are unchanged, so calling it
//! on every sync (or after an agent restart) costs a few reads. Owners and the modes the pod's
//! fsGroup asks for (see `ownership`) are set as files are written, not by a later walk.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::os::unix::fs::{chown, lchown, symlink, DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;

use super::downward::Payload;
use super::ownership::Ownership;

pub const DATA_LINK: &str = "..data";
const DATA_TMP: &str = "..data_tmp";

/// Makes `dir` hold exactly `payload`, owned as `own` says. Returns whether anything was
/// written.
pub fn write(dir: &Path, payload: &Payload, own: Ownership) -> io::Result<bool> {
    let current = fs::read_link(dir.join(DATA_LINK)).ok();
    let unchanged = match &current {
        Some(ts) => same_content(&dir.join(ts), payload, own)?,
        None => false,
    };
    if !unchanged {
        let ts = new_timestamp_dir(dir, own)?;
        let ts_path = dir.join(&ts);
        for (rel, f) in payload {
            let file = ts_path.join(rel);
            if let Some(parent) = file.parent() {
                make_dirs(&ts_path, parent, own)?;
            }
            fs::write(&file, &f.data)?;
            // Owner before mode: a chown clears setuid/setgid bits set earlier.
            if f.uid.is_some() || own.fs_group.is_some() {
                chown(&file, f.uid, own.fs_group)?;
            }
            // Explicitly, since the umask trims the mode given at creation.
            fs::set_permissions(&file, fs::Permissions::from_mode(own.file_mode(f.mode)))?;
        }
        let tmp = dir.join(DATA_TMP);
        remove_if_exists(&tmp)?;
        symlink(&ts, &tmp)?;
        if own.fs_group.is_some() {
            lchown(&tmp, None, own.fs_group)?;
        }
        fs::rename(&tmp, dir.join(DATA_LINK))?;
    }
    own_root(dir, own)?;
    // The user-visible names: top-level entries of the payload, as links through ..data.
    // Done on every call, which repairs a crash between the swap and these links.
    let wanted: BTreeSet<&str> = payload
        .keys()
        .map(|p| p.split('/').next().unwrap_or(p))
        .collect();
    for name in &wanted {
        let link = dir.join(name);
        if fs::symlink_metadata(&link).is_err() {
            symlink(Path::new(DATA_LINK).join(name), &link)?;
            if own.fs_group.is_some() {
                lchown(&link, None, own.fs_group)?;
            }
        }
    }
    let current = fs::read_link(dir.join(DATA_LINK)).ok();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("..") {
            // Old timestamp dirs: everything but the current one.
            if name != DATA_LINK
                && current.as_deref() != Some(Path::new(name.as_ref()))
                && entry.file_type()?.is_dir()
            {
                fs::remove_dir_all(entry.path())?;
            }
            continue;
        }
        if !wanted.contains(name.as_ref()) && entry.file_type()?.is_symlink() {
            fs::remove_file(entry.path())?;
        }
    }
    Ok(!unchanged)
}

/// The volume root: group-owned by the fsGroup, with its group bits, whatever medium made it.
fn own_root(dir: &Path, own: Ownership) -> io::Result<()> {
    let Some(gid) = own.fs_group else {
        return Ok(());
    };
    let meta = fs::metadata(dir)?;
    let mode = meta.permissions().mode() & 0o7777;
    let want = own.root_mode(mode);
    if meta.gid() != gid {
        chown(dir, None, Some(gid))?;
        // A chown may clear setgid: set the mode after it, always.
        return fs::set_permissions(dir, fs::Permissions::from_mode(want));
    }
    if mode != want {
        fs::set_permissions(dir, fs::Permissions::from_mode(want))?;
    }
    Ok(())
}

/// The directories between `ts_path` and `dir` (inclusive), each with the writer's mode and
/// group.
fn make_dirs(ts_path: &Path, dir: &Path, own: Ownership) -> io::Result<()> {
    if dir == ts_path || dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        make_dirs(ts_path, parent, own)?;
    }
    fs::DirBuilder::new().mode(0o755).create(dir)?;
    set_dir_owner(dir, own)
}

fn set_dir_owner(dir: &Path, own: Ownership) -> io::Result<()> {
    if own.fs_group.is_some() {
        chown(dir, None, own.fs_group)?;
    }
    fs::set_permissions(dir, fs::Permissions::from_mode(own.dir_mode()))
}

/// Whether the timestamp dir holds exactly the payload's files with the same bytes, modes and
/// owners.
fn same_content(ts_dir: &Path, payload: &Payload, own: Ownership) -> io::Result<bool> {
    let mut found = BTreeSet::new();
    if !ts_dir.is_dir() {
        return Ok(false);
    }
    list_files(ts_dir, ts_dir, &mut found)?;
    if found.len() != payload.len() || !payload.keys().all(|k| found.contains(k)) {
        return Ok(false);
    }
    for (rel, f) in payload {
        let path = ts_dir.join(rel);
        let meta = fs::symlink_metadata(&path)?;
        let owners_differ =
            f.uid.is_some_and(|u| u != meta.uid()) || own.fs_group.is_some_and(|g| g != meta.gid());
        if meta.permissions().mode() & 0o7777 != own.file_mode(f.mode)
            || owners_differ
            || fs::read(&path)? != f.data
        {
            return Ok(false);
        }
    }
    Ok(true)
}

fn list_files(root: &Path, dir: &Path, out: &mut BTreeSet<String>) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let t = entry.file_type()?;
        if t.is_dir() {
            list_files(root, &entry.path(), out)?;
        } else {
            let rel = entry.path();
            let rel = rel.strip_prefix(root).unwrap_or(&rel);
            out.insert(rel.to_string_lossy().into_owned());
        }
    }
    Ok(())
}

/// Creates `..<UTC time>.<random>` (0755, or as the fsGroup wants) in `dir` and returns its
/// name.
fn new_timestamp_dir(dir: &Path, own: Ownership) -> io::Result<String> {
    let stamp = chrono::Utc::now().format("..%Y_%m_%d_%H_%M_%S.");
    loop {
        let name = format!("{stamp}{}", rand::random::<u32>());
        let path = dir.join(&name);
        match fs::DirBuilder::new().mode(0o755).create(&path) {
            Ok(()) => {
                set_dir_owner(&path, own)?;
                return Ok(name);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

fn remove_if_exists(p: &Path) -> io::Result<()> {
    match fs::remove_file(p) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::volume::downward::FileProjection;

    fn payload(items: &[(&str, &str, u32)]) -> Payload {
        items
            .iter()
            .map(|(p, d, m)| {
                (
                    p.to_string(),
                    FileProjection {
                        data: d.as_bytes().to_vec(),
                        mode: *m,
                        uid: None,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn writes_upstream_layout_and_skips_unchanged_content() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let p = payload(&[("name", "web", 0o644), ("sub/labels", "a=\"1\"", 0o600)]);
        assert!(write(d, &p, Ownership::default()).unwrap());
        let ts1 = fs::read_link(d.join("..data")).unwrap();
        assert!(ts1.to_string_lossy().starts_with("..20"));
        assert_eq!(
            fs::read_link(d.join("name")).unwrap(),
            Path::new("..data/name")
        );
        assert_eq!(fs::read_to_string(d.join("name")).unwrap(), "web");
        assert_eq!(fs::read_to_string(d.join("sub/labels")).unwrap(), "a=\"1\"");
        let mode = fs::metadata(d.join("sub/labels"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);

        // Same content: nothing written, same version.
        assert!(!write(d, &p, Ownership::default()).unwrap());
        assert_eq!(fs::read_link(d.join("..data")).unwrap(), ts1);

        // A mode change alone is a change.
        let p2 = payload(&[("name", "web", 0o400), ("sub/labels", "a=\"1\"", 0o600)]);
        assert!(write(d, &p2, Ownership::default()).unwrap());
        let ts2 = fs::read_link(d.join("..data")).unwrap();
        assert_ne!(ts1, ts2);
        assert!(!d.join(&ts1).exists(), "old version removed");
    }

    #[test]
    fn update_replaces_content_and_drops_removed_names() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let own = Ownership::default();
        write(d, &payload(&[("a", "1", 0o644), ("b", "2", 0o644)]), own).unwrap();
        write(d, &payload(&[("a", "changed", 0o644)]), own).unwrap();
        assert_eq!(fs::read_to_string(d.join("a")).unwrap(), "changed");
        assert!(fs::symlink_metadata(d.join("b")).is_err());
        let names: Vec<String> = fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 3, "{names:?}: a, ..data and one timestamp dir");
        assert!(!d.join("..data_tmp").exists());
    }

    #[test]
    fn repairs_a_missing_user_link() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let p = payload(&[("a", "1", 0o644)]);
        write(d, &p, Ownership::default()).unwrap();
        fs::remove_file(d.join("a")).unwrap();
        assert!(!write(d, &p, Ownership::default()).unwrap());
        assert_eq!(fs::read_to_string(d.join("a")).unwrap(), "1");
    }

    use crate::test_support::test_gid;

    #[test]
    fn fs_group_owns_everything_and_adds_group_bits_once() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("vol");
        fs::create_dir(&d).unwrap();
        fs::set_permissions(&d, fs::Permissions::from_mode(0o777)).unwrap();
        let gid = test_gid();
        let own = Ownership {
            fs_group: Some(gid),
        };
        let mut p = payload(&[("key", "v", 0o400), ("dir/nested", "n", 0o644)]);
        let uid = nix::unistd::geteuid().as_raw();
        p.get_mut("key").unwrap().uid = Some(uid);
        assert!(write(&d, &p, own).unwrap());

        let meta = |rel: &str| fs::metadata(d.join(rel)).unwrap();
        let lmeta = |rel: &str| fs::symlink_metadata(d.join(rel)).unwrap();
        assert_eq!(meta("key").permissions().mode() & 0o7777, 0o440);
        assert_eq!(meta("key").gid(), gid);
        assert_eq!(meta("key").uid(), uid);
        assert_eq!(meta("dir/nested").permissions().mode() & 0o7777, 0o644);
        assert_eq!(meta("dir").permissions().mode() & 0o7777, 0o2755);
        assert_eq!(meta("dir").gid(), gid);
        assert_eq!(meta("..data").permissions().mode() & 0o7777, 0o2755);
        assert_eq!(meta(".").permissions().mode() & 0o7777, 0o2777);
        assert_eq!(meta(".").gid(), gid);
        for link in ["..data", "key", "dir"] {
            assert_eq!(lmeta(link).gid(), gid, "{link}");
        }
        // The modes and owners on disk are the wanted ones: nothing to rewrite.
        let version = fs::read_link(d.join("..data")).unwrap();
        assert!(!write(&d, &p, own).unwrap());
        assert_eq!(fs::read_link(d.join("..data")).unwrap(), version);
    }
}
