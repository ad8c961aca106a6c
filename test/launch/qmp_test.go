package launch

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fakeQMP serves one QMP connection on a unix socket the way qemu does and
// records the commands it receives, each with its arguments' JSON after a
// space if it has any. reply answers each command after
// qmp_capabilities; it returns the lines to send, or nil to hang up.
func fakeQMP(t *testing.T, reply func(cmd string) []string) (socket string, got <-chan []string) {
	t.Helper()
	socket = filepath.Join(t.TempDir(), "qmp.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	cmds := make(chan []string, 1)
	go func() {
		var seen []string
		defer func() { cmds <- seen }()
		conn, err := l.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		conn.Write([]byte(`{"QMP": {"version": {"qemu": {"micro": 0, "minor": 2, "major": 7}}, "capabilities": ["oob"]}}` + "\n"))
		r := bufio.NewReader(conn)
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				return
			}
			var req struct {
				Execute   string
				Arguments json.RawMessage
			}
			if err := json.Unmarshal(line, &req); err != nil {
				t.Errorf("client sent bad JSON %q: %v", line, err)
				return
			}
			if req.Arguments != nil {
				seen = append(seen, req.Execute+" "+string(req.Arguments))
			} else {
				seen = append(seen, req.Execute)
			}
			if req.Execute == "qmp_capabilities" {
				conn.Write([]byte(`{"return": {}}` + "\n"))
				continue
			}
			out := reply(req.Execute)
			if out == nil {
				return
			}
			conn.Write([]byte(strings.Join(out, "\n") + "\n"))
		}
	}()
	return socket, cmds
}

func TestQMPExecute(t *testing.T) {
	event := `{"timestamp": {"seconds": 1, "microseconds": 2}, "event": "POWERDOWN"}`
	for _, tc := range []struct {
		name    string
		cmd     string
		eofOK   bool
		reply   []string
		wantErr string
	}{
		{name: "return", cmd: "system_powerdown", reply: []string{`{"return": {}}`}},
		{name: "events before the return", cmd: "system_powerdown", reply: []string{event, event, `{"return": {}}`}},
		{
			name:    "error",
			cmd:     "system_powerdown",
			reply:   []string{`{"error": {"class": "GenericError", "desc": "no way"}}`},
			wantErr: "GenericError: no way",
		},
		{name: "quit hangs up", cmd: "quit", eofOK: true, reply: nil},
		{name: "hang up is an error otherwise", cmd: "system_powerdown", reply: nil, wantErr: "EOF"},
		{name: "garbage", cmd: "quit", reply: []string{`{not json`}, wantErr: "bad QMP message"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			socket, cmds := fakeQMP(t, func(string) []string { return tc.reply })
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := qmpExecute(ctx, socket, tc.cmd, tc.eofOK)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("qmpExecute(%q) = %v, want success", tc.cmd, err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("qmpExecute(%q) = %v, want error containing %q", tc.cmd, err, tc.wantErr)
			}
			if diff := cmp.Diff([]string{"qmp_capabilities", tc.cmd}, <-cmds); diff != "" {
				t.Errorf("commands sent (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAttachDisk: the disk is added read-only as a block node, then as a
// virtio disk on the machine's hotplug port, or as a USB stick on its USB
// controller's bus, on one connection.
func TestAttachDisk(t *testing.T) {
	for _, tc := range []struct {
		name   string
		attach func(*Node, context.Context, string) error
		want   []string
	}{
		{"disk", (*Node).AttachDisk, []string{
			"qmp_capabilities",
			`blockdev-add {"driver":"raw","file":{"driver":"file","filename":"/images/params.img"},"node-name":"attached-disk","read-only":true}`,
			`device_add {"bus":"hotplug0","drive":"attached-disk","driver":"virtio-blk-pci","id":"attached-disk-device"}`,
		}},
		{"stick", (*Node).AttachStick, []string{
			"qmp_capabilities",
			`blockdev-add {"driver":"raw","file":{"driver":"file","filename":"/images/params.img"},"node-name":"attached-stick","read-only":true}`,
			`device_add {"bus":"usb0.0","drive":"attached-stick","driver":"usb-storage","id":"attached-stick-device","removable":true}`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			socket, cmds := fakeQMP(t, func(string) []string { return []string{`{"return": {}}`} })
			n := &Node{name: "node1", qmpSocket: socket}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := tc.attach(n, ctx, "/images/params.img"); err != nil {
				t.Fatalf("attaching: %v", err)
			}
			if diff := cmp.Diff(tc.want, <-cmds); diff != "" {
				t.Errorf("commands sent (-want +got):\n%s", diff)
			}
		})
	}
}

func TestQMPExecuteHonoursContext(t *testing.T) {
	// A server that greets and then answers nothing until the test ends.
	silent := make(chan struct{})
	socket, _ := fakeQMP(t, func(string) []string { <-silent; return nil })
	defer close(silent)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := qmpExecute(ctx, socket, "system_powerdown", false); err == nil {
		t.Error("qmpExecute against a silent qemu succeeded")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("qmpExecute took %v after its context ended", d)
	}
}

// TestDialQMPWaitsForListen binds a socket the way qemu does, listening
// only a moment later: the dial in between is refused, and dialQMP tries
// again until it is accepted.
func TestDialQMPWaitsForListen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "qmp.sock")
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	var d net.Dialer
	if _, err := d.Dial("unix", path); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial before listen = %v, want ECONNREFUSED", err)
	}
	listened := make(chan error, 1)
	time.AfterFunc(200*time.Millisecond, func() { listened <- syscall.Listen(fd, 1) })
	conn, err := dialQMP(context.Background(), path)
	if err != nil {
		t.Fatalf("dialQMP while qemu only binds: %v", err)
	}
	conn.Close()
	if err := <-listened; err != nil {
		t.Fatal(err)
	}
}
