package main

import (
	"context"
	"errors"
	"os"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const injectedFailure = "injected NodePublishVolume failure"

type node struct {
	csi.UnimplementedNodeServer
	cfg  *config
	vols *volumes
}

func checkCapability(c *csi.VolumeCapability) error {
	if c == nil {
		return status.Error(codes.InvalidArgument, "volume_capability is required")
	}
	return nil
}

func (s *node) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: s.cfg.nodeID, AccessibleTopology: s.cfg.topology()}, nil
}

func (s *node) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	caps := []csi.NodeServiceCapability_RPC_Type{
		csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		// As hostpath drivers do: the kubelet asks for the volumes' usage.
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
	}
	out := &csi.NodeGetCapabilitiesResponse{}
	for _, c := range caps {
		out.Capabilities = append(out.Capabilities, &csi.NodeServiceCapability{
			Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: c}},
		})
	}
	return out, nil
}

func (s *node) NodeStageVolume(_ context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	staging := req.GetStagingTargetPath()
	if staging == "" {
		return nil, status.Error(codes.InvalidArgument, "staging_target_path is required")
	}
	if err := checkCapability(req.GetVolumeCapability()); err != nil {
		return nil, err
	}
	s.vols.mu.Lock()
	defer s.vols.mu.Unlock()
	if isBlock(req.GetVolumeCapability()) {
		// Staged: its image attached as a loop device; the staging folder stays empty.
		image, err := s.vols.blockImage(req.GetVolumeId(), s.cfg.blockSize)
		if err != nil {
			return nil, err
		}
		if _, err := attachLoop(image); err != nil {
			return nil, err
		}
		s.vols.mounted(req.GetVolumeId(), staging)
		return &csi.NodeStageVolumeResponse{}, nil
	}
	src, err := s.vols.ensureDir(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(staging, 0o750); err != nil {
		return nil, status.Errorf(codes.Internal, "creating %s: %v", staging, err)
	}
	mounted, err := isMountPoint(staging)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if !mounted {
		if err := bindMount(src, staging, false); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	s.vols.mounted(req.GetVolumeId(), staging)
	return &csi.NodeStageVolumeResponse{}, nil
}

func (s *node) NodeUnstageVolume(_ context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	staging := req.GetStagingTargetPath()
	if req.GetVolumeId() == "" || staging == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and staging_target_path are required")
	}
	s.vols.mu.Lock()
	defer s.vols.mu.Unlock()
	if err := unmountAll(staging); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	// A block volume's loop device goes with its staging.
	image, err := s.vols.existingBlockImage(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if image != "" {
		if err := detachLoop(image); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	s.vols.unmounted(req.GetVolumeId(), staging)
	if err := removeDir(staging); err != nil {
		return nil, status.Errorf(codes.Internal, "removing %s: %v", staging, err)
	}
	return &csi.NodeUnstageVolumeResponse{}, nil
}

func (s *node) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	if s.cfg.failPublish != "" {
		if _, err := os.Stat(s.cfg.failPublish); err == nil {
			return nil, status.Error(codes.Internal, injectedFailure)
		}
	}
	target := req.GetTargetPath()
	if target == "" {
		return nil, status.Error(codes.InvalidArgument, "target_path is required")
	}
	if err := checkCapability(req.GetVolumeCapability()); err != nil {
		return nil, err
	}
	if _, err := s.vols.dir(req.GetVolumeId()); err != nil {
		return nil, err
	}
	s.vols.mu.Lock()
	defer s.vols.mu.Unlock()

	if isBlock(req.GetVolumeCapability()) {
		// Staged or not (attachLoop sets the loop device up when not), the loop device is
		// bound onto the target file.
		image, err := s.vols.blockImage(req.GetVolumeId(), s.cfg.blockSize)
		if err != nil {
			return nil, err
		}
		device, err := attachLoop(image)
		if err != nil {
			return nil, err
		}
		if err := publishBlock(device, target, req.GetReadonly()); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		s.vols.mounted(req.GetVolumeId(), target)
		return &csi.NodePublishVolumeResponse{}, nil
	}

	src := req.GetStagingTargetPath()
	if src != "" {
		staged, err := isMountPoint(src)
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		if !staged {
			return nil, status.Errorf(codes.FailedPrecondition, "volume %s is not staged at %s", req.GetVolumeId(), src)
		}
	} else {
		// No staging: an inline ephemeral volume (the node agent does not stage those).
		dir, err := s.vols.ensureDir(req.GetVolumeId())
		if err != nil {
			return nil, err
		}
		src = dir
	}

	mounted, err := isMountPoint(target)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if mounted {
		s.vols.mounted(req.GetVolumeId(), target)
		return &csi.NodePublishVolumeResponse{}, nil
	}
	created := false
	if _, err := os.Stat(target); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(target, 0o750); err != nil {
			return nil, status.Errorf(codes.Internal, "creating %s: %v", target, err)
		}
		created = true
	} else if err != nil {
		return nil, status.Errorf(codes.Internal, "stat %s: %v", target, err)
	}
	if err := bindMount(src, target, req.GetReadonly()); err != nil {
		if created {
			_ = removeDir(target)
		}
		return nil, status.Error(codes.Internal, err.Error())
	}
	s.vols.mounted(req.GetVolumeId(), target)
	return &csi.NodePublishVolumeResponse{}, nil
}

func (s *node) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	target := req.GetTargetPath()
	if req.GetVolumeId() == "" || target == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and target_path are required")
	}
	s.vols.mu.Lock()
	defer s.vols.mu.Unlock()
	if err := unmountAll(target); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	s.vols.unmounted(req.GetVolumeId(), target)
	if err := removeDir(target); err != nil {
		return nil, status.Errorf(codes.Internal, "removing %s: %v", target, err)
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

func (s *node) NodeGetVolumeStats(_ context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	path := req.GetVolumePath()
	if req.GetVolumeId() == "" || path == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and volume_path are required")
	}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil, status.Errorf(codes.NotFound, "%s does not exist", path)
	}
	// A block volume's path is its device: only its size is known (as host-path reports it).
	if size, ok, err := deviceSize(path); err != nil {
		return nil, status.Errorf(codes.Internal, "size of %s: %v", path, err)
	} else if ok {
		return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
			{Unit: csi.VolumeUsage_BYTES, Total: size},
		}}, nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return nil, status.Errorf(codes.Internal, "statfs %s: %v", path, err)
	}
	bsize := int64(st.Bsize)
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
		{
			Unit:      csi.VolumeUsage_BYTES,
			Total:     int64(st.Blocks) * bsize,
			Available: int64(st.Bavail) * bsize,
			Used:      int64(st.Blocks-st.Bfree) * bsize,
		},
		{
			Unit:      csi.VolumeUsage_INODES,
			Total:     int64(st.Files),
			Available: int64(st.Ffree),
			Used:      int64(st.Files - st.Ffree),
		},
	}}, nil
}
