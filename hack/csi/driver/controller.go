package main

import (
	"context"
	"log"
	"maps"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// topologyKey is the one topology key of the driver, as csi-driver-host-path's
// topology.hostpath.csi/node: a volume lives on one node's disk, so it is accessible from
// that node only.
const topologyKey = "topology.csi.kubelet-rs.io/node"

// A volume CreateVolume makes when the claim names no size.
const defaultCapacityBytes int64 = 1 << 30

// topology is this node's segment, in NodeGetInfo and in every volume CreateVolume makes.
func (c *config) topology() *csi.Topology {
	return &csi.Topology{Segments: map[string]string{topologyKey: c.nodeID}}
}

// The controller service: CreateVolume and DeleteVolume for a provisioner, and, with
// --attach-required, ControllerPublishVolume and ControllerUnpublishVolume for the
// external-attacher.
type controller struct {
	csi.UnimplementedControllerServer
	cfg  *config
	vols *volumes
}

func (s *controller) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	caps := []csi.ControllerServiceCapability_RPC_Type{csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME}
	if s.cfg.attachRequired {
		caps = append(caps, csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME)
	}
	resp := &csi.ControllerGetCapabilitiesResponse{}
	for _, c := range caps {
		resp.Capabilities = append(resp.Capabilities, &csi.ControllerServiceCapability{
			Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: c}},
		})
	}
	return resp, nil
}

// capacity is the size CreateVolume gives a volume: the required bytes, else the default
// within the limit.
func capacity(r *csi.CapacityRange) (int64, error) {
	required, limit := r.GetRequiredBytes(), r.GetLimitBytes()
	if required < 0 || limit < 0 {
		return 0, status.Errorf(codes.InvalidArgument, "negative capacity_range %v", r)
	}
	if limit > 0 && required > limit {
		return 0, status.Errorf(codes.OutOfRange, "required_bytes %d is over limit_bytes %d", required, limit)
	}
	if required > 0 {
		return required, nil
	}
	if limit > 0 && limit < defaultCapacityBytes {
		return limit, nil
	}
	return defaultCapacityBytes, nil
}

// reachable reports whether this node satisfies the accessibility requirements: its
// segment is among the requisite ones (or, with none requisite, the preferred ones). No
// requirements is any node.
func (c *config) reachable(req *csi.TopologyRequirement) bool {
	if req == nil || (len(req.GetRequisite()) == 0 && len(req.GetPreferred()) == 0) {
		return true
	}
	segments := req.GetRequisite()
	if len(segments) == 0 {
		segments = req.GetPreferred()
	}
	ours := c.topology().GetSegments()
	return slices.ContainsFunc(segments, func(t *csi.Topology) bool {
		return maps.Equal(t.GetSegments(), ours)
	})
}

func (s *controller) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	// The name is the volume's id, so a retried call finds the volume it made.
	id := req.GetName()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "name is required")
	}
	if err := checkVolumeID(id); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "name %q cannot be a volume id here", id)
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume_capabilities are required")
	}
	for _, c := range req.GetVolumeCapabilities() {
		if err := checkCapability(c); err != nil {
			return nil, err
		}
		// The node serves pre-made block volumes (block.go); provisioning makes folders only.
		if isBlock(c) {
			return nil, status.Error(codes.InvalidArgument, "provisioning block volumes is not supported")
		}
	}
	if req.GetVolumeContentSource() != nil {
		return nil, status.Error(codes.InvalidArgument, "volume_content_source (snapshots, clones) is not supported")
	}
	size, err := capacity(req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	// ResourceExhausted, as CSI says for a volume that cannot be made where required: with a
	// selected node, the provisioner asks the scheduler for another node.
	if !s.cfg.reachable(req.GetAccessibilityRequirements()) {
		return nil, status.Errorf(codes.ResourceExhausted, "this driver makes volumes on node %s only, not within %v", s.cfg.nodeID, req.GetAccessibilityRequirements())
	}

	s.vols.mu.Lock()
	defer s.vols.mu.Unlock()
	old, err := s.vols.record(id)
	if err != nil {
		return nil, err
	}
	if old != nil && old.CapacityBytes != size {
		return nil, status.Errorf(codes.AlreadyExists, "volume %s exists with %d bytes, not %d", id, old.CapacityBytes, size)
	}
	if _, err := s.vols.ensureDir(id); err != nil {
		return nil, err
	}
	if old == nil {
		if err := s.vols.writeRecord(id, &volumeRecord{Name: id, CapacityBytes: size, Parameters: req.GetParameters()}); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		log.Printf("created volume %s (%d bytes)", id, size)
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:      id,
		CapacityBytes: size,
		// The class's parameters come back in NodeStage and NodePublish, as hostpath's do.
		VolumeContext:      req.GetParameters(),
		AccessibleTopology: []*csi.Topology{s.cfg.topology()},
	}}, nil
}

func (s *controller) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := checkVolumeID(id); err != nil {
		return nil, err
	}
	s.vols.mu.Lock()
	defer s.vols.mu.Unlock()
	// Deleting the data of a mounted volume would empty a pod's volume under it.
	if paths := s.vols.mountedAt(id); len(paths) > 0 {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is still mounted at %v", id, paths)
	}
	if err := s.vols.remove(id); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	log.Printf("deleted volume %s", id)
	return &csi.DeleteVolumeResponse{}, nil
}

func (s *controller) ControllerPublishVolume(_ context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	if !s.cfg.attachRequired {
		return nil, status.Error(codes.Unimplemented, "attach is not required by this driver")
	}
	if req.GetVolumeId() == "" || req.GetNodeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and node_id are required")
	}
	if req.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "volume_capability is required")
	}
	return &csi.ControllerPublishVolumeResponse{
		PublishContext: map[string]string{"krs-published": req.GetNodeId()},
	}, nil
}

func (s *controller) ControllerUnpublishVolume(_ context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	if !s.cfg.attachRequired {
		return nil, status.Error(codes.Unimplemented, "attach is not required by this driver")
	}
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}
