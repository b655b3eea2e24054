//! The WebSocket channel protocols (`channel.k8s.io`, `base64.channel.k8s.io`,
//! `v4.channel.k8s.io`, ...) the apiserver passes through to the kubelet.
