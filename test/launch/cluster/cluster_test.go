package cluster

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"cairn.dev/cairn/node/marker"
	"cairn.dev/cairn/test/launch/l2switch"
)

func TestParseNodeList(t *testing.T) {
	for _, tc := range []struct {
		name string
		json string
		want []NodeInfo
	}{
		{
			name: "protojson of GetNodesResponse",
			json: `{"nodes":[{"id":"cairn-00000000000000bb","state":"NODE_STATE_NEW"},
				{"id":"cairn-00000000000000aa","state":"NODE_STATE_UP","roles":{"consensusMember":{}},
				 "status":{"externalAddress":"10.42.0.10"},"health":"NODE_HEALTH_HEALTHY"}]}`,
			want: []NodeInfo{
				{ID: "cairn-00000000000000aa", State: "UP", Roles: []string{"ConsensusMember"}, Health: "HEALTHY"},
				{ID: "cairn-00000000000000bb", State: "NEW"},
			},
		},
		{
			name: "list with role names",
			json: `[{"id":"cairn-00000000000000aa","state":"UP","roles":["ConsensusMember","KubernetesWorker"],"health":"HEARTBEAT_TIMEOUT"}]`,
			want: []NodeInfo{
				{ID: "cairn-00000000000000aa", State: "UP", Roles: []string{"ConsensusMember", "KubernetesWorker"}, Health: "HEARTBEAT_TIMEOUT"},
			},
		},
		{
			name: "snake case roles, one unset",
			json: `{"nodes":[{"id":"cairn-00000000000000aa","state":"up","roles":{"consensus_member":{},"kubernetes_worker":null}}]}`,
			want: []NodeInfo{{ID: "cairn-00000000000000aa", State: "UP", Roles: []string{"ConsensusMember"}}},
		},
		{name: "empty list", json: `{"nodes":[]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseNodeList([]byte(tc.json))
			if err != nil {
				t.Fatalf("ParseNodeList: %v", err)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(NodeInfo{}, "Raw"), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("ParseNodeList(%s) (-want +got):\n%s", tc.json, diff)
			}
		})
	}
	for _, bad := range []string{``, `not json`, `{"x":1}`} {
		if got, err := ParseNodeList([]byte(bad)); err == nil {
			t.Errorf("ParseNodeList(%q) = %+v, want an error", bad, got)
		}
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"node":                  "node",
		"/out/cairnctl":         "/out/cairnctl",
		"cairn-0a=127.0.0.1:80": "cairn-0a=127.0.0.1:80",
		"":                      "''",
		"a b":                   "'a b'",
		"it's":                  `'it'\''s'`,
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestMessage(t *testing.T) {
	for in, want := range map[string]string{
		"I1123 10:27:00.123456 root.cluster enrol.go:42] @cairn-mark committed node=cairn-00": "@cairn-mark committed node=cairn-00",
		"[    3.99] cairn: init started": "cairn: init started",
		"no header":                      "no header",
	} {
		if got := Message(in); got != want {
			t.Errorf("Message(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestNodeID(t *testing.T) {
	const id = "cairn-0123456789abcdef"
	for line, want := range map[string]string{
		"I1123 x.go:1] " + marker.Format(marker.Bootstrapped, "node", id):                           id,
		"I1123 x.go:1] " + marker.Format(marker.Registering, "node", id):                            id,
		"I1123 x.go:1] " + marker.Format(marker.WaitingForApproval, "node", id):                     id,
		"I1123 x.go:1] " + marker.Format(marker.Committed, "node", id):                              id,
		"I1123 x.go:1] " + marker.Format(marker.Joined, "node", id, "via", "cold-start"):            id,
		"I1123 x.go:1] " + marker.Format(marker.CuratorServing, "addr", "10.42.0.10:7833"):          "",
		"I1123 x.go:1] " + marker.Format(marker.Committed):                                          "",
		"I1123 x.go:1] committed as " + id:                                                          "",
		"I1123 x.go:1] " + marker.Format(marker.Name("following-leader"), "node", "cairn-00000000"): "",
	} {
		named := want != ""
		if got, ok := nodeID(line); got != want || ok != named {
			t.Errorf("nodeID(%q) = %q, %v, want %q, %v", line, got, ok, want, named)
		}
		if got := idLine.MatchString(line); got != named {
			t.Errorf("idLine.MatchString(%q) = %v, want %v", line, got, named)
		}
	}
}

func TestProgressLine(t *testing.T) {
	for line, want := range map[string]bool{
		"[    3.99] cairn: init started (kernel 6.1)":                        true,
		"[    4.10] cairn: network address 10.42.0.10/24":                    true,
		"I1123 x.go:1] " + marker.Format(marker.CuratorLeading):              true,
		"I1123 x.go:1] " + marker.Format(marker.Roles, "roles", ""):          true,
		"panic: runtime error":                                               true,
		"[ 1234.21] reboot: machine restart":                                 true,
		`BdsDxe: starting Boot0003 "Cairn system-b" from HD(1,GPT,...)`:      true,
		"I1123 x.go:1] following leader cairn-0123456789abcdef":              false,
		"I1123 x.go:1] etcd member 8e9e05c52164694d (cairn-01) running, ...": false,
	} {
		if got := progressLine.MatchString(line); got != want {
			t.Errorf("progressLine.MatchString(%q) = %v, want %v", line, got, want)
		}
	}
}

func TestPrefixWriter(t *testing.T) {
	var out bytes.Buffer
	w := &prefixWriter{w: &out, prefix: "node1| "}
	for _, chunk := range []string{"first li", "ne\nsecond\nthi", "rd\n", "partial"} {
		w.Write([]byte(chunk))
	}
	want := "node1| first line\nnode1| second\nnode1| third\n"
	if out.String() != want {
		t.Errorf("prefixed console = %q, want %q", out.String(), want)
	}
}

// TestNewForwardsEveryNode makes a cluster's network without booting
// anything: every node, spare ones too, has two forwards that listen on
// the host's loopback, at fixed ports when asked, and Close removes them.
func TestNewForwardsEveryNode(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("creating a network namespace needs root")
	}
	dir := t.TempDir()
	c, err := New(Config{Nodes: 2, Spare: 1, Image: "img", Cairnctl: "cairnctl", Dir: dir, HostPortBase: 27800})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if got := len(c.Nodes()); got != 2 {
		t.Errorf("Nodes() has %d nodes, want 2", got)
	}
	want := map[string]string{
		"node0": "127.0.0.1:27833 127.0.0.1:27835",
		"node1": "127.0.0.1:27933 127.0.0.1:27935",
		"node2": "127.0.0.1:28033 127.0.0.1:28035",
	}
	for i := range 3 {
		n := c.Node(i)
		if got := n.CuratorAddr() + " " + n.ManagementAddr(); got != want[n.Name()] {
			t.Errorf("forwards of %s = %s, want %s", n.Name(), got, want[n.Name()])
		}
		conn, err := net.Dial("tcp", n.CuratorAddr())
		if err != nil {
			t.Errorf("dialing the forward of %s: %v", n.Name(), err)
		} else {
			conn.Close()
		}
	}
	line := c.CommandLine("node", "list")
	if !strings.Contains(line, "--config "+filepath.Join(dir, "cairnctl")+" node list") {
		t.Errorf("CommandLine = %q, want the config dir and the command", line)
	}
	flags := strings.Join(c.globalFlags(1), " ")
	if !strings.Contains(flags, "--endpoint 127.0.0.1:27933 --endpoint 127.0.0.1:27833") || strings.Contains(flags, "28033") {
		t.Errorf("flags through node 1 = %q, want node 1's curator first, then node 0's, and no spare node's", flags)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if conn, err := net.Dial("tcp", "127.0.0.1:27833"); err == nil {
		conn.Close()
		t.Errorf("the forward to node 0 still listens after Close")
	}
}

// TestStoreContextNeedsAName checks that a cluster without a context name,
// as the tests make them, never writes the user's cairnctl configuration.
func TestStoreContextNeedsAName(t *testing.T) {
	c := &Cluster{cfg: Config{Cairnctl: "/nonexistent/cairnctl"}, configDir: t.TempDir()}
	if err := c.StoreContext(context.Background()); err == nil || !strings.Contains(err.Error(), "no context name") {
		t.Errorf("StoreContext without Config.Context = %v, want a refusal", err)
	}
}

// TestNetChaosEnv checks that CAIRN_NET_CHAOS puts a cluster on the
// harness's switch when its Config names no profile, and that a Config's
// own profile wins.
func TestNetChaosEnv(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("creating a network namespace needs root")
	}
	cfg := Config{Nodes: 1, Image: "img", Cairnctl: "cairnctl", Dir: t.TempDir()}

	t.Setenv(NetChaosEnv, "delay=5ms,loss=1%,seed=9")
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New with %s set: %v", NetChaosEnv, err)
	}
	if sw := c.Network().Switch(); sw == nil || len(sw.Ports()) != 2 {
		t.Errorf("with %s set, the network's switch is %v, want one with a port for the node and the host", NetChaosEnv, sw)
	}
	if got, want := c.Config().Switch.String(), "delay=5ms,loss=1%,seed=9"; got != want {
		t.Errorf("Config().Switch = %q, want %q", got, want)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}

	own := l2switch.Profile{Impairment: l2switch.Impairment{Delay: time.Millisecond}}
	cfg.Switch = &own
	c, err = New(cfg)
	if err != nil {
		t.Fatalf("New with a profile: %v", err)
	}
	if p := c.Config().Switch; p.Delay != time.Millisecond || p.Loss != 0 || p.Seed == 0 {
		t.Errorf("Config().Switch = %v, want the Config's own profile with a seed picked", p)
	}
	c.Close()

	t.Setenv(NetChaosEnv, "loss=lots")
	cfg.Switch = nil
	if c, err := New(cfg); err == nil || !strings.Contains(err.Error(), NetChaosEnv) {
		if c != nil {
			c.Close()
		}
		t.Errorf("New with %s=loss=lots = %v, want an error naming the variable", NetChaosEnv, err)
	}
}

// TestReleaseKeyBeside: the release key beside the image is trusted when
// make release wrote it, and its absence is no error.
func TestReleaseKeyBeside(t *testing.T) {
	dir := t.TempDir()
	image := filepath.Join(dir, "cairn.img")
	if got, err := releaseKeyBeside(image); got != "" || err != nil {
		t.Errorf("releaseKeyBeside without %s = %q, %v, want none", ReleaseKeyFile, got, err)
	}
	want := filepath.Join(dir, ReleaseKeyFile)
	if err := os.WriteFile(want, []byte("cairn-release-ed25519:...\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := releaseKeyBeside(image); got != want || err != nil {
		t.Errorf("releaseKeyBeside with %s = %q, %v, want %q", ReleaseKeyFile, got, err, want)
	}
}
