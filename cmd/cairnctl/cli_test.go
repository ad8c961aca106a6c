package main

import (
	"crypto/ed25519"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/disk"
	"github.com/diskfs/go-diskfs/filesystem"
	"github.com/diskfs/go-diskfs/partition/gpt"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"cairn.dev/cairn/node/esp"
	"cairn.dev/cairn/pkg/espimage"
	"cairn.dev/cairn/proto/api"
)

func TestDefaultConfigDir(t *testing.T) {
	tmp := t.TempDir()
	for _, tc := range []struct {
		name, xdg, home, want string
	}{
		{"xdg", filepath.Join(tmp, "xdg"), filepath.Join(tmp, "home"), filepath.Join(tmp, "xdg", "cairnctl")},
		{"home", "", filepath.Join(tmp, "home"), filepath.Join(tmp, "home", ".config", "cairnctl")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("XDG_CONFIG_HOME", tc.xdg)
			t.Setenv("HOME", tc.home)
			var v configView
			if err := json.Unmarshal([]byte(mustRun(t, "", "config", "show", "-o", "json")), &v); err != nil {
				t.Fatalf("config show -o json: %v", err)
			}
			if v.Dir != tc.want {
				t.Errorf("config dir with XDG_CONFIG_HOME=%q HOME=%q = %q, want %q", tc.xdg, tc.home, v.Dir, tc.want)
			}
		})
	}
}

// readParams reads the parameters a params command wrote to a file.
func readParams(t *testing.T, data []byte) *api.NodeParameters {
	t.Helper()
	p := &api.NodeParameters{}
	if err := proto.Unmarshal(data, p); err != nil {
		t.Fatalf("parameters do not parse: %v", err)
	}
	return p
}

func TestParamsBootstrapOut(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cfg")
	out := filepath.Join(t.TempDir(), "params.pb")
	stdout := mustRun(t, dir, "params", "bootstrap", "--out", out)
	if !strings.Contains(stdout, "Created owner key") {
		t.Errorf("first params bootstrap printed %q, want it to say it created the owner key", stdout)
	}
	st, err := os.Stat(filepath.Join(dir, ownerKeyFile))
	if err != nil {
		t.Fatalf("owner key: %v", err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("owner key mode = %v, want 0600", st.Mode().Perm())
	}
	key, err := readOwnerKey(dir)
	if err != nil {
		t.Fatalf("readOwnerKey: %v", err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want := &api.NodeParameters{Cluster: &api.NodeParameters_ClusterBootstrap_{
		ClusterBootstrap: &api.NodeParameters_ClusterBootstrap{
			OwnerPublicKey: key.Public().(ed25519.PublicKey),
			InitialClusterConfiguration: &api.ClusterConfiguration{
				StorageSecurityPolicy: api.StorageSecurityPolicy_STORAGE_SECURITY_POLICY_ENCRYPTED,
				TpmMode:               api.TPMMode_TPM_MODE_REQUIRED,
			},
		},
	}}
	if diff := cmp.Diff(want, readParams(t, data), protocmp.Transform()); diff != "" {
		t.Errorf("bootstrap parameters with defaults (-want +got):\n%s", diff)
	}

	// A second run keeps the key.
	stdout = mustRun(t, dir, "params", "bootstrap", "--out", out, "--storage-security", "INSECURE", "--tpm", "disabled", "--secure-boot", "required")
	if strings.Contains(stdout, "Created owner key") {
		t.Errorf("second params bootstrap printed %q, want it to reuse the key", stdout)
	}
	again, err := readOwnerKey(dir)
	if err != nil || !again.Equal(key) {
		t.Errorf("owner key after a second params bootstrap changed (err %v)", err)
	}
	data, err = os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	cc := readParams(t, data).GetClusterBootstrap().GetInitialClusterConfiguration()
	if cc.GetStorageSecurityPolicy() != api.StorageSecurityPolicy_STORAGE_SECURITY_POLICY_INSECURE ||
		cc.GetTpmMode() != api.TPMMode_TPM_MODE_DISABLED || !cc.GetSecureBootRequired() {
		t.Errorf("configuration with --storage-security INSECURE --tpm disabled --secure-boot required = %v", cc)
	}
	if !strings.Contains(stdout, "Secure Boot required") {
		t.Errorf("params bootstrap --secure-boot required printed %q, want it to say Secure Boot is required", stdout)
	}

	// A bound seal requires Secure Boot and a TPM.
	stdout = mustRun(t, dir, "params", "bootstrap", "--out", out, "--secure-boot", "bound")
	data, err = os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	cc = readParams(t, data).GetClusterBootstrap().GetInitialClusterConfiguration()
	if !cc.GetSecureBootRequired() || !cc.GetBoundSealRequired() || !strings.Contains(stdout, "Secure Boot required, with seals bound to signed releases") {
		t.Errorf("params bootstrap --secure-boot bound: configuration %v, printed %q", cc, stdout)
	}
	if _, err := run(t, dir, "params", "bootstrap", "--out", out, "--secure-boot", "bound", "--tpm", "best-effort"); err == nil || !strings.Contains(err.Error(), "needs the tpm_mode REQUIRED") {
		t.Errorf("params bootstrap --secure-boot bound --tpm best-effort: %v; want it refused", err)
	}

	// Registry mirrors.
	stdout = mustRun(t, dir, "params", "bootstrap", "--out", out, "--registry-mirror", "docker.io=http://10.42.0.1:5000", "--plain-http-registry", "10.42.0.1:5000")
	if !strings.Contains(stdout, "docker.io mirrored by http://10.42.0.1:5000") {
		t.Errorf("params bootstrap with a mirror printed %q, want it to name the mirror", stdout)
	}
	data, err = os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	wantRegistries := &api.Registries{
		Mirrors:   []*api.Registries_Mirror{{Registry: "docker.io", Endpoints: []string{"http://10.42.0.1:5000"}}},
		PlainHttp: []string{"10.42.0.1:5000"},
	}
	if diff := cmp.Diff(wantRegistries, readParams(t, data).GetClusterBootstrap().GetInitialClusterConfiguration().GetRegistries(), protocmp.Transform()); diff != "" {
		t.Errorf("registries with --registry-mirror (-want +got):\n%s", diff)
	}
}

// TestFlagErrors runs command lines that must fail before reaching any
// cluster, each with an error that names the problem.
func TestFlagErrors(t *testing.T) {
	dir := t.TempDir()
	id := "cairn-0123456789abcdef"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"params", "bootstrap"}, "image"},
		{[]string{"params", "bootstrap", "--image", "a", "--out", "b"}, "none of the others"},
		{[]string{"params", "bootstrap", "--out", "x", "--storage-security", "weak"}, `--storage-security "weak"`},
		{[]string{"params", "bootstrap", "--out", "x", "--tpm", "maybe"}, `--tpm "maybe"`},
		{[]string{"params", "bootstrap", "--out", "x", "--secure-boot", "sometimes"}, `--secure-boot "sometimes"`},
		{[]string{"params", "bootstrap", "--out", "x", "--registry-mirror", "docker.io"}, "REGISTRY=URL"},
		{[]string{"params", "bootstrap", "--out", "x", "--registry-mirror", "docker.io=http://10.42.0.1:5000"}, "not among the plain-HTTP hosts"},
		{[]string{"cluster", "registries", "--clear", "--plain-http-registry", "a:1"}, "--clear takes no other"},
		{[]string{"-o", "yaml", "node", "list"}, `-o "yaml"`},
		{[]string{"--timeout", "0s", "node", "list"}, "--timeout"},
		{[]string{"--endpoint", "nohost", "node", "list"}, "HOST:PORT"},
		{[]string{"--endpoint", "host:0", "node", "list"}, "port"},
		{[]string{"--node-endpoint", "host:7835", "node", "list"}, "ID=HOST:PORT"},
		{[]string{"--node-endpoint", "node1=host:7835", "node", "list"}, "not a node ID"},
		{[]string{"node", "approve", "node1"}, "not a node ID"},
		{[]string{"node", "approve"}, "takes 1 argument(s), ID"},
		{[]string{"node", "add-role", id, "Janitor"}, `unknown role "Janitor"`},
		{[]string{"node", "add-role", id}, "ID ROLE"},
		{[]string{"logs", id, "--backlog", "-2"}, "--backlog"},
		{[]string{"logs", id, "--min-severity", "loud"}, "--min-severity"},
		{[]string{"cluster", "update", "start"}, "give --image REF"},
		{[]string{"cluster", "update", "start", "--image", "release:v1"}, `--image: reference "release:v1": want HOST/REPOSITORY`},
		{[]string{"cluster", "update", "start", "--image", "h:5000/cairn/release:v1", "--max-unavailable", "-1"}, "--max-unavailable -1"},
		{[]string{"cluster", "update", "start", "--image", "h:5000/cairn/release:v1", "--drain-timeout", "-1m"}, "--drain-timeout -1m0s"},
		{[]string{"cluster", "update", "start", "--image", "h:5000/cairn/release:v1", "--trial-deadline", "500ms"}, "--trial-deadline 500ms"},
		{[]string{"cluster", "update", "start", "--image", "h:5000/cairn/release:v1", "--trial-deadline", "25h"}, "from 1s to 24h"},
		{[]string{"cluster", "update", "clear-bad"}, "takes 1 argument(s), DIGEST"},
		{[]string{"cluster", "update", "clear-bad", "sha256:abc"}, `"sha256:abc" is not a release digest`},
		{[]string{"cluster", "update", "clear-bad", "SHA256:" + strings.Repeat("ab", 32)}, "is not a release digest"},
		{[]string{"cluster", "update", "clear-bad", "sha256:" + strings.Repeat("AB", 32)}, "is not a release digest"},
		{[]string{"cluster", "update", "status"}, "params bootstrap"},
		{[]string{"node", "list"}, "params bootstrap"},
		{[]string{"takeownership"}, "params bootstrap"},
	} {
		_, err := run(t, dir, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("cairnctl %s = %v, want an error containing %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}

func TestNoOwnerCertificate(t *testing.T) {
	dir := t.TempDir()
	mustRun(t, dir, "params", "bootstrap", "--out", filepath.Join(dir, "p.pb"))
	for _, args := range [][]string{
		{"node", "list"},
		{"cluster", "info"},
		{"params", "register", "--out", filepath.Join(dir, "r.pb")},
		{"logs", "cairn-0123456789abcdef"},
	} {
		_, err := run(t, dir, args...)
		if err == nil || !strings.Contains(err.Error(), "run `cairnctl --endpoint HOST:PORT takeownership` first") {
			t.Errorf("cairnctl %s before takeownership = %v, want it to say to take ownership", strings.Join(args, " "), err)
		}
	}
	if _, err := run(t, dir, "takeownership"); err == nil || !strings.Contains(err.Error(), "--endpoint") {
		t.Errorf("takeownership without endpoints = %v, want it to ask for --endpoint", err)
	}
}

func TestRoleUpdate(t *testing.T) {
	yes, no := true, false
	for _, tc := range []struct {
		role string
		add  bool
		want *api.UpdateNodeRolesRequest
	}{
		{"ConsensusMember", true, &api.UpdateNodeRolesRequest{NodeId: "n", ConsensusMember: &yes}},
		{"consensusmember", false, &api.UpdateNodeRolesRequest{NodeId: "n", ConsensusMember: &no}},
		{"KUBERNETESCONTROLLER", true, &api.UpdateNodeRolesRequest{NodeId: "n", KubernetesController: &yes}},
		{"kubernetesWorker", false, &api.UpdateNodeRolesRequest{NodeId: "n", KubernetesWorker: &no}},
	} {
		got, err := roleUpdate("n", tc.role, tc.add)
		if err != nil {
			t.Errorf("roleUpdate(%q, %t): %v", tc.role, tc.add, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
			t.Errorf("roleUpdate(%q, %t) (-want +got):\n%s", tc.role, tc.add, diff)
		}
	}
	if _, err := roleUpdate("n", "Consensus", true); err == nil {
		t.Error(`roleUpdate("Consensus") succeeded, want an error`)
	}
}

func TestNodeEndpointSettings(t *testing.T) {
	dir := t.TempDir()
	mustRun(t, dir, "config", "set-node-endpoint", "cairn-0123456789abcdef=127.0.0.1:17835", "cairn-fedcba9876543210=[::1]:7835")
	mustRun(t, dir, "config", "unset-node-endpoint", "cairn-fedcba9876543210")
	mustRun(t, dir, "config", "set-endpoints", "127.0.0.1:17833", "10.0.0.1:7833")
	var v configView
	if err := json.Unmarshal([]byte(mustRun(t, dir, "-o", "json", "config", "show")), &v); err != nil {
		t.Fatal(err)
	}
	want := configView{
		Context:       defaultContext,
		Dir:           dir,
		Endpoints:     []string{"127.0.0.1:17833", "10.0.0.1:7833"},
		NodeEndpoints: map[string]string{"cairn-0123456789abcdef": "127.0.0.1:17835"},
	}
	if diff := cmp.Diff(want, v, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("config show after changes (-want +got):\n%s", diff)
	}
	if _, err := run(t, dir, "config", "set-node-endpoint", "cairn-0123456789abcdef"); err == nil {
		t.Error("config set-node-endpoint without =HOST:PORT succeeded, want an error")
	}
}

// TestParamsBootstrapImage writes bootstrap parameters into the ESP of a
// GPT image made with go-diskfs and reads them back from there.
func TestParamsBootstrapImage(t *testing.T) {
	img := filepath.Join(t.TempDir(), "disk.img")
	d, err := diskfs.Create(img, 96<<20, diskfs.SectorSizeDefault)
	if err != nil {
		t.Fatal(err)
	}
	err = d.Partition(&gpt.Table{
		LogicalSectorSize: 512, PhysicalSectorSize: 512, ProtectiveMBR: true,
		Partitions: []*gpt.Partition{{Index: 1, Start: 2048, End: 2048 + 64<<20/512 - 1, Type: gpt.EFISystemPartition, Name: "EFI System Partition"}},
	})
	if err == nil {
		_, err = d.CreateFilesystem(disk.FilesystemSpec{Partition: 1, FSType: filesystem.TypeFat32, VolumeLabel: "CAIRN-ESP"})
	}
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("making the image: %v", err)
	}

	dir := t.TempDir()
	out := mustRun(t, dir, "params", "bootstrap", "--image", img, "--tpm", "best-effort")
	if !strings.Contains(out, esp.ParametersPath+" on the ESP of "+img) {
		t.Errorf("params bootstrap --image printed %q, want it to name the ESP file", out)
	}
	data, err := espimage.ReadFile(img, esp.ParametersPath)
	if err != nil {
		t.Fatalf("reading the parameters back: %v", err)
	}
	key, err := readOwnerKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := readParams(t, data).GetClusterBootstrap()
	if !key.Public().(ed25519.PublicKey).Equal(ed25519.PublicKey(got.GetOwnerPublicKey())) {
		t.Errorf("owner key in the image's parameters = %x, want the config dir's", got.GetOwnerPublicKey())
	}
	if m := got.GetInitialClusterConfiguration().GetTpmMode(); m != api.TPMMode_TPM_MODE_BEST_EFFORT {
		t.Errorf("TPM mode in the image's parameters = %v, want BEST_EFFORT", m)
	}

	if _, err := run(t, dir, "params", "bootstrap", "--image", filepath.Join(dir, "missing.img")); err == nil || !strings.Contains(err.Error(), "missing.img") {
		t.Errorf("params bootstrap into a missing image = %v, want an error naming it", err)
	}
}

// TestParamsBootstrapDisk: --disk makes a new parameters disk, readable
// by others only as its owner, whose FAT filesystem holds the parameters
// where a node looks; it never overwrites an existing file.
func TestParamsBootstrapDisk(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(t.TempDir(), "stick.img")
	out := mustRun(t, dir, "params", "bootstrap", "--disk", img)
	if !strings.Contains(out, esp.ParametersPath+" on the new parameters disk "+img) {
		t.Errorf("params bootstrap --disk printed %q, want it to name the disk", out)
	}
	st, err := os.Stat(img)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("parameters disk mode = %v, want 0600", st.Mode().Perm())
	}
	d, err := diskfs.Open(img, diskfs.WithOpenMode(diskfs.ReadOnly))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	fs, err := d.GetFilesystem(0)
	if err != nil {
		t.Fatalf("the parameters disk has no filesystem over the whole disk: %v", err)
	}
	f, err := fs.OpenFile("/"+esp.ParametersPath, os.O_RDONLY)
	if err != nil {
		t.Fatalf("opening %s on the parameters disk: %v", esp.ParametersPath, err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	key, err := readOwnerKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := readParams(t, data).GetClusterBootstrap().GetOwnerPublicKey(); !key.Public().(ed25519.PublicKey).Equal(ed25519.PublicKey(got)) {
		t.Errorf("owner key on the parameters disk = %x, want the config dir's", got)
	}
	if _, err := run(t, dir, "params", "bootstrap", "--disk", img); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("params bootstrap --disk over an existing file = %v, want an error saying it exists", err)
	}
}
