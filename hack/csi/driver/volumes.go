package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// volumes is the driver's state, shared by its controller and node services: a volume's data
// is the directory <data-dir>/volumes/<id>; one made by CreateVolume also has its record
// <data-dir>/controller/<id>.json. Which volumes are staged or published is kept in memory
// only (a restarted driver forgets it), enough for DeleteVolume to refuse a volume in use.
type volumes struct {
	dataDir string
	// One operation at a time: a retry of a slow call must not race the call, and
	// DeleteVolume must not race a NodeStageVolume of the same volume.
	mu sync.Mutex
	// Volume id -> the staging and target paths it is mounted at.
	inUse map[string]map[string]struct{}
}

// volumeRecord is what CreateVolume keeps of a volume, to answer a repeated call the same way.
type volumeRecord struct {
	Name          string            `json:"name"`
	CapacityBytes int64             `json:"capacity_bytes"`
	Parameters    map[string]string `json:"parameters,omitempty"`
}

func newVolumes(dataDir string) (*volumes, error) {
	for _, d := range []string{"volumes", "controller"} {
		if err := os.MkdirAll(filepath.Join(dataDir, d), 0o755); err != nil {
			return nil, err
		}
	}
	return &volumes{dataDir: dataDir, inUse: map[string]map[string]struct{}{}}, nil
}

func checkVolumeID(id string) error {
	if id == "" || id == "." || id == ".." || strings.ContainsAny(id, "/\x00") {
		return status.Errorf(codes.InvalidArgument, "invalid volume_id %q", id)
	}
	return nil
}

// dir is where volume id's data lives: <data-dir>/volumes/<id>.
func (v *volumes) dir(id string) (string, error) {
	if err := checkVolumeID(id); err != nil {
		return "", err
	}
	return filepath.Join(v.dataDir, "volumes", id), nil
}

func (v *volumes) recordPath(id string) string {
	return filepath.Join(v.dataDir, "controller", id+".json")
}

// ensureDir creates id's directory, writable by any user a pod runs as.
func (v *volumes) ensureDir(id string) (string, error) {
	dir, err := v.dir(id)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return "", status.Errorf(codes.Internal, "creating %s: %v", dir, err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		return "", status.Errorf(codes.Internal, "chmod %s: %v", dir, err)
	}
	return dir, nil
}

// record reads id's CreateVolume record; nil when there is none.
func (v *volumes) record(id string) (*volumeRecord, error) {
	b, err := os.ReadFile(v.recordPath(id))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, status.Errorf(codes.Internal, "reading the record of %s: %v", id, err)
	}
	var r volumeRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, status.Errorf(codes.Internal, "%s: %v", v.recordPath(id), err)
	}
	return &r, nil
}

// writeRecord writes id's record through a temporary file, so a crash leaves the old one or
// the new one, never half of one.
func (v *volumes) writeRecord(id string, r *volumeRecord) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	tmp := v.recordPath(id) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, v.recordPath(id)); err != nil {
		return fmt.Errorf("renaming %s: %w", tmp, err)
	}
	return nil
}

// remove deletes id's data and record; a missing volume is fine (DeleteVolume is idempotent).
func (v *volumes) remove(id string) error {
	dir, err := v.dir(id)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	if err := os.Remove(v.recordPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// mounted and unmounted track where a volume is staged or published; callers hold mu.
func (v *volumes) mounted(id, path string) {
	if v.inUse[id] == nil {
		v.inUse[id] = map[string]struct{}{}
	}
	v.inUse[id][path] = struct{}{}
}

func (v *volumes) unmounted(id, path string) {
	delete(v.inUse[id], path)
	if len(v.inUse[id]) == 0 {
		delete(v.inUse, id)
	}
}

// mountedAt lists the paths id is staged or published at; callers hold mu.
func (v *volumes) mountedAt(id string) []string {
	var paths []string
	for p := range v.inUse[id] {
		paths = append(paths, p)
	}
	return paths
}
