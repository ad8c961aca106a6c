// Package csiplugin is the node half of Cairn's CSI driver local.cairn.dev:
// the Identity and Node services that the kubelet calls to hand a pod the
// local volumes of node/kubernetes/localvolume.
//
//   - NodePublishVolume bind-mounts a filesystem volume's data directory
//     onto the pod's target path (nosuid, nodev, noexec; read-only when
//     asked), or, for a block volume, attaches a loop device to its file
//     and bind-mounts the device node onto the target (nosuid, noexec).
//   - NodeUnpublishVolume undoes that, detaching the loop device.
//   - NodeGetVolumeStats answers from the volume's project quota.
//   - NodeExpandVolume grows the volume (and its loop device) in place,
//     while the pod runs.
//
// Volumes are published straight to each pod (no staging): they are
// directories and files of the node's own data partition, reached by one
// node only (the single-node access modes). The volume ID is the volume's
// name, which is its PersistentVolume's.
package csiplugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"cairn.dev/cairn/node/kubernetes/localvolume"
	"cairn.dev/cairn/pkg/mountinfo"
)

// DriverName is the CSI driver's name, in the CSIDriver object, the
// StorageClass and every PersistentVolume it provisions.
const DriverName = "local.cairn.dev"

// The mount flags of published volumes: a block volume's target is a
// device node, which nodev would make useless.
const (
	fsFlags    = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	blockFlags = unix.MS_NOSUID | unix.MS_NOEXEC
)

// Plugin serves the CSI Identity and Node services for the volumes of
// Volumes. Register it on a gRPC server with csi.RegisterIdentityServer and
// csi.RegisterNodeServer.
type Plugin struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedNodeServer

	// NodeID is the node's ID, which is its Kubernetes Node's name.
	NodeID string
	// Version is the node's version, reported as the driver's.
	Version string
	// Volumes are the node's local volumes.
	Volumes *localvolume.Manager
}

func (p *Plugin) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: DriverName, VendorVersion: p.Version}, nil
}

func (p *Plugin) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	// No controller service: the node's provisioner creates volumes.
	return &csi.GetPluginCapabilitiesResponse{}, nil
}

func (p *Plugin) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}

func (p *Plugin) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: p.NodeID}, nil
}

func (p *Plugin) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	var caps []*csi.NodeServiceCapability
	for _, t := range []csi.NodeServiceCapability_RPC_Type{
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
		csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
	} {
		caps = append(caps, &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: t}}})
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

func (p *Plugin) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	target, err := checkTarget(req.GetTargetPath())
	if err != nil {
		return nil, err
	}
	vc := req.GetVolumeCapability()
	if vc == nil {
		return nil, status.Error(codes.InvalidArgument, "volume_capability is missing")
	}
	if err := checkAccessMode(vc.GetAccessMode().GetMode()); err != nil {
		return nil, err
	}
	v, err := p.volume(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	switch {
	case vc.GetMount() != nil && v.Mode != localvolume.Filesystem,
		vc.GetBlock() != nil && v.Mode != localvolume.Block:
		return nil, status.Errorf(codes.InvalidArgument, "volume %s is a %s volume, and the request asks for the other kind", v.Name, v.Mode)
	case vc.GetMount() == nil && vc.GetBlock() == nil:
		return nil, status.Error(codes.InvalidArgument, "volume_capability asks for neither a mount nor a block device")
	}
	if fs := vc.GetMount().GetFsType(); fs != "" && fs != "xfs" {
		return nil, status.Errorf(codes.InvalidArgument, "volume %s is a directory of the node's XFS; it cannot be %s", v.Name, fs)
	}
	if mounted, err := isMountPoint(target); err != nil {
		return nil, status.Errorf(codes.Internal, "%v", err)
	} else if mounted {
		return &csi.NodePublishVolumeResponse{}, nil // a retry of a publication that succeeded
	}
	source, flags := v.Path, uintptr(fsFlags)
	if v.Mode == localvolume.Block {
		flags = blockFlags
		if source, err = attachLoop(v.Path); err != nil {
			return nil, status.Errorf(codes.Internal, "volume %s: %v", v.Name, err)
		}
		if err := makeFile(target); err != nil {
			return nil, status.Errorf(codes.Internal, "volume %s: %v", v.Name, err)
		}
	} else if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, status.Errorf(codes.Internal, "volume %s: when creating the target %s: %v", v.Name, target, err)
	}
	if err := bindMount(source, target, flags, req.GetReadonly()); err != nil {
		return nil, status.Errorf(codes.Internal, "volume %s: %v", v.Name, err)
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

func (p *Plugin) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	target, err := checkTarget(req.GetTargetPath())
	if err != nil {
		return nil, err
	}
	// A volume deleted since (or never here) leaves only the target.
	v, verr := p.volume(req.GetVolumeId())
	if verr != nil && status.Code(verr) != codes.NotFound {
		return nil, verr
	}
	if err := unmountAll(target); err != nil {
		return nil, status.Errorf(codes.Internal, "volume %s: %v", req.GetVolumeId(), err)
	}
	if verr == nil && v.Mode == localvolume.Block {
		if err := p.detachUnused(v); err != nil {
			return nil, status.Errorf(codes.Internal, "volume %s: %v", v.Name, err)
		}
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Errorf(codes.Internal, "volume %s: when removing the target %s: %v", req.GetVolumeId(), target, err)
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// detachUnused detaches the loop device of block volume v unless it is
// still mounted somewhere (published to another pod).
func (p *Plugin) detachUnused(v localvolume.Volume) error {
	dev, err := loopOf(v.Path)
	if err != nil || dev == "" {
		return err
	}
	mounts, err := mountinfo.Read()
	if err != nil {
		return fmt.Errorf("when reading the mounts: %w", err)
	}
	for _, m := range mounts {
		if m.FSType == "devtmpfs" && m.Root == "/"+filepath.Base(dev) {
			return nil
		}
	}
	return detachLoop(dev)
}

func (p *Plugin) NodeGetVolumeStats(ctx context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	if req.GetVolumePath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_path is missing")
	}
	v, err := p.volume(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if v.Mode == localvolume.Block {
		return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{{Unit: csi.VolumeUsage_BYTES, Total: int64(v.Bytes)}}}, nil
	}
	u, l, err := p.Volumes.Usage(v.Name)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "%v", err)
	}
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
		{Unit: csi.VolumeUsage_BYTES, Total: int64(l.Bytes), Used: int64(u.Bytes), Available: int64(l.Bytes - min(u.Bytes, l.Bytes))},
		{Unit: csi.VolumeUsage_INODES, Total: int64(l.Inodes), Used: int64(u.Inodes), Available: int64(l.Inodes - min(u.Inodes, l.Inodes))},
	}}, nil
}

func (p *Plugin) NodeExpandVolume(ctx context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	want := req.GetCapacityRange().GetRequiredBytes()
	if want <= 0 {
		return nil, status.Error(codes.InvalidArgument, "capacity_range.required_bytes is missing")
	}
	if limit := req.GetCapacityRange().GetLimitBytes(); limit > 0 && limit < want {
		return nil, status.Errorf(codes.InvalidArgument, "capacity_range asks for at least %d and at most %d bytes", want, limit)
	}
	v, err := p.volume(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	v, err = p.Volumes.Expand(v.Name, uint64(want))
	switch {
	case errors.Is(err, localvolume.ErrNoSpace):
		return nil, status.Errorf(codes.OutOfRange, "%v", err)
	case errors.Is(err, localvolume.ErrInvalid):
		return nil, status.Errorf(codes.InvalidArgument, "%v", err)
	case err != nil:
		return nil, status.Errorf(codes.Internal, "%v", err)
	}
	if v.Mode == localvolume.Block {
		dev, err := loopOf(v.Path)
		if err == nil && dev != "" {
			err = resizeLoop(dev)
		}
		if err != nil {
			return nil, status.Errorf(codes.Internal, "volume %s: %v", v.Name, err)
		}
	}
	return &csi.NodeExpandVolumeResponse{CapacityBytes: int64(v.Bytes)}, nil
}

// volume returns the volume of id, or the gRPC error to answer with.
func (p *Plugin) volume(id string) (localvolume.Volume, error) {
	if id == "" {
		return localvolume.Volume{}, status.Error(codes.InvalidArgument, "volume_id is missing")
	}
	v, err := p.Volumes.Get(id)
	switch {
	case errors.Is(err, localvolume.ErrNotFound):
		return localvolume.Volume{}, status.Errorf(codes.NotFound, "no volume %s on node %s", id, p.NodeID)
	case errors.Is(err, localvolume.ErrInvalid):
		return localvolume.Volume{}, status.Errorf(codes.InvalidArgument, "%v", err)
	case err != nil:
		return localvolume.Volume{}, status.Errorf(codes.Internal, "%v", err)
	}
	return v, nil
}

// checkAccessMode refuses the access modes of several nodes: a local
// volume lives on one.
func checkAccessMode(m csi.VolumeCapability_AccessMode_Mode) error {
	switch m {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:
		return nil
	}
	return status.Errorf(codes.InvalidArgument, "access mode %s: a local volume is reached from its own node only", m)
}

// checkTarget returns target if it is an absolute, clean path.
func checkTarget(target string) (string, error) {
	if target == "" || !filepath.IsAbs(target) || filepath.Clean(target) != target {
		return "", status.Errorf(codes.InvalidArgument, "target_path %q is not an absolute, clean path", target)
	}
	return target, nil
}

// isMountPoint tells whether path is where something is mounted.
func isMountPoint(path string) (bool, error) {
	mounts, err := mountinfo.Read()
	if err != nil {
		return false, fmt.Errorf("when reading the mounts: %w", err)
	}
	for _, m := range mounts {
		if m.MountPoint == path {
			return true, nil
		}
	}
	return false, nil
}

// makeFile creates an empty file at path, to bind-mount a device onto.
func makeFile(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return fmt.Errorf("when creating the target's directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("when creating the target %s: %w", path, err)
	}
	return f.Close()
}

// bindMount binds source onto target with flags, read-only if readonly:
// a bind mount takes its flags only from a second, remounting call.
func bindMount(source, target string, flags uintptr, readonly bool) error {
	if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("when binding %s onto %s: %w", source, target, err)
	}
	flags |= unix.MS_BIND | unix.MS_REMOUNT
	if readonly {
		flags |= unix.MS_RDONLY
	}
	if err := unix.Mount("", target, "", flags, ""); err != nil {
		unix.Unmount(target, 0)
		return fmt.Errorf("when setting the flags of %s: %w", target, err)
	}
	return nil
}

// unmountAll unmounts whatever is mounted on target, over and over, until
// nothing is.
func unmountAll(target string) error {
	for {
		err := unix.Unmount(target, 0)
		switch {
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			return nil // not (or no longer) a mount point
		case err != nil:
			return fmt.Errorf("when unmounting %s: %w", target, err)
		}
	}
}
