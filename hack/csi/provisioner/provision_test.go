package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"
)

const (
	testDriver = "hostpath.csi.test"
	testKey    = "topology.csi.test/node"
)

// fakeController records CreateVolume and DeleteVolume requests and answers as told.
type fakeController struct {
	csi.ControllerClient
	created   []*csi.CreateVolumeRequest
	deleted   []string
	createErr error
	createCap int64
	deleteErr error
}

func (f *fakeController) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest, _ ...grpc.CallOption) (*csi.CreateVolumeResponse, error) {
	f.created = append(f.created, req)
	if f.createErr != nil {
		return nil, f.createErr
	}
	size := f.createCap
	if size == 0 {
		size = req.GetCapacityRange().GetRequiredBytes()
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:           "vol-" + req.GetName(),
		CapacityBytes:      size,
		VolumeContext:      map[string]string{"from": "driver"},
		AccessibleTopology: req.GetAccessibilityRequirements().GetPreferred()[:1],
	}}, nil
}

func (f *fakeController) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest, _ ...grpc.CallOption) (*csi.DeleteVolumeResponse, error) {
	f.deleted = append(f.deleted, req.GetVolumeId())
	return &csi.DeleteVolumeResponse{}, f.deleteErr
}

// cluster has node-a and node-b with the driver, its topology key and their labels.
func cluster() *fake.Clientset {
	var objs []runtime.Object
	for _, n := range []string{"node-a", "node-b"} {
		objs = append(objs,
			&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{testKey: n}}},
			&storagev1.CSINode{
				ObjectMeta: metav1.ObjectMeta{Name: n},
				Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{
					{Name: testDriver, NodeID: n, TopologyKeys: []string{testKey}},
				}},
			})
	}
	return fake.NewClientset(objs...)
}

func newTestProvisioner(ctl *fakeController) *csiProvisioner {
	return &csiProvisioner{
		driver:     testDriver,
		identity:   "id-1",
		controller: ctl,
		client:     cluster(),
		topology:   true,
		timeout:    time.Minute,
	}
}

func claim() *v1.PersistentVolumeClaim {
	fs := v1.PersistentVolumeFilesystem
	return &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data-db-0", Namespace: "default", UID: "1234"},
		Spec: v1.PersistentVolumeClaimSpec{
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			VolumeMode:  &fs,
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{
				v1.ResourceStorage: resource.MustParse("2Gi"),
			}},
		},
	}
}

func class() *storagev1.StorageClass {
	retain := v1.PersistentVolumeReclaimRetain
	return &storagev1.StorageClass{
		ObjectMeta:    metav1.ObjectMeta{Name: "fast"},
		Provisioner:   testDriver,
		ReclaimPolicy: &retain,
		MountOptions:  []string{"noatime"},
		Parameters:    map[string]string{"tier": "gold", paramFSType: "xfs"},
	}
}

func TestProvisionOnTheSelectedNode(t *testing.T) {
	ctl := &fakeController{}
	p := newTestProvisioner(ctl)
	pv, state, err := p.Provision(context.Background(), controller.ProvisionOptions{
		StorageClass: class(), PVName: "pvc-1234", PVC: claim(), SelectedNodeName: "node-b",
	})
	if err != nil || state != controller.ProvisioningFinished {
		t.Fatalf("Provision: %v, %v", state, err)
	}
	if len(ctl.created) != 1 {
		t.Fatalf("CreateVolume calls: %d", len(ctl.created))
	}
	req := ctl.created[0]
	if req.GetName() != "pvc-1234" || req.GetCapacityRange().GetRequiredBytes() != 2<<30 {
		t.Errorf("name and capacity: %v", req)
	}
	if len(req.GetParameters()) != 1 || req.GetParameters()["tier"] != "gold" {
		t.Errorf("parameters (fstype is the provisioner's): %v", req.GetParameters())
	}
	c := req.GetVolumeCapabilities()
	if len(c) != 1 || c[0].GetAccessMode().GetMode() != csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER ||
		c[0].GetMount().GetFsType() != "xfs" || len(c[0].GetMount().GetMountFlags()) != 1 {
		t.Errorf("capabilities: %v", c)
	}
	reqs := req.GetAccessibilityRequirements()
	if len(reqs.GetRequisite()) != 1 || reqs.GetRequisite()[0].GetSegments()[testKey] != "node-b" {
		t.Errorf("the selected node's segment only: %v", reqs)
	}

	if pv.Name != "pvc-1234" || pv.Spec.StorageClassName != "fast" ||
		pv.Spec.PersistentVolumeReclaimPolicy != v1.PersistentVolumeReclaimRetain ||
		len(pv.Spec.MountOptions) != 1 || *pv.Spec.VolumeMode != v1.PersistentVolumeFilesystem {
		t.Errorf("PV: %+v", pv.Spec)
	}
	if got := pv.Spec.Capacity[v1.ResourceStorage]; got.Value() != 2<<30 {
		t.Errorf("capacity: %v", got)
	}
	src := pv.Spec.CSI
	if src.Driver != testDriver || src.VolumeHandle != "vol-pvc-1234" || src.FSType != "xfs" ||
		src.VolumeAttributes["from"] != "driver" || src.VolumeAttributes[attrIdentity] != "id-1" {
		t.Errorf("csi source: %+v", src)
	}
	term := pv.Spec.NodeAffinity.Required.NodeSelectorTerms
	if len(term) != 1 || term[0].MatchExpressions[0].Key != testKey || term[0].MatchExpressions[0].Values[0] != "node-b" {
		t.Errorf("node affinity: %+v", term)
	}
}

func TestProvisionWithoutASelectedNodeOffersEveryNode(t *testing.T) {
	ctl := &fakeController{}
	p := newTestProvisioner(ctl)
	p.extraMetadata = true
	if _, _, err := p.Provision(context.Background(), controller.ProvisionOptions{
		StorageClass: class(), PVName: "pvc-1234", PVC: claim(),
	}); err != nil {
		t.Fatal(err)
	}
	req := ctl.created[0]
	if n := len(req.GetAccessibilityRequirements().GetRequisite()); n != 2 {
		t.Errorf("both nodes' segments: %v", req.GetAccessibilityRequirements())
	}
	if req.GetParameters()[paramPVCName] != "data-db-0" || req.GetParameters()[paramPVName] != "pvc-1234" {
		t.Errorf("extra metadata: %v", req.GetParameters())
	}
}

func TestProvisionFailureStates(t *testing.T) {
	for _, tc := range []struct {
		code     codes.Code
		selected string
		want     controller.ProvisioningState
	}{
		{codes.ResourceExhausted, "node-a", controller.ProvisioningReschedule},
		{codes.ResourceExhausted, "", controller.ProvisioningInBackground},
		{codes.DeadlineExceeded, "node-a", controller.ProvisioningInBackground},
		{codes.Unavailable, "", controller.ProvisioningInBackground},
		{codes.InvalidArgument, "node-a", controller.ProvisioningFinished},
	} {
		ctl := &fakeController{createErr: status.Error(tc.code, "no")}
		_, state, err := newTestProvisioner(ctl).Provision(context.Background(), controller.ProvisionOptions{
			StorageClass: class(), PVName: "pvc-1234", PVC: claim(), SelectedNodeName: tc.selected,
		})
		if err == nil || state != tc.want {
			t.Errorf("%v on %q: %v, %v; want %v", tc.code, tc.selected, state, err, tc.want)
		}
	}
}

func TestProvisionRefusesWhatItCannotDo(t *testing.T) {
	ctl := &fakeController{}
	p := newTestProvisioner(ctl)
	bad := class()
	bad.Parameters[reservedPrefix+"provisioner-secret-name"] = "s"
	if _, state, err := p.Provision(context.Background(), controller.ProvisionOptions{
		StorageClass: bad, PVName: "pvc-1234", PVC: claim(), SelectedNodeName: "node-a",
	}); err == nil || state != controller.ProvisioningNoChange {
		t.Errorf("an unsupported reserved parameter: %v, %v", state, err)
	}
	if _, _, err := p.Provision(context.Background(), controller.ProvisionOptions{
		StorageClass: class(), PVName: "pvc-1234", PVC: claim(), SelectedNodeName: "node-c",
	}); err == nil {
		t.Error("a node without the driver's CSINode")
	}
	if len(ctl.created) != 0 {
		t.Errorf("CreateVolume called: %v", ctl.created)
	}

	// A volume smaller than the claim goes back to the driver.
	ctl.createCap = 1 << 30
	if _, _, err := p.Provision(context.Background(), controller.ProvisionOptions{
		StorageClass: class(), PVName: "pvc-1234", PVC: claim(), SelectedNodeName: "node-a",
	}); err == nil || len(ctl.deleted) != 1 {
		t.Errorf("too small: %v, deleted %v", err, ctl.deleted)
	}
}

func pv(driver string) *v1.PersistentVolume {
	return &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pvc-1234"},
		Spec: v1.PersistentVolumeSpec{PersistentVolumeSource: v1.PersistentVolumeSource{
			CSI: &v1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: "vol-1"},
		}},
	}
}

func TestDelete(t *testing.T) {
	ctl := &fakeController{}
	p := newTestProvisioner(ctl)
	var ignored *controller.IgnoredError
	if err := p.Delete(context.Background(), pv("other.csi")); !errors.As(err, &ignored) {
		t.Errorf("another driver's PV: %v", err)
	}

	name := "pvc-1234"
	va := &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: "csi-1"},
		Spec: storagev1.VolumeAttachmentSpec{
			Attacher: testDriver, NodeName: "node-a",
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &name},
		},
	}
	if _, err := p.client.StorageV1().VolumeAttachments().Create(context.Background(), va, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var inUse *controller.VolumeInUseError
	if err := p.Delete(context.Background(), pv(testDriver)); !errors.As(err, &inUse) {
		t.Errorf("attached: %v", err)
	}
	if len(ctl.deleted) != 0 {
		t.Errorf("DeleteVolume while attached: %v", ctl.deleted)
	}
	if err := p.client.StorageV1().VolumeAttachments().Delete(context.Background(), "csi-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	ctl.deleteErr = status.Error(codes.FailedPrecondition, "still mounted")
	if err := p.Delete(context.Background(), pv(testDriver)); !errors.As(err, &inUse) {
		t.Errorf("mounted: %v", err)
	}
	ctl.deleteErr = status.Error(codes.NotFound, "gone")
	if err := p.Delete(context.Background(), pv(testDriver)); err != nil {
		t.Errorf("already gone: %v", err)
	}
	ctl.deleteErr = status.Error(codes.Internal, "disk on fire")
	if err := p.Delete(context.Background(), pv(testDriver)); err == nil || errors.As(err, &inUse) {
		t.Errorf("a failure: %v", err)
	}
	ctl.deleteErr = nil
	if err := p.Delete(context.Background(), pv(testDriver)); err != nil {
		t.Errorf("deleted: %v", err)
	}
	if len(ctl.deleted) != 4 || ctl.deleted[3] != "vol-1" {
		t.Errorf("DeleteVolume calls: %v", ctl.deleted)
	}
}
