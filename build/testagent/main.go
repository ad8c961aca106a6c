// Command agent is the program of the test image that the e2e suites run
// in pods (image docker.io/cairn/agent:1, served by the harness's
// registry): a small HTTP server that says which pod answers, and the
// client the suites run in pods with kubectl exec to probe the network.
//
//	agent serve [ADDR]   answer GET / with the pod's host name (default :8080)
//	                     (and the same over SCTP, where the kernel has it)
//	agent get URL        GET URL, print the answer; exit 1 on failure;
//	                     sctp://ADDR/PATH is GET /PATH over SCTP
//	agent resolve NAME   look NAME up as the pod's resolv.conf says, print
//	                     its addresses, one a line; exit 1 on failure
//	agent api PATH       GET PATH of the apiserver at
//	                     https://kubernetes.default.svc.cluster.local with
//	                     the pod's service-account token, verifying the
//	                     apiserver with the CA the pod was given
//	agent statfs PATH    print the size statfs(2) reports for PATH, in bytes
//	agent fill PATH N    write N bytes to a new file PATH and sync it; exit
//	                     1 saying why when the filesystem refuses them, and
//	                     remove the file then
//	agent blocksize DEV  print the size of the block device DEV, in bytes
//	agent blockwrite DEV write a sector at the end of DEV and read it back
//	agent write PATH TEXT  write TEXT to PATH and sync it
//	agent cat PATH       print the file PATH
//	agent underneath     in a copy of the container's mount namespace,
//	                     unmount the container's root and print what the
//	                     namespace's root then holds, a name a line
//	                     (needs CAP_SYS_ADMIN: a privileged pod)
//	agent kill NAME      kill (SIGKILL) every process named NAME (its
//	                     comm, as ps shows it), print their PIDs and wait
//	                     until they are gone; exit 1 when there is none
//	                     (needs the host's PID namespace and CAP_KILL: a
//	                     privileged hostPID pod)
//	agent aggregated ADDR CA
//	                     serve the API group test.cairn.dev/v1 over TLS on
//	                     ADDR, as an aggregated apiserver behind the
//	                     cluster's apiserver: its discovery to anyone, and
//	                     GET /apis/test.cairn.dev/v1/whoami, to a client
//	                     certificate of the CA in the file CA alone, with
//	                     the proxy's name and the user and groups it names
//	                     in its request headers
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	args := os.Args[1:]
	if len(args) == 0 {
		args = []string{"serve"}
	}
	var err error
	switch {
	case args[0] == "serve" && len(args) <= 2:
		addr := ":8080"
		if len(args) == 2 {
			addr = args[1]
		}
		err = serve(addr)
	case args[0] == "get" && len(args) == 2:
		err = get(args[1])
	case args[0] == "bench" && len(args) == 2:
		err = bench(args[1])
	case args[0] == "resolve" && len(args) == 2:
		err = resolve(args[1])
	case args[0] == "api" && len(args) == 2:
		err = api(args[1])
	case args[0] == "statfs" && len(args) == 2:
		err = statfs(args[1])
	case args[0] == "fill" && len(args) == 3:
		err = fill(args[1], args[2])
	case args[0] == "blocksize" && len(args) == 2:
		err = blocksize(args[1])
	case args[0] == "blockwrite" && len(args) == 2:
		err = blockwrite(args[1])
	case args[0] == "write" && len(args) == 3:
		err = writeSynced(args[1], args[2])
	case args[0] == "aggregated" && len(args) == 3:
		err = aggregated(args[1], args[2])
	case args[0] == "underneath" && len(args) == 1:
		err = underneath()
	case args[0] == "kill" && len(args) == 2:
		err = kill(args[1])
	case args[0] == "cat" && len(args) == 2:
		var b []byte
		if b, err = os.ReadFile(args[1]); err == nil {
			_, err = os.Stdout.Write(b)
		}
	default:
		fmt.Fprintln(os.Stderr, "usage: agent serve [ADDR] | agent get URL | agent bench URL | agent resolve NAME|ADDR | agent api PATH | agent statfs PATH | agent fill PATH N | agent blocksize DEV | agent blockwrite DEV | agent write PATH TEXT | agent cat PATH | agent underneath | agent kill NAME | agent aggregated ADDR CA")
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "agent: %v\n", err)
		os.Exit(1)
	}
}

func serve(addr string) error {
	host, err := os.Hostname()
	if err != nil {
		return fmt.Errorf("when reading the host name: %w", err)
	}
	http.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, host)
	})
	http.HandleFunc("/bytes", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(benchBytes))
		_, _ = w.Write(make([]byte, benchBytes))
	})
	// The same answer over SCTP, on the same port, where the kernel has
	// SCTP.
	if _, p, err := net.SplitHostPort(addr); err == nil {
		port, _ := strconv.Atoi(p)
		if ln, err := sctpListen(port); err != nil {
			fmt.Printf("agent: not serving over SCTP: %v\n", err)
		} else {
			go func() { fmt.Printf("agent: SCTP server ended: %v\n", http.Serve(ln, nil)) }()
		}
	}
	fmt.Printf("agent: serving on %s as %s\n", addr, host)
	return http.ListenAndServe(addr, nil)
}

// get GETs url; sctp://ADDR/PATH is http://ADDR/PATH over SCTP.
func get(url string) error {
	if rest, ok := strings.CutPrefix(url, "sctp://"); ok {
		tr := &http.Transport{DialContext: func(_ context.Context, _, addr string) (net.Conn, error) {
			return sctpDial(addr, 4*time.Second)
		}}
		return fetch(&http.Client{Transport: tr}, "http://"+rest, "")
	}
	return fetch(http.DefaultClient, url, "")
}

// benchBytes is the size of the download of bench, served at /bytes.
const benchBytes = 16 << 20

// bench measures the way to the agent serving at url (http://ADDR:PORT):
// the median time of 50 GETs of its name, one after another on one
// connection, then the rate of one download of benchBytes. It prints
// "latency MS ms throughput MIBS MiB/s".
func bench(url string) error {
	client := &http.Client{Timeout: time.Minute}
	getAll := func(path string) (int64, error) {
		resp, err := client.Get(strings.TrimSuffix(url, "/") + path)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		n, err := io.Copy(io.Discard, resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("%s%s answered %s", url, path, resp.Status)
		}
		return n, err
	}
	times := make([]time.Duration, 0, 50)
	for range cap(times) {
		start := time.Now()
		if _, err := getAll("/"); err != nil {
			return err
		}
		times = append(times, time.Since(start))
	}
	slices.Sort(times)
	start := time.Now()
	n, err := getAll("/bytes")
	if err != nil {
		return err
	}
	if n != benchBytes {
		return fmt.Errorf("downloaded %d bytes, want %d", n, benchBytes)
	}
	rate := float64(n) / (1 << 20) / time.Since(start).Seconds()
	fmt.Printf("latency %.2f ms throughput %.1f MiB/s\n", float64(times[len(times)/2])/float64(time.Millisecond), rate)
	return nil
}

// serviceAccount is where the kubelet mounts a pod's service-account
// credentials.
const serviceAccount = "/var/run/secrets/kubernetes.io/serviceaccount"

func api(path string) error {
	token, err := os.ReadFile(serviceAccount + "/token")
	if err != nil {
		return fmt.Errorf("when reading the service-account token: %w", err)
	}
	ca, err := os.ReadFile(serviceAccount + "/ca.crt")
	if err != nil {
		return fmt.Errorf("when reading the apiserver's CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return fmt.Errorf("no certificate in %s/ca.crt", serviceAccount)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	return fetch(client, "https://kubernetes.default.svc.cluster.local"+path, "Bearer "+string(token))
}

// fetch GETs url with client, with an Authorization header when auth is
// not empty, and prints the answer.
func fetch(client *http.Client, url, auth string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("when reading the answer of %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s: %s", url, resp.Status, body)
	}
	_, err = os.Stdout.Write(body)
	return err
}

// resolve prints the addresses of name, or the names of an address (its
// PTR records).
func resolve(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lookup := net.DefaultResolver.LookupHost
	if net.ParseIP(name) != nil {
		lookup = net.DefaultResolver.LookupAddr
	}
	addrs, err := lookup(ctx, name)
	if err != nil {
		return err
	}
	slices.Sort(addrs)
	for _, a := range addrs {
		fmt.Println(a)
	}
	return nil
}

func statfs(path string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", path, err)
	}
	fmt.Println(st.Blocks * uint64(st.Bsize))
	return nil
}

func fill(path, size string) error {
	n, err := strconv.ParseInt(size, 10, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("%q is not a number of bytes", size)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	// What the filesystem refused is not kept: the space is free again.
	fail := func(err error) error {
		f.Close()
		os.Remove(path)
		return err
	}
	buf := make([]byte, 1<<20)
	for written := int64(0); written < n; {
		chunk := min(int64(len(buf)), n-written)
		if _, err := f.Write(buf[:chunk]); err != nil {
			return fail(fmt.Errorf("after %d bytes: %w", written, err))
		}
		written += chunk
	}
	if err := f.Sync(); err != nil {
		return fail(fmt.Errorf("sync: %w", err))
	}
	return f.Close()
}

func blocksize(dev string) error {
	f, err := os.Open(dev)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := unix.IoctlGetInt(int(f.Fd()), unix.BLKGETSIZE64)
	if err != nil {
		return fmt.Errorf("BLKGETSIZE64 of %s: %w", dev, err)
	}
	fmt.Println(n)
	return nil
}

func blockwrite(dev string) error {
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return err
	}
	sector := make([]byte, 512)
	copy(sector, "cairn block marker")
	if _, err := f.WriteAt(sector, size-512); err != nil {
		return fmt.Errorf("writing the last sector: %w", err)
	}
	if err := f.Sync(); err != nil {
		return err
	}
	back := make([]byte, 512)
	if _, err := f.ReadAt(back, size-512); err != nil {
		return fmt.Errorf("reading the last sector: %w", err)
	}
	if string(back[:18]) != "cairn block marker" {
		return fmt.Errorf("read back %q", back[:18])
	}
	fmt.Println("ok")
	return nil
}

func writeSynced(path, text string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// underneath shows what lies beneath the container's root in its mount
// namespace, as a process holding CAP_SYS_ADMIN could reach it. On a
// locked thread, it takes a copy of the namespace of its own, detaches
// the container's root there and enters that namespace again, which puts
// its root at the namespace's: with pivot_root, the kernel's rootfs; with
// runc's no_pivot_root, whatever root the node ran on. It prints the
// names found there, one a line. The pod's own namespace is left as it
// was.
func underneath() error {
	// The thread is never unlocked, so it ends with the command, and no
	// other goroutine runs in its namespace.
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_FS | unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("when copying the mount namespace: %w", err)
	}
	// Private, so that the unmount below stays in the copy.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("when making the copy's mounts private: %w", err)
	}
	ns, err := unix.Open("/proc/thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("when opening the copy of the mount namespace: %w", err)
	}
	defer unix.Close(ns)
	if err := unix.Unmount("/", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("when detaching the container's root: %w", err)
	}
	if err := unix.Setns(ns, unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("when entering the copy of the mount namespace again: %w", err)
	}
	entries, err := os.ReadDir("/")
	if err != nil {
		return fmt.Errorf("when reading what lies beneath: %w", err)
	}
	for _, e := range entries {
		fmt.Println(e.Name())
	}
	return nil
}
