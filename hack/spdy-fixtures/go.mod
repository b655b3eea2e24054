module kubelet-rs/hack/spdy-fixtures

go 1.22

require github.com/moby/spdystream v0.5.0
