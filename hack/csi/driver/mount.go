package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// isMountPoint reports whether path is a mount point of this mount namespace: whether it is
// the mount point (field 5) of a line of /proc/self/mountinfo. A missing path is not one.
func isMountPoint(path string) (bool, error) {
	resolved, err := filepath.EvalSymlinks(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		// A mount whose source is gone (ENOTCONN, ESTALE) still shows in mountinfo.
		resolved = filepath.Clean(path)
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.SplitN(sc.Text(), " ", 6)
		if len(fields) < 5 {
			continue
		}
		if unescapeMountinfo(fields[4]) == resolved {
			return true, nil
		}
	}
	return false, sc.Err()
}

// unescapeMountinfo undoes the kernel's octal escapes (\040 for a space, \011, \012, \134).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// bindMount bind-mounts src onto dst, read-only if asked (a bind mount takes MS_RDONLY only
// on a remount).
func bindMount(src, dst string, readonly bool) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mounting %s on %s: %w", src, dst, err)
	}
	if readonly {
		if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			_ = unix.Unmount(dst, 0)
			return fmt.Errorf("remounting %s read-only: %w", dst, err)
		}
	}
	return nil
}

// unmountAll unmounts path until it is no mount point (mounts stacked by a retried call go
// too); a path that is not mounted, or missing, is fine.
func unmountAll(path string) error {
	for i := 0; i < 16; i++ {
		mounted, err := isMountPoint(path)
		if err != nil {
			return err
		}
		if !mounted {
			return nil
		}
		if err := unix.Unmount(path, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmounting %s: %w", path, err)
		}
	}
	return fmt.Errorf("%s is still mounted after 16 unmounts", path)
}

// removeDir removes the (empty) directory path, or a block volume's target file; a missing
// one is fine. Never recursive: a directory that is not empty may still hold a volume's data.
func removeDir(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
