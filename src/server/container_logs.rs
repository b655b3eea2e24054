//! `GET /containerLogs/{namespace}/{pod}/{container}`: the query decoded as upstream decodes a
//! v1.PodLogOptions, validated as upstream validates it, then the container's CRI log file
//! streamed back (only the content, optionally prefixed with each record's time).

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, FixedOffset, SecondsFormat, Utc};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio::sync::mpsc;

use crate::logs::{container_log_path, parse_cri_line, pod_log_dir};
use crate::pod::StatusStore;

/// The log options of a request (v1.PodLogOptions fields the kubelet uses).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogOptions {
    pub follow: bool,
    pub previous: bool,
    pub timestamps: bool,
    pub since_seconds: Option<i64>,
    pub since_time: Option<DateTime<FixedOffset>>,
    pub tail_lines: Option<i64>,
    pub limit_bytes: Option<i64>,
}

/// A refusal, with upstream's status and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogError {
    pub status: u16,
    pub body: String,
}

fn err(status: u16, body: impl Into<String>) -> LogError {
    LogError {
        status,
        body: body.into(),
    }
}

/// `application/x-www-form-urlencoded` decoding of a query string: every value per key.
pub fn parse_query(query: &str) -> HashMap<String, Vec<String>> {
    let mut out: HashMap<String, Vec<String>> = HashMap::new();
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        out.entry(k.into_owned()).or_default().push(v.into_owned());
    }
    out
}

/// Go's query-parameter bool: only `0`, `f` and `false` (any case) are false.
fn query_bool(v: &str) -> bool {
    !(v == "0" || v.eq_ignore_ascii_case("f") || v.eq_ignore_ascii_case("false"))
}

/// Decodes and validates the query: 400 `Unable to decode query.`, 422 `Invalid request.`.
pub fn parse_log_options(query: &str) -> Result<LogOptions, LogError> {
    let mut q = parse_query(query);
    // The legacy `tail` parameter wins over tailLines; `tail=all` means no limit.
    if let Some(tail) = q.get("tail").and_then(|v| v.first()).cloned() {
        if !tail.is_empty() {
            q.remove("tailLines");
            if tail != "all" {
                q.insert("tailLines".into(), vec![tail]);
            }
        }
    }
    let decode_error = || err(400, r#"{"message": "Unable to decode query."}"#);
    let first = |k: &str| q.get(k).and_then(|v| v.first()).map(String::as_str);
    let int = |k: &str| -> Result<Option<i64>, LogError> {
        match first(k) {
            None | Some("") => Ok(None),
            Some(v) => v.parse().map(Some).map_err(|_| decode_error()),
        }
    };
    let opts = LogOptions {
        follow: first("follow").is_some_and(query_bool),
        previous: first("previous").is_some_and(query_bool),
        timestamps: first("timestamps").is_some_and(query_bool),
        since_seconds: int("sinceSeconds")?,
        since_time: match first("sinceTime") {
            None | Some("") => None,
            Some(v) => Some(DateTime::parse_from_rfc3339(v).map_err(|_| decode_error())?),
        },
        tail_lines: int("tailLines")?,
        limit_bytes: int("limitBytes")?,
    };
    let invalid = || err(422, r#"{"message": "Invalid request."}"#);
    if opts.tail_lines.is_some_and(|n| n < 0)
        || opts.limit_bytes.is_some_and(|n| n < 1)
        || (opts.since_seconds.is_some() && opts.since_time.is_some())
        || opts.since_seconds.is_some_and(|n| n < 1)
        // Choosing a stream needs the PodLogsQuerySplitStreams gate, off upstream by default.
        || first("stream").is_some()
    {
        return Err(invalid());
    }
    Ok(opts)
}

/// Where a container's log is, and whether it is still being written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogTarget {
    pub path: PathBuf,
    pub pod_uid: String,
    pub restart_count: u32,
}

fn statuses(pod: &Pod) -> impl Iterator<Item = &ContainerStatus> {
    let s = pod.status.as_ref();
    s.and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .chain(s.and_then(|s| s.init_container_statuses.as_ref()))
        .chain(s.and_then(|s| s.ephemeral_container_statuses.as_ref()))
        .flatten()
}

fn has_container(pod: &Pod, name: &str) -> bool {
    pod.spec.as_ref().is_some_and(|s| {
        s.containers.iter().any(|c| c.name == name)
            || s.init_containers.iter().flatten().any(|c| c.name == name)
            || s.ephemeral_containers
                .iter()
                .flatten()
                .any(|c| c.name == name)
    })
}

/// Finds the pod and container and picks the log file, with upstream's 404/400 answers.
pub async fn locate(
    store: &StatusStore,
    pod_logs_dir: &std::path::Path,
    namespace: &str,
    pod_name: &str,
    container: &str,
    opts: &LogOptions,
) -> Result<LogTarget, LogError> {
    let pod = store
        .find(namespace, pod_name)
        .ok_or_else(|| err(404, format!("pod {pod_name:?} does not exist")))?;
    let pod = pod.as_ref();
    if !has_container(pod, container) {
        return Err(err(
            404,
            format!("container {container:?} not found in pod {pod_name:?}"),
        ));
    }
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let status = statuses(pod).find(|s| s.name == container);
    let restart_count = status.map_or(0, |s| s.restart_count.max(0) as u32);
    let state = status.and_then(|s| s.state.as_ref());
    let restart_count = if opts.previous {
        let had_previous = status
            .and_then(|s| s.last_state.as_ref())
            .is_some_and(|l| l.terminated.is_some());
        if !had_previous || restart_count == 0 {
            return Err(err(
                400,
                format!(
                    "previous terminated container {container:?} in pod {pod_name:?} not found"
                ),
            ));
        }
        restart_count - 1
    } else {
        match state {
            Some(s) if s.running.is_some() || s.terminated.is_some() => restart_count,
            Some(s) => match s.waiting.as_ref() {
                // A restarting container's last run still has a log to show.
                Some(_) if status.and_then(|s| s.last_state.as_ref()).is_some_and(|l| l.terminated.is_some()) => {
                    restart_count.saturating_sub(1)
                }
                Some(w) => {
                    return Err(err(
                        400,
                        format!(
                            "container {container:?} in pod {pod_name:?} is waiting to start: {}",
                            w.reason.as_deref().unwrap_or("ContainerCreating")
                        ),
                    ))
                }
                None => restart_count,
            },
            None => {
                return Err(err(
                    400,
                    format!("container {container:?} in pod {pod_name:?} is waiting to start: ContainerCreating"),
                ))
            }
        }
    };
    let dir = pod_log_dir(pod_logs_dir, namespace, pod_name, &uid);
    Ok(LogTarget {
        path: container_log_path(&dir, container, restart_count),
        pod_uid: uid,
        restart_count,
    })
}

/// Whether the container still runs the instance whose log is being followed.
async fn still_writing(
    store: &StatusStore,
    uid: &str,
    container: &str,
    restart_count: u32,
) -> bool {
    let Some(found) = store.get(uid) else {
        return false;
    };
    let running = statuses(&found.pod).any(|s| {
        s.name == container
            && s.restart_count.max(0) as u32 == restart_count
            && s.state.as_ref().is_some_and(|st| st.running.is_some())
    });
    running
}

/// Turns CRI records into client output, applying since, timestamps and limitBytes.
struct Emitter {
    since: Option<DateTime<FixedOffset>>,
    timestamps: bool,
    remaining: Option<u64>,
}

impl Emitter {
    /// Output for one record; None once limitBytes is used up.
    fn record(&mut self, raw: &[u8]) -> Option<Vec<u8>> {
        if self.remaining == Some(0) {
            return None;
        }
        let Ok(rec) = parse_cri_line(raw) else {
            return Some(Vec::new());
        };
        if self.since.is_some_and(|s| rec.timestamp < s) {
            return Some(Vec::new());
        }
        let mut out = Vec::with_capacity(rec.content.len() + 40);
        if self.timestamps {
            let t = rec.timestamp.with_timezone(&Utc);
            out.extend_from_slice(t.to_rfc3339_opts(SecondsFormat::Nanos, true).as_bytes());
            out.push(b' ');
        }
        out.extend_from_slice(rec.content);
        if !rec.partial {
            out.push(b'\n');
        }
        if let Some(rem) = self.remaining.as_mut() {
            out.truncate((*rem).min(out.len() as u64) as usize);
            *rem -= out.len() as u64;
        }
        Some(out)
    }
}

/// The file `path` names now, when it is no longer the open `file` (the writer rotated it).
async fn rotated(file: &tokio::fs::File, path: &std::path::Path) -> Option<tokio::fs::File> {
    use std::os::unix::fs::MetadataExt;
    let open = file.metadata().await.ok()?;
    let now = tokio::fs::metadata(path).await.ok()?;
    if (open.dev(), open.ino()) == (now.dev(), now.ino()) {
        return None;
    }
    tokio::fs::File::open(path).await.ok()
}

/// How much of the log file is read at a time, and about how much output is batched into one
/// message: memory per request stays at a few of these whatever the file's size.
const CHUNK: usize = 64 * 1024;

/// The time `since_seconds` before `now`, or None when that is before any time chrono can
/// hold (then every record is newer, which is what such a request asks for). Upstream
/// subtracts in Go's time arithmetic; here no value of the field may overflow or panic.
fn since_from_seconds(now: DateTime<Utc>, since_seconds: i64) -> Option<DateTime<FixedOffset>> {
    chrono::TimeDelta::try_seconds(since_seconds)
        .and_then(|d| now.checked_sub_signed(d))
        .map(|t| t.fixed_offset())
}

/// Where the last `lines` complete records of the first `end` bytes start, found by reading
/// backwards from `end` in chunks (upstream's tail does the same), so a tail of a big file
/// reads only about as much as the tail itself. Bytes after the last newline (a record still
/// being written) are not a line; they belong to what follows.
async fn tail_start<R>(reader: &mut R, end: u64, lines: u64) -> std::io::Result<u64>
where
    R: tokio::io::AsyncRead + tokio::io::AsyncSeek + Unpin,
{
    // The newline that ends the last complete record is found first; each newline before it
    // ends one more record, and the wanted records start after the `lines`-th of those.
    let mut newlines_wanted = lines.saturating_add(1);
    let mut pos = end;
    let mut buf = vec![0u8; CHUNK];
    while pos > 0 {
        let len = (pos.min(CHUNK as u64)) as usize;
        pos -= len as u64;
        reader.seek(std::io::SeekFrom::Start(pos)).await?;
        reader.read_exact(&mut buf[..len]).await?;
        for i in (0..len).rev() {
            if buf[i] == b'\n' {
                newlines_wanted -= 1;
                if newlines_wanted == 0 {
                    return Ok(pos + i as u64 + 1);
                }
            }
        }
    }
    Ok(0)
}

/// Why pumping a log stopped.
#[derive(Debug, PartialEq, Eq)]
enum Pumped {
    /// The reader is at its end; more may come later.
    End,
    /// limitBytes is used up or the client left: nothing more to send.
    Done,
}

/// Reads from the reader's current position to its end in chunks, sending the output of each
/// complete record in batches. `pending` carries a record cut by the end of what was read
/// (kept for the next call).
async fn pump<R>(
    reader: &mut R,
    pending: &mut Vec<u8>,
    emit: &mut Emitter,
    tx: &mpsc::Sender<Bytes>,
) -> std::io::Result<Pumped>
where
    R: tokio::io::AsyncRead + Unpin,
{
    let mut buf = vec![0u8; CHUNK];
    let mut out = Vec::new();
    loop {
        let n = reader.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        pending.extend_from_slice(&buf[..n]);
        let Some(end) = pending.iter().rposition(|&b| b == b'\n').map(|i| i + 1) else {
            continue;
        };
        let mut done = false;
        for raw in pending[..end].split_inclusive(|&b| b == b'\n') {
            match emit.record(raw) {
                Some(o) => out.extend_from_slice(&o),
                None => {
                    done = true;
                    break;
                }
            }
        }
        pending.drain(..end);
        if (out.len() >= CHUNK || done)
            && !out.is_empty()
            && tx
                .send(Bytes::from(std::mem::take(&mut out)))
                .await
                .is_err()
        {
            return Ok(Pumped::Done);
        }
        if done {
            return Ok(Pumped::Done);
        }
    }
    if !out.is_empty() && tx.send(Bytes::from(out)).await.is_err() {
        return Ok(Pumped::Done);
    }
    Ok(if emit.remaining == Some(0) {
        Pumped::Done
    } else {
        Pumped::End
    })
}

/// Sends what the log holds now: from its start, or its last `tail_lines` records, reading
/// forwards from there. Leaves the reader at the end and `pending` holding a record still
/// being written.
async fn send_existing<R>(
    reader: &mut R,
    tail_lines: Option<i64>,
    pending: &mut Vec<u8>,
    emit: &mut Emitter,
    tx: &mpsc::Sender<Bytes>,
) -> std::io::Result<Pumped>
where
    R: tokio::io::AsyncRead + tokio::io::AsyncSeek + Unpin,
{
    let start = match tail_lines {
        Some(n) => {
            let end = reader.seek(std::io::SeekFrom::End(0)).await?;
            // Validation refused negative counts; max(0) keeps the cast exact regardless.
            tail_start(reader, end, n.max(0) as u64).await?
        }
        None => 0,
    };
    reader.seek(std::io::SeekFrom::Start(start)).await?;
    pump(reader, pending, emit, tx).await
}

/// Streams the log into `tx` until done (or, with follow, until the instance stops or the
/// client goes away, which closes the channel).
pub async fn stream(
    store: StatusStore,
    container: String,
    target: LogTarget,
    opts: LogOptions,
    tx: mpsc::Sender<Bytes>,
) {
    let since = opts.since_time.or_else(|| {
        opts.since_seconds
            .and_then(|s| since_from_seconds(Utc::now(), s))
    });
    let mut emit = Emitter {
        since,
        timestamps: opts.timestamps,
        // Validation refused counts under 1; max(0) keeps the cast exact regardless.
        remaining: opts.limit_bytes.map(|n| n.max(0) as u64),
    };
    let mut file = match tokio::fs::File::open(&target.path).await {
        Ok(f) => f,
        Err(e) => {
            let _ = tx
                .send(Bytes::from(format!(
                    "failed to open log file {:?}: {e}\n",
                    target.path
                )))
                .await;
            return;
        }
    };
    // Only whole records are sent; a record still being written stays in `pending` and is
    // finished by the next read.
    let mut pending = Vec::new();
    match send_existing(&mut file, opts.tail_lines, &mut pending, &mut emit, &tx).await {
        Ok(Pumped::End) if opts.follow => {}
        _ => return,
    }
    let mut switch_to = None;
    loop {
        if tx.is_closed() {
            return;
        }
        match pump(&mut file, &mut pending, &mut emit, &tx).await {
            Ok(Pumped::End) => {}
            Ok(Pumped::Done) | Err(_) => return,
        }
        // The writer rotates by renaming the file and starting a new one at the same path:
        // once the open file is read to its end, go on with the file the path names now
        // (upstream's follow reopens on the rename as well).
        if let Some(newer) = switch_to.take() {
            file = newer;
            // A record cut by the rotation cannot continue in the next file.
            pending.clear();
            continue;
        }
        if let Some(newer) = rotated(&file, &target.path).await {
            // Records may have reached the old file between the read that found its end
            // and the rename: read it to its end once more before switching.
            switch_to = Some(newer);
            continue;
        }
        if !still_writing(&store, &target.pod_uid, &container, target.restart_count).await {
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
            _ = tx.closed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_query_like_go() {
        let q = parse_query("a=1&a=2&b=x%20y+z&c&d=%zz");
        assert_eq!(q["a"], ["1", "2"]);
        assert_eq!(q["b"], ["x y z"]);
        assert_eq!(q["c"], [""]);
        assert_eq!(q["d"], ["%zz"]);
    }

    #[test]
    fn parses_log_options() {
        let o = parse_log_options(
            "follow=true&previous=1&timestamps=T&tailLines=10&limitBytes=5&sinceTime=2024-01-02T03:04:05Z",
        )
        .unwrap();
        assert!(o.follow && o.previous && o.timestamps);
        assert_eq!(o.tail_lines, Some(10));
        assert_eq!(o.limit_bytes, Some(5));
        assert_eq!(
            o.since_time.unwrap().to_rfc3339(),
            "2024-01-02T03:04:05+00:00"
        );
        assert!(!parse_log_options("follow=false").unwrap().follow);
        assert!(
            parse_log_options("follow=").unwrap().follow,
            "Go: empty is true"
        );
        assert_eq!(parse_log_options("tail=3").unwrap().tail_lines, Some(3));
        assert_eq!(
            parse_log_options("tail=all&tailLines=4")
                .unwrap()
                .tail_lines,
            None
        );
        assert_eq!(
            parse_log_options("sinceSeconds=").unwrap().since_seconds,
            None
        );
    }

    #[test]
    fn rejects_bad_options_with_upstream_answers() {
        let decode = err(400, r#"{"message": "Unable to decode query."}"#);
        let invalid = err(422, r#"{"message": "Invalid request."}"#);
        assert_eq!(parse_log_options("tailLines=x"), Err(decode.clone()));
        assert_eq!(
            parse_log_options("sinceTime=yesterday"),
            Err(decode.clone())
        );
        assert_eq!(parse_log_options("tail=many"), Err(decode));
        assert_eq!(parse_log_options("tailLines=-1"), Err(invalid.clone()));
        assert_eq!(parse_log_options("limitBytes=0"), Err(invalid.clone()));
        assert_eq!(parse_log_options("sinceSeconds=0"), Err(invalid.clone()));
        assert_eq!(
            parse_log_options("sinceSeconds=5&sinceTime=2024-01-02T03:04:05Z"),
            Err(invalid.clone())
        );
        assert_eq!(parse_log_options("stream=Stdout"), Err(invalid));
    }

    #[test]
    fn emitter_applies_since_timestamps_and_limit() {
        let mut e = Emitter {
            since: Some(DateTime::parse_from_rfc3339("2024-01-01T00:00:01Z").unwrap()),
            timestamps: true,
            remaining: Some(45),
        };
        assert_eq!(
            e.record(b"2024-01-01T00:00:00Z stdout F old\n"),
            Some(vec![])
        );
        assert_eq!(
            e.record(b"2024-01-01T01:00:02.5+01:00 stdout P par\n")
                .unwrap(),
            b"2024-01-01T00:00:02.500000000Z par".to_vec()
        );
        let last = e.record(b"2024-01-01T00:00:03Z stderr F tial\n").unwrap();
        assert_eq!(last, b"2024-01-01T".to_vec(), "cut at 45 bytes");
        assert_eq!(e.record(b"2024-01-01T00:00:04Z stdout F more\n"), None);
    }

    /// A reader that counts the bytes it hands out, to show how much of a file was read.
    struct Counting<R> {
        inner: R,
        read: u64,
    }

    impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Counting<R> {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            let before = buf.filled().len();
            let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
            self.read += (buf.filled().len() - before) as u64;
            polled
        }
    }

    impl<R: tokio::io::AsyncSeek + Unpin> tokio::io::AsyncSeek for Counting<R> {
        fn start_seek(
            mut self: std::pin::Pin<&mut Self>,
            position: std::io::SeekFrom,
        ) -> std::io::Result<()> {
            std::pin::Pin::new(&mut self.inner).start_seek(position)
        }
        fn poll_complete(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<u64>> {
            std::pin::Pin::new(&mut self.inner).poll_complete(cx)
        }
    }

    fn record(n: usize) -> String {
        format!("2024-01-02T03:04:05.000000000Z stdout F line {n:07}\n")
    }

    /// Everything `send_existing` sends for these options, and how many bytes it read.
    async fn existing(
        path: &std::path::Path,
        tail: Option<i64>,
        limit: Option<u64>,
    ) -> (String, u64) {
        let file = tokio::fs::File::open(path).await.unwrap();
        let mut counted = Counting {
            inner: file,
            read: 0,
        };
        let mut emit = Emitter {
            since: None,
            timestamps: false,
            remaining: limit,
        };
        let (tx, mut rx) = mpsc::channel::<Bytes>(4);
        let collect = tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some(b) = rx.recv().await {
                got.extend_from_slice(&b);
            }
            String::from_utf8(got).unwrap()
        });
        let mut pending = Vec::new();
        send_existing(&mut counted, tail, &mut pending, &mut emit, &tx)
            .await
            .unwrap();
        drop(tx);
        (collect.await.unwrap(), counted.read)
    }

    /// A tail (or a byte limit) of a big log reads about as much as it sends, not the file:
    /// before, the whole file was read into memory for every request.
    #[tokio::test]
    async fn a_tail_of_a_big_log_reads_only_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        let mut text = String::new();
        let mut n = 0;
        while text.len() < 32 << 20 {
            text.push_str(&record(n));
            n += 1;
        }
        // A record still being written: not a line yet, so not in the tail.
        text.push_str("2024-01-02T03:04:05.000000000Z stdout F unfinish");
        std::fs::write(&path, &text).unwrap();
        let (got, read) = existing(&path, Some(3), None).await;
        assert_eq!(
            got,
            format!("line {:07}\nline {:07}\nline {:07}\n", n - 3, n - 2, n - 1)
        );
        assert!(
            read < 1 << 20,
            "read {read} bytes of a 32 MiB file for a tail of 3"
        );
        let (got, read) = existing(&path, None, Some(20)).await;
        assert_eq!(got, "line 0000000\nline 00");
        assert!(
            read < 1 << 20,
            "read {read} bytes of a 32 MiB file for 20 bytes"
        );
        // A tail longer than the file is the whole file (read once, as it must be).
        let (got, read) = existing(&path, Some(i64::MAX), Some(13)).await;
        assert_eq!(got, "line 0000000\n");
        assert!(read >= text.len() as u64);
    }

    /// tailLines counts records, P and F alike, across the chunks read backwards; 0 is none.
    #[tokio::test]
    async fn tail_counts_records_across_chunk_boundaries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        let mut text = String::new();
        // Records of many lengths, so chunk boundaries fall everywhere in them.
        for i in 0..5000 {
            let tag = if i % 3 == 0 { "P" } else { "F" };
            let pad = "x".repeat(i % 97);
            text.push_str(&format!("2024-01-02T03:04:05Z stdout {tag} {i}{pad}\n"));
        }
        std::fs::write(&path, &text).unwrap();
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        for tail in [0usize, 1, 2, 999, 1000, 4999, 5000] {
            let (got, _) = existing(&path, Some(tail as i64), None).await;
            let mut want = Vec::new();
            let mut e = Emitter {
                since: None,
                timestamps: false,
                remaining: None,
            };
            for raw in &lines[lines.len() - tail..] {
                want.extend(e.record(raw.as_bytes()).unwrap());
            }
            assert_eq!(got, String::from_utf8(want).unwrap(), "tail {tail}");
        }
    }

    /// No value of the numeric options can panic or overflow: huge ones are clamped (a
    /// sinceSeconds before any representable time means every record), and the streaming
    /// itself copes with the extremes. Before, `sinceSeconds=9223372036854775807` panicked
    /// in the time arithmetic.
    #[tokio::test]
    async fn extreme_option_values_give_answers_not_panics() {
        let now = Utc::now();
        for s in [
            i64::MAX,
            i64::MAX / 1000,
            9_223_372_036_854_775,
            i64::MIN,
            i64::MIN + 1,
        ] {
            // Before the year -262143 or beyond: clamped to "everything".
            let _ = since_from_seconds(now, s);
        }
        assert_eq!(since_from_seconds(now, i64::MAX), None);
        assert_eq!(
            since_from_seconds(now, 60).unwrap(),
            (now - chrono::TimeDelta::seconds(60)).fixed_offset()
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        std::fs::write(&path, record(1) + &record(2)).unwrap();
        let store = crate::pod::status_manager::StatusManager::new();
        for query in [
            "sinceSeconds=9223372036854775807",
            "sinceSeconds=9223372036854775",
            "tailLines=9223372036854775807",
            "limitBytes=9223372036854775807",
            "tailLines=9223372036854775807&limitBytes=9223372036854775807&sinceSeconds=9223372036854775807&timestamps=true",
            "sinceTime=9999-12-31T23:59:59-23:59",
            "sinceTime=0000-01-01T00:00:00%2B23:59&timestamps=true",
        ] {
            let opts = parse_log_options(query).unwrap_or_else(|e| panic!("{query}: {e:?}"));
            let (tx, mut rx) = mpsc::channel(16);
            let target = LogTarget {
                path: path.clone(),
                pod_uid: "u".into(),
                restart_count: 0,
            };
            tokio::spawn(stream(store.clone(), "c".into(), target, opts, tx))
                .await
                .unwrap_or_else(|e| panic!("{query}: {e}"));
            let mut got = Vec::new();
            while let Some(b) = rx.recv().await {
                got.extend_from_slice(&b);
            }
            let got = String::from_utf8(got).unwrap();
            if query.starts_with("sinceTime=9999") {
                assert_eq!(got, "", "{query}");
            } else {
                assert!(got.ends_with("line 0000002\n"), "{query}: {got:?}");
            }
        }
        // Out of i64 or negative: refused, not wrapped.
        for query in [
            "sinceSeconds=9223372036854775808",
            "tailLines=-9223372036854775808",
            "limitBytes=-9223372036854775808",
            "sinceSeconds=-9223372036854775808",
            "sinceTime=%2B10000-01-01T00:00:00Z",
            "sinceTime=-9999-01-01T00:00:00Z",
        ] {
            assert!(parse_log_options(query).is_err(), "{query}");
        }
    }

    #[tokio::test]
    async fn follow_goes_on_in_the_new_file_after_a_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        let line = |n: u32| format!("2024-01-02T03:04:05.000000000Z stdout F line {n}\n");
        std::fs::write(&path, line(1)).unwrap();
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
            "status": {"containerStatuses": [{
                "name": "c", "image": "i", "imageID": "", "ready": true, "restartCount": 0,
                "state": {"running": {}}
            }]}
        }))
        .unwrap();
        let store = crate::pod::status_manager::StatusManager::new();
        store.set(pod.clone());
        let (tx, mut rx) = mpsc::channel(16);
        let target = LogTarget {
            path: path.clone(),
            pod_uid: "u1".into(),
            restart_count: 0,
        };
        let opts = LogOptions {
            follow: true,
            ..Default::default()
        };
        let follow = tokio::spawn(stream(store.clone(), "c".into(), target, opts, tx));
        assert_eq!(rx.recv().await.unwrap(), Bytes::from("line 1\n"));
        // What the writer does at its size limit: rename, then a fresh file at the path.
        let mut old = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut old, line(2).as_bytes()).unwrap();
        std::fs::rename(&path, dir.path().join("0.log.20240102-030405")).unwrap();
        std::fs::write(&path, line(3)).unwrap();
        let mut got = String::new();
        while !got.contains("line 3") {
            let chunk = tokio::time::timeout(Duration::from_secs(60), rx.recv())
                .await
                .expect("the follow goes on within a minute")
                .expect("the follow is still running");
            got.push_str(std::str::from_utf8(&chunk).unwrap());
        }
        assert_eq!(got, "line 2\nline 3\n");
        // The container stops: the follow ends.
        let mut stopped = pod;
        stopped
            .status
            .as_mut()
            .unwrap()
            .container_statuses
            .as_mut()
            .unwrap()[0]
            .state = Some(k8s_openapi::api::core::v1::ContainerState {
            terminated: Some(Default::default()),
            ..Default::default()
        });
        store.set(stopped);
        tokio::time::timeout(Duration::from_secs(60), follow)
            .await
            .expect("the follow ends once the container stopped")
            .unwrap();
    }

    mod properties {
        use super::*;
        use chrono::TimeZone;
        use proptest::prelude::*;

        fn value() -> impl Strategy<Value = String> {
            prop_oneof![
                any::<i64>().prop_map(|n| n.to_string()),
                "[+-]?[0-9]{18,22}",
                prop::sample::select(vec!["true", "false", "0", "1", "f", "all", ""]).prop_map(str::to_string),
                "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{1,12})?(Z|[+-][0-9]{2}:[0-9]{2})",
                ".{0,10}",
            ]
        }

        fn query() -> impl Strategy<Value = String> {
            let key = prop::sample::select(vec![
                "follow",
                "previous",
                "timestamps",
                "sinceSeconds",
                "sinceTime",
                "tailLines",
                "tail",
                "limitBytes",
                "stream",
                "other",
            ]);
            crate::test_support::query_of(key, value())
        }

        proptest! {
            #![proptest_config(crate::test_support::proptest_config(512))]

            /// Any query is options or upstream's refusal, and options that pass hold
            /// upstream's rules; the since time any number of seconds gives is a time or
            /// "everything", never a panic.
            #[test]
            fn any_query_is_options_or_a_refusal(q in prop_oneof![query(), ".{0,40}"], secs in any::<i64>()) {
                match parse_log_options(&q) {
                    Ok(o) => {
                        prop_assert!(o.tail_lines.is_none_or(|n| n >= 0));
                        prop_assert!(o.limit_bytes.is_none_or(|n| n >= 1));
                        prop_assert!(o.since_seconds.is_none_or(|n| n >= 1));
                        prop_assert!(o.since_seconds.is_none() || o.since_time.is_none());
                    }
                    Err(e) => prop_assert!(e.status == 400 || e.status == 422),
                }
                let now = Utc::now();
                if let Some(since) = since_from_seconds(now, secs) {
                    prop_assert_eq!(since >= now, secs <= 0);
                }
            }

            /// The options a client asks for are the options read.
            #[test]
            fn options_round_trip(
                follow in any::<bool>(),
                previous in any::<bool>(),
                timestamps in any::<bool>(),
                since in prop_oneof![
                    Just((None, None)),
                    (1..=i64::MAX).prop_map(|s| (Some(s), None)),
                    (-62_135_596_800i64..253_402_300_799, 0u32..1_000_000_000)
                        .prop_map(|(s, n)| (None, Some(Utc.timestamp_opt(s, n).unwrap().fixed_offset()))),
                ],
                tail_lines in proptest::option::of(0..=i64::MAX),
                limit_bytes in proptest::option::of(1..=i64::MAX),
            ) {
                let want = LogOptions {
                    follow,
                    previous,
                    timestamps,
                    since_seconds: since.0,
                    since_time: since.1,
                    tail_lines,
                    limit_bytes,
                };
                let mut s = form_urlencoded::Serializer::new(String::new());
                for (k, on) in [("follow", follow), ("previous", previous), ("timestamps", timestamps)] {
                    s.append_pair(k, if on { "true" } else { "false" });
                }
                for (k, n) in [("sinceSeconds", since.0), ("tailLines", tail_lines), ("limitBytes", limit_bytes)] {
                    if let Some(n) = n {
                        s.append_pair(k, &n.to_string());
                    }
                }
                if let Some(t) = since.1 {
                    s.append_pair("sinceTime", &t.to_rfc3339_opts(SecondsFormat::AutoSi, true));
                }
                prop_assert_eq!(parse_log_options(&s.finish()), Ok(want));
            }
        }
    }
}
