//! Helpers shared by unit tests that need more than one module's fakes.

/// A directory on a file system that never answers: a FUSE mount whose device nobody
/// reads, so every lookup below it waits, as on a hung disk. Dropping it closes the
/// device, which fails every waiting call, and detaches the mount.
pub(crate) struct HungFs {
    pub(crate) dir: tempfile::TempDir,
    device: Option<std::fs::File>,
}

impl HungFs {
    pub(crate) fn mount() -> HungFs {
        use std::os::fd::AsRawFd;
        let device = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
            .expect("open /dev/fuse: the test needs root");
        let dir = tempfile::tempdir().unwrap();
        let options = format!(
            "fd={},rootmode=40000,user_id=0,group_id=0",
            device.as_raw_fd()
        );
        nix::mount::mount(
            Some("kubelet-rs-hung"),
            dir.path(),
            Some("fuse"),
            nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
            Some(options.as_str()),
        )
        .expect("mount a FUSE file system");
        HungFs {
            dir,
            device: Some(device),
        }
    }

    /// Fails every call waiting on the file system.
    pub(crate) fn release(&mut self) {
        self.device.take();
    }
}

impl Drop for HungFs {
    fn drop(&mut self) {
        self.release();
        let _ = nix::mount::umount2(self.dir.path(), nix::mount::MntFlags::MNT_DETACH);
    }
}

/// Writes an executable script that is safe to run at once from a test binary whose other
/// tests fork: a child forked while the file was open for writing holds that descriptor
/// until its exec, and running the script meanwhile fails with ETXTBSY ("Text file busy").
/// The file is closed before returning, and one run with retries waits those children
/// out; no later fork can inherit the closed descriptor, so every later run succeeds.
pub(crate) fn write_script(path: &std::path::Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        // A run with no input; the script's own output and status do not matter here.
        match std::process::Command::new(path)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
        {
            Ok(_) => return,
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "{} stayed busy: {e}",
                    path.display()
                );
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(e) => panic!("running {}: {e}", path.display()),
        }
    }
}

/// The settings of the property tests over the parsers that take outside input: a bounded
/// number of cases, so the whole set adds seconds, not minutes, to a test run on a loaded
/// two-core machine; and no failure persistence, so a run never writes a
/// `proptest-regressions/` file into the source tree (a failure found is kept as a plain
/// `#[test]` next to the property instead). `PROPTEST_CASES` overrides the count, for a
/// deeper search by hand (e.g. `PROPTEST_CASES=20000 cargo test --lib properties`).
pub(crate) fn proptest_config(cases: u32) -> proptest::test_runner::Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cases);
    proptest::test_runner::Config {
        cases,
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    }
}

/// Query strings for property tests: up to five `key=value` pairs, keys drawn from `key`
/// and values from `value`, URL-encoded as a client sends them.
pub(crate) fn query_of(
    key: impl proptest::strategy::Strategy<Value = &'static str>,
    value: impl proptest::strategy::Strategy<Value = String>,
) -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::strategy::Strategy;
    proptest::collection::vec((key, value), 0..6).prop_map(|pairs| {
        let mut s = form_urlencoded::Serializer::new(String::new());
        for (k, v) in pairs {
            s.append_pair(k, &v);
        }
        s.finish()
    })
}

/// A group id tests hand files to: as root one no file of theirs has (so a change shows);
/// otherwise the process's own, the only one a user may always give files to.
pub(crate) fn test_gid() -> u32 {
    if nix::unistd::geteuid().is_root() {
        4321
    } else {
        nix::unistd::getegid().as_raw()
    }
}

/// Copies a folder of fixtures (a captured cgroup tree) into a test's scratch folder.
pub(crate) fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), dst).unwrap();
        }
    }
}
