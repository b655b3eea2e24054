package main

// Raw block volumes, served the way csi-driver-host-path serves them: a volume's data is an
// image file, <data-dir>/volumes/<id>/block.img (--block-size bytes, made on first use),
// attached as a loop device when the volume is staged (or published without staging), and
// published by bind-mounting that loop device onto the file the kubelet names as the target.
// NodeUnstageVolume detaches the loop device. A restarted driver finds its loop devices again
// by their backing files in sysfs.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const blockImageName = "block.img"

func isBlock(c *csi.VolumeCapability) bool { return c.GetBlock() != nil }

// blockImage is id's image file; made (sparse, size bytes) when missing.
func (v *volumes) blockImage(id string, size int64) (string, error) {
	dir, err := v.ensureDir(id)
	if err != nil {
		return "", err
	}
	image := filepath.Join(dir, blockImageName)
	f, err := os.OpenFile(image, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return "", status.Errorf(codes.Internal, "creating %s: %v", image, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", status.Errorf(codes.Internal, "stat %s: %v", image, err)
	}
	if st.Size() == 0 {
		if err := f.Truncate(size); err != nil {
			return "", status.Errorf(codes.Internal, "sizing %s: %v", image, err)
		}
	}
	return image, nil
}

// existingBlockImage is id's image file, "" when the volume has none (a filesystem volume).
func (v *volumes) existingBlockImage(id string) (string, error) {
	dir, err := v.dir(id)
	if err != nil {
		return "", err
	}
	image := filepath.Join(dir, blockImageName)
	if _, err := os.Stat(image); errors.Is(err, os.ErrNotExist) {
		return "", nil
	} else if err != nil {
		return "", status.Errorf(codes.Internal, "stat %s: %v", image, err)
	}
	return image, nil
}

// loopFor is the loop device whose backing file is path, "" when there is none.
func loopFor(path string) (string, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", err
	}
	devices, err := filepath.Glob("/sys/block/loop*")
	if err != nil {
		return "", err
	}
	for _, d := range devices {
		b, err := os.ReadFile(filepath.Join(d, "loop", "backing_file"))
		if err != nil {
			continue // not set up
		}
		if strings.TrimSpace(string(b)) == real {
			return "/dev/" + filepath.Base(d), nil
		}
	}
	return "", nil
}

// attachLoop is the loop device over image, set up when there is none.
func attachLoop(image string) (string, error) {
	dev, err := loopFor(image)
	if err != nil {
		return "", status.Errorf(codes.Internal, "looking up the loop device of %s: %v", image, err)
	}
	if dev != "" {
		return dev, nil
	}
	out, err := exec.Command("losetup", "-f", "--show", image).CombinedOutput()
	if err != nil {
		return "", status.Errorf(codes.Internal, "losetup -f --show %s: %v: %s", image, err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

// detachLoop detaches the loop device over image, if there is one.
func detachLoop(image string) error {
	dev, err := loopFor(image)
	if err != nil || dev == "" {
		return err
	}
	if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
		return fmt.Errorf("losetup -d %s: %v: %s", dev, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// publishBlock bind-mounts device onto the file target (made here: the kubelet makes only
// its folder), read-only if asked.
func publishBlock(device, target string, readonly bool) error {
	mounted, err := isMountPoint(target)
	if err != nil {
		return err
	}
	if mounted {
		return nil
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_RDONLY, 0o640)
	if err != nil {
		return fmt.Errorf("creating %s: %w", target, err)
	}
	f.Close()
	if err := bindMount(device, target, readonly); err != nil {
		_ = os.Remove(target)
		return err
	}
	return nil
}

// deviceSize is the size of the block device at path, or ok=false when path is no device.
func deviceSize(path string) (size int64, ok bool, err error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, false, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return 0, false, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, true, err
	}
	defer f.Close()
	end, err := f.Seek(0, io.SeekEnd)
	return end, true, err
}
