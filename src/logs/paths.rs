//! Log file locations, named exactly as the upstream kubelet names them
//! (`pkg/kubelet/kuberuntime/helpers.go`, `kuberuntime_container.go`), because log shippers
//! (fluent-bit, promtail, ...) find and label logs by parsing these names.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

/// ext4 refuses longer file names; upstream cuts the symlink name to fit.
const MAX_FILE_NAME_BYTES: usize = 255;
const LOG_SUFFIX: &str = ".log";

/// `<pod_logs_dir>/<namespace>_<pod_name>_<uid>`, the directory holding one pod's logs.
pub fn pod_log_dir(pod_logs_dir: &Path, namespace: &str, pod_name: &str, uid: &str) -> PathBuf {
    pod_logs_dir.join(format!("{namespace}_{pod_name}_{uid}"))
}

/// `<pod_log_dir>/<container>/<restart_count>.log`: each restart of a container gets its own file,
/// which is how `kubectl logs --previous` finds the last instance's output.
pub fn container_log_path(pod_log_dir: &Path, container: &str, restart_count: u32) -> PathBuf {
    pod_log_dir
        .join(container)
        .join(format!("{restart_count}{LOG_SUFFIX}"))
}

/// `<containers_dir>/<pod>_<namespace>_<container>-<container_id>.log`, the symlink upstream keeps
/// in `/var/log/containers`. When the name would exceed 255 bytes, the part before `.log` is cut
/// at a byte boundary (as upstream does, even inside a multi-byte character; Kubernetes names are
/// ASCII in practice).
pub fn container_log_symlink(
    containers_dir: &Path,
    pod_name: &str,
    namespace: &str,
    container: &str,
    container_id: &str,
) -> PathBuf {
    let mut name = format!("{pod_name}_{namespace}_{container}-{container_id}").into_bytes();
    name.truncate(MAX_FILE_NAME_BYTES - LOG_SUFFIX.len());
    name.extend_from_slice(LOG_SUFFIX.as_bytes());
    containers_dir.join(OsString::from_vec(name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    #[test]
    fn pod_log_dir_joins_namespace_name_uid() {
        assert_eq!(
            pod_log_dir(
                Path::new("/var/log/pods"),
                "kube-system",
                "coredns-abc",
                "1234-uid"
            ),
            PathBuf::from("/var/log/pods/kube-system_coredns-abc_1234-uid")
        );
    }

    #[test]
    fn container_log_path_uses_restart_count() {
        let dir = Path::new("/var/log/pods/default_web_u1");
        assert_eq!(
            container_log_path(dir, "nginx", 0),
            PathBuf::from("/var/log/pods/default_web_u1/nginx/0.log")
        );
        assert_eq!(
            container_log_path(dir, "nginx", 12),
            PathBuf::from("/var/log/pods/default_web_u1/nginx/12.log")
        );
    }

    #[test]
    fn symlink_name_puts_pod_before_namespace() {
        assert_eq!(
            container_log_symlink(
                Path::new("/var/log/containers"),
                "web",
                "default",
                "nginx",
                "0123abcd"
            ),
            PathBuf::from("/var/log/containers/web_default_nginx-0123abcd.log")
        );
    }

    #[test]
    fn symlink_name_at_the_limit_is_kept_whole() {
        // 251 bytes before ".log" make exactly 255.
        let pod = "p".repeat(251 - "_ns_c-id".len());
        let link = container_log_symlink(Path::new("/d"), &pod, "ns", "c", "id");
        let name = link.file_name().unwrap().as_bytes();
        assert_eq!(name.len(), 255);
        assert!(name.ends_with(b"_ns_c-id.log"));
    }

    #[test]
    fn long_symlink_name_is_cut_to_255_bytes_keeping_the_suffix() {
        let id = "f".repeat(64);
        let pod = "a".repeat(200);
        let link = container_log_symlink(Path::new("/var/log/containers"), &pod, "ns", "c", &id);
        assert_eq!(link.parent(), Some(Path::new("/var/log/containers")));
        let name = link.file_name().unwrap().as_bytes();
        assert_eq!(name.len(), 255);
        let full = format!("{pod}_ns_c-{id}");
        assert_eq!(&name[..251], &full.as_bytes()[..251]);
        assert!(name.ends_with(b".log"));
    }

    #[test]
    fn truncation_may_split_a_multibyte_character_like_upstream() {
        // 'é' is two bytes; place one so the 251-byte cut lands inside it.
        let pod = format!("{}é", "a".repeat(250));
        let link = container_log_symlink(Path::new("/d"), &pod, "ns", "c", "id");
        let name = link.file_name().unwrap().as_bytes();
        assert_eq!(name.len(), 255);
        assert_eq!(name[250], "é".as_bytes()[0]);
        assert_eq!(&name[251..], b".log");
    }
}
