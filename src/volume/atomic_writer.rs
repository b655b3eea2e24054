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
//! version. Nothing is rewritten when content and modes are unchanged, so calling it on
//! every sync (or after an agent restart) costs a few reads.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::os::unix::fs::{symlink, DirBuilderExt, PermissionsExt};
use std::path::Path;

use super::downward::Payload;

const DATA_LINK: &str = "..data";
const DATA_TMP: &str = "..data_tmp";

/// Makes `dir` hold exactly `payload`. Returns whether anything was written.
pub fn write(dir: &Path, payload: &Payload) -> io::Result<bool> {
    let current = fs::read_link(dir.join(DATA_LINK)).ok();
    let unchanged = match &current {
        Some(ts) => same_content(&dir.join(ts), payload)?,
        None => false,
    };
    if !unchanged {
        let ts = new_timestamp_dir(dir)?;
        let ts_path = dir.join(&ts);
        for (rel, f) in payload {
            let file = ts_path.join(rel);
            if let Some(parent) = file.parent() {
                fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o755)
                    .create(parent)?;
            }
            fs::write(&file, &f.data)?;
            // Explicitly, since the umask trims the mode given at creation.
            fs::set_permissions(&file, fs::Permissions::from_mode(f.mode))?;
        }
        let tmp = dir.join(DATA_TMP);
        remove_if_exists(&tmp)?;
        symlink(&ts, &tmp)?;
        fs::rename(&tmp, dir.join(DATA_LINK))?;
    }
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

/// Whether the timestamp dir holds exactly the payload's files with the same bytes and modes.
fn same_content(ts_dir: &Path, payload: &Payload) -> io::Result<bool> {
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
        if meta.permissions().mode() & 0o7777 != f.mode || fs::read(&path)? != f.data {
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

/// Creates `..<UTC time>.<random>` (0755) in `dir` and returns its name.
fn new_timestamp_dir(dir: &Path) -> io::Result<String> {
    let stamp = chrono::Utc::now().format("..%Y_%m_%d_%H_%M_%S.");
    loop {
        let name = format!("{stamp}{}", rand::random::<u32>());
        let path = dir.join(&name);
        match fs::DirBuilder::new().mode(0o755).create(&path) {
            Ok(()) => {
                fs::set_permissions(&path, fs::Permissions::from_mode(0o755))?;
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
        assert!(write(d, &p).unwrap());
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
        assert!(!write(d, &p).unwrap());
        assert_eq!(fs::read_link(d.join("..data")).unwrap(), ts1);

        // A mode change alone is a change.
        let p2 = payload(&[("name", "web", 0o400), ("sub/labels", "a=\"1\"", 0o600)]);
        assert!(write(d, &p2).unwrap());
        let ts2 = fs::read_link(d.join("..data")).unwrap();
        assert_ne!(ts1, ts2);
        assert!(!d.join(&ts1).exists(), "old version removed");
    }

    #[test]
    fn update_replaces_content_and_drops_removed_names() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        write(d, &payload(&[("a", "1", 0o644), ("b", "2", 0o644)])).unwrap();
        write(d, &payload(&[("a", "changed", 0o644)])).unwrap();
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
        write(d, &p).unwrap();
        fs::remove_file(d.join("a")).unwrap();
        assert!(!write(d, &p).unwrap());
        assert_eq!(fs::read_to_string(d.join("a")).unwrap(), "1");
    }
}
