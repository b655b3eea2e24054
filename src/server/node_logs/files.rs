//! The node log folder as a file server, the way upstream's `http.FileServer(http.Dir(..))`
//! answers: directory listings in Go's HTML, files with Go's content type, Last-Modified and
//! If-Modified-Since, Go's redirects for a folder without its slash and a file with one.
//!
//! Hand-written rather than tower-http's ServeDir: that has no directory listing, follows
//! symlinks anywhere, and answers in its own words. Here every name is opened with
//! openat2(RESOLVE_BENEATH) from the root's descriptor, so `..` and symlinks (absolute ones,
//! or relative ones that climb out) can never reach a file outside the log folder; upstream's
//! `http.Dir` follows such symlinks, its query's os.Root refuses them, and here both refuse.
//! Range requests are not served (the whole file is sent, which HTTP allows).

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::SystemTime;

use bytes::Bytes;
use hyper::{Response, StatusCode};
use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::Mode;

use super::{go_error, stream_body};
use crate::server::mux::clean;
use crate::server::response::{bytes_body, html_escape_into, Body};

/// Why a name could not be opened under the root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpenError {
    /// It leaves the root (`..` above it, an absolute name or symlink, or one climbing out).
    Escapes,
    /// Neither a regular file nor a folder (a FIFO, socket or device): never served, as reading
    /// one could block a thread for good or read a device.
    NotRegular,
    Os(Errno),
}

impl From<Errno> for OpenError {
    fn from(e: Errno) -> Self {
        match e {
            // openat2 says EXDEV when resolution would leave the root.
            Errno::EXDEV => OpenError::Escapes,
            e => OpenError::Os(e),
        }
    }
}

/// Opens `name` (relative; `""` is the root itself) beneath `root`. Blocking.
fn open_beneath(root: &Path, name: &str, flags: OFlag) -> Result<OwnedFd, OpenError> {
    if name.starts_with('/') {
        // Go's os.Root refuses absolute names.
        return Err(OpenError::Escapes);
    }
    let dir = nix::fcntl::open(
        root,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let name = if name.is_empty() { "." } else { name };
    let how = OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    Ok(nix::fcntl::openat2(dir.as_fd(), name, how)?)
}

/// Opens `name` for reading beneath `root`, as Go's os.OpenInRoot does, when it is a regular
/// file or a folder. O_NONBLOCK: opening a FIFO no one writes to would otherwise wait for a
/// writer, holding the thread (it changes nothing for a file's reads); O_NOCTTY: a terminal
/// opened here never becomes the agent's. Blocking.
pub(crate) fn open_in_root(root: &Path, name: &str) -> Result<File, OpenError> {
    let flags = OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY;
    let file = File::from(open_beneath(root, name, flags)?);
    let kind = file
        .metadata()
        .map_err(|e| OpenError::Os(Errno::from_raw(e.raw_os_error().unwrap_or(0))))?
        .file_type();
    if kind.is_file() || kind.is_dir() {
        Ok(file)
    } else {
        Err(OpenError::NotRegular)
    }
}

/// Whether `name` exists beneath `root` (the final symlink followed), as os.Root's Stat.
/// Blocking.
pub(crate) fn stat_in_root(root: &Path, name: &str) -> Result<(), OpenError> {
    open_beneath(root, name, OFlag::O_PATH).map(|_| ())
}

/// Go's path.Base.
fn base(path: &str) -> &str {
    let trimmed = path.trim_end_matches('/');
    if trimmed.is_empty() {
        return if path.is_empty() { "." } else { "/" };
    }
    trimmed.rsplit('/').next().unwrap_or(trimmed)
}

/// The file server's answer for `upath` (the request path after `/logs/`, decoded).
pub(crate) async fn serve(
    root: PathBuf,
    upath: String,
    raw_query: String,
    if_modified_since: Option<String>,
) -> Response<Body> {
    let upath = if upath.starts_with('/') {
        upath
    } else {
        format!("/{upath}")
    };
    // Opening, stat and readdir can block on a slow disk: off the async workers.
    let found = tokio::task::spawn_blocking(move || lookup(&root, &upath, if_modified_since));
    match found.await {
        Ok(Found::Redirect(to)) => local_redirect(&to, &raw_query),
        Ok(Found::Answer(resp)) => resp,
        Ok(Found::File {
            file,
            size,
            modified,
            content_type,
        }) => {
            let mut b = Response::builder()
                .status(StatusCode::OK)
                .header("Content-Type", content_type)
                .header("Content-Length", size.to_string());
            if let Some(m) = modified {
                b = b.header("Last-Modified", httpdate::fmt_http_date(m));
            }
            b.body(stream_body(move |tx| send_file(file, size, tx)))
                .expect("static response")
        }
        Err(e) => {
            tracing::error!(error = %e, "node log file server task failed");
            go_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "500 Internal Server Error",
            )
        }
    }
}

enum Found {
    Redirect(String),
    Answer(Response<Body>),
    File {
        file: File,
        size: u64,
        modified: Option<SystemTime>,
        content_type: String,
    },
}

/// Go's toHTTPError, with a refused escape as a 403.
fn open_failure(e: OpenError) -> Found {
    Found::Answer(match e {
        OpenError::Os(Errno::ENOENT | Errno::ENOTDIR) => {
            go_error(StatusCode::NOT_FOUND, "404 page not found")
        }
        OpenError::Os(Errno::EACCES | Errno::EPERM)
        | OpenError::Escapes
        | OpenError::NotRegular => go_error(StatusCode::FORBIDDEN, "403 Forbidden"),
        OpenError::Os(errno) => {
            tracing::warn!(error = %errno, "node log file server");
            go_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "500 Internal Server Error",
            )
        }
    })
}

fn lookup(root: &Path, upath: &str, if_modified_since: Option<String>) -> Found {
    if upath.ends_with("/index.html") {
        return Found::Redirect("./".into());
    }
    let name = clean(upath);
    let rel = name.trim_start_matches('/');
    let file = match open_in_root(root, rel) {
        Ok(f) => f,
        Err(e) => return open_failure(e),
    };
    let meta = match file.metadata() {
        Ok(m) => m,
        Err(e) => {
            return open_failure(OpenError::Os(Errno::from_raw(
                e.raw_os_error().unwrap_or(0),
            )))
        }
    };
    if meta.is_dir() && !upath.ends_with('/') {
        return Found::Redirect(format!("{}/", base(upath)));
    }
    if !meta.is_dir() && upath.ends_with('/') {
        return Found::Redirect(format!("../{}", base(upath)));
    }
    let not_modified = |modified: Option<SystemTime>| {
        let (Some(ims), Some(modified)) = (if_modified_since.as_deref(), modified) else {
            return false;
        };
        let Ok(ims) = httpdate::parse_http_date(ims) else {
            return false;
        };
        // Whole seconds, as the header carries.
        let secs = |t: SystemTime| {
            t.duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0)
        };
        secs(modified) <= secs(ims)
    };
    let not_modified_answer = || {
        Found::Answer(
            Response::builder()
                .status(StatusCode::NOT_MODIFIED)
                .body(bytes_body(Bytes::new()))
                .expect("static response"),
        )
    };
    if meta.is_dir() {
        // A folder's index.html is served in place of its listing, as Go does.
        let index = format!("{}/index.html", rel.trim_end_matches('/'));
        let index = index.trim_start_matches('/');
        if let Ok(f) = open_in_root(root, index) {
            if let Some(m) = f.metadata().ok().filter(|m| m.is_file()) {
                return file_answer(f, &m, "index.html", not_modified(m.modified().ok()));
            }
        }
        let modified = meta.modified().ok();
        if not_modified(modified) {
            return not_modified_answer();
        }
        return match list_dir(file) {
            Ok(html) => {
                let mut b = Response::builder()
                    .status(StatusCode::OK)
                    .header("Content-Type", "text/html; charset=utf-8");
                if let Some(m) = modified.filter(|m| *m != SystemTime::UNIX_EPOCH) {
                    b = b.header("Last-Modified", httpdate::fmt_http_date(m));
                }
                Found::Answer(b.body(bytes_body(html)).expect("static response"))
            }
            Err(e) => {
                tracing::warn!(error = %e, path = upath, "reading a node log folder");
                Found::Answer(go_error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "Error reading directory",
                ))
            }
        };
    }
    let modified = meta.modified().ok();
    let not_modified = not_modified(modified);
    file_answer(file, &meta, &name, not_modified)
}

fn file_answer(mut file: File, meta: &std::fs::Metadata, name: &str, not_modified: bool) -> Found {
    if not_modified {
        let mut b = Response::builder().status(StatusCode::NOT_MODIFIED);
        if let Ok(m) = meta.modified() {
            b = b.header("Last-Modified", httpdate::fmt_http_date(m));
        }
        return Found::Answer(b.body(bytes_body(Bytes::new())).expect("static response"));
    }
    let content_type = match content_type_by_extension(name) {
        Some(t) => t,
        None => {
            // Go sniffs the first 512 bytes, then reads the file from its start.
            let mut head = Vec::with_capacity(512);
            let read = (&mut file).take(512).read_to_end(&mut head);
            if let Err(e) = read.and_then(|_| {
                use std::io::Seek;
                file.seek(std::io::SeekFrom::Start(0))
            }) {
                tracing::warn!(error = %e, file = name, "reading a node log file");
                return Found::Answer(go_error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "500 Internal Server Error",
                ));
            }
            sniff(&head).to_string()
        }
    };
    Found::File {
        size: meta.len(),
        modified: meta
            .modified()
            .ok()
            .filter(|m| *m != SystemTime::UNIX_EPOCH),
        content_type,
        file,
    }
}

/// Sends the first `size` bytes of `file` (its size when it was looked at: a log that grows
/// meanwhile is cut there, as Go's io.CopyN cuts it). Blocking.
fn send_file(mut file: File, size: u64, tx: tokio::sync::mpsc::Sender<Bytes>) {
    let mut left = size;
    let mut buf = vec![0u8; 64 * 1024];
    while left > 0 {
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        match file.read(&mut buf[..want]) {
            Ok(0) => return,
            Ok(n) => {
                left -= n as u64;
                if tx.blocking_send(Bytes::copy_from_slice(&buf[..n])).is_err() {
                    // The client went away.
                    return;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::warn!(error = %e, "reading a node log file");
                return;
            }
        }
    }
}

/// Go's dirList: entries sorted by name, folders with a trailing slash.
fn list_dir(dir: File) -> Result<Vec<u8>, std::io::Error> {
    // A second handle on the folder for the lstat fallback (iteration borrows the first).
    let dup = dir.try_clone()?;
    let mut d = nix::dir::Dir::from_fd(OwnedFd::from(dir))?;
    let mut entries: Vec<(Vec<u8>, bool)> = Vec::new();
    for entry in d.iter() {
        let entry = entry?;
        let name = entry.file_name().to_bytes().to_vec();
        if name == b"." || name == b".." {
            continue;
        }
        let is_dir = match entry.file_type() {
            Some(t) => t == nix::dir::Type::Directory,
            // No d_type from this filesystem: lstat it (a symlink is not a folder).
            None => nix::sys::stat::fstatat(
                dup.as_fd(),
                entry.file_name(),
                nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
            )
            .map(|s| s.st_mode & libc::S_IFMT == libc::S_IFDIR)
            .unwrap_or(false),
        };
        entries.push((name, is_dir));
    }
    entries.sort();
    let mut out = Vec::new();
    out.extend_from_slice(
        b"<!doctype html>\n<meta name=\"viewport\" content=\"width=device-width\">\n<pre>\n",
    );
    for (mut name, is_dir) in entries {
        if is_dir {
            name.push(b'/');
        }
        out.extend_from_slice(b"<a href=\"");
        out.extend_from_slice(url_of_path(&name).as_bytes());
        out.extend_from_slice(b"\">");
        html_escape_into(&name, &mut out);
        out.extend_from_slice(b"</a>\n");
    }
    out.extend_from_slice(b"</pre>\n");
    Ok(out)
}

/// Go's `url.URL{Path: p}.String()`: the path escaped as a path, and `./` in front when the
/// first segment has a colon (so it cannot read as a scheme).
fn url_of_path(path: &[u8]) -> String {
    let mut out = String::new();
    let colon = path.iter().position(|b| *b == b':');
    if colon.is_some_and(|i| !path[..i].contains(&b'/')) {
        out.push_str("./");
    }
    for &b in path {
        let keep = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'_'
                    | b'.'
                    | b'~'
                    | b'$'
                    | b'&'
                    | b'+'
                    | b','
                    | b'/'
                    | b':'
                    | b';'
                    | b'='
                    | b'@'
            );
        if keep {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Go's mime.TypeByExtension on Linux: its built-in table, then the shared MIME database
/// (globs2) the way Go reads it, `text/*` types given `charset=utf-8`.
fn content_type_by_extension(name: &str) -> Option<String> {
    let ext = Path::new(name).extension()?.to_str()?.to_ascii_lowercase();
    const BUILTIN: &[(&str, &str)] = &[
        ("avif", "image/avif"),
        ("css", "text/css; charset=utf-8"),
        ("gif", "image/gif"),
        ("htm", "text/html; charset=utf-8"),
        ("html", "text/html; charset=utf-8"),
        ("jpeg", "image/jpeg"),
        ("jpg", "image/jpeg"),
        ("js", "text/javascript; charset=utf-8"),
        ("json", "application/json"),
        ("mjs", "text/javascript; charset=utf-8"),
        ("pdf", "application/pdf"),
        ("png", "image/png"),
        ("svg", "image/svg+xml"),
        ("wasm", "application/wasm"),
        ("webp", "image/webp"),
        ("xml", "text/xml; charset=utf-8"),
    ];
    if let Some((_, t)) = BUILTIN.iter().find(|(e, _)| *e == ext) {
        return Some((*t).to_string());
    }
    system_types()
        .iter()
        .find(|(e, _)| *e == ext)
        .map(|(_, t)| t.clone())
}

/// The extensions of the first shared MIME database found (Go stops at the first), else
/// of the mime.types files.
fn system_types() -> &'static [(String, String)] {
    static TYPES: OnceLock<Vec<(String, String)>> = OnceLock::new();
    TYPES.get_or_init(|| {
        let with_charset = |t: &str| {
            if t.starts_with("text/") && !t.contains("charset") {
                format!("{t}; charset=utf-8")
            } else {
                t.to_string()
            }
        };
        let mut out: Vec<(String, String)> = Vec::new();
        for globs in ["/usr/local/share/mime/globs2", "/usr/share/mime/globs2"] {
            let Ok(text) = std::fs::read_to_string(globs) else {
                continue;
            };
            for line in text.lines().filter(|l| !l.starts_with('#')) {
                let fields: Vec<&str> = line.split(':').collect();
                let (Some(ty), Some(glob)) = (fields.get(1), fields.get(2)) else {
                    continue;
                };
                let Some(ext) = glob.strip_prefix("*.") else {
                    continue;
                };
                if ext.contains(['*', '?', '[']) || out.iter().any(|(e, _)| e == ext) {
                    continue;
                }
                out.push((ext.to_ascii_lowercase(), with_charset(ty)));
            }
            return out;
        }
        for file in [
            "/etc/mime.types",
            "/etc/apache2/mime.types",
            "/etc/apache/mime.types",
            "/etc/httpd/conf/mime.types",
        ] {
            let Ok(text) = std::fs::read_to_string(file) else {
                continue;
            };
            for line in text.lines().filter(|l| !l.starts_with('#')) {
                let mut words = line.split_whitespace();
                let Some(ty) = words.next() else { continue };
                for ext in words {
                    out.retain(|(e, _)| e != ext);
                    out.push((ext.to_ascii_lowercase(), with_charset(ty)));
                }
            }
        }
        out
    })
}

/// The part of Go's http.DetectContentType a log folder meets: HTML and XML openings,
/// PDF, gzip and zip magic, byte-order marks, else text unless a binary byte shows.
pub(crate) fn sniff(head: &[u8]) -> &'static str {
    let head = &head[..head.len().min(512)];
    let text_start = head
        .iter()
        .position(|b| !matches!(b, b'\t' | b'\n' | b'\x0c' | b'\r' | b' '))
        .unwrap_or(head.len());
    let rest = &head[text_start..];
    const HTML: &[&str] = &[
        "<!DOCTYPE HTML",
        "<HTML",
        "<HEAD",
        "<SCRIPT",
        "<IFRAME",
        "<H1",
        "<DIV",
        "<FONT",
        "<TABLE",
        "<A",
        "<STYLE",
        "<TITLE",
        "<B",
        "<BODY",
        "<BR",
        "<P",
        "<!--",
    ];
    for tag in HTML {
        let tag = tag.as_bytes();
        if rest.len() > tag.len()
            && rest[..tag.len()].eq_ignore_ascii_case(tag)
            && matches!(rest[tag.len()], b' ' | b'>')
        {
            return "text/html; charset=utf-8";
        }
    }
    if rest.starts_with(b"<?xml") {
        return "text/xml; charset=utf-8";
    }
    for (magic, ty) in [
        (&b"%PDF-"[..], "application/pdf"),
        (b"%!PS-Adobe-", "application/postscript"),
        (b"\xFE\xFF", "text/plain; charset=utf-16be"),
        (b"\xFF\xFE", "text/plain; charset=utf-16le"),
        (b"\xEF\xBB\xBF", "text/plain; charset=utf-8"),
        (b"\x1F\x8B\x08", "application/x-gzip"),
        (b"PK\x03\x04", "application/zip"),
    ] {
        if head.starts_with(magic) {
            return ty;
        }
    }
    let binary = |b: &u8| matches!(b, 0x00..=0x08 | 0x0B | 0x0E..=0x1A | 0x1C..=0x1F);
    if head.iter().any(binary) {
        "application/octet-stream"
    } else {
        "text/plain; charset=utf-8"
    }
}

/// fs.go's localRedirect: a relative Location with the query kept, no body.
fn local_redirect(to: &str, raw_query: &str) -> Response<Body> {
    let location = if raw_query.is_empty() {
        to.to_string()
    } else {
        format!("{to}?{raw_query}")
    };
    Response::builder()
        .status(StatusCode::MOVED_PERMANENTLY)
        .header("Location", location)
        .body(bytes_body(Bytes::new()))
        .expect("static response")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_clean_and_base_as_go_does() {
        assert_eq!(clean("/"), "/");
        assert_eq!(clean("/a/../../b/./c//"), "/b/c");
        assert_eq!(clean("/../.."), "/");
        assert_eq!(base("/a/b/"), "b");
        assert_eq!(base("/"), "/");
        assert_eq!(url_of_path(b"a b?#.log"), "a%20b%3F%23.log");
        assert_eq!(url_of_path(b"c:d/"), "./c:d/");
        assert_eq!(url_of_path(b"x/c:d"), "x/c:d");
    }

    #[test]
    fn content_is_sniffed_as_go_sniffs_it() {
        assert_eq!(sniff(b"Jan 1 kernel: hello\n"), "text/plain; charset=utf-8");
        assert_eq!(sniff(b"\x1f\x8b\x08\x00rest"), "application/x-gzip");
        assert_eq!(sniff(b"\x00\x01\x02utmp"), "application/octet-stream");
        assert_eq!(sniff(b"  <html><body>"), "text/html; charset=utf-8");
        assert_eq!(sniff(b""), "text/plain; charset=utf-8");
    }

    #[test]
    fn nothing_outside_the_root_opens() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        std::fs::create_dir(r.join("sub")).unwrap();
        std::fs::write(r.join("sub/a.log"), "a").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), r.join("abs")).unwrap();
        std::os::unix::fs::symlink("../../../../../../etc/passwd", r.join("climb")).unwrap();
        std::os::unix::fs::symlink("sub/a.log", r.join("inside")).unwrap();
        assert_eq!(open_in_root(r, "abs").unwrap_err(), OpenError::Escapes);
        assert_eq!(open_in_root(r, "climb").unwrap_err(), OpenError::Escapes);
        assert_eq!(open_in_root(r, "../x").unwrap_err(), OpenError::Escapes);
        assert_eq!(
            open_in_root(r, "/sub/a.log").unwrap_err(),
            OpenError::Escapes
        );
        assert_eq!(
            open_in_root(r, "nope").unwrap_err(),
            OpenError::Os(Errno::ENOENT)
        );
        let mut text = String::new();
        open_in_root(r, "inside")
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "a");
        assert!(open_in_root(r, "sub/../sub/a.log").is_ok());
    }
}
