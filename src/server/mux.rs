//! What Go's ServeMux does before any handler, and so before authentication, on both ports: a
//! request whose path is not clean (repeated slashes, `.` or `..` elements) is answered with a
//! 301 to the clean path, and one for the root of a subtree the port registers only with its
//! slash (`/logs`, `/stats`, ...) with a 301 to the subtree, in one hop (`//logs` goes to
//! `/logs/`). So routing, the debugging switch and authorization only ever see clean paths:
//! `//exec/...` or `/a/../exec/...` cannot reach a handler under a spelling a check does not
//! know. The Location is the clean path as the client escaped it (Go re-escapes its decoded
//! path, so `%` comes back as `%25`: a difference no client relies on).

use hyper::{Method, Response, StatusCode};

use super::response::{bytes_body, html_escape_into, Body};

/// Go's path.Clean of a slash-rooted path.
pub(crate) fn clean(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

/// Go's cleanPath (what its ServeMux redirects to): `.`, `..` and repeated slashes gone, a
/// trailing slash kept.
pub(crate) fn clean_path(p: &str) -> String {
    let cleaned = clean(p);
    if p.ends_with('/') && cleaned != "/" {
        format!("{cleaned}/")
    } else {
        cleaned
    }
}

/// The subtrees (patterns ending in `/` with no pattern for their root) the main port
/// registers, as upstream's: the node logs, stats, running pods and pprof; with the debugging
/// handlers off, also the paths answered "Debug endpoints are disabled".
pub(crate) fn main_subtrees(debugging_handlers: bool) -> &'static [&'static str] {
    const ON: &[&str] = &["/logs/", "/stats/", "/runningpods/", "/debug/pprof/"];
    const OFF: &[&str] = &[
        "/logs/",
        "/stats/",
        "/runningpods/",
        "/debug/pprof/",
        "/run/",
        "/exec/",
        "/attach/",
        "/portForward/",
        "/containerLogs/",
    ];
    if debugging_handlers {
        ON
    } else {
        OFF
    }
}

/// The read-only port's subtrees.
pub(crate) const READ_ONLY_SUBTREES: &[&str] = &["/stats/"];

/// The redirect Go's ServeMux answers for `path`, if any; `subtrees`: the port's (above).
/// CONNECT is never redirected here (Go routes it by host), nor is a request-target that is not
/// a path (`OPTIONS *`).
pub(crate) fn redirect(
    method: &Method,
    path: &str,
    raw_query: &str,
    subtrees: &[&str],
) -> Option<Response<Body>> {
    if method == Method::CONNECT || !path.starts_with('/') {
        return None;
    }
    let clean = clean_path(path);
    let is_subtree_root = |p: &str| subtrees.iter().any(|t| t.strip_suffix('/') == Some(p));
    let target = if is_subtree_root(&clean) {
        format!("{clean}/")
    } else if clean != path {
        clean
    } else {
        return None;
    };
    let location = if raw_query.is_empty() {
        target
    } else {
        format!("{target}?{raw_query}")
    };
    let mut b = Response::builder()
        .status(StatusCode::MOVED_PERMANENTLY)
        .header("Location", location.as_str());
    let get = method == Method::GET;
    if get || method == Method::HEAD {
        b = b.header("Content-Type", "text/html; charset=utf-8");
    }
    let body = if get {
        let mut escaped = Vec::new();
        html_escape_into(location.as_bytes(), &mut escaped);
        format!(
            "<a href=\"{}\">Moved Permanently</a>.\n\n",
            String::from_utf8_lossy(&escaped)
        )
    } else {
        String::new()
    };
    Some(b.body(bytes_body(body)).expect("static response"))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use http_body_util::BodyExt;

    async fn answer(r: Response<Body>) -> (StatusCode, String, String) {
        let status = r.status();
        let location = r
            .headers()
            .get("Location")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        let body = r.into_body().collect().await.unwrap().to_bytes();
        (
            status,
            location,
            String::from_utf8_lossy(&body).into_owned(),
        )
    }

    #[tokio::test]
    async fn unclean_paths_are_redirected_to_their_clean_form_before_any_handler() {
        let get = Method::GET;
        let main = main_subtrees(true);
        let (status, location, body) = answer(redirect(&get, "/logs", "", main).unwrap()).await;
        assert_eq!(status, StatusCode::MOVED_PERMANENTLY);
        assert_eq!(location, "/logs/");
        assert_eq!(body, "<a href=\"/logs/\">Moved Permanently</a>.\n\n");
        // The read-only port has no /logs/ subtree: no redirect there.
        assert!(redirect(&get, "/logs", "", READ_ONLY_SUBTREES).is_none());
        for (path, clean) in [
            ("/logs/../../etc/passwd", "/etc/passwd"),
            ("//exec/ns/pod/c", "/exec/ns/pod/c"),
            ("/./run/ns/pod/c", "/run/ns/pod/c"),
            ("/a/../attach/ns/pod/c", "/attach/ns/pod/c"),
            ("/portForward//ns/pod", "/portForward/ns/pod"),
            ("/containerLogs/ns/./pod/c", "/containerLogs/ns/pod/c"),
            // A subtree's root, cleaned and given its slash in one hop.
            ("/runningpods/.", "/runningpods/"),
            ("//logs", "/logs/"),
            ("/stats", "/stats/"),
            ("/debug/pprof", "/debug/pprof/"),
        ] {
            for subtrees in [main, main_subtrees(false)] {
                let (status, location, _) =
                    answer(redirect(&get, path, "a=1&b=<x>", subtrees).unwrap()).await;
                assert_eq!(status, StatusCode::MOVED_PERMANENTLY, "{path}");
                assert_eq!(location, format!("{clean}?a=1&b=<x>"), "{path}");
            }
        }
        // The debugging paths are subtrees only while the switch is off (then upstream answers
        // them from subtree patterns; with it on, go-restful registers their roots too).
        assert!(redirect(&get, "/exec", "", main).is_none());
        let (_, location, _) =
            answer(redirect(&get, "/exec", "", main_subtrees(false)).unwrap()).await;
        assert_eq!(location, "/exec/");
        let (_, location, _) =
            answer(redirect(&get, "/stats", "", READ_ONLY_SUBTREES).unwrap()).await;
        assert_eq!(location, "/stats/");
        // The body of a GET escapes the location as Go's htmlEscape does; other methods get none.
        let (_, _, body) = answer(redirect(&get, "//x", "q=<'\">&", main).unwrap()).await;
        assert_eq!(
            body,
            "<a href=\"/x?q=&lt;&#39;&#34;&gt;&amp;\">Moved Permanently</a>.\n\n"
        );
        let (_, location, body) =
            answer(redirect(&Method::POST, "/logs/sub//y.log", "", main).unwrap()).await;
        assert_eq!(location, "/logs/sub/y.log");
        assert!(body.is_empty());
        for clean in [
            "/logs/",
            "/logs/sub/",
            "/pods",
            "/pods/",
            "/exec/ns/pod/c",
            "/",
            "/stats/summary",
        ] {
            assert!(redirect(&get, clean, "", main).is_none(), "{clean}");
        }
        assert!(redirect(&Method::CONNECT, "//exec/ns/pod/c", "", main).is_none());
        assert!(redirect(&Method::OPTIONS, "*", "", main).is_none());
    }

    /// Request paths built from the elements that matter here: dot elements, empty ones
    /// (repeated slashes), the subtrees' and routes' names, escapes, and anything else.
    pub(crate) fn request_path() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let element = prop_oneof![
            4 => prop::sample::select(vec![
                "", ".", "..", "logs", "stats", "runningpods", "debug", "pprof", "exec",
                "attach", "portForward", "run", "containerLogs", "configz", "pods", "healthz",
                "metrics", "summary", "ns", "pod", "c", "%2e%2e", "%2F", "...", ". ",
            ])
            .prop_map(str::to_string),
            1 => ".{0,6}",
        ];
        // Only what a request line can carry: the path as hyper hands it over.
        (prop::collection::vec(element, 0..8), any::<bool>()).prop_filter_map(
            "not a request path",
            |(parts, slash)| {
                let p = format!("/{}{}", parts.join("/"), if slash { "/" } else { "" });
                let uri: hyper::Uri = p.parse().ok()?;
                Some(uri.path().to_string())
            },
        )
    }

    pub(crate) fn location(r: &Response<Body>) -> String {
        String::from_utf8(r.headers()["Location"].as_bytes().to_vec()).unwrap()
    }

    proptest::proptest! {
        #![proptest_config(crate::test_support::proptest_config(512))]

        /// Cleaning is idempotent, and its result has no element a client could use to
        /// spell a path two ways.
        #[test]
        fn clean_paths_are_fixed_points(p in proptest::prop_oneof![request_path(), ".{0,30}"]) {
            let c = clean_path(&p);
            proptest::prop_assert_eq!(clean_path(&c), c.clone());
            proptest::prop_assert!(c.starts_with('/'));
            proptest::prop_assert!(!c.contains("//"), "{:?}", c);
            let trimmed = c.trim_end_matches('/');
            proptest::prop_assert!(!trimmed.split('/').any(|e| e == "." || e == ".."), "{:?}", c);
        }

        /// One hop: the redirect's target is the clean path (a subtree's root with its
        /// slash), the query rides along, and the target is not redirected again.
        #[test]
        fn a_redirect_lands_on_a_clean_path_in_one_hop(
            p in request_path(),
            query in "[a-z=&<>]{0,6}",
            debugging in proptest::prelude::any::<bool>(),
            read_only in proptest::prelude::any::<bool>(),
        ) {
            let subtrees = if read_only { READ_ONLY_SUBTREES } else { main_subtrees(debugging) };
            for method in [Method::GET, Method::POST, Method::HEAD, Method::DELETE] {
                let Some(r) = redirect(&method, &p, &query, subtrees) else {
                    proptest::prop_assert_eq!(clean_path(&p), p.clone());
                    continue;
                };
                proptest::prop_assert_eq!(r.status(), StatusCode::MOVED_PERMANENTLY);
                let location = location(&r);
                let (target, q) = location.split_once('?').unwrap_or((&location, ""));
                proptest::prop_assert_eq!(q, query.as_str());
                let clean = clean_path(&p);
                proptest::prop_assert!(target == clean || target == format!("{clean}/"), "{:?} -> {:?}", p, target);
                proptest::prop_assert!(redirect(&method, target, &query, subtrees).is_none(), "{:?} -> {:?}", p, target);
            }
        }
    }
}
