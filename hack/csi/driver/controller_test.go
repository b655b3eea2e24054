package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func testController(t *testing.T) *controller {
	t.Helper()
	vols, err := newVolumes(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return &controller{cfg: &config{name: "d", nodeID: "node-a", dataDir: vols.dataDir}, vols: vols}
}

func mountCap() []*csi.VolumeCapability {
	return []*csi.VolumeCapability{{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}}
}

func onNode(n string) *csi.TopologyRequirement {
	t := []*csi.Topology{{Segments: map[string]string{topologyKey: n}}}
	return &csi.TopologyRequirement{Requisite: t, Preferred: t}
}

func TestCreateVolumeMakesAFolderOnThisNode(t *testing.T) {
	c := testController(t)
	req := &csi.CreateVolumeRequest{
		Name:                      "pvc-1",
		CapacityRange:             &csi.CapacityRange{RequiredBytes: 5 << 20},
		VolumeCapabilities:        mountCap(),
		Parameters:                map[string]string{"tier": "gold"},
		AccessibilityRequirements: onNode("node-a"),
	}
	resp, err := c.CreateVolume(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	v := resp.GetVolume()
	if v.GetVolumeId() != "pvc-1" || v.GetCapacityBytes() != 5<<20 || v.GetVolumeContext()["tier"] != "gold" ||
		v.GetAccessibleTopology()[0].GetSegments()[topologyKey] != "node-a" {
		t.Errorf("volume: %v", v)
	}
	if fi, err := os.Stat(filepath.Join(c.vols.dataDir, "volumes", "pvc-1")); err != nil || !fi.IsDir() {
		t.Errorf("the volume's folder: %v", err)
	}
	// Idempotent for the same request; another size for the same name is refused.
	if _, err := c.CreateVolume(context.Background(), req); err != nil {
		t.Errorf("repeated: %v", err)
	}
	req.CapacityRange.RequiredBytes = 6 << 20
	if _, err := c.CreateVolume(context.Background(), req); status.Code(err) != codes.AlreadyExists {
		t.Errorf("another size: %v", err)
	}
}

func TestCreateVolumeRefuses(t *testing.T) {
	c := testController(t)
	block := []*csi.VolumeCapability{{
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}}
	for name, tc := range map[string]struct {
		req  *csi.CreateVolumeRequest
		want codes.Code
	}{
		"another node":  {&csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: mountCap(), AccessibilityRequirements: onNode("node-b")}, codes.ResourceExhausted},
		"block":         {&csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: block}, codes.InvalidArgument},
		"no name":       {&csi.CreateVolumeRequest{VolumeCapabilities: mountCap()}, codes.InvalidArgument},
		"a path name":   {&csi.CreateVolumeRequest{Name: "../x", VolumeCapabilities: mountCap()}, codes.InvalidArgument},
		"no capability": {&csi.CreateVolumeRequest{Name: "v"}, codes.InvalidArgument},
		"over limit":    {&csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: mountCap(), CapacityRange: &csi.CapacityRange{RequiredBytes: 2, LimitBytes: 1}}, codes.OutOfRange},
	} {
		if _, err := c.CreateVolume(context.Background(), tc.req); status.Code(err) != tc.want {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(c.vols.dataDir, "volumes")); len(entries) != 0 {
		t.Errorf("folders made by refused calls: %v", entries)
	}
}

func TestDeleteVolumeKeepsAMountedVolume(t *testing.T) {
	c := testController(t)
	if _, err := c.CreateVolume(context.Background(), &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: mountCap()}); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(c.vols.dataDir, "volumes", "pvc-1")
	c.vols.mounted("pvc-1", "/staging")
	if _, err := c.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: "pvc-1"}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("mounted: %v", err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("the mounted volume's folder went: %v", err)
	}
	c.vols.unmounted("pvc-1", "/staging")
	for i := 0; i < 2; i++ { // the second call finds nothing, and that is fine
		if _, err := c.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: "pvc-1"}); err != nil {
			t.Errorf("delete %d: %v", i, err)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the folder stays: %v", err)
	}
	if _, err := os.Stat(c.vols.recordPath("pvc-1")); !os.IsNotExist(err) {
		t.Errorf("the record stays: %v", err)
	}
}

func TestCapacityDefaults(t *testing.T) {
	for _, tc := range []struct {
		r    *csi.CapacityRange
		want int64
	}{
		{nil, defaultCapacityBytes},
		{&csi.CapacityRange{LimitBytes: 1 << 20}, 1 << 20},
		{&csi.CapacityRange{RequiredBytes: 3}, 3},
	} {
		if got, err := capacity(tc.r); err != nil || got != tc.want {
			t.Errorf("%v: %d, %v; want %d", tc.r, got, err, tc.want)
		}
	}
}
