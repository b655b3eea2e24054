//! `/logs/` answered in process over a temporary log folder.

use std::path::Path;

use http_body_util::BodyExt;
use hyper::header::HeaderMap;

use super::*;

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Answer {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap())
            .unwrap_or("")
    }
}

async fn answer(resp: Response<Body>) -> Answer {
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = resp
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes()
        .to_vec();
    Answer {
        status,
        headers,
        body,
    }
}

async fn get_with(logs: Option<&NodeLogs>, target: &str, headers: &[(&str, &str)]) -> Answer {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut map = HeaderMap::new();
    for (k, v) in headers {
        map.insert(
            hyper::header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    answer(serve(logs, &Method::GET, path, query, &map).await).await
}

async fn get(logs: &NodeLogs, target: &str) -> Answer {
    get_with(Some(logs), target, &[]).await
}

/// A log folder: `syslog`, `kern.log`, `sub/` with `y.log`, `svc/svc.log`, `app.log`, a file
/// whose name needs escaping, and symlinks inside and out.
fn log_folder(outside: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    std::fs::write(r.join("syslog"), "Jan  1 00:00:00 host kernel: one\n").unwrap();
    std::fs::write(r.join("kern.log"), "k1\nk2\n").unwrap();
    std::fs::create_dir(r.join("sub")).unwrap();
    std::fs::write(r.join("sub/y.log"), "y\n").unwrap();
    std::fs::create_dir(r.join("svc")).unwrap();
    std::fs::write(r.join("svc/svc.log"), "from svc/svc.log\n").unwrap();
    std::fs::write(r.join("app.log"), "from app.log\n").unwrap();
    std::fs::write(r.join("a b&<c>.log"), "odd\n").unwrap();
    std::fs::write(outside.join("secret"), "secret\n").unwrap();
    std::os::unix::fs::symlink(outside.join("secret"), r.join("out-abs")).unwrap();
    std::os::unix::fs::symlink("../../../../../../../../etc/hostname", r.join("out-rel")).unwrap();
    std::os::unix::fs::symlink("sub/y.log", r.join("in")).unwrap();
    dir
}

fn logs(root: &Path, query: bool, journalctl: &Path) -> NodeLogs {
    let mut config = Config::defaults(false);
    config.node_log_dir = root.to_path_buf();
    config.journalctl = journalctl.to_path_buf();
    config.enable_system_log_query = query;
    config.feature_gates.set("NodeLogQuery", query);
    NodeLogs::from_config(&config).unwrap()
}

/// No journal on this host: journalctl is not there.
fn no_journal() -> &'static Path {
    Path::new("/nonexistent/journalctl")
}

/// A FIFO (or socket, or device) under the log folder is refused at once, by the file server
/// and by the node log query, never opened for a read that waits for a writer. Before, a GET
/// of a FIFO no one writes to held a blocking thread for good.
#[tokio::test]
async fn only_regular_files_and_folders_are_served() {
    let dir = tempfile::tempdir().unwrap();
    nix::unistd::mkfifo(&dir.path().join("pipe"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    nix::unistd::mkfifo(&dir.path().join("svc.log"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    std::fs::write(dir.path().join("plain.log"), "plain\n").unwrap();
    let l = logs(dir.path(), true, no_journal());
    let patience = std::time::Duration::from_secs(30);
    let a = tokio::time::timeout(patience, get(&l, "/logs/pipe"))
        .await
        .expect("a FIFO is answered at once");
    assert_eq!(a.status, StatusCode::FORBIDDEN);
    let a = tokio::time::timeout(patience, get(&l, "/logs/?query=svc"))
        .await
        .expect("a FIFO is answered at once");
    assert!(a.text().contains("not a regular file"), "{}", a.text());
    assert_eq!(get(&l, "/logs/plain.log").await.text(), "plain\n");
}

#[tokio::test]
async fn the_folder_is_listed_as_gos_file_server_lists_it() {
    let outside = tempfile::tempdir().unwrap();
    let dir = log_folder(outside.path());
    let l = logs(dir.path(), false, no_journal());
    let a = get(&l, "/logs/").await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.header("Content-Type"), "text/html; charset=utf-8");
    assert!(!a.header("Last-Modified").is_empty());
    assert_eq!(
        a.text(),
        "<!doctype html>\n<meta name=\"viewport\" content=\"width=device-width\">\n<pre>\n\
         <a href=\"a%20b&%3Cc%3E.log\">a b&amp;&lt;c&gt;.log</a>\n\
         <a href=\"app.log\">app.log</a>\n\
         <a href=\"in\">in</a>\n\
         <a href=\"kern.log\">kern.log</a>\n\
         <a href=\"out-abs\">out-abs</a>\n\
         <a href=\"out-rel\">out-rel</a>\n\
         <a href=\"sub/\">sub/</a>\n\
         <a href=\"svc/\">svc/</a>\n\
         <a href=\"syslog\">syslog</a>\n\
         </pre>\n"
    );
    let a = get(&l, "/logs/sub/").await;
    assert_eq!(a.status, StatusCode::OK);
    assert!(
        a.text().contains("<a href=\"y.log\">y.log</a>\n"),
        "{}",
        a.text()
    );
}

#[tokio::test]
async fn files_are_served_with_gos_headers_and_redirects() {
    let outside = tempfile::tempdir().unwrap();
    let dir = log_folder(outside.path());
    let l = logs(dir.path(), false, no_journal());
    let a = get(&l, "/logs/syslog").await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.text(), "Jan  1 00:00:00 host kernel: one\n");
    // No extension: sniffed.
    assert_eq!(a.header("Content-Type"), "text/plain; charset=utf-8");
    assert_eq!(a.header("Content-Length"), "33");
    let modified = a.header("Last-Modified").to_string();
    assert!(modified.ends_with(" GMT"), "{modified}");
    // Unchanged since: 304 without a body.
    let a = get_with(
        Some(&l),
        "/logs/syslog",
        &[("If-Modified-Since", &modified)],
    )
    .await;
    assert_eq!(a.status, StatusCode::NOT_MODIFIED);
    assert!(a.body.is_empty());
    let a = get_with(
        Some(&l),
        "/logs/syslog",
        &[("If-Modified-Since", "Mon, 01 Jan 1990 00:00:00 GMT")],
    )
    .await;
    assert_eq!(a.status, StatusCode::OK);
    // Escaped names are decoded, symlinks inside the folder followed.
    assert_eq!(get(&l, "/logs/a%20b&%3Cc%3E.log").await.text(), "odd\n");
    assert_eq!(get(&l, "/logs/in").await.text(), "y\n");
    // A folder without its slash, a file with one: Go's relative redirects.
    let a = get(&l, "/logs/sub?x=1").await;
    assert_eq!(a.status, StatusCode::MOVED_PERMANENTLY);
    assert_eq!(a.header("Location"), "sub/?x=1");
    let a = get(&l, "/logs/sub/y.log/").await;
    assert_eq!(a.status, StatusCode::MOVED_PERMANENTLY);
    assert_eq!(a.header("Location"), "../y.log");
    let a = get(&l, "/logs/nothing.log").await;
    assert_eq!(
        (a.status, a.text()),
        (StatusCode::NOT_FOUND, "404 page not found\n".into())
    );
    assert_eq!(a.header("X-Content-Type-Options"), "nosniff");
}

#[tokio::test]
async fn nothing_outside_the_folder_is_served() {
    let outside = tempfile::tempdir().unwrap();
    let dir = log_folder(outside.path());
    let l = logs(dir.path(), true, no_journal());
    for target in ["/logs/out-abs", "/logs/out-rel"] {
        let a = get(&l, target).await;
        assert_eq!(
            (a.status, a.text()),
            (StatusCode::FORBIDDEN, "403 Forbidden\n".into()),
            "{target}"
        );
    }
    // Escaped dots and slashes decode to a path that is cleaned inside the folder, as Go
    // cleans it: /etc/hostname is looked for under the folder and is not there.
    for target in [
        "/logs/..%2f..%2f..%2f..%2fetc%2fhostname",
        "/logs/%2e%2e/%2e%2e/etc/hostname",
    ] {
        let a = get(&l, target).await;
        assert_eq!(a.status, StatusCode::NOT_FOUND, "{target}: {}", a.text());
    }
    // The query's file is checked inside the folder too (406, upstream's validation).
    for (query, why) in [
        ("query=../secret", "path escapes from parent"),
        ("query=out-abs/", "path escapes from parent"),
        ("query=/etc/hostname", "path escapes from parent"),
    ] {
        let a = get(&l, &format!("/logs/?{query}")).await;
        assert_eq!(a.status, StatusCode::NOT_ACCEPTABLE, "{query}");
        assert!(a.text().contains(why), "{query}: {}", a.text());
        assert!(!a.text().contains("secret\n"));
    }
    // A service named for a way out finds nothing either.
    let a = get(&l, "/logs/?query=..").await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(
        a.text(),
        "\nerror getting log for ..: openat ..: path escapes from parent\n"
    );
}

#[tokio::test]
async fn the_switches_answer_as_upstream() {
    let outside = tempfile::tempdir().unwrap();
    let dir = log_folder(outside.path());
    // enableSystemLogHandler off: every method, every path under /logs/.
    for target in ["/logs/", "/logs/syslog", "/logs/?query=kubelet"] {
        let a = get_with(None, target, &[]).await;
        assert_eq!(
            (a.status, a.text()),
            (
                StatusCode::METHOD_NOT_ALLOWED,
                "logs endpoint is disabled.\n".into()
            )
        );
    }
    let mut config = Config::defaults(false);
    config.enable_system_log_handler = false;
    assert!(NodeLogs::from_config(&config).is_none());
    // The query off (the default, or the gate off): the parameters are ignored and the
    // folder is served.
    for l in [logs(dir.path(), false, no_journal()), {
        let mut config = Config::defaults(false);
        config.node_log_dir = dir.path().to_path_buf();
        config.enable_system_log_query = true;
        NodeLogs::from_config(&config).unwrap()
    }] {
        let a = get(&l, "/logs/?query=kern.log&tailLines=1").await;
        assert_eq!(a.status, StatusCode::OK);
        assert!(a.text().starts_with("<!doctype html>"), "{}", a.text());
        let a = get(&l, "/logs/kern.log?query=x").await;
        assert_eq!(a.text(), "k1\nk2\n");
    }
    // GET only.
    let l = logs(dir.path(), true, no_journal());
    let a = answer(serve(Some(&l), &Method::POST, "/logs/", "", &HeaderMap::new()).await).await;
    assert_eq!(a.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(a.header("Allow"), "GET");
}

#[tokio::test]
async fn a_query_without_a_journal_reads_the_services_files() {
    let outside = tempfile::tempdir().unwrap();
    let dir = log_folder(outside.path());
    let l = logs(dir.path(), true, no_journal());
    // <name>, <name>.log, <name>/<name>.log: the first found.
    assert_eq!(
        get(&l, "/logs/?query=syslog").await.text(),
        "Jan  1 00:00:00 host kernel: one\n"
    );
    assert_eq!(get(&l, "/logs/?query=app").await.text(), "from app.log\n");
    assert_eq!(
        get(&l, "/logs/?query=svc").await.text(),
        "from svc/svc.log\n"
    );
    let a = get(&l, "/logs/?query=app&query=nothere").await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.header("Content-Type"), "text/plain;charset=UTF-8");
    assert_eq!(a.text(), "from app.log\n\nlog not found for nothere\n");
    // Options cannot apply to a file: upstream says so in the body.
    for options in [
        "tailLines=1",
        "pattern=app",
        "sinceTime=2024-01-01T00:00:00Z",
    ] {
        let a = get(&l, &format!("/logs/?query=app&{options}")).await;
        assert_eq!(a.status, StatusCode::OK);
        assert_eq!(
            a.text(),
            "\noptions present and query resolved to log files for [app]\ntry without specifying options\n",
            "{options}"
        );
    }
    // A file (a slash in the query) goes to the file server.
    let a = get(&l, "/logs/?query=sub/y.log").await;
    assert_eq!((a.status, a.text()), (StatusCode::OK, "y\n".into()));
    let a = get(&l, "/logs/?query=./kern.log").await;
    assert_eq!(a.text(), "k1\nk2\n");
    // ... and takes no options, no path beside it; bad values are 400s.
    for (target, status, body) in [
        (
            "/logs/?query=sub/y.log&tailLines=1",
            406,
            r#"query: Invalid value: ["sub/y.log"]: cannot specify file with options"#,
        ),
        (
            "/logs/?query=./kern.log&pattern=k",
            406,
            r#"query: Invalid value: ["./kern.log"]: cannot specify file with options"#,
        ),
        ("/logs/sub?query=app", 406, "path not allowed in query mode"),
        (
            "/logs/?query=app&tailLines=lots",
            400,
            r#"tailLines: Invalid value: "lots": strconv.Atoi: parsing "lots": invalid syntax"#,
        ),
        (
            "/logs/?query=app&sinceTime=2024-01-02",
            400,
            r#"sinceTime: Invalid value: "2024-01-02": invalid time format"#,
        ),
        (
            "/logs/?tailLines=3",
            406,
            "query: Required value: cannot be empty with options",
        ),
    ] {
        let a = get(&l, target).await;
        assert_eq!(
            (a.status.as_u16(), a.text()),
            (status, format!("{body}\n")),
            "{target}"
        );
    }
}

/// A stand-in journalctl: it knows the unit `kubelet.service`, and prints its arguments.
fn fake_journalctl(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("journalctl");
    crate::test_support::write_script(
        &path,
        "#!/bin/sh\n\
         if [ \"$1\" = --field ]; then echo kubelet.service; echo other.service; exit 0; fi\n\
         for a in \"$@\"; do echo \"arg $a\"; done\n\
         echo 'on stderr' >&2\n",
    );
    path
}

#[tokio::test]
async fn services_in_the_journal_are_read_with_journalctl() {
    let outside = tempfile::tempdir().unwrap();
    let dir = log_folder(outside.path());
    let bin = tempfile::tempdir().unwrap();
    let l = logs(dir.path(), true, &fake_journalctl(bin.path()));
    let a = get(
        &l,
        "/logs/?query=kubelet&tailLines=5&pattern=fail&sinceTime=2024-03-04T05:06:07Z&boot=0",
    )
    .await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.header("Content-Type"), "text/plain;charset=UTF-8");
    assert_eq!(
        a.text(),
        "arg --utc\narg --no-pager\narg --output=short-precise\narg --since=2024-3-4 5:6:7\n\
         arg --pager-end\narg --lines=5\narg --unit=kubelet\narg --grep=fail\narg --boot\narg 0\n\
         on stderr\n"
    );
    // One in the journal, one not: the journal's, then (no options) the file's.
    let a = get(&l, "/logs/?query=kubelet&query=app").await;
    assert_eq!(
        a.text(),
        "arg --utc\narg --no-pager\narg --output=short-precise\narg --unit=kubelet\non stderr\nfrom app.log\n"
    );
    // gzip when asked for exactly so.
    let a = get_with(
        Some(&l),
        "/logs/?query=kubelet",
        &[("Accept-Encoding", "gzip")],
    )
    .await;
    assert_eq!(a.header("Content-Encoding"), "gzip");
    let mut text = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&a.body[..]), &mut text)
        .unwrap();
    assert!(text.ends_with("arg --unit=kubelet\non stderr\n"), "{text}");
}
