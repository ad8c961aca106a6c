package launch

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"cairn.dev/cairn/node/parameters"
	"cairn.dev/cairn/pkg/fixture"
)

// These tests run the real qemu and swtpm, with an empty disk: OVMF finds
// nothing to boot there, which is all that starting, stopping and cleaning
// up need. Booting Cairn itself is test/e2e's job.

// helperEnv makes the test binary act as a launcher that gets killed; see
// TestChildrenDieWithLauncher.
const helperEnv = "CAIRN_LAUNCH_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(runHelperLauncher())
	}
	os.Exit(m.Run())
}

// isolate gives the test a temporary directory of its own as TMPDIR, so
// that it can check that nothing is left there, and an empty disk image.
func isolate(t *testing.T) (tmp, image string) {
	t.Helper()
	tmp = t.TempDir()
	t.Setenv("TMPDIR", tmp)
	image = filepath.Join(t.TempDir(), "empty.img")
	if err := os.WriteFile(image, make([]byte, 4<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	return tmp, image
}

// assertEmpty fails unless dir holds nothing.
func assertEmpty(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("left behind in TMPDIR: %s", e.Name())
	}
}

// processGone reports whether pid has exited (a zombie counts as exited:
// it runs nothing and only waits for its new parent to reap it).
func processGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// "pid (comm) S ...": the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z'
}

func fileHash(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

func TestLaunchBootsFirmwareAndCleansUp(t *testing.T) {
	tmp, image := isolate(t)
	before := fileHash(t, image)
	params := []byte("\x0a\x03abc not really a protobuf")
	var copied fixture.SyncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	n, err := Launch(ctx, Config{Name: "fw", Image: image, MemoryMiB: 256},
		WithTPM(), WithParameters(params), WithFWCfgFile("opt/dev.cairn/extra", []byte("x")),
		WithConsoleCopy(&copied))
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	t.Cleanup(func() { n.Close() })

	// The state directory holds what qemu was given.
	if got, err := os.ReadFile(filepath.Join(n.dir, "fwcfg-0")); err != nil || !bytes.Equal(got, params) {
		t.Errorf("fw_cfg parameters file = %q, %v, want %q", got, err, params)
	}
	if fileHash(t, filepath.Join(n.dir, "OVMF_VARS.fd")) != fileHash(t, DefaultOVMFVars) {
		t.Error("the node's OVMF variable store is not a copy of the template")
	}
	// The firmware runs and reaches the console: it found nothing to
	// boot on the empty disk and says so.
	l, err := n.WaitFor(ctx, Substring("BdsDxe"))
	if err != nil {
		t.Fatalf("WaitFor firmware: %v\nconsole:\n%s", err, n.Console().Tail(20))
	}
	t.Logf("firmware line after %v", l.Time.Sub(n.Started()))
	if l.Time.Before(n.Started()) {
		t.Errorf("console line at %v, before qemu started at %v", l.Time, n.Started())
	}

	if err := n.Quit(ctx); err != nil {
		t.Fatalf("Quit: %v", err)
	}
	if err := n.Wait(ctx); err != nil {
		t.Errorf("Wait after Quit: %v", err)
	}
	console, err := os.ReadFile(n.ConsolePath())
	if err != nil {
		t.Fatalf("reading console file: %v", err)
	}
	if !bytes.Contains(console, []byte("BdsDxe")) {
		t.Errorf("console file lacks the firmware's lines:\n%s", console)
	}
	if got := copied.String(); got != string(console) {
		t.Errorf("console copy (%d bytes) differs from console file (%d bytes)", len(got), len(console))
	}

	tpm := n.tpm.Process.Pid
	if err := n.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if !processGone(tpm) {
		t.Errorf("swtpm (pid %d) still runs after Close", tpm)
	}
	assertEmpty(t, tmp)
	if fileHash(t, image) != before {
		t.Error("the image changed: the node wrote to it instead of its overlay")
	}
}

func TestCloseStopsRunningNode(t *testing.T) {
	tmp, image := isolate(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := Launch(ctx, Config{Image: image, MemoryMiB: 128}, WithTPM())
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	qemu, tpm := n.cmd.Process.Pid, n.tpm.Process.Pid
	if err := n.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := n.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	for name, pid := range map[string]int{"qemu": qemu, "swtpm": tpm} {
		if !processGone(pid) {
			t.Errorf("%s (pid %d) still runs after Close", name, pid)
		}
	}
	select {
	case <-n.Done():
	default:
		t.Error("Done not closed after Close")
	}
	if err := n.Wait(ctx); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("Wait after Close = %v, want an error saying qemu was killed", err)
	}
	if _, err := n.WaitFor(ctx, Substring("never")); err == nil || !strings.Contains(err.Error(), "console closed") {
		t.Errorf("WaitFor after Close = %v, want console closed", err)
	}
	assertEmpty(t, tmp)
}

// TestDiskModes starts qemu with the disks that need no overlay of ours:
// where qemu-img is missing, qemu keeps a temporary overlay of its own and
// the image stays as it was; a writable image is used as it is.
func TestDiskModes(t *testing.T) {
	for _, tc := range []struct {
		name          string
		opt           Option
		imageReadOnly bool
	}{
		{"without qemu-img", WithBinaries("", "/nonexistent/qemu-img", ""), true},
		{"writable image", WithWritableImage(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmp, image := isolate(t)
			before := fileHash(t, image)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			n, err := Launch(ctx, Config{Image: image, MemoryMiB: 128}, tc.opt)
			if err != nil {
				t.Fatalf("Launch: %v", err)
			}
			t.Cleanup(func() { n.Close() })
			if _, err := os.Stat(filepath.Join(n.dir, "disk.qcow2")); err == nil {
				t.Error("an overlay was made")
			}
			if err := n.Quit(ctx); err != nil {
				t.Fatalf("Quit: %v", err)
			}
			if err := n.Wait(ctx); err != nil {
				t.Errorf("Wait after Quit: %v", err)
			}
			if err := n.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			assertEmpty(t, tmp)
			if tc.imageReadOnly && fileHash(t, image) != before {
				t.Error("the image changed")
			}
		})
	}
}

func TestLaunchErrors(t *testing.T) {
	tmp, image := isolate(t)
	for _, tc := range []struct {
		name string
		cfg  Config
		opts []Option
		want string
	}{
		{"missing image", Config{Image: filepath.Join(tmp, "nope.img")}, nil, "nope.img"},
		{"no image", Config{}, nil, "no image"},
		{"direct boot without kernel", Config{}, []Option{WithDirectBoot(DirectBoot{})}, "without a kernel"},
		{"bad fw_cfg name", Config{Image: image}, []Option{WithFWCfgFile("dev.cairn/x", nil)}, "opt/"},
		{"qemu refuses its arguments", Config{Image: image}, []Option{WithExtraArgs("-bogus-option")}, "bogus-option"},
		{"no qemu", Config{Image: image}, []Option{WithBinaries("/nonexistent/qemu", "", "")}, "starting qemu"},
		{"no swtpm", Config{Image: image}, []Option{WithTPM(), WithBinaries("", "", "/nonexistent/swtpm")}, "starting swtpm"},
		{"missing OVMF", Config{Image: image}, []Option{WithOVMF("/x", "/nonexistent/VARS.fd")}, "OVMF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			n, err := Launch(ctx, tc.cfg, tc.opts...)
			if err == nil {
				n.Close()
				t.Fatalf("Launch succeeded, want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Launch = %v, want an error containing %q", err, tc.want)
			}
			assertEmpty(t, tmp)
		})
	}
}

// TestChildrenDieWithLauncher kills a launcher outright, as a test binary
// that hits its timeout dies: its qemu and swtpm must die with it, and the
// next Launch removes the state directory it left.
func TestChildrenDieWithLauncher(t *testing.T) {
	tmp, image := isolate(t)
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), helperEnv+"="+image)
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	helper.Stderr = os.Stderr
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	defer helper.Process.Kill()
	report, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the helper launcher's report: %v", err)
	}
	var qemu, tpm int
	var dir string
	if _, err := fmt.Sscanf(report, "%d %d %s", &qemu, &tpm, &dir); err != nil {
		t.Fatalf("helper launcher reported %q: %v", report, err)
	}
	helper.Process.Signal(syscall.SIGKILL)
	helper.Wait()

	deadline := time.Now().Add(10 * time.Second)
	for !(processGone(qemu) && processGone(tpm)) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	for name, pid := range map[string]int{"qemu": qemu, "swtpm": tpm} {
		if !processGone(pid) {
			t.Errorf("%s (pid %d) outlived its launcher", name, pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the killed launcher's state directory is already gone: %v", err)
	}
	sweepStale(tmp)
	assertEmpty(t, tmp)
}

// runHelperLauncher launches a node from the image named in helperEnv,
// reports "qemuPID swtpmPID stateDir" and waits to be killed.
func runHelperLauncher() int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := Launch(ctx, Config{Image: os.Getenv(helperEnv), MemoryMiB: 128}, WithTPM())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("%d %d %s\n", n.cmd.Process.Pid, n.tpm.Process.Pid, n.dir)
	<-ctx.Done()
	n.Close()
	return 1
}

func TestSweepStaleKeepsLiveLaunchers(t *testing.T) {
	tmp := t.TempDir()
	mk := func(name, pid string) string {
		dir := filepath.Join(tmp, stateDirPrefix+name)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if pid != "" {
			os.WriteFile(filepath.Join(dir, launcherPIDFile), []byte(pid), 0o644)
		}
		return dir
	}
	live := mk("live", strconv.Itoa(os.Getpid()))
	young := mk("young", "")
	garbled := mk("garbled", "not a pid")
	// PIDs never go this high (pid_max is at most 2^22).
	dead := mk("dead", strconv.Itoa(1<<30))
	other := filepath.Join(tmp, "unrelated")
	os.Mkdir(other, 0o700)

	sweepStale(tmp)
	for _, dir := range []string{live, young, garbled, other} {
		if _, err := os.Stat(dir); err != nil {
			t.Errorf("sweepStale removed %s: %v", filepath.Base(dir), err)
		}
	}
	if _, err := os.Stat(dead); err == nil {
		t.Errorf("sweepStale kept %s, whose launcher is dead", filepath.Base(dead))
	}
}

func TestFWCfgFiles(t *testing.T) {
	dir := t.TempDir()
	files := []FWCfgFile{
		{Name: parameters.FWCfgName, Data: []byte{0, 1, 2, 0xff}},
		{Name: "opt/dev.cairn/empty", Data: nil},
	}
	paths, err := writeFWCfg(dir, files)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range paths {
		if p.name != files[i].Name {
			t.Errorf("fw_cfg %d named %q, want %q", i, p.name, files[i].Name)
		}
		got, err := os.ReadFile(p.path)
		if err != nil || !bytes.Equal(got, files[i].Data) {
			t.Errorf("fw_cfg file %s holds %q, %v, want %q", p.name, got, err, files[i].Data)
		}
	}

	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{parameters.FWCfgName, true},
		{"opt/x", true},
		{"etc/x", false},
		{"opt/" + strings.Repeat("a", 51), true},
		{"opt/" + strings.Repeat("a", 52), false},
		{"opt/a,b", false},
	} {
		if err := checkFWCfgName(tc.name); (err == nil) != tc.ok {
			t.Errorf("checkFWCfgName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

// TestTPMStateOutlivesNode launches a node twice with the same TPM state
// directory: swtpm is told to keep its state there, not in the node's
// temporary directory, so the directory survives Close, while the
// temporary directory goes. (swtpm writes its state files only once a
// guest uses the TPM; the e2e suites see sealed secrets survive.)
func TestTPMStateOutlivesNode(t *testing.T) {
	tmp, image := isolate(t)
	state := filepath.Join(t.TempDir(), "tpm")
	for boot := 1; boot <= 2; boot++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		n, err := Launch(ctx, Config{Image: image, MemoryMiB: 128}, WithTPMState(state))
		cancel()
		if err != nil {
			t.Fatalf("Launch %d: %v", boot, err)
		}
		if n.tpm == nil {
			t.Fatalf("launch %d: WithTPMState started no swtpm", boot)
		}
		if want := "dir=" + state; !slices.Contains(n.tpm.Args, want) {
			t.Errorf("launch %d: swtpm arguments %q lack %q", boot, n.tpm.Args, want)
		}
		if err := n.Close(); err != nil {
			t.Errorf("Close %d: %v", boot, err)
		}
		if st, err := os.Stat(state); err != nil || !st.IsDir() {
			t.Errorf("after Close %d: TPM state directory: %v", boot, err)
		}
		assertEmpty(t, tmp)
	}
}
