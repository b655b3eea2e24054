//! The log file the logger writes to, rotated as bytes are written.
//!
//! Upstream kubelet checks file sizes every 10 s and asks the runtime to reopen; a fast writer
//! outruns that by gigabytes. Here the writer itself rotates the moment the file reaches its
//! limit: `N.log` is renamed to `N.log.<YYYYMMDD-hhmmss>` (upstream's layout, in UTC) and a fresh
//! `N.log` is started, keeping at most `max_files` files in all.
//!
//! Unlike upstream, rotated files stay uncompressed (upstream gzips all but the newest): the
//! agent carries no gzip implementation, and the logger runs once per container, so it must stay
//! small. Budget disk space for `max_size * max_files` per container.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use super::cri_writer::LogSink;
use super::timestamp::rotation_suffix;

/// Same mode as containerd's CRI plugin gives container log files.
const LOG_FILE_MODE: u32 = 0o640;

/// How often a write first checks that the path still names the open file. A `stat(2)` per
/// record would double the syscalls of a chatty container, while checking only at our own
/// rotations would never notice a file removed or renamed by someone else (an operator,
/// logrotate, or a kubelet-style log manager) and would keep writing into a file nobody reads.
/// Checking on the first write after this interval bounds the damage to one second of output at
/// the cost of one monotonic clock read per record.
const IDENTITY_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Numbered rotation names tried after the first one is taken. Only reached when the
/// directory could not be listed or changed under us; a bound turns a directory that keeps
/// answering "exists" into an error instead of an endless search.
const MAX_ROTATED_NAME_CANDIDATES: u64 = 1000;

/// What `lstat` says about a candidate rotation name; replaced in tests to inject errors.
type ProbeFn = fn(&Path) -> io::Result<fs::Metadata>;

/// Size-based rotation settings (`containerLogMaxSize`, `containerLogMaxFiles`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RotationPolicy {
    /// Rotate once the current file holds at least this many bytes; 0 disables rotation (the
    /// kubelet's negative `containerLogMaxSize` maps here).
    pub max_size: u64,
    /// Files kept in all, the current one included; values below 2 keep only the current file,
    /// so rotating discards the old content.
    pub max_files: u32,
}

impl RotationPolicy {
    pub const DISABLED: RotationPolicy = RotationPolicy {
        max_size: 0,
        max_files: 0,
    };

    pub fn is_enabled(&self) -> bool {
        self.max_size > 0
    }

    fn rotated_files_to_keep(&self) -> usize {
        self.max_files.saturating_sub(1) as usize
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LogFileError {
    #[error("creating log directory {path}: {source}")]
    CreateDir { path: PathBuf, source: io::Error },
    #[error("opening log file {path}: {source}")]
    Open { path: PathBuf, source: io::Error },
    #[error("renaming log file {path} to {rotated} for rotation: {source}")]
    Rename {
        path: PathBuf,
        rotated: PathBuf,
        source: io::Error,
    },
    #[error("listing rotated log files in {dir}: {source}")]
    ListRotated { dir: PathBuf, source: io::Error },
    #[error("removing old rotated log file {path}: {source}")]
    RemoveRotated { path: PathBuf, source: io::Error },
    #[error("finding a free name to rotate log file {path} to: {candidate}: {source}")]
    RotatedName {
        path: PathBuf,
        candidate: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "finding a free name to rotate log file {path} to: the first {tried} candidates all exist"
    )]
    NoFreeRotatedName { path: PathBuf, tried: u64 },
}

/// An append-only log file that rotates itself by size and reopens its path when the file it
/// has open was moved or removed by someone else.
pub struct RotatingLogFile {
    path: PathBuf,
    file: File,
    /// (device, inode) of `file`, to tell whether `path` still names it.
    identity: (u64, u64),
    size: u64,
    /// Size at which to rotate next; raised after a failed rotation so a persistent failure
    /// costs one attempt per `max_size` bytes rather than one per record.
    rotate_at: u64,
    policy: RotationPolicy,
    clock: fn() -> SystemTime,
    identity_check_interval: Duration,
    last_identity_check: Instant,
    probe: ProbeFn,
}

fn open_append(path: &Path) -> Result<File, LogFileError> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(LOG_FILE_MODE)
        .open(path)
        .map_err(|source| LogFileError::Open {
            path: path.to_owned(),
            source,
        })
}

fn identity_of(meta: &fs::Metadata) -> (u64, u64) {
    (meta.dev(), meta.ino())
}

impl RotatingLogFile {
    /// Opens (creating it and its parent directories if needed) the log file at `path` for
    /// appending; existing content counts toward the first rotation.
    pub fn open(path: &Path, policy: RotationPolicy) -> Result<Self, LogFileError> {
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).map_err(|source| LogFileError::CreateDir {
                path: dir.to_owned(),
                source,
            })?;
        }
        let file = open_append(path)?;
        let meta = file.metadata().map_err(|source| LogFileError::Open {
            path: path.to_owned(),
            source,
        })?;
        Ok(RotatingLogFile {
            path: path.to_owned(),
            identity: identity_of(&meta),
            size: meta.len(),
            rotate_at: policy.max_size,
            file,
            policy,
            clock: SystemTime::now,
            identity_check_interval: IDENTITY_CHECK_INTERVAL,
            last_identity_check: Instant::now(),
            probe: |p| fs::symlink_metadata(p),
        })
    }

    /// Replaces the wall clock used to name rotated files (tests).
    pub fn with_clock(mut self, clock: fn() -> SystemTime) -> Self {
        self.clock = clock;
        self
    }

    /// Replaces how often writes check for an externally moved file (tests use zero).
    pub fn with_identity_check_interval(mut self, interval: Duration) -> Self {
        self.identity_check_interval = interval;
        self
    }

    #[cfg(test)]
    fn with_probe(mut self, probe: ProbeFn) -> Self {
        self.probe = probe;
        self
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes in the current file as far as this writer knows.
    pub fn size(&self) -> u64 {
        self.size
    }

    fn install(&mut self, file: File) -> Result<(), LogFileError> {
        let meta = file.metadata().map_err(|source| LogFileError::Open {
            path: self.path.clone(),
            source,
        })?;
        self.identity = identity_of(&meta);
        self.size = meta.len();
        self.rotate_at = self.policy.max_size;
        self.file = file;
        Ok(())
    }

    /// Reopens `path` if it no longer names the open file; returns whether it did. Parent
    /// directories are not recreated: a removed pod log directory means the pod is being cleaned
    /// up, and resurrecting it would leak a directory. The old handle stays in use until the
    /// path can be opened again.
    fn reopen_if_replaced(&mut self) -> Result<bool, LogFileError> {
        self.last_identity_check = Instant::now();
        match fs::metadata(&self.path) {
            Ok(meta) if identity_of(&meta) == self.identity => return Ok(false),
            _ => {}
        }
        let file = open_append(&self.path)?;
        self.install(file)?;
        Ok(true)
    }

    /// `N.log.<YYYYMMDD-hhmmss>`, or with `.1`, `.2`, ... appended when rotations come faster
    /// than once a second. The counter continues after the highest one present rather than
    /// reusing a pruned name, so the newest file always sorts last. A name counts as free only
    /// when `lstat` says it does not exist; any other error ends the search with that error
    /// (it would repeat for every candidate), as does finding no free name among the first
    /// [`MAX_ROTATED_NAME_CANDIDATES`].
    fn free_rotated_path(&self) -> Result<PathBuf, LogFileError> {
        let name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let base = format!("{name}.{}", rotation_suffix((self.clock)()));
        let numbered_prefix = format!("{base}.");
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let mut next: Option<u64> = None;
        for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
            let entry_name = entry.file_name();
            let entry_name = entry_name.to_string_lossy();
            let taken = if entry_name == base {
                Some(0)
            } else {
                entry_name
                    .strip_prefix(&numbered_prefix)
                    .and_then(|n| n.parse::<u64>().ok())
            };
            if let Some(n) = taken {
                next = next.max(Some(n + 1));
            }
        }
        let first = match next {
            None => self.path.with_file_name(&base),
            Some(n) => self.path.with_file_name(format!("{base}.{n}")),
        };
        let start = next.unwrap_or(1);
        let numbered = (start..start.saturating_add(MAX_ROTATED_NAME_CANDIDATES))
            .map(|n| self.path.with_file_name(format!("{base}.{n}")));
        for candidate in std::iter::once(first).chain(numbered) {
            match (self.probe)(&candidate) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(candidate),
                Ok(_) => continue,
                Err(source) => {
                    return Err(LogFileError::RotatedName {
                        path: self.path.clone(),
                        candidate,
                        source,
                    })
                }
            }
        }
        Err(LogFileError::NoFreeRotatedName {
            path: self.path.clone(),
            tried: MAX_ROTATED_NAME_CANDIDATES + 1,
        })
    }

    fn rotate(&mut self) -> Result<(), LogFileError> {
        // If someone else already moved the file away, the path now names a fresh file and
        // their copy is theirs to manage; just follow the path.
        if self.reopen_if_replaced()? {
            return Ok(());
        }
        let rotated = self.free_rotated_path()?;
        fs::rename(&self.path, &rotated).map_err(|source| LogFileError::Rename {
            path: self.path.clone(),
            rotated: rotated.clone(),
            source,
        })?;
        // Should this open fail, writes keep going to the renamed file through the old handle
        // until the next identity check opens the path again.
        let file = open_append(&self.path)?;
        self.install(file)?;
        self.remove_oldest_rotated()
    }

    /// Keeps the newest `max_files - 1` files named `N.log.*`, matching upstream's glob (so its
    /// `.gz` files count too).
    fn remove_oldest_rotated(&self) -> Result<(), LogFileError> {
        let dir = match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let prefix = match self.path.file_name() {
            Some(n) => format!("{}.", n.to_string_lossy()),
            None => return Ok(()),
        };
        let list_err = |source| LogFileError::ListRotated {
            dir: dir.to_owned(),
            source,
        };
        let mut rotated = Vec::new();
        for entry in fs::read_dir(dir).map_err(list_err)? {
            let entry = entry.map_err(list_err)?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(rest) = name.strip_prefix(&prefix) {
                rotated.push((rotated_sort_key(rest), entry.path()));
            }
        }
        let keep = self.policy.rotated_files_to_keep();
        if rotated.len() <= keep {
            return Ok(());
        }
        rotated.sort();
        let excess = rotated.len() - keep;
        for (_, path) in rotated.into_iter().take(excess) {
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(source) => return Err(LogFileError::RemoveRotated { path, source }),
            }
        }
        Ok(())
    }
}

/// Orders `<YYYYMMDD-hhmmss>[.<n>]` oldest first, with `.10` after `.9`; names of other shapes
/// sort by their text.
fn rotated_sort_key(rest: &str) -> (String, u64, String) {
    let (stamp, tail) = rest.split_once('.').unwrap_or((rest, ""));
    let counter = tail.parse::<u64>().unwrap_or(0);
    (stamp.to_owned(), counter, rest.to_owned())
}

impl LogSink for RotatingLogFile {
    fn write_record(&mut self, record: &[u8]) -> io::Result<()> {
        if self.last_identity_check.elapsed() >= self.identity_check_interval {
            // On failure keep the old handle; the next check tries again.
            let _ = self.reopen_if_replaced();
        }
        let written = self.file.write_all(record);
        if written.is_ok() {
            self.size += record.len() as u64;
        }
        let rotated = if self.policy.is_enabled() && self.size >= self.rotate_at {
            self.rotate().map_err(|e| {
                self.rotate_at = self.size.saturating_add(self.policy.max_size);
                io::Error::other(e)
            })
        } else {
            Ok(())
        };
        written.and(rotated)
    }
}

/// Removes a container's log file and every rotated file of it (`N.log.*`): what container
/// GC takes with a dead container. Files already gone are fine.
pub fn remove_log_files(path: &Path) {
    let _ = fs::remove_file(path);
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let prefix = format!("{}.", name.to_string_lossy());
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = fs::remove_file(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn fixed_clock() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_136_214_245) // 2006-01-02T15:04:05Z
    }

    fn names_in(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn removing_a_log_takes_its_rotated_files_only() {
        let dir = tempfile::tempdir().unwrap();
        for n in [
            "0.log",
            "0.log.20260101-000000",
            "0.log.20260101-000001.gz",
            "1.log",
            "10.log",
        ] {
            fs::write(dir.path().join(n), "x").unwrap();
        }
        remove_log_files(&dir.path().join("0.log"));
        assert_eq!(names_in(dir.path()), ["1.log", "10.log"]);
        remove_log_files(&dir.path().join("7.log"));
        assert_eq!(names_in(dir.path()), ["1.log", "10.log"]);
    }

    fn record(i: usize) -> Vec<u8> {
        format!("record {i:04} padded to thirty!\n").into_bytes()
    }

    #[test]
    fn creates_parent_directories_and_appends() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("ns_pod_uid/c/0.log");
        let mut log = RotatingLogFile::open(&path, RotationPolicy::DISABLED).unwrap();
        log.write_record(b"one\n").unwrap();
        drop(log);
        let mut log = RotatingLogFile::open(&path, RotationPolicy::DISABLED).unwrap();
        assert_eq!(log.size(), 4);
        log.write_record(b"two\n").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "one\ntwo\n");
        let mode = fs::metadata(&path).unwrap().mode() & 0o777;
        assert_eq!(mode & !0o640, 0, "mode {mode:o} wider than 0640");
    }

    #[test]
    fn no_rotation_when_max_size_is_zero() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("0.log");
        let mut log = RotatingLogFile::open(
            &path,
            RotationPolicy {
                max_size: 0,
                max_files: 2,
            },
        )
        .unwrap();
        for i in 0..100 {
            log.write_record(&record(i)).unwrap();
        }
        assert_eq!(names_in(tmp.path()), ["0.log"]);
        assert_eq!(fs::metadata(&path).unwrap().len(), 100 * 30);
    }

    #[test]
    fn rotates_by_bytes_and_loses_nothing_across_boundaries() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("0.log");
        let policy = RotationPolicy {
            max_size: 100,
            max_files: 50,
        };
        let mut log = RotatingLogFile::open(&path, policy)
            .unwrap()
            .with_clock(fixed_clock);
        for i in 0..10 {
            log.write_record(&record(i)).unwrap();
        }
        // 30-byte records: a file rotates after its 4th record (120 >= 100).
        assert_eq!(
            names_in(tmp.path()),
            ["0.log", "0.log.20060102-150405", "0.log.20060102-150405.1"]
        );
        let mut all = Vec::new();
        for name in ["0.log.20060102-150405", "0.log.20060102-150405.1", "0.log"] {
            let content = fs::read(tmp.path().join(name)).unwrap();
            if name != "0.log" {
                assert_eq!(content.len(), 120, "{name}");
            }
            all.extend(content);
        }
        let expected: Vec<u8> = (0..10).flat_map(record).collect();
        assert_eq!(all, expected);
    }

    #[test]
    fn keeps_at_most_max_files_dropping_the_oldest() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("3.log");
        let policy = RotationPolicy {
            max_size: 60,
            max_files: 3,
        };
        let mut log = RotatingLogFile::open(&path, policy)
            .unwrap()
            .with_clock(fixed_clock);
        for i in 0..25 {
            log.write_record(&record(i)).unwrap();
        }
        // 25 records, 2 per file: 12 rotations, the newest two rotated files survive.
        assert_eq!(
            names_in(tmp.path()),
            [
                "3.log",
                "3.log.20060102-150405.10",
                "3.log.20060102-150405.11"
            ]
        );
        let newest = fs::read(tmp.path().join("3.log.20060102-150405.11")).unwrap();
        assert_eq!(newest, [record(22), record(23)].concat());
        assert_eq!(fs::read(&path).unwrap(), record(24));
    }

    #[test]
    fn max_files_one_keeps_only_the_current_file() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("0.log");
        let policy = RotationPolicy {
            max_size: 50,
            max_files: 1,
        };
        let mut log = RotatingLogFile::open(&path, policy).unwrap();
        for i in 0..5 {
            log.write_record(&record(i)).unwrap();
        }
        assert_eq!(names_in(tmp.path()), ["0.log"]);
        assert_eq!(fs::read(&path).unwrap(), record(4));
    }

    #[test]
    fn existing_content_counts_toward_the_first_rotation() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("0.log");
        fs::write(&path, vec![b'x'; 90]).unwrap();
        let policy = RotationPolicy {
            max_size: 100,
            max_files: 5,
        };
        let mut log = RotatingLogFile::open(&path, policy)
            .unwrap()
            .with_clock(fixed_clock);
        log.write_record(&record(0)).unwrap();
        assert_eq!(names_in(tmp.path()), ["0.log", "0.log.20060102-150405"]);
        assert_eq!(fs::metadata(&path).unwrap().len(), 0);
    }

    #[test]
    fn reopens_after_the_file_is_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("0.log");
        let mut log = RotatingLogFile::open(&path, RotationPolicy::DISABLED)
            .unwrap()
            .with_identity_check_interval(Duration::ZERO);
        log.write_record(b"before\n").unwrap();
        fs::remove_file(&path).unwrap();
        log.write_record(b"after\n").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "after\n");
    }

    #[test]
    fn follows_the_path_after_an_external_rename_without_touching_the_moved_file() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("0.log");
        let moved = tmp.path().join("0.log.by-logrotate");
        let mut log = RotatingLogFile::open(&path, RotationPolicy::DISABLED)
            .unwrap()
            .with_identity_check_interval(Duration::ZERO);
        log.write_record(b"old\n").unwrap();
        fs::rename(&path, &moved).unwrap();
        log.write_record(b"new\n").unwrap();
        assert_eq!(fs::read_to_string(&moved).unwrap(), "old\n");
        assert_eq!(fs::read_to_string(&path).unwrap(), "new\n");
    }

    #[test]
    fn without_a_due_check_writes_stay_on_the_open_file() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("0.log");
        let moved = tmp.path().join("elsewhere.log");
        let mut log = RotatingLogFile::open(&path, RotationPolicy::DISABLED)
            .unwrap()
            .with_identity_check_interval(Duration::from_secs(3600));
        fs::rename(&path, &moved).unwrap();
        log.write_record(b"still here\n").unwrap();
        assert_eq!(fs::read_to_string(&moved).unwrap(), "still here\n");
        assert!(!path.exists());
    }

    #[test]
    fn removed_directory_is_not_recreated() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ns_pod_uid/c");
        let path = dir.join("0.log");
        let mut log = RotatingLogFile::open(&path, RotationPolicy::DISABLED)
            .unwrap()
            .with_identity_check_interval(Duration::ZERO);
        fs::remove_dir_all(tmp.path().join("ns_pod_uid")).unwrap();
        // The write lands in the unlinked file; what matters is that it neither fails nor
        // brings the pod's directory back.
        log.write_record(b"late\n").unwrap();
        assert!(!dir.exists());
    }

    /// Before the bound, any lstat error other than "not found" made every candidate look
    /// taken, and the search for a free name never ended.
    #[test]
    fn an_io_error_while_naming_the_rotated_file_ends_the_rotation_with_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("0.log");
        let policy = RotationPolicy {
            max_size: 60,
            max_files: 3,
        };
        let mut log = RotatingLogFile::open(&path, policy)
            .unwrap()
            .with_clock(fixed_clock)
            .with_probe(|_| Err(io::Error::from_raw_os_error(libc::EIO)));
        log.write_record(&record(0)).unwrap();
        let err = log.write_record(&record(1)).unwrap_err();
        assert!(
            err.to_string()
                .contains("0.log.20060102-150405: Input/output error"),
            "{err}"
        );
        // Nothing lost, nothing renamed; the failed rotation is retried only after another
        // max_size bytes, so the records in between cost no attempt.
        log.write_record(&record(2)).unwrap();
        assert_eq!(names_in(tmp.path()), ["0.log"]);
        assert_eq!(
            fs::read(&path).unwrap(),
            [record(0), record(1), record(2)].concat()
        );
    }

    #[test]
    fn a_real_lstat_error_ends_the_rotation_too() {
        // A log file name so long that every rotated name is too long for the file system:
        // lstat answers ENAMETOOLONG, never "not found".
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join(format!("{}.log", "c".repeat(246)));
        let policy = RotationPolicy {
            max_size: 30,
            max_files: 2,
        };
        let mut log = RotatingLogFile::open(&path, policy)
            .unwrap()
            .with_clock(fixed_clock);
        let err = log.write_record(&record(0)).unwrap_err();
        assert!(err.to_string().contains("File name too long"), "{err}");
        assert_eq!(fs::read(&path).unwrap(), record(0));
    }

    #[test]
    fn a_directory_where_every_name_is_taken_ends_the_search() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("0.log");
        let policy = RotationPolicy {
            max_size: 30,
            max_files: 2,
        };
        let mut log = RotatingLogFile::open(&path, policy)
            .unwrap()
            .with_clock(fixed_clock)
            .with_probe(|p| fs::symlink_metadata(p.parent().unwrap()));
        let err = log.write_record(&record(0)).unwrap_err();
        assert!(
            err.to_string()
                .contains("the first 1001 candidates all exist"),
            "{err}"
        );
    }

    #[test]
    fn rotated_names_sort_numerically() {
        let mut keys = [
            rotated_sort_key("20060102-150405.10"),
            rotated_sort_key("20060102-150406"),
            rotated_sort_key("20060102-150405.9"),
            rotated_sort_key("20060102-150405"),
        ];
        keys.sort();
        let order: Vec<&str> = keys.iter().map(|k| k.2.as_str()).collect();
        assert_eq!(
            order,
            [
                "20060102-150405",
                "20060102-150405.9",
                "20060102-150405.10",
                "20060102-150406"
            ]
        );
    }
}
