# kubelet-rs as an image.
#
# It manages the host's containers, so it runs as a privileged DaemonSet with hostNetwork and
# hostPID (or as a node image). runc, containerd's shims and the log writer run on the host
# and open the paths the agent names, so every host path below is mounted at the SAME path:
#   /run/containerd       containerd's socket
#   /var/lib/kubelet-rs   the agent's state (--root-dir): pod dirs, volumes, and bin/kubelet-rs,
#                         the agent's copy of itself that containerd's shim runs as each
#                         container's log writer. Bidirectional (mountPropagation), so tmpfs
#                         volumes the agent mounts there reach the host, where runc binds them.
#   /run/netns            pinned pod network namespaces (the agent uses /var/run/netns; Debian's
#                         /var/run links to /run). Bidirectional: runc opens them on the host.
#   /var/lib/cni          CNI IPAM state (host-local), shared with the host's other CNI users
#   /var/log              /var/log/pods and /var/log/containers, written by the log writer
#   /etc/cni/net.d        CNI configuration (read-only)
#   /opt/cni/bin          CNI plugins (read-only); also the directory their links point to if
#                         they are links (Debian's package: /usr/lib/cni)
#   /var/lib/containerd   read-only (HostToContainer): the agent reads an image's /etc/passwd
#                         and /etc/group from a view of its snapshot
#   /sys/fs/cgroup        the pods' cgroups, for limits and stats
#   /run/xtables.lock     (a file) so the CNI plugins' iptables calls here and the host's take turns
# and dnsPolicy: Default, so this container's /etc/resolv.conf, which pods get, is the node's.
#
# Requirements and limits (shown by integration/daemonset.rs, which runs the agent this way
# under containerd with a rootfs assembled from local files):
# - Bidirectional needs the host side to be a shared mount: systemd hosts mount everything
#   shared; elsewhere make /run/netns and the root dir shared first (`ip netns add` does it
#   for /run/netns: `mount --bind /run/netns /run/netns && mount --make-shared /run/netns`).
# - hostPID: the agent finds containerd as its socket's peer to tell whether the host can see
#   its executable. Without hostPID it cannot tell and installs the copy anyway.
# - The log writer is this image's binary running on the HOST with the host's C library: the
#   host needs glibc 2.34 or newer (Debian 12, Ubuntu 22.04, RHEL 9 and later).
# - The CNI plugins run iptables from this image: its backend must match the host's
#   (bookworm's default is nf_tables; `update-alternatives --set iptables
#   /usr/sbin/iptables-legacy` in the image for legacy hosts).
# - An agent upgrade replaces <root-dir>/bin/kubelet-rs by rename; log writers already
#   running keep the old file, so containers keep logging across the rollout.
# containerd, runc and the CNI plugins come from the host; only the agent is in the image.

FROM rust:bookworm AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends protobuf-compiler \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Everything cargo reads, including every target path Cargo.toml names (.dockerignore trims the rest).
COPY . .
RUN cargo build --release --locked --bin kubelet-rs

FROM debian:bookworm-slim
# iptables: the CNI bridge (ipMasq) and portmap plugins run it from this mount namespace;
# iproute2 for looking at pod namespaces (`ip netns`); ca-certificates: TLS to the API server.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates iproute2 iptables \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/kubelet-rs /usr/local/bin/kubelet-rs
ENTRYPOINT ["/usr/local/bin/kubelet-rs"]
