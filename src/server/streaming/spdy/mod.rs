//! SPDY/3.1: what the apiserver speaks to the kubelet for exec, attach and port-forward.
