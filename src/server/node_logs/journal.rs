//! A query for services: their journal through `journalctl` where the journal knows them,
//! else their log file under the log folder (`<name>`, `<name>.log`, `<name>/<name>.log`,
//! the first found), as upstream's journalServer does on Linux. Problems are told in the
//! body, after the 200, as upstream tells them. The whole answer has 30 seconds.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use bytes::Bytes;
use hyper::{Response, StatusCode};
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc::Sender;
use tokio::time::Instant;

use super::files::{self, OpenError};
use super::query::{NodeLogQuery, Options};
use crate::server::response::Body;

/// Upstream's deadline for one query, both journalctl runs and file copies included.
const DEADLINE: Duration = Duration::from_secs(30);

/// Where the query looks.
#[derive(Debug, Clone)]
pub(crate) struct Sources {
    /// The log folder (/var/log).
    pub root: PathBuf,
    /// The journalctl to run (found on PATH by default).
    pub journalctl: PathBuf,
}

/// journalctl's arguments for `services` (upstream's getLoggingCmd on Linux).
pub(crate) fn journalctl_args(options: &Options, services: &[String]) -> Vec<String> {
    let mut args: Vec<String> = ["--utc", "--no-pager", "--output=short-precise"]
        .map(String::from)
        .into();
    // Go's "2006-1-2 15:4:5" layout: no zero padding, in the offset the time was given in.
    let layout = "%Y-%-m-%-d %-H:%-M:%-S";
    if let Some(t) = options.since {
        args.push(format!("--since={}", t.format(layout)));
    }
    if let Some(t) = options.until {
        args.push(format!("--until={}", t.format(layout)));
    }
    if let Some(n) = options.tail_lines {
        args.push("--pager-end".into());
        args.push(format!("--lines={n}"));
    }
    for s in services.iter().filter(|s| !s.is_empty()) {
        args.push(format!("--unit={s}"));
    }
    if !options.pattern.is_empty() {
        args.push(format!("--grep={}", options.pattern));
    }
    if let Some(boot) = options.boot {
        args.push("--boot".into());
        args.push(boot.to_string());
    }
    args
}

/// The answer to a validated query for services. `gzip`: the client sent exactly
/// `Accept-Encoding: gzip`, as upstream checks it.
pub(crate) fn serve(query: NodeLogQuery, sources: Sources, gzip: bool) -> Response<Body> {
    let mut b = Response::builder()
        .status(StatusCode::OK)
        .header("Content-Type", "text/plain;charset=UTF-8");
    if gzip {
        b = b.header("Content-Encoding", "gzip");
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
    tokio::spawn(async move {
        let mut out = Output::new(tx, gzip);
        copy(&query, &sources, &mut out, Instant::now() + DEADLINE).await;
        out.finish().await;
    });
    b.body(super::receiver_body(rx)).expect("static response")
}

/// The body being written, gzipped or not.
struct Output {
    tx: Sender<Bytes>,
    gzip: Option<flate2::write::GzEncoder<Vec<u8>>>,
    /// The client went away: nothing more is worth doing.
    closed: bool,
}

impl Output {
    fn new(tx: Sender<Bytes>, gzip: bool) -> Self {
        Output {
            tx,
            // BestSpeed, as upstream's writer.
            gzip: gzip
                .then(|| flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast())),
            closed: false,
        }
    }

    async fn write(&mut self, bytes: &[u8]) {
        if self.closed || bytes.is_empty() {
            return;
        }
        let chunk = match &mut self.gzip {
            Some(gz) => {
                use std::io::Write;
                if gz.write_all(bytes).is_err() {
                    return;
                }
                std::mem::take(gz.get_mut())
            }
            None => bytes.to_vec(),
        };
        if !chunk.is_empty() && self.tx.send(Bytes::from(chunk)).await.is_err() {
            self.closed = true;
        }
    }

    async fn finish(mut self) {
        if let Some(gz) = self.gzip.take() {
            if let Ok(rest) = gz.finish() {
                if !rest.is_empty() && !self.closed {
                    let _ = self.tx.send(Bytes::from(rest)).await;
                }
            }
        }
    }
}

async fn copy(query: &NodeLogQuery, sources: &Sources, out: &mut Output, deadline: Instant) {
    let mut native = Vec::new();
    let mut file_loggers = Vec::new();
    for s in &query.services {
        if logs_to_journal(&sources.journalctl, s, deadline).await {
            native.push(s.clone());
        } else {
            file_loggers.push(s.clone());
        }
    }
    if !native.is_empty() {
        copy_journal(query, &native, sources, out, deadline).await;
    }
    if !file_loggers.is_empty() && !query.options.is_empty() {
        out.write(
            format!(
                "\noptions present and query resolved to log files for [{}]\ntry without specifying options\n",
                file_loggers.join(" ")
            )
            .as_bytes(),
        )
        .await;
        return;
    }
    if !file_loggers.is_empty() {
        if Instant::now() >= deadline {
            out.write(b"\ncontext error: context deadline exceeded\n")
                .await;
            return;
        }
        for s in &file_loggers {
            copy_file_log(&sources.root, s, out, deadline).await;
        }
    }
}

/// Whether the journal has the unit `<service>.service` (journalctl lists the units it
/// has; a journalctl that is missing or fails means no).
async fn logs_to_journal(journalctl: &Path, service: &str, deadline: Instant) -> bool {
    let run = tokio::process::Command::new(journalctl)
        .args(["--field", "_SYSTEMD_UNIT"])
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout_at(deadline, run).await {
        Ok(Ok(o)) if o.status.success() => {
            let mut all = o.stdout;
            all.extend_from_slice(&o.stderr);
            String::from_utf8_lossy(&all).contains(&format!("{service}.service"))
        }
        _ => false,
    }
}

/// Runs journalctl for `services`, its stdout and stderr into the body through one pipe
/// (as Go's exec gives both to one writer), until it ends or the deadline kills it.
async fn copy_journal(
    query: &NodeLogQuery,
    services: &[String],
    sources: &Sources,
    out: &mut Output,
    deadline: Instant,
) {
    let not_available = query.options.boot.unwrap_or(0) == 0;
    let spawned = (|| {
        let (reader, writer) = std::io::pipe()?;
        let child = tokio::process::Command::new(&sources.journalctl)
            .args(journalctl_args(&query.options, services))
            .stdin(Stdio::null())
            .stdout(Stdio::from(writer.try_clone()?))
            .stderr(Stdio::from(writer))
            .kill_on_drop(true)
            .spawn()?;
        let reader =
            tokio::net::unix::pipe::Receiver::from_owned_fd(std::os::fd::OwnedFd::from(reader))?;
        Ok::<_, std::io::Error>((child, reader))
    })();
    let (mut child, mut reader) = match spawned {
        Ok(p) => p,
        Err(e) => {
            tracing::debug!(error = %e, "journalctl did not start");
            if not_available {
                out.write(b"\nerror: journal output not available\n").await;
            }
            return;
        }
    };
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match tokio::time::timeout_at(deadline, reader.read(&mut buf)).await {
            Ok(Ok(0)) => break,
            Ok(Ok(n)) => {
                out.write(&buf[..n]).await;
                if out.closed {
                    break;
                }
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "reading journalctl's output");
                break;
            }
            // Killed at the deadline: what was sent stays, as upstream's killed command.
            Err(_) => break,
        }
    }
    let _ = child.start_kill();
    let _ = child.wait().await;
}

/// Upstream's heuristicsCopyFileLogs: the first of `<s>`, `<s>.log`, `<s>/<s>.log` that is a
/// file beneath the root.
async fn copy_file_log(root: &Path, service: &str, out: &mut Output, deadline: Instant) {
    let names = [
        service.to_string(),
        format!("{service}.log"),
        format!("{service}/{service}.log"),
    ];
    let mut last = None;
    for name in names {
        let (r, n) = (root.to_path_buf(), name.clone());
        let opened = tokio::task::spawn_blocking(move || {
            let f = files::open_in_root(&r, &n)?;
            let is_dir = f
                .metadata()
                .map_err(|e| {
                    OpenError::Os(nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(0)))
                })?
                .is_dir();
            Ok::<_, OpenError>((f, is_dir))
        })
        .await;
        match opened {
            Ok(Ok((_, true))) | Ok(Err(OpenError::Os(nix::errno::Errno::ENOENT))) => {
                last = None;
                continue;
            }
            Ok(Ok((file, false))) => {
                if let Err(e) = send_file(file, out, deadline).await {
                    out.write(format!("\nerror getting log for {service}: {e}\n").as_bytes())
                        .await;
                }
                return;
            }
            Ok(Err(e)) => {
                last = Some(format!("openat {name}: {}", e.go_text()));
                break;
            }
            Err(e) => {
                last = Some(e.to_string());
                break;
            }
        }
    }
    match last {
        None => {
            out.write(format!("\nlog not found for {service}\n").as_bytes())
                .await
        }
        Some(e) => {
            out.write(format!("\nerror getting log for {service}: {e}\n").as_bytes())
                .await
        }
    }
}

/// Why a log file's copy stopped short; written into the body as upstream writes it.
#[derive(Debug, thiserror::Error)]
enum SendFileError {
    #[error("context deadline exceeded")]
    Deadline,
    #[error(transparent)]
    Read(#[from] std::io::Error),
}

/// The whole file into the body, stopping at the deadline.
async fn send_file(
    file: std::fs::File,
    out: &mut Output,
    deadline: Instant,
) -> Result<(), SendFileError> {
    let mut file = tokio::fs::File::from_std(file);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if Instant::now() >= deadline {
            return Err(SendFileError::Deadline);
        }
        let n = file.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        out.write(&buf[..n]).await;
        if out.closed {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::DateTime;

    #[test]
    fn journalctl_gets_upstreams_arguments() {
        let options = Options {
            since: Some(DateTime::parse_from_rfc3339("2024-01-05T03:04:05+02:00").unwrap()),
            until: Some(DateTime::parse_from_rfc3339("2024-11-15T13:14:15Z").unwrap()),
            tail_lines: Some(10),
            boot: Some(-1),
            pattern: "err(or)?".into(),
        };
        assert_eq!(
            journalctl_args(&options, &["kubelet".into(), "containerd".into()]),
            [
                "--utc",
                "--no-pager",
                "--output=short-precise",
                "--since=2024-1-5 3:4:5",
                "--until=2024-11-15 13:14:15",
                "--pager-end",
                "--lines=10",
                "--unit=kubelet",
                "--unit=containerd",
                "--grep=err(or)?",
                "--boot",
                "-1",
            ]
        );
        assert_eq!(
            journalctl_args(&Options::default(), &["kubelet".into()]),
            [
                "--utc",
                "--no-pager",
                "--output=short-precise",
                "--unit=kubelet"
            ]
        );
    }
}
