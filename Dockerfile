# kubelet-rs as an image.
#
# It manages the host's containers, so it runs as a privileged DaemonSet (hostNetwork, hostPID)
# or as a node image, with these host paths mounted at the same place:
#   /run/containerd      containerd's socket (and the shim sockets under it)
#   /var/lib/kubelet-rs  the agent's state: pod dirs, volumes, pinned network namespaces
#                        (mount with Bidirectional propagation so netns and volume mounts reach the host)
#   /var/log             /var/log/pods and /var/log/containers
#   /etc/cni, /opt/cni   CNI configuration and plugins
#   /sys/fs/cgroup       cgroups of the pods
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
# iproute2 and iptables: the CNI bridge and portmap plugins call into them from this mount
# namespace; ca-certificates: TLS to the API server.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates iproute2 iptables \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/kubelet-rs /usr/local/bin/kubelet-rs
ENTRYPOINT ["/usr/local/bin/kubelet-rs"]
