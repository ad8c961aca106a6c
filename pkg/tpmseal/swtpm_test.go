package tpmseal

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-tpm/tpm2/transport"
)

// swtpm is a software TPM 2.0 (the swtpm program) serving one test, with its
// state in a directory of its own: two of them are two different TPMs.
type swtpm struct {
	t        testing.TB
	stateDir string
	sock     string
	cmd      *exec.Cmd
	stderr   bytes.Buffer
}

// newSWTPM starts a software TPM with fresh state; it is stopped when the
// test ends.
func newSWTPM(t testing.TB) *swtpm {
	t.Helper()
	if _, err := exec.LookPath("swtpm"); err != nil {
		t.Fatalf("swtpm, the software TPM these tests run against, is not installed (%v): run build/deps.sh", err)
	}
	dir := t.TempDir()
	s := &swtpm{t: t, stateDir: dir, sock: filepath.Join(dir, "s")}
	s.start()
	t.Cleanup(s.stop)
	return s
}

// start runs swtpm on the state directory. The test binds the command
// socket itself and hands it over as fd 3, so it can connect at once,
// without waiting for swtpm to come up or racing for a port.
func (s *swtpm) start() {
	s.t.Helper()
	os.Remove(s.sock)
	lis, err := net.ListenUnix("unix", &net.UnixAddr{Name: s.sock, Net: "unix"})
	if err != nil {
		s.t.Fatalf("listening for swtpm: %v", err)
	}
	lis.SetUnlinkOnClose(false)
	f, err := lis.File()
	lis.Close()
	if err != nil {
		s.t.Fatalf("listener file: %v", err)
	}
	defer f.Close()
	s.stderr.Reset()
	s.cmd = exec.Command("swtpm", "socket", "--tpm2",
		"--server", "type=unixio,fd=3",
		"--tpmstate", "dir="+s.stateDir,
		"--flags", "not-need-init,startup-clear",
	)
	s.cmd.ExtraFiles = []*os.File{f}
	s.cmd.Stdout = &s.stderr
	s.cmd.Stderr = &s.stderr
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("starting swtpm: %v", err)
	}
}

// stop ends swtpm, which saves its state; start may then run it again.
func (s *swtpm) stop() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-done
		s.t.Errorf("swtpm ignored SIGTERM for 10 s; killed it. Its output:\n%s", s.stderr.String())
	}
	s.cmd = nil
}

// open connects to the software TPM; the TPM is closed when the test ends.
func (s *swtpm) open() *TPM {
	s.t.Helper()
	tp := s.transport()
	tpm := openTransport(tp)
	s.t.Cleanup(func() { tpm.Close() })
	return tpm
}

// transport connects to the software TPM's command socket.
func (s *swtpm) transport() transport.TPMCloser {
	s.t.Helper()
	conn, err := net.Dial("unix", s.sock)
	if err != nil {
		s.t.Fatalf("connecting to swtpm: %v\nits output:\n%s", err, s.stderr.String())
	}
	return &streamTransport{conn: conn}
}

// streamTransport speaks swtpm's command socket: a raw TPM command written
// to a byte stream, answered by a raw TPM response, whose header says how
// long it is.
type streamTransport struct {
	mu   sync.Mutex
	conn io.ReadWriteCloser
}

// maxResponse bounds what a response may announce; TPMs answer at most a few
// KiB.
const maxResponse = 1 << 16

// Send implements transport.TPM.
func (s *streamTransport) Send(cmd []byte) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.conn.Write(cmd); err != nil {
		return nil, fmt.Errorf("writing the command: %w", err)
	}
	// tag (2), size (4), response code (4)
	header := make([]byte, 10)
	if _, err := io.ReadFull(s.conn, header); err != nil {
		return nil, fmt.Errorf("reading the response header: %w", err)
	}
	size := binary.BigEndian.Uint32(header[2:6])
	if size < uint32(len(header)) || size > maxResponse {
		return nil, fmt.Errorf("response announces %d bytes", size)
	}
	rsp := make([]byte, size)
	copy(rsp, header)
	if _, err := io.ReadFull(s.conn, rsp[len(header):]); err != nil {
		return nil, fmt.Errorf("reading the response: %w", err)
	}
	return rsp, nil
}

// Close implements transport.TPMCloser.
func (s *streamTransport) Close() error { return s.conn.Close() }

// recorder is a transport that keeps every byte sent to and received from
// the TPM, to check what crosses the bus.
type recorder struct {
	transport.TPMCloser
	mu      sync.Mutex
	traffic bytes.Buffer
}

// Send implements transport.TPM.
func (r *recorder) Send(cmd []byte) ([]byte, error) {
	rsp, err := r.TPMCloser.Send(cmd)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.traffic.Write(cmd)
	r.traffic.Write(rsp)
	return rsp, err
}

// saw reports whether b crossed the bus, in either direction.
func (r *recorder) saw(b []byte) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Contains(r.traffic.Bytes(), b)
}
