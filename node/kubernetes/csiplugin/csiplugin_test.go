package csiplugin

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/kubernetes/localvolume"
	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/pkg/fsquota"
)

const mib = 1 << 20

// client serves a Plugin on volumes in the temporary directory over a
// unix socket, as the kubelet reaches it, and returns a client of its
// Identity and Node services. Publishing needs a node: project quotas
// and a root that may mount. Elsewhere it skips, unless the test runs
// inside a node (fixture.SkipOutsideNode).
func client(t *testing.T) (*localvolume.Manager, csi.IdentityClient, csi.NodeClient) {
	t.Helper()
	m, err := localvolume.New(localvolume.Config{Root: filepath.Join(t.TempDir(), "volumes")})
	switch {
	case errors.Is(err, fsquota.ErrUnsupported):
		fixture.SkipOutsideNode(t, err.Error())
	case err == nil && os.Geteuid() != 0:
		fixture.SkipOutsideNode(t, "not root, and publishing mounts needs root")
	case err != nil:
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "csi.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	p := &Plugin{NodeID: "cairn-test", Version: "test", Volumes: m}
	csi.RegisterIdentityServer(srv, p)
	csi.RegisterNodeServer(srv, p)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return m, csi.NewIdentityClient(conn), csi.NewNodeClient(conn)
}

func mountCap(mode csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
	}
}

func blockCap() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

// mountOf says whether something is mounted at path, and with which of
// the flags a publication sets.
func mountOf(t *testing.T, path string) (flags string, ok bool) {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return "", false
	}
	mounted, err := isMountPoint(path)
	if err != nil {
		t.Fatal(err)
	}
	return flagText(st.Flags), mounted
}

// flagText names the statfs flags a publication sets.
func flagText(f int64) string {
	s := ""
	for _, x := range []struct {
		bit  int64
		name string
	}{{unix.ST_RDONLY, "ro"}, {unix.ST_NOSUID, "nosuid"}, {unix.ST_NODEV, "nodev"}, {unix.ST_NOEXEC, "noexec"}} {
		if f&x.bit != 0 {
			s += x.name + " "
		}
	}
	return s
}

// TestPublishFilesystem publishes a filesystem volume to two targets,
// one read-only, as two pods would have it: the pods see the same files,
// with nosuid, nodev and noexec, and the quota's size; stats and
// expansion answer from the quota; unpublishing leaves nothing mounted.
func TestPublishFilesystem(t *testing.T) {
	m, id, node := client(t)
	ctx := fixture.Context(t)
	if info, err := id.GetPluginInfo(ctx, &csi.GetPluginInfoRequest{}); err != nil || info.GetName() != DriverName {
		t.Errorf("GetPluginInfo = %v, %v; want %s", info, err, DriverName)
	}
	if _, err := m.Create("pvc-fs", 8*mib, localvolume.Filesystem); err != nil {
		t.Fatal(err)
	}
	pods := t.TempDir()
	rw, ro := filepath.Join(pods, "rw", "mount"), filepath.Join(pods, "ro", "mount")
	t.Cleanup(func() { unmountAll(rw); unmountAll(ro) })
	for i := range 2 { // the second time as a retry
		if _, err := node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "pvc-fs", TargetPath: rw, VolumeCapability: mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)}); err != nil {
			t.Fatalf("NodePublishVolume %d: %v", i+1, err)
		}
	}
	if _, err := node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "pvc-fs", TargetPath: ro, Readonly: true, VolumeCapability: mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER)}); err != nil {
		t.Fatalf("NodePublishVolume read-only: %v", err)
	}
	if flags, ok := mountOf(t, rw); !ok || flags != "nosuid nodev noexec " {
		t.Errorf("the read-write target: mounted %v with %q, want nosuid nodev noexec", ok, flags)
	}
	if flags, ok := mountOf(t, ro); !ok || flags != "ro nosuid nodev noexec " {
		t.Errorf("the read-only target: mounted %v with %q, want ro nosuid nodev noexec", ok, flags)
	}
	if err := os.WriteFile(filepath.Join(rw, "marker"), []byte("written"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(ro, "marker")); err != nil || string(b) != "written" {
		t.Errorf("the marker through the read-only target: %q, %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(ro, "other"), nil, 0o644); !errors.Is(err, unix.EROFS) {
		t.Errorf("writing through the read-only target: %v, want EROFS", err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(rw, &st); err != nil || st.Blocks*uint64(st.Bsize) != 8*mib {
		t.Errorf("statfs of the target: %d bytes, %v; want %d", st.Blocks*uint64(st.Bsize), err, 8*mib)
	}

	stats, err := node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "pvc-fs", VolumePath: rw})
	if err != nil || len(stats.GetUsage()) != 2 || stats.GetUsage()[0].GetTotal() != 8*mib || stats.GetUsage()[0].GetUsed() <= 0 {
		t.Errorf("NodeGetVolumeStats = %v, %v; want 8 MiB in all, some used", stats, err)
	}
	exp, err := node.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: "pvc-fs", VolumePath: rw, CapacityRange: &csi.CapacityRange{RequiredBytes: 16 * mib}})
	if err != nil || exp.GetCapacityBytes() != 16*mib {
		t.Errorf("NodeExpandVolume = %v, %v; want 16 MiB", exp, err)
	}
	if err := unix.Statfs(rw, &st); err != nil || st.Blocks*uint64(st.Bsize) != 16*mib {
		t.Errorf("statfs of the target after the expansion: %d bytes, %v; want %d", st.Blocks*uint64(st.Bsize), err, 16*mib)
	}

	for _, target := range []string{rw, ro, rw} { // rw twice: a retry
		if _, err := node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "pvc-fs", TargetPath: target}); err != nil {
			t.Errorf("NodeUnpublishVolume %s: %v", target, err)
		}
		if _, ok := mountOf(t, target); ok {
			t.Errorf("%s is still mounted after NodeUnpublishVolume", target)
		}
	}
	if _, err := os.Stat(rw); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the target after NodeUnpublishVolume: %v, want removed", err)
	}
}

// TestPublishBlock publishes a block volume: the target is a block device
// of the volume's size that takes writes, expansion grows it while
// published, and unpublishing detaches the loop device.
func TestPublishBlock(t *testing.T) {
	m, _, node := client(t)
	ctx := fixture.Context(t)
	v, err := m.Create("pvc-block", 4*mib, localvolume.Block)
	if err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(t.TempDir(), "dev", "pvc-block")
	t.Cleanup(func() { unmountAll(target) })
	if _, err := node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "pvc-block", TargetPath: target, VolumeCapability: blockCap()}); err != nil {
		t.Fatalf("NodePublishVolume: %v", err)
	}
	size := func() int64 {
		t.Helper()
		f, err := os.OpenFile(target, os.O_RDWR, 0)
		if err != nil {
			t.Fatalf("opening the published device: %v", err)
		}
		defer f.Close()
		n, err := unix.IoctlGetInt(int(f.Fd()), unix.BLKGETSIZE64)
		if err != nil {
			t.Fatalf("BLKGETSIZE64: %v", err)
		}
		return int64(n)
	}
	if got := size(); got != 4*mib {
		t.Errorf("the published device has %d bytes, want %d", got, 4*mib)
	}
	f, err := os.OpenFile(target, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("block marker"), 4*mib-512); err != nil {
		t.Errorf("writing the device's last sector: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Error(err)
	}
	if _, err := node.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: "pvc-block", CapacityRange: &csi.CapacityRange{RequiredBytes: 6 * mib}}); err != nil {
		t.Errorf("NodeExpandVolume: %v", err)
	}
	if got := size(); got != 6*mib {
		t.Errorf("the published device has %d bytes after the expansion, want %d", got, 6*mib)
	}
	if _, err := node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "pvc-block", TargetPath: filepath.Join(t.TempDir(), "m"), VolumeCapability: mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("publishing a block volume as a mount = %v, want InvalidArgument", err)
	}
	if _, err := node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "pvc-block", TargetPath: target}); err != nil {
		t.Fatalf("NodeUnpublishVolume: %v", err)
	}
	if dev, err := loopOf(v.Path); err != nil || dev != "" {
		t.Errorf("after NodeUnpublishVolume the volume's loop device is %q (%v), want none", dev, err)
	}
}

// TestDetachLoops checks that what a stopped worker leaves of a published
// block volume, its loop device, goes, and that loop devices of other
// directories stay.
func TestDetachLoops(t *testing.T) {
	m, _, node := client(t)
	ctx := fixture.Context(t)
	v, err := m.Create("pvc-left", mib, localvolume.Block)
	if err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(t.TempDir(), "dev", "pvc-left")
	if _, err := node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "pvc-left", TargetPath: target, VolumeCapability: blockCap()}); err != nil {
		t.Fatalf("NodePublishVolume: %v", err)
	}
	// The worker stops: its mounts go, the loop device stays.
	if err := unmountAll(target); err != nil {
		t.Fatal(err)
	}
	dev, err := loopOf(v.Path)
	if err != nil || dev == "" {
		t.Fatalf("the published volume has loop device %q (%v), want one", dev, err)
	}
	root := filepath.Dir(filepath.Dir(v.Path))
	if got, err := DetachLoops(filepath.Join(root, "elsewhere")); err != nil || len(got) != 0 {
		t.Errorf("DetachLoops of another directory = %q, %v; want nothing detached", got, err)
	}
	got, err := DetachLoops(root)
	if err != nil || !slices.Equal(got, []string{dev}) {
		t.Errorf("DetachLoops = %q, %v; want %s", got, err, dev)
	}
	if dev, err := loopOf(v.Path); err != nil || dev != "" {
		t.Errorf("after DetachLoops the volume's loop device is %q (%v), want none", dev, err)
	}
}

// TestRefusals checks the requests the plugin must refuse, each with the
// code the kubelet acts on, and that it touches nothing for them.
func TestRefusals(t *testing.T) {
	m, _, node := client(t)
	ctx := fixture.Context(t)
	if _, err := m.Create("pvc-fs", mib, localvolume.Filesystem); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(t.TempDir(), "mount")
	for _, c := range []struct {
		name string
		req  *csi.NodePublishVolumeRequest
		want codes.Code
	}{
		{"no such volume", &csi.NodePublishVolumeRequest{VolumeId: "pvc-none", TargetPath: target, VolumeCapability: mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)}, codes.NotFound},
		{"a path as the volume ID", &csi.NodePublishVolumeRequest{VolumeId: "../pvc-fs", TargetPath: target, VolumeCapability: mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)}, codes.InvalidArgument},
		{"a relative target", &csi.NodePublishVolumeRequest{VolumeId: "pvc-fs", TargetPath: "mount", VolumeCapability: mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)}, codes.InvalidArgument},
		{"ReadWriteMany", &csi.NodePublishVolumeRequest{VolumeId: "pvc-fs", TargetPath: target, VolumeCapability: mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)}, codes.InvalidArgument},
		{"no capability", &csi.NodePublishVolumeRequest{VolumeId: "pvc-fs", TargetPath: target}, codes.InvalidArgument},
	} {
		if _, err := node.NodePublishVolume(ctx, c.req); status.Code(err) != c.want {
			t.Errorf("%s: NodePublishVolume = %v, want %s", c.name, err, c.want)
		}
	}
	if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refusals left the target: %v", err)
	}
	if _, err := node.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: "pvc-fs", CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 50}}); status.Code(err) != codes.OutOfRange {
		t.Errorf("NodeExpandVolume past the node's space = %v, want OutOfRange", err)
	}
	if _, err := node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "pvc-gone", TargetPath: target}); err != nil {
		t.Errorf("NodeUnpublishVolume of a volume that is gone: %v, want success", err)
	}
}
