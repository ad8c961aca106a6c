//go:build payload

package kubernetes

import (
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
)

// The payload to check, as make kube-payload-test passes it.
var (
	binDir  = flag.String("bin", "", "directory of the built payload (out/kubernetes/bin)")
	kubectl = flag.String("kubectl", "", "the built kubectl (out/kubectl)")
)

// components are the links to the two builds of hyperkube, which build.sh
// makes: the control plane's, and the worker's in worker/.
var components = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy",
	"worker/kubelet", "worker/kube-proxy"}

// cniPlugins are the CNI plugins of the payload.
var cniPlugins = []string{"ptp", "host-local", "portmap"}

// programs are the regular files of the payload; every one must be
// static.
var programs = append([]string{"hyperkube", "worker/hyperkube", "containerd", "ctr", "containerd-shim-runc-v2", "runc"}, cniPlugins...)

func bin(t *testing.T, name string) string {
	t.Helper()
	if *binDir == "" {
		t.Fatal("-bin is not set: run make kube-payload-test")
	}
	return filepath.Join(*binDir, name)
}

// module returns module path as Go recorded it in the binary at file:
// its main module (kubectl's package is Kubernetes' own) or one of its
// dependencies.
func module(t *testing.T, file, path string) *debug.Module {
	t.Helper()
	info, err := buildinfo.ReadFile(file)
	if err != nil {
		t.Fatalf("reading the build information of %s: %v", file, err)
	}
	if info.Main.Path == path {
		return &info.Main
	}
	for _, d := range info.Deps {
		if d.Path == path {
			return d
		}
	}
	t.Fatalf("%s was not built from %s", file, path)
	return nil
}

// moduleVersion returns the version of module path that the binary at
// file was built from: the version a program prints must be the one it
// was built from. Only Kubernetes may be replaced, by its patched copy.
func moduleVersion(t *testing.T, file, path string) string {
	t.Helper()
	m := module(t, file, path)
	if m.Replace != nil && !(path == "k8s.io/kubernetes" && isPatchedCopy(m.Replace)) {
		t.Fatalf("%s: %s is replaced by %s %s", file, path, m.Replace.Path, m.Replace.Version)
	}
	return m.Version
}

// isPatchedCopy reports whether m is build.sh's patched copy of
// k8s.io/kubernetes: a directory named patched beside the payload.
func isPatchedCopy(m *debug.Module) bool {
	return (m.Version == "" || m.Version == "(devel)") && filepath.Base(m.Path) == "patched"
}

// TestKubernetesPatched checks that each build of hyperkube, and kubectl,
// is built from the patched copy of Kubernetes when patches/ holds any:
// a build.sh that applied them and built from the module cache anyway
// would ship the release's bugs.
func TestKubernetesPatched(t *testing.T) {
	patches, err := filepath.Glob("patches/*.patch")
	if err != nil || len(patches) == 0 {
		t.Fatalf("no patches/*.patch (%v): nothing to check", err)
	}
	for _, file := range []string{bin(t, "hyperkube"), bin(t, "worker/hyperkube"), *kubectl} {
		if m := module(t, file, "k8s.io/kubernetes"); m.Replace == nil || !isPatchedCopy(m.Replace) {
			t.Errorf("%s is built from k8s.io/kubernetes %s, not its patched copy: %d patch(es) left out", file, m.Version, len(patches))
		}
	}
}

// run runs name with args and env and returns what it wrote to stdout
// and stderr together.
func run(t *testing.T, name string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// isRelease fails unless version is a release: no pre-release, no pseudo
// version.
func isRelease(t *testing.T, what, version string) {
	t.Helper()
	if !regexp.MustCompile(`^v\d+\.\d+\.\d+$`).MatchString(version) {
		t.Errorf("%s is built from %s, not a release", what, version)
	}
}

// TestStatic checks that no program of the payload needs a loader or a
// library: the node carries none for them.
func TestStatic(t *testing.T) {
	for _, p := range programs {
		f, err := elf.Open(bin(t, p))
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				t.Errorf("%s asks for a program interpreter: it is not static", p)
			}
		}
		if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
			t.Errorf("%s needs libraries %q (%v): it is not static", p, libs, err)
		}
		f.Close()
	}
}

// TestKubernetes runs every component through its link, and one of each
// build through hyperkube's first argument, and checks the version each
// prints is the Kubernetes release it was built from, and that each build
// has only its own components.
func TestKubernetes(t *testing.T) {
	hyperkube, worker := bin(t, "hyperkube"), bin(t, "worker/hyperkube")
	version := moduleVersion(t, hyperkube, "k8s.io/kubernetes")
	isRelease(t, "hyperkube", version)
	if v := moduleVersion(t, worker, "k8s.io/kubernetes"); v != version {
		t.Errorf("worker/hyperkube is built from Kubernetes %s, hyperkube from %s", v, version)
	}
	want := "Kubernetes " + version + "\n"
	for _, c := range components {
		link := bin(t, c)
		if target, err := os.Readlink(link); err != nil || target != "hyperkube" {
			t.Errorf("%s links to %q (%v), want hyperkube", c, target, err)
			continue
		}
		if got := run(t, link, nil, "--version"); got != want {
			t.Errorf("%s --version = %q, want %q", c, got, want)
		}
	}
	for _, c := range []struct{ program, component string }{{hyperkube, "kube-scheduler"}, {worker, "kubelet"}} {
		if got := run(t, c.program, nil, c.component, "--version"); got != want {
			t.Errorf("%s %s --version = %q, want %q", c.program, c.component, got, want)
		}
	}
	for _, c := range []struct{ program, component, lists string }{
		{hyperkube, "etcd", "kube-apiserver"},
		{hyperkube, "kubelet", "kube-apiserver"},
		{worker, "kube-apiserver", "kubelet"},
	} {
		out, err := exec.Command(c.program, c.component).CombinedOutput()
		if code := exitCode(err); code != 2 || !strings.Contains(string(out), c.lists) {
			t.Errorf("%s %s = exit %d, %q; want exit 2 and the list of components", c.program, c.component, code, out)
		}
	}
	t.Logf("hyperkube and worker/hyperkube: Kubernetes %s", version)
}

// TestKubectl checks the host's kubectl is of the same release.
func TestKubectl(t *testing.T) {
	if *kubectl == "" {
		t.Fatal("-kubectl is not set: run make kube-payload-test")
	}
	version := moduleVersion(t, *kubectl, "k8s.io/kubernetes")
	var v struct {
		ClientVersion struct{ GitVersion, GitTreeState string }
	}
	out := run(t, *kubectl, nil, "version", "--client", "-o", "json")
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("kubectl version: %v\n%s", err, out)
	}
	if v.ClientVersion.GitVersion != version {
		t.Errorf("kubectl version: %q, want %q", v.ClientVersion.GitVersion, version)
	}
}

// TestContainerd checks containerd and its shim print the release they
// were built from.
func TestContainerd(t *testing.T) {
	const module = "github.com/containerd/containerd/v2"
	containerd := bin(t, "containerd")
	version := moduleVersion(t, containerd, module)
	isRelease(t, "containerd", version)
	want := fmt.Sprintf("containerd %s %s ", module, version)
	if got := run(t, containerd, nil, "--version"); !strings.HasPrefix(got, want) {
		t.Errorf("containerd --version = %q, want it to begin %q", got, want)
	}
	shim := bin(t, "containerd-shim-runc-v2")
	if v := moduleVersion(t, shim, module); v != version {
		t.Errorf("containerd-shim-runc-v2 is built from %s %s, containerd from %s", module, v, version)
	}
	got := run(t, shim, nil, "-v")
	if !regexp.MustCompile(`(?m)^  Version: +` + regexp.QuoteMeta(version) + `$`).MatchString(got) {
		t.Errorf("containerd-shim-runc-v2 -v = %q, want Version: %s", got, version)
	}
	t.Logf("containerd %s", version)
}

// TestRunc checks runc's version and that it filters system calls: it was
// linked with libseccomp and knows seccomp's actions.
func TestRunc(t *testing.T) {
	runc := bin(t, "runc")
	version := moduleVersion(t, runc, "github.com/opencontainers/runc")
	isRelease(t, "runc", version)
	got := run(t, runc, nil, "--version")
	want := "runc version " + strings.TrimPrefix(version, "v") + "\n"
	if !strings.HasPrefix(got, want) {
		t.Errorf("runc --version = %q, want it to begin %q", got, want)
	}
	libseccomp := regexp.MustCompile(`(?m)^libseccomp: (\d+\.\d+\.\d+)$`).FindStringSubmatch(got)
	if libseccomp == nil {
		t.Errorf("runc --version = %q: no libseccomp version, so it was built without seccomp", got)
	}

	var features struct {
		Linux struct {
			Seccomp struct {
				Enabled *bool
				Actions []string
			}
		}
	}
	out := run(t, runc, nil, "features")
	if err := json.Unmarshal([]byte(out), &features); err != nil {
		t.Fatalf("runc features: %v\n%s", err, out)
	}
	s := features.Linux.Seccomp
	if s.Enabled == nil || !*s.Enabled || len(s.Actions) == 0 {
		t.Errorf("runc features: seccomp enabled %v with actions %q, want enabled with actions\n%s", s.Enabled, s.Actions, out)
	}
	if libseccomp != nil {
		t.Logf("runc %s, libseccomp %s, seccomp actions %s", version, libseccomp[1], strings.Join(s.Actions, " "))
	}
}

// TestCNIPlugins runs each plugin as a container runtime first does, with
// CNI_COMMAND=VERSION, and without a command, when it says what it is.
func TestCNIPlugins(t *testing.T) {
	for _, p := range cniPlugins {
		plugin := bin(t, p)
		version := moduleVersion(t, plugin, "github.com/containernetworking/plugins")
		isRelease(t, p, version)
		want := fmt.Sprintf("CNI %s plugin %s\n", p, version)
		if got := run(t, plugin, []string{"CNI_COMMAND="}); !strings.HasPrefix(got, want) {
			t.Errorf("%s = %q, want it to begin %q", p, got, want)
		}
		var v struct{ SupportedVersions []string }
		out := run(t, plugin, []string{"CNI_COMMAND=VERSION"})
		if err := json.Unmarshal([]byte(out), &v); err != nil || len(v.SupportedVersions) == 0 {
			t.Errorf("CNI_COMMAND=VERSION %s = %q (%v), want the CNI versions it speaks", p, out, err)
		}
		t.Logf("%s %s, CNI %s", p, version, strings.Join(v.SupportedVersions, " "))
	}
}

// TestDependenciesAsUpstream checks that this module builds Kubernetes
// with every dependency at the version Kubernetes' own go.mod requires:
// a requirement of this module may raise none of them.
func TestDependenciesAsUpstream(t *testing.T) {
	var upstream struct {
		Require []struct{ Path, Version string }
	}
	gomod := strings.TrimSpace(goCmd(t, "list", "-m", "-f", "{{.GoMod}}", "k8s.io/kubernetes"))
	if err := json.Unmarshal([]byte(goCmd(t, "mod", "edit", "-json", gomod)), &upstream); err != nil {
		t.Fatalf("reading %s: %v", gomod, err)
	}
	selected := map[string]string{}
	for _, line := range strings.Split(goCmd(t, "list", "-m", "-f", "{{.Path}} {{.Version}}", "all"), "\n") {
		if path, version, ok := strings.Cut(line, " "); ok {
			selected[path] = version
		}
	}
	for _, r := range upstream.Require {
		if r.Version == "v0.0.0" {
			continue // a staging module, replaced in go.mod
		}
		if got := selected[r.Path]; got != r.Version {
			t.Errorf("%s is at %s, Kubernetes requires %s", r.Path, got, r.Version)
		}
	}
}

func goCmd(t *testing.T, args ...string) string {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command("go", args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return string(out)
}

func exitCode(err error) int {
	if e, ok := err.(*exec.ExitError); ok {
		return e.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}
