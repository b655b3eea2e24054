// Package unixsock holds what both hack/csi binaries need around their gRPC unix sockets:
// listening (a stale socket removed first, paths longer than sun_path allows still bound),
// dialling the same way, signals, and a bounded graceful stop.
package unixsock

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"google.golang.org/grpc"
)

// sun_path holds 108 bytes with the terminating NUL; longer paths are reached through
// /proc/self/fd/<fd of the directory>/<name>, which is short whatever the directory.
const maxSunPath = 107

// Path strips an optional unix:// (or unix:) scheme and makes the path absolute.
func Path(endpoint string) (string, error) {
	p := endpoint
	switch {
	case len(p) > 7 && p[:7] == "unix://":
		p = p[7:]
	case len(p) > 5 && p[:5] == "unix:":
		p = p[5:]
	}
	if p == "" {
		return "", errors.New("empty socket path")
	}
	return filepath.Abs(p)
}

// Listen listens on the unix socket at path (absolute), creating its directory and removing a
// socket left by an earlier run. Anything else at path is an error, never removed. The
// listener does not unlink the socket when closed: callers remove it with Remove.
func Listen(path string) (*net.UnixListener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := Remove(path); err != nil {
		return nil, err
	}
	var l *net.UnixListener
	err := viaShortPath(path, func(addr string) error {
		var err error
		l, err = net.ListenUnix("unix", &net.UnixAddr{Name: addr, Net: "unix"})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	l.SetUnlinkOnClose(false)
	return l, nil
}

// Remove removes the socket at path if there is one; a missing path is fine, anything but a
// socket is an error.
func Remove(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSocket == 0 {
		return fmt.Errorf("%s exists and is not a socket; not removing it", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Dialer is a grpc.WithContextDialer function for a target "passthrough:///<absolute path>".
func Dialer(ctx context.Context, path string) (net.Conn, error) {
	var conn net.Conn
	err := viaShortPath(path, func(addr string) error {
		var err error
		var d net.Dialer
		conn, err = d.DialContext(ctx, "unix", addr)
		return err
	})
	return conn, err
}

// viaShortPath calls f with path, or, when path is too long for sun_path, with a
// /proc/self/fd path to it that stays valid while f runs.
func viaShortPath(path string, f func(addr string) error) error {
	if len(path) <= maxSunPath {
		return f(path)
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return f(fmt.Sprintf("/proc/self/fd/%d/%s", d.Fd(), filepath.Base(path)))
}

// Signals starts catching SIGTERM and SIGINT; call it first thing, so that a signal sent while
// the program starts still gets its clean-up.
func Signals() <-chan os.Signal {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	return ch
}

// Stop stops srv gracefully, and forcibly after timeout (a client holding a stream open must
// not keep the process alive).
func Stop(srv *grpc.Server, timeout time.Duration) {
	done := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(timeout):
		srv.Stop()
	}
}
