// Command apiserverbench measures the start of the payload's kube-apiserver
// on this machine, natively, in seconds instead of a VM's minutes: each run
// starts it with a controller's arguments (kubernetes.APIServerArgs) and
// GOGC against a fresh embedded etcd, as on a new cluster, and times it
// until /readyz answers ok, with the CPU it spent by then and its
// resident memory. With -perf DIR, perf records each start (call graphs,
// 499 Hz) into DIR/run-N.perf for `perf report`: give it, with -bin, a
// hyperkube built with its symbol table, as the payload's is not (-s -w).
//
// A start under the emulation of make cluster costs tens of times what it
// costs here; what a change saves of its CPU here is what it saves there.
//
//	go run ./test/apiserverbench [-bin out/kubernetes/bin/kube-apiserver] [-runs 5] [-gogc 30,100] [-perf DIR]
//
// `make bench-apiserver` runs it after building the payload.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	"cairn.dev/cairn/node/kubernetes"
	"cairn.dev/cairn/pkg/etcdtest"
	"cairn.dev/cairn/pkg/procstat"
)

func main() {
	bin := flag.String("bin", "out/kubernetes/bin/kube-apiserver", "the payload's kube-apiserver")
	runs := flag.Int("runs", 5, "starts for each GOGC")
	gogc := flag.String("gogc", kubernetes.APIServerGOGC, "comma-separated GOGC values to start it with, in turn")
	perfDir := flag.String("perf", "", "record each start with perf into this directory")
	timeout := flag.Duration("timeout", 5*time.Minute, "deadline of each start")
	flag.Parse()

	gogcs := strings.Split(*gogc, ",")
	if *perfDir != "" {
		if _, err := exec.LookPath("perf"); err != nil {
			fail(fmt.Errorf("-perf needs perf (Debian's linux-perf): %w", err))
		}
		if err := os.MkdirAll(*perfDir, 0o755); err != nil {
			fail(err)
		}
	}
	results := map[string][]start{}
	n := 0
	// Interleaved, so that the machine's drift falls on every value alike.
	for i := 0; i < *runs; i++ {
		for _, g := range gogcs {
			n++
			perf := ""
			if *perfDir != "" {
				perf = filepath.Join(*perfDir, fmt.Sprintf("run-%d.perf", n))
			}
			s, err := run(*bin, g, perf, *timeout)
			if err != nil {
				fail(fmt.Errorf("run %d (GOGC=%s): %w", n, g, err))
			}
			fmt.Printf("run %d  GOGC=%-4s ready %6.2f s  CPU %6.2f s  RSS %4d MiB%s\n",
				n, g, s.ready.Seconds(), s.cpu.Seconds(), s.rss>>20, ifSet(perf, "  "+perf))
			results[g] = append(results[g], s)
		}
	}
	fmt.Printf("\nkube-apiserver start, %d runs each (min / median / max):\n", *runs)
	for _, g := range gogcs {
		rs := results[g]
		fmt.Printf("  GOGC=%-4s ready %s s   CPU %s s   RSS %s MiB\n", g,
			spread(rs, func(s start) float64 { return s.ready.Seconds() }, "%.2f"),
			spread(rs, func(s start) float64 { return s.cpu.Seconds() }, "%.2f"),
			spread(rs, func(s start) float64 { return float64(s.rss >> 20) }, "%.0f"))
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "apiserverbench: %v\n", err)
	os.Exit(1)
}

func ifSet(s, then string) string {
	if s == "" {
		return ""
	}
	return then
}

// spread formats min / median / max of f over rs.
func spread(rs []start, f func(start) float64, format string) string {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	return fmt.Sprintf(format+" / "+format+" / "+format, v[0], v[len(v)/2], v[len(v)-1])
}

// A start is what one run measured: from the apiserver's exec to its
// first ok from /readyz, and its CPU and resident memory then.
type start struct {
	ready, cpu time.Duration
	rss        uint64
}

// run starts the apiserver once, in a directory and etcd of its own, and
// stops it once ready. perf, if set, is where perf records it.
func run(bin, gogc, perf string, timeout time.Duration) (start, error) {
	dir, err := os.MkdirTemp("", "apiserverbench-")
	if err != nil {
		return start{}, err
	}
	defer os.RemoveAll(dir)
	etcd, err := startEtcd(dir)
	if err != nil {
		return start{}, err
	}
	defer etcd.Close()
	f, admin, err := writeFiles(dir)
	if err != nil {
		return start{}, err
	}
	f.Etcd = "unix://" + filepath.Join(dir, "etcd.sock")
	if f.Port, err = freePort(); err != nil {
		return start{}, err
	}
	logFile, err := os.Create(filepath.Join(dir, "apiserver.log"))
	if err != nil {
		return start{}, err
	}
	defer logFile.Close()

	// On loopback only, where a node serves on every address: the
	// bench's apiserver is for this machine alone.
	cmd := exec.Command(bin, append(kubernetes.APIServerArgs(f), "--bind-address=127.0.0.1")...)
	cmd.Env = append(os.Environ(), "GOGC="+gogc)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		return start{}, fmt.Errorf("when starting %s: %w", bin, err)
	}
	// exited is closed once the apiserver has exited, with waitErr set.
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	}()
	var recorder *exec.Cmd
	if perf != "" {
		recorder = exec.Command("perf", "record", "-q", "-F", "499", "-g", "-p", strconv.Itoa(cmd.Process.Pid), "-o", perf)
		if err := recorder.Start(); err != nil {
			return start{}, fmt.Errorf("when starting perf: %w", err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	readyz := fmt.Sprintf("https://127.0.0.1:%d/readyz", f.Port)
	for {
		ok, err := askReady(ctx, admin, readyz)
		if ok {
			break
		}
		select {
		case <-exited:
			return start{}, fmt.Errorf("the apiserver exited before ready (%v); its log: %s", waitErr, tail(logFile.Name()))
		case <-ctx.Done():
			return start{}, fmt.Errorf("the apiserver was not ready after %v (last: %v); its log: %s", timeout, err, tail(logFile.Name()))
		case <-time.After(100 * time.Millisecond):
		}
	}
	ready := time.Since(began)
	p, err := procstat.ReadProcess("/proc", cmd.Process.Pid)
	if err != nil {
		return start{}, err
	}
	s := start{ready: ready, cpu: p.CPUTime, rss: p.ResidentBytes}
	if recorder != nil {
		// perf writes its file when interrupted, and then ends by the
		// signal.
		recorder.Process.Signal(os.Interrupt)
		if err := recorder.Wait(); err != nil && !interrupted(err) {
			return start{}, fmt.Errorf("perf record: %w", err)
		}
	}
	return s, nil
}

func interrupted(err error) bool {
	var exit *exec.ExitError
	return errors.As(err, &exit) && exit.Sys().(syscall.WaitStatus).Signal() == syscall.SIGINT
}

// askReady asks the apiserver's /readyz once, as its administrator.
func askReady(ctx context.Context, cl *http.Client, u string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return false, err
	}
	res, err := cl.Do(req)
	if err != nil {
		return false, err
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return false, fmt.Errorf("/readyz answered %s", res.Status)
	}
	return true, nil
}

// startEtcd starts a fresh single-member etcd with its data in dir and
// its clients on dir/etcd.sock, the apiserver's only client.
func startEtcd(dir string) (*embed.Etcd, error) {
	peerPort, err := freePort()
	if err != nil {
		return nil, err
	}
	peer := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(peerPort))}
	return etcdtest.Embed(filepath.Join(dir, "etcd"), url.URL{Scheme: "unix", Path: filepath.Join(dir, "etcd.sock")}, peer)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("when finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// writeFiles writes, in dir, the certificates, keys and configuration a
// controller gives its apiserver, and returns them with a client of the
// apiserver as a member of system:masters.
func writeFiles(dir string) (kubernetes.APIServerFiles, *http.Client, error) {
	ca, err := newCA("bench Kubernetes CA")
	if err != nil {
		return kubernetes.APIServerFiles{}, nil, err
	}
	frontCA, err := newCA("bench front proxy CA")
	if err != nil {
		return kubernetes.APIServerFiles{}, nil, err
	}
	// The advertised address must not be loopback; the documentation
	// range's first is never this machine's.
	ip := netip.MustParseAddr("192.0.2.1")
	f := kubernetes.APIServerFiles{IP: ip, Dir: dir,
		CA: filepath.Join(dir, "ca.crt"), FrontProxyCA: filepath.Join(dir, "front-proxy-ca.crt"),
		Admission: filepath.Join(dir, "admission.json"), ServiceAccountKey: filepath.Join(dir, "service-account.key"),
	}
	var admin tls.Certificate
	steps := []func() error{
		func() error { return writePEM(f.CA, "CERTIFICATE", ca.der) },
		func() error { return writePEM(f.FrontProxyCA, "CERTIFICATE", frontCA.der) },
		func() error {
			var err error
			f.Serving, f.ServingKey, err = ca.issue(dir, "serving", "kube-apiserver", nil, []net.IP{net.ParseIP("127.0.0.1"), ip.AsSlice()})
			return err
		},
		func() error {
			var err error
			f.KubeletClient, f.KubeletClientKey, err = ca.issue(dir, "kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, nil)
			return err
		},
		func() error {
			var err error
			f.FrontProxyClient, f.FrontProxyClientKey, err = frontCA.issue(dir, "front-proxy-client", kubernetes.FrontProxyClient, nil, nil)
			return err
		},
		func() error {
			cert, key, err := ca.issue(dir, "admin", "admin", []string{"system:masters"}, nil)
			if err == nil {
				admin, err = tls.LoadX509KeyPair(cert, key)
			}
			return err
		},
		func() error { return writeECKey(f.ServiceAccountKey) },
		func() error { return writeJSON(f.Admission, kubernetes.AdmissionConfiguration()) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return kubernetes.APIServerFiles{}, nil, err
		}
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: roots, Certificates: []tls.Certificate{admin}, ServerName: "127.0.0.1",
	}}}
	return f, cl, nil
}

// tail returns the last lines of the file at path, for an error.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return "\n" + strings.Join(lines[max(0, len(lines)-15):], "\n")
}
