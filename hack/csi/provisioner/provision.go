package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"
)

// The StorageClass parameters with this prefix are for the provisioner, not the driver, as
// external-provisioner reads them.
const reservedPrefix = "csi.storage.k8s.io/"

const (
	paramFSType = reservedPrefix + "fstype"
	// The keys --extra-create-metadata adds, external-provisioner's.
	paramPVCName      = reservedPrefix + "pvc/name"
	paramPVCNamespace = reservedPrefix + "pvc/namespace"
	paramPVName       = reservedPrefix + "pv/name"
	// external-provisioner's volume attribute naming the provisioner instance that made a PV.
	attrIdentity = "storage.kubernetes.io/csiProvisionerIdentity"
)

// csiProvisioner is the lib's Provisioner for one CSI driver: Provision is CreateVolume and
// the PV built from its answer, Delete is DeleteVolume.
type csiProvisioner struct {
	driver     string
	identity   string
	controller csi.ControllerClient
	client     kubernetes.Interface
	// Whether the driver has VOLUME_ACCESSIBILITY_CONSTRAINTS: CreateVolume then gets
	// accessibility requirements and the PV a node affinity.
	topology      bool
	extraMetadata bool
	// The deadline of each CreateVolume and DeleteVolume call.
	timeout time.Duration
}

var _ controller.BlockProvisioner = (*csiProvisioner)(nil)

// SupportsBlock says yes, as external-provisioner does: the driver refuses a block
// capability in CreateVolume if it has none.
func (p *csiProvisioner) SupportsBlock(context.Context) bool { return true }

// splitParameters takes the provisioner's keys out of a class's parameters: what is left goes
// to the driver. A reserved key this provisioner does not know is an error naming it, rather
// than being passed on or dropped.
func splitParameters(class *storagev1.StorageClass) (params map[string]string, fsType string, err error) {
	params = map[string]string{}
	for k, v := range class.Parameters {
		switch {
		case k == paramFSType:
			fsType = v
		case strings.HasPrefix(k, reservedPrefix):
			return nil, "", fmt.Errorf("StorageClass %s: parameter %q is not supported by this provisioner", class.Name, k)
		default:
			params[k] = v
		}
	}
	return params, fsType, nil
}

// accessMode maps a claim's access mode to CSI's, as external-provisioner does for a driver
// without SINGLE_NODE_MULTI_WRITER.
func accessMode(m v1.PersistentVolumeAccessMode) (csi.VolumeCapability_AccessMode_Mode, error) {
	switch m {
	case v1.ReadWriteOnce:
		return csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, nil
	case v1.ReadOnlyMany:
		return csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY, nil
	case v1.ReadWriteMany:
		return csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, nil
	case v1.ReadWriteOncePod:
		return csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER, nil
	}
	return csi.VolumeCapability_AccessMode_UNKNOWN, fmt.Errorf("unknown access mode %q", m)
}

// capabilities are the claim's access modes, each with the claim's volume mode: a mount with
// the class's fsType and mount options, or a block device.
func capabilities(claim *v1.PersistentVolumeClaim, fsType string, mountOptions []string) ([]*csi.VolumeCapability, error) {
	if len(claim.Spec.AccessModes) == 0 {
		return nil, fmt.Errorf("claim %s/%s has no access modes", claim.Namespace, claim.Name)
	}
	block := claim.Spec.VolumeMode != nil && *claim.Spec.VolumeMode == v1.PersistentVolumeBlock
	var caps []*csi.VolumeCapability
	for _, m := range claim.Spec.AccessModes {
		mode, err := accessMode(m)
		if err != nil {
			return nil, fmt.Errorf("claim %s/%s: %w", claim.Namespace, claim.Name, err)
		}
		c := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode}}
		if block {
			c.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
		} else {
			c.AccessType = &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{
				FsType:     fsType,
				MountFlags: mountOptions,
			}}
		}
		caps = append(caps, c)
	}
	return caps, nil
}

// segment is node's topology for the driver: the values of its node labels named by the
// CSINode's topology keys of the driver.
func (p *csiProvisioner) segment(ctx context.Context, nodeName string) (map[string]string, error) {
	csiNode, err := p.client.StorageV1().CSINodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("CSINode %s: %w", nodeName, err)
	}
	i := slices.IndexFunc(csiNode.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == p.driver })
	if i < 0 {
		return nil, fmt.Errorf("driver %s is not registered on node %s (not in its CSINode)", p.driver, nodeName)
	}
	keys := csiNode.Spec.Drivers[i].TopologyKeys
	if len(keys) == 0 {
		return nil, fmt.Errorf("CSINode %s lists no topology keys for driver %s", nodeName, p.driver)
	}
	node, err := p.client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", nodeName, err)
	}
	seg := map[string]string{}
	for _, k := range keys {
		v, ok := node.Labels[k]
		if !ok {
			return nil, fmt.Errorf("node %s has no label %s (driver %s's topology key) yet", nodeName, k, p.driver)
		}
		seg[k] = v
	}
	return seg, nil
}

// requirements are CreateVolume's accessibility requirements: the selected node's segment
// when the class waits for a consumer; otherwise the segments of every node the driver is
// registered on.
func (p *csiProvisioner) requirements(ctx context.Context, selectedNode string) (*csi.TopologyRequirement, error) {
	if selectedNode != "" {
		seg, err := p.segment(ctx, selectedNode)
		if err != nil {
			return nil, err
		}
		t := []*csi.Topology{{Segments: seg}}
		return &csi.TopologyRequirement{Requisite: t, Preferred: t}, nil
	}
	csiNodes, err := p.client.StorageV1().CSINodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing CSINodes: %w", err)
	}
	var segs []*csi.Topology
	for _, cn := range csiNodes.Items {
		if !slices.ContainsFunc(cn.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == p.driver }) {
			continue
		}
		seg, err := p.segment(ctx, cn.Name)
		if err != nil {
			klog.FromContext(ctx).Info("Node left out of the accessibility requirements", "node", cn.Name, "err", err)
			continue
		}
		if !slices.ContainsFunc(segs, func(t *csi.Topology) bool { return maps.Equal(t.Segments, seg) }) {
			segs = append(segs, &csi.Topology{Segments: seg})
		}
	}
	if len(segs) == 0 {
		return nil, fmt.Errorf("no node has driver %s with its topology", p.driver)
	}
	return &csi.TopologyRequirement{Requisite: segs, Preferred: segs}, nil
}

// nodeAffinity is where a volume with these accessible segments can be used: one selector
// term for each segment, matching all its keys.
func nodeAffinity(topology []*csi.Topology) *v1.VolumeNodeAffinity {
	if len(topology) == 0 {
		return nil
	}
	sel := &v1.NodeSelector{}
	for _, t := range topology {
		var term v1.NodeSelectorTerm
		for _, k := range slices.Sorted(maps.Keys(t.GetSegments())) {
			term.MatchExpressions = append(term.MatchExpressions, v1.NodeSelectorRequirement{
				Key:      k,
				Operator: v1.NodeSelectorOpIn,
				Values:   []string{t.GetSegments()[k]},
			})
		}
		sel.NodeSelectorTerms = append(sel.NodeSelectorTerms, term)
	}
	return &v1.VolumeNodeAffinity{Required: sel}
}

// stateAfter says what a failed CreateVolume leaves, as external-provisioner reads it: a call
// that timed out or could not reach the driver (or was aborted, or ran out of resources) may
// still be making the volume, so the lib must call again; any other code is final. Out of
// resources on a selected node asks the scheduler for another node instead.
func stateAfter(err error, selectedNode string) controller.ProvisioningState {
	st, ok := status.FromError(err)
	if !ok {
		return controller.ProvisioningFinished
	}
	switch st.Code() {
	case codes.ResourceExhausted:
		if selectedNode != "" {
			return controller.ProvisioningReschedule
		}
		return controller.ProvisioningInBackground
	case codes.Canceled, codes.DeadlineExceeded, codes.Unavailable, codes.Aborted:
		return controller.ProvisioningInBackground
	}
	return controller.ProvisioningFinished
}

func (p *csiProvisioner) Provision(ctx context.Context, opts controller.ProvisionOptions) (*v1.PersistentVolume, controller.ProvisioningState, error) {
	claim, class := opts.PVC, opts.StorageClass
	// Errors before CreateVolume leave the state as it was: nothing reached the driver.
	params, fsType, err := splitParameters(class)
	if err != nil {
		return nil, controller.ProvisioningNoChange, err
	}
	if p.extraMetadata {
		params[paramPVCName] = claim.Name
		params[paramPVCNamespace] = claim.Namespace
		params[paramPVName] = opts.PVName
	}
	caps, err := capabilities(claim, fsType, class.MountOptions)
	if err != nil {
		return nil, controller.ProvisioningNoChange, err
	}
	requested := claim.Spec.Resources.Requests[v1.ResourceStorage]
	rng := &csi.CapacityRange{RequiredBytes: requested.Value()}
	if limit, ok := claim.Spec.Resources.Limits[v1.ResourceStorage]; ok {
		rng.LimitBytes = limit.Value()
	}
	req := &csi.CreateVolumeRequest{
		Name:               opts.PVName,
		CapacityRange:      rng,
		VolumeCapabilities: caps,
		Parameters:         params,
	}
	if p.topology {
		if req.AccessibilityRequirements, err = p.requirements(ctx, opts.SelectedNodeName); err != nil {
			return nil, controller.ProvisioningNoChange, err
		}
	}

	callCtx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	resp, err := p.controller.CreateVolume(callCtx, req)
	if err != nil {
		return nil, stateAfter(err, opts.SelectedNodeName), fmt.Errorf("rpc CreateVolume for claim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	vol := resp.GetVolume()
	if vol.GetVolumeId() == "" {
		return nil, controller.ProvisioningFinished, fmt.Errorf("driver %s: CreateVolume %s answered no volume_id", p.driver, opts.PVName)
	}
	size := vol.GetCapacityBytes()
	if size == 0 {
		// Zero is "unknown" in CSI: the claim's request stands.
		size = requested.Value()
	}
	if size < requested.Value() {
		// The volume is too small for the claim: it goes back, and the claim waits for a retry.
		if _, derr := p.controller.DeleteVolume(callCtx, &csi.DeleteVolumeRequest{VolumeId: vol.GetVolumeId()}); derr != nil {
			return nil, controller.ProvisioningInBackground, fmt.Errorf("driver %s made volume %s of %d bytes for a claim of %d, and deleting it failed: %w", p.driver, vol.GetVolumeId(), size, requested.Value(), derr)
		}
		return nil, controller.ProvisioningFinished, fmt.Errorf("driver %s made volume %s of %d bytes for a claim of %d: deleted", p.driver, vol.GetVolumeId(), size, requested.Value())
	}

	attrs := map[string]string{}
	maps.Copy(attrs, vol.GetVolumeContext())
	attrs[attrIdentity] = p.identity
	reclaim := v1.PersistentVolumeReclaimDelete
	if class.ReclaimPolicy != nil {
		reclaim = *class.ReclaimPolicy
	}
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: opts.PVName},
		Spec: v1.PersistentVolumeSpec{
			AccessModes:                   claim.Spec.AccessModes,
			Capacity:                      v1.ResourceList{v1.ResourceStorage: *resource.NewQuantity(size, resource.BinarySI)},
			PersistentVolumeReclaimPolicy: reclaim,
			MountOptions:                  class.MountOptions,
			StorageClassName:              class.Name,
			VolumeMode:                    claim.Spec.VolumeMode,
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
				Driver:           p.driver,
				VolumeHandle:     vol.GetVolumeId(),
				FSType:           fsType,
				VolumeAttributes: attrs,
			}},
		},
	}
	if p.topology {
		pv.Spec.NodeAffinity = nodeAffinity(vol.GetAccessibleTopology())
	}
	klog.FromContext(ctx).Info("Provisioned", "PVC", klog.KObj(claim), "PV", pv.Name, "volumeHandle", vol.GetVolumeId(), "bytes", size)
	return pv, controller.ProvisioningFinished, nil
}

// attachedTo is the node a VolumeAttachment still attaches pv to, "" if none does.
func (p *csiProvisioner) attachedTo(ctx context.Context, pv string) (string, error) {
	list, err := p.client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("listing VolumeAttachments: %w", err)
	}
	for _, va := range list.Items {
		if name := va.Spec.Source.PersistentVolumeName; name != nil && *name == pv {
			return va.Spec.NodeName, nil
		}
	}
	return "", nil
}

func (p *csiProvisioner) Delete(ctx context.Context, pv *v1.PersistentVolume) error {
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != p.driver {
		return &controller.IgnoredError{Reason: fmt.Sprintf("PV %s is not a volume of driver %s", pv.Name, p.driver)}
	}
	// As external-provisioner: a volume still attached is not deleted under its node.
	node, err := p.attachedTo(ctx, pv.Name)
	if err != nil {
		return err
	}
	if node != "" {
		return &controller.VolumeInUseError{Reason: fmt.Sprintf("persistentvolume %s is still attached to node %s", pv.Name, node)}
	}
	callCtx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	_, err = p.controller.DeleteVolume(callCtx, &csi.DeleteVolumeRequest{VolumeId: pv.Spec.CSI.VolumeHandle})
	switch status.Code(err) {
	case codes.OK, codes.NotFound:
		// NotFound: already gone, which is what was asked.
		klog.FromContext(ctx).Info("Deleted", "PV", pv.Name, "volumeHandle", pv.Spec.CSI.VolumeHandle)
		return nil
	case codes.FailedPrecondition:
		// The driver's word for a volume still staged or published on a node.
		return &controller.VolumeInUseError{Reason: fmt.Sprintf("rpc DeleteVolume %s: %v", pv.Spec.CSI.VolumeHandle, err)}
	}
	return fmt.Errorf("rpc DeleteVolume %s: %w", pv.Spec.CSI.VolumeHandle, err)
}

// errNoCreateDelete is a driver without CREATE_DELETE_VOLUME: nothing to provision with.
var errNoCreateDelete = errors.New("the driver's controller service has no CREATE_DELETE_VOLUME capability")
