package main

import (
	"bytes"
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cairn.dev/cairn/proto/api"
)

// fakeEndpoint listens on a loopback port and hands every connection it
// accepts to handle, until the test ends; then it closes what handle
// kept open.
func fakeEndpoint(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			handle(c)
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		<-done
	})
	return lis.Addr().String()
}

// silentEndpoint accepts connections and holds them without a word, as a
// port forward to a frozen machine does.
func silentEndpoint(t *testing.T) string {
	var mu sync.Mutex
	var held []net.Conn
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	return fakeEndpoint(t, func(c net.Conn) {
		mu.Lock()
		defer mu.Unlock()
		held = append(held, c)
	})
}

// hangUpEndpoint closes every connection at once, as a port forward whose
// target is gone does.
func hangUpEndpoint(t *testing.T) string {
	return fakeEndpoint(t, func(c net.Conn) { c.Close() })
}

// refusingEndpoint returns a loopback address where nothing listens.
func refusingEndpoint(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// runTimed runs cairnctl with the app changed by configure and returns
// what it printed, how long it took and its error.
func runTimed(t *testing.T, dir string, configure func(*app), args ...string) (string, time.Duration, error) {
	t.Helper()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	err := runApp(ctx, &out, dir, configure, args...)
	return out.String(), time.Since(start), err
}

// TestFailoverToRealCurator stores three endpoints, a silent one first,
// then one that refuses, then a real curator: node list must succeed
// without waiting for the silent endpoint to time out, in whatever order
// the endpoints come.
func TestFailoverToRealCurator(t *testing.T) {
	dir := t.TempDir()
	c := ownedControlPlane(t, dir)
	mustRun(t, dir, "--endpoint", c.Addr, "takeownership")
	runUntilOK(t, dir, "node", "list")

	silent, refused, hangUp := silentEndpoint(t), refusingEndpoint(t), hangUpEndpoint(t)
	// A connect timeout longer than any wait for the real curator: a
	// command that waited for the silent endpoint would show it.
	const connect = 20 * time.Second
	long := func(a *app) { a.connectTimeout = connect }
	for _, order := range [][]string{
		{silent, refused, c.Addr},
		{refused, hangUp, silent, c.Addr},
		{silent, c.Addr, refused},
	} {
		mustRun(t, dir, append([]string{"config", "set-endpoints"}, order...)...)
		out, took, err := runTimed(t, dir, long, "--timeout", "60s", "node", "list")
		names := strings.NewReplacer(silent, "silent", refused, "refusing", hangUp, "hanging-up", c.Addr, "curator").Replace(strings.Join(order, " "))
		t.Logf("node list through endpoints %s: %v", names, took.Round(time.Millisecond))
		if err != nil {
			t.Errorf("node list through endpoints %s: %v", names, err)
			continue
		}
		if !strings.Contains(out, c.Node.ID()) {
			t.Errorf("node list through endpoints %s printed %q, want node %s", names, out, c.Node.ID())
		}
		if took >= connect {
			t.Errorf("node list through endpoints %s took %v: it waited for the silent endpoint (connect timeout %v)", names, took, connect)
		}
	}

	// With only dead endpoints, the command fails within the connect
	// timeout, naming each and why.
	_, took, err := runTimed(t, dir, nil, "--endpoint", silent, "--endpoint", refused, "--endpoint", hangUp, "node", "list")
	t.Logf("node list through dead endpoints failed after %v: %v", took.Round(time.Millisecond), err)
	for _, want := range []string{
		silent + ": it accepted the connection but did not complete the TLS handshake within 2s",
		"cannot reach " + refused + ": dial tcp",
		hangUp + ": it closed the connection before the TLS handshake completed",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("node list through dead endpoints = %v, want an error saying %q", err, want)
		}
	}
}

// TestFailoverAfterSilentCall points cairnctl at a server that completes
// the TLS handshake but never answers a call (a curator forwarding to a
// leader that just died), then at one that answers: the attempt timeout
// gives way to the second, well before --timeout.
func TestFailoverAfterSilentCall(t *testing.T) {
	dir, s := bootstrapped(t, testNode(t, api.NodeState_NODE_STATE_UP, nil, nil, time.Time{}))
	mustRun(t, dir, "--endpoint", s.addr, "takeownership")
	mute := &testServer{ca: s.ca, owner: s.owner, hang: true}
	startTestServer(t, mute)

	const attempt = time.Second
	short := func(a *app) { a.attemptTimeout = attempt }
	out, took, err := runTimed(t, dir, short, "--timeout", "60s", "--endpoint", mute.addr, "--endpoint", s.addr, "node", "list")
	t.Logf("node list through a mute server, then an answering one: %v", took.Round(time.Millisecond))
	if err != nil {
		t.Fatalf("node list through a mute server, then an answering one: %v", err)
	}
	if n := strings.Count(out, "\n"); n != 2 {
		t.Errorf("node list printed %q, want a header and one node", out)
	}
	if took < attempt || took > 30*time.Second {
		t.Errorf("node list took %v, want one attempt timeout (%v) and not the whole --timeout", took, attempt)
	}

	// Alone, the mute server fails the command at --timeout, saying so.
	_, _, err = runTimed(t, dir, short, "--timeout", "3s", "--endpoint", mute.addr, "node", "list")
	if err == nil || !strings.Contains(err.Error(), "did not answer in time") || !strings.Contains(err.Error(), "attempts") {
		t.Errorf("node list through a mute server alone = %v, want it to say it did not answer after several attempts", err)
	}
}

// TestPerNodeCommandOnDeadNode aims per-node commands at a node whose
// management port accepts connections and never answers: they fail
// within the connect timeout, naming the node.
func TestPerNodeCommandOnDeadNode(t *testing.T) {
	dir, s := bootstrapped(t)
	up := nodeRecord(s.ident.PublicKey(), api.NodeState_NODE_STATE_UP, nil, nil, time.Time{})
	s.setNodes(up)
	mustRun(t, dir, "--endpoint", s.addr, "takeownership")
	silent := silentEndpoint(t)
	mustRun(t, dir, "config", "set-node-endpoint", up.Id+"="+silent)
	for _, args := range [][]string{
		{"node", "reboot", up.Id},
		{"logs", up.Id},
	} {
		_, took, err := runTimed(t, dir, nil, args...)
		t.Logf("cairnctl %s against a dead node failed after %v: %v", strings.Join(args, " "), took.Round(time.Millisecond), err)
		if err == nil || !strings.Contains(err.Error(), "did not complete the TLS handshake within 2s") || !strings.Contains(err.Error(), "is node "+up.Id+" down or frozen?") {
			t.Errorf("cairnctl %s against a dead node = %v, want it to say the node does not answer", strings.Join(args, " "), err)
		}
		if took > 10*time.Second {
			t.Errorf("cairnctl %s against a dead node took %v, want about the connect timeout (2s)", strings.Join(args, " "), took)
		}
	}
	// Cluster-wide commands about it still work.
	if out := mustRun(t, dir, "node", "describe", up.Id); !strings.Contains(out, up.Id) {
		t.Errorf("node describe of the dead node printed %q", out)
	}
}

func TestToBack(t *testing.T) {
	for _, tc := range []struct {
		eps, last, want []string
	}{
		{[]string{"a", "b", "c"}, []string{"a"}, []string{"b", "c", "a"}},
		{[]string{"a", "b", "c"}, []string{"c", "a"}, []string{"b", "a", "c"}},
		{[]string{"a", "b"}, nil, []string{"a", "b"}},
		{[]string{"a"}, []string{"x"}, []string{"a"}},
	} {
		if got := toBack(tc.eps, tc.last); !slices.Equal(got, tc.want) {
			t.Errorf("toBack(%q, %q) = %q, want %q", tc.eps, tc.last, got, tc.want)
		}
	}
}
