//! Termination messages, as upstream's kubelet gives them: each container instance gets an
//! empty, world-writable file under its pod's directory
//! (`<root-dir>/pods/<uid>/containers/<name>/<random>`), bind-mounted at its
//! terminationMessagePath; when the instance exits, the last 4 KiB of that file become its
//! terminated state's message. With terminationMessagePolicy FallbackToLogsOnError, a
//! failed instance that wrote nothing there gets the tail of its log instead (its last 80
//! lines, at most 2 KiB). Blocking: file-system work.

use std::fs;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::logs::parse_cri_line;

/// upstream's MaxContainerTerminationMessageLength.
pub const MAX_MESSAGE_BYTES: u64 = 4 * 1024;
/// upstream's MaxContainerTerminationMessageLogLines and ...LogLength.
pub const MAX_LOG_LINES: usize = 80;
pub const MAX_LOG_BYTES: usize = 2 * 1024;

/// Creates the message file of one container instance (`tag` tells instances apart) and
/// returns its path. Mode 0666 whatever the umask: the container's user may be anyone.
pub fn create_file(pod_dir: &Path, container: &str, tag: &str) -> io::Result<PathBuf> {
    let dir = pod_dir.join("containers").join(container);
    fs::create_dir_all(&dir)?;
    let path = dir.join(tag);
    fs::File::create(&path)?;
    fs::set_permissions(&path, fs::Permissions::from_mode(0o666))?;
    Ok(path)
}

/// How an instance ended, for choosing its message.
pub struct Ended<'a> {
    /// The message file on the host (None: the container has no terminationMessagePath).
    pub file: Option<&'a Path>,
    /// terminationMessagePolicy is FallbackToLogsOnError.
    pub fallback_to_logs: bool,
    pub exit_code: i32,
    /// The instance's CRI log file.
    pub log: Option<&'a Path>,
}

/// The instance's termination message: its file's last 4 KiB, or with the fallback policy
/// and a failure, the tail of its log when the file is empty or missing. A file that cannot
/// be read says so in the message, as upstream's does.
pub fn read(ended: &Ended<'_>) -> String {
    let fallback = ended.fallback_to_logs && ended.exit_code != 0;
    let from_file = match ended.file {
        None => None,
        Some(path) => match read_last(path, MAX_MESSAGE_BYTES) {
            Ok(data) => Some(String::from_utf8_lossy(&data).into_owned()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => {
                return format!("Error on reading termination log {}: {e}", path.display());
            }
        },
    };
    match from_file {
        Some(m) if !m.is_empty() || !fallback => m,
        _ if fallback => ended.log.map(log_tail).unwrap_or_default(),
        _ => String::new(),
    }
}

/// The last `max` bytes of a file.
fn read_last(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let mut f = fs::File::open(path)?;
    let len = f.metadata()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(max)))?;
    let mut data = Vec::new();
    f.take(max).read_to_end(&mut data)?;
    Ok(data)
}

/// The content of a CRI log's last 80 records, cut to its first 2 KiB (upstream reads the
/// log with tailLines 80 and limitBytes 2048). A partial record joins the next.
fn log_tail(path: &Path) -> String {
    // 80 lines of up to the writer's line size could be large; the message only keeps 2 KiB
    // of content, so a generous window of the file's end is enough.
    let Ok(data) = read_last(path, 256 * 1024) else {
        return String::new();
    };
    let mut lines: Vec<&[u8]> = data.split_inclusive(|&b| b == b'\n').collect();
    // The window may start inside a record: drop that fragment unless it is the whole file.
    if data.len() as u64 == 256 * 1024 && !lines.is_empty() {
        lines.remove(0);
    }
    let mut out = Vec::new();
    for raw in lines.iter().rev().take(MAX_LOG_LINES).rev() {
        let Ok(rec) = parse_cri_line(raw) else {
            continue;
        };
        out.extend_from_slice(rec.content);
        if !rec.partial {
            out.push(b'\n');
        }
    }
    out.truncate(MAX_LOG_BYTES);
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended<'a>(file: Option<&'a Path>, fallback: bool, code: i32, log: &'a Path) -> Ended<'a> {
        Ended {
            file,
            fallback_to_logs: fallback,
            exit_code: code,
            log: Some(log),
        }
    }

    fn cri_log(dir: &Path, lines: &[&str]) -> PathBuf {
        let path = dir.join("0.log");
        let body: String = lines
            .iter()
            .map(|l| format!("2026-12-04T10:00:00.000000000Z stdout F {l}\n"))
            .collect();
        fs::write(&path, body).unwrap();
        path
    }

    #[test]
    fn the_file_is_world_writable_and_its_last_4_kib_are_the_message() {
        let tmp = tempfile::tempdir().unwrap();
        let file = create_file(tmp.path(), "app", "0a1b2c3d").unwrap();
        assert_eq!(file, tmp.path().join("containers/app/0a1b2c3d"));
        assert_eq!(
            fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o666
        );
        let log = cri_log(tmp.path(), &["from the log"]);
        assert_eq!(read(&ended(Some(&file), false, 0, &log)), "");
        fs::write(&file, "DONE").unwrap();
        assert_eq!(read(&ended(Some(&file), false, 1, &log)), "DONE");
        // Written by the container, read back from the end when too long.
        let long = format!("{}{}", "x".repeat(5000), "END");
        fs::write(&file, &long).unwrap();
        let m = read(&ended(Some(&file), false, 0, &log));
        assert_eq!(m.len(), 4096);
        assert!(m.ends_with("xEND"));
    }

    #[test]
    fn fallback_to_logs_only_for_a_failure_that_wrote_no_message() {
        let tmp = tempfile::tempdir().unwrap();
        let file = create_file(tmp.path(), "app", "t").unwrap();
        let log = cri_log(tmp.path(), &["first", "DONE"]);
        // A failure with an empty file: the log's tail.
        assert_eq!(read(&ended(Some(&file), true, 1, &log)), "first\nDONE\n");
        // A success with an empty file: nothing, even with the fallback.
        assert_eq!(read(&ended(Some(&file), true, 0, &log)), "");
        // Without the fallback policy: nothing.
        assert_eq!(read(&ended(Some(&file), false, 1, &log)), "");
        // A message in the file wins over the log.
        fs::write(&file, "OK").unwrap();
        assert_eq!(read(&ended(Some(&file), true, 1, &log)), "OK");
        // No message file at all (no terminationMessagePath): the log, on failure.
        assert_eq!(read(&ended(None, true, 2, &log)), "first\nDONE\n");
        let gone = tmp.path().join("gone");
        assert_eq!(read(&ended(Some(&gone), true, 2, &log)), "first\nDONE\n");
    }

    #[test]
    fn the_log_tail_is_the_last_80_lines_cut_to_2_kib() {
        let tmp = tempfile::tempdir().unwrap();
        let lines: Vec<String> = (0..100).map(|i| format!("line {i}")).collect();
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        let log = cri_log(tmp.path(), &refs);
        let m = read(&ended(None, true, 1, &log));
        assert!(m.starts_with("line 20\n"), "{m}");
        assert!(m.ends_with("line 99\n"), "{m}");
        let wide: Vec<String> = (0..80)
            .map(|i| format!("{i:03}{}", "y".repeat(97)))
            .collect();
        let refs: Vec<&str> = wide.iter().map(String::as_str).collect();
        let log = cri_log(tmp.path(), &refs);
        let m = read(&ended(None, true, 1, &log));
        assert_eq!(m.len(), MAX_LOG_BYTES);
        assert!(
            m.starts_with("000y"),
            "the first bytes of the tail are kept"
        );
    }
}
