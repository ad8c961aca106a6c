package nodemanagement

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"cairn.dev/cairn/node/logstore"
	"cairn.dev/cairn/node/logstore/logstoretest"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/proto/api"
)

// testTree logs, in this order: root.a INFO "a1", root.a.b WARNING "b1",
// root.c ERROR "c1", root.a raw "a2", root.a.b INFO "b2".
func testTree(t *testing.T) *logtree.LogTree {
	t.Helper()
	lt := logtree.New()
	lt.LeveledFor("root.a").Info("a1")
	lt.LeveledFor("root.a.b").Warning("b1")
	lt.LeveledFor("root.c").Error("c1")
	raw := lt.RawFor("root.a")
	if _, err := io.WriteString(raw, "a2\n"); err != nil {
		t.Fatalf("raw write: %v", err)
	}
	raw.Close()
	lt.LeveledFor("root.a.b").Info("b2")
	return lt
}

// recvAll reads a Logs stream to its end and returns its entries as
// "dn message" strings, and how many messages carried them.
func recvAll(t *testing.T, stream grpc.ServerStreamingClient[api.LogsResponse]) ([]string, int, error) {
	t.Helper()
	var got []string
	n := 0
	for {
		rsp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return got, n, nil
		}
		if err != nil {
			return got, n, err
		}
		n++
		got = append(got, short(rsp.GetEntries())...)
	}
}

func short(entries []*api.LogEntry) []string {
	var out []string
	for _, e := range entries {
		out = append(out, e.GetDn()+" "+e.GetMessage())
	}
	return out
}

// TestLogsBacklog reads the same entries from the running boot's log tree
// and, kept by node/logstore, as a past boot's: the request's logger,
// severity and backlog select the same ones.
func TestLogsBacklog(t *testing.T) {
	dir := t.TempDir()
	logstoretest.Boot(t, logstore.Config{Tree: testTree(t), Dir: dir}, func() {})
	// The running boot's own file, which Logs never reads: the live
	// tree has its entries.
	running := logtree.New()
	running.LeveledFor("root.a").Info("the running boot")
	store := logstoretest.Boot(t, logstore.Config{Tree: running, Dir: dir}, func() {})
	client := serve(t, New(Config{LogTree: testTree(t), LogStore: store})).owner(t)
	for _, tc := range []struct {
		name string
		req  *api.LogsRequest
		want []string
	}{
		{"one node", &api.LogsRequest{Dn: "root.a", Backlog: -1}, []string{"root.a a1", "root.a a2"}},
		{"with children", &api.LogsRequest{Dn: "root.a", WithChildren: true, Backlog: -1},
			[]string{"root.a a1", "root.a.b b1", "root.a a2", "root.a.b b2"}},
		{"whole tree", &api.LogsRequest{WithChildren: true, Backlog: -1},
			[]string{"root.a a1", "root.a.b b1", "root.c c1", "root.a a2", "root.a.b b2"}},
		{"newest two", &api.LogsRequest{WithChildren: true, Backlog: 2}, []string{"root.a a2", "root.a.b b2"}},
		{"no backlog", &api.LogsRequest{WithChildren: true, Backlog: 0}, nil},
		{"warnings and worse", &api.LogsRequest{WithChildren: true, Backlog: -1, MinimumSeverity: api.LogSeverity_LOG_SEVERITY_WARNING},
			[]string{"root.a.b b1", "root.c c1"}},
		{"errors and worse", &api.LogsRequest{WithChildren: true, Backlog: -1, MinimumSeverity: api.LogSeverity_LOG_SEVERITY_ERROR},
			[]string{"root.c c1"}},
		{"a node nothing logged to", &api.LogsRequest{Dn: "root.nothing", Backlog: -1}, nil},
	} {
		for _, boot := range []int32{0, -1} {
			t.Run(fmt.Sprintf("%s, boot %d", tc.name, boot), func(t *testing.T) {
				req := proto.Clone(tc.req).(*api.LogsRequest)
				req.Boot = boot
				stream, err := client.Logs(t.Context(), req)
				if err != nil {
					t.Fatalf("Logs: %v", err)
				}
				got, _, err := recvAll(t, stream)
				if err != nil {
					t.Fatalf("Logs(%v): %v", req, err)
				}
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("Logs(%v) (-want +got):\n%s", req, diff)
				}
			})
		}
	}
}

// TestLogsPastBootErrors checks the answers for past boots that cannot
// be read as asked.
func TestLogsPastBootErrors(t *testing.T) {
	store := logstoretest.Boot(t, logstore.Config{Tree: testTree(t), Dir: t.TempDir()}, func() {})
	client := serve(t, New(Config{LogTree: testTree(t), LogStore: store})).owner(t)
	// The store holds only the running boot: none before it.
	without := serve(t, New(Config{LogTree: testTree(t)})).owner(t)
	for _, tc := range []struct {
		client api.NodeManagementClient
		req    *api.LogsRequest
		want   codes.Code
	}{
		{client, &api.LogsRequest{Backlog: -1, Boot: -1}, codes.NotFound},
		{client, &api.LogsRequest{Backlog: -1, Boot: 1}, codes.InvalidArgument},
		{client, &api.LogsRequest{Backlog: -1, Boot: -1, Follow: true}, codes.InvalidArgument},
		{client, &api.LogsRequest{Dn: "root..a", Backlog: -1, Boot: -1}, codes.InvalidArgument},
		{client, &api.LogsRequest{Backlog: -3, Boot: -1}, codes.InvalidArgument},
		{without, &api.LogsRequest{Backlog: -1, Boot: -1}, codes.Unavailable},
	} {
		stream, err := tc.client.Logs(t.Context(), tc.req)
		if err == nil {
			_, _, err = recvAll(t, stream)
		}
		if status.Code(err) != tc.want {
			t.Errorf("Logs(%v) = %v, want %v", tc.req, err, tc.want)
		}
	}
}

// TestLogsEntryFields checks that every field of an entry arrives as the
// log tree holds it.
func TestLogsEntryFields(t *testing.T) {
	lt := testTree(t)
	r, err := lt.Read("root.a", logtree.WithBacklog(logtree.BacklogAll))
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	r.Close()
	var want []*api.LogEntry
	for _, e := range r.Backlog {
		want = append(want, &api.LogEntry{
			TimeUnixNanos: e.Time.UnixNano(),
			Dn:            string(e.DN),
			Severity:      api.LogSeverity_LOG_SEVERITY_INFO,
			File:          e.File,
			Line:          int32(e.Line),
			Message:       e.Message,
			Raw:           e.Raw,
		})
	}
	if want[0].File != "logs_test.go" || want[0].Line == 0 || !want[1].Raw {
		t.Fatalf("the test tree is not what this test expects: %v", want)
	}

	stream, err := serve(t, New(Config{LogTree: lt})).owner(t).Logs(t.Context(), &api.LogsRequest{Dn: "root.a", Backlog: -1})
	if err != nil {
		t.Fatalf("Logs: %v", err)
	}
	rsp, err := stream.Recv()
	if err != nil {
		t.Fatalf("Recv: %v", err)
	}
	if diff := cmp.Diff(want, rsp.GetEntries(), protocmp.Transform()); diff != "" {
		t.Errorf("Logs entries (-want +got):\n%s", diff)
	}
}

func TestLogsInvalidArgument(t *testing.T) {
	client := serve(t, New(Config{LogTree: testTree(t)})).owner(t)
	for _, req := range []*api.LogsRequest{
		{Backlog: -2},
		{Dn: "root..a", Backlog: -1},
		{Dn: ".root", Backlog: -1},
		{Dn: "root.", Follow: true},
		{Backlog: -1, MinimumSeverity: api.LogSeverity(99)},
	} {
		stream, err := client.Logs(t.Context(), req)
		if err == nil {
			_, _, err = recvAll(t, stream)
		}
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("Logs(%v) = %v, want InvalidArgument", req, err)
			continue
		}
		t.Logf("Logs(%v): %v", req, err)
	}
}

func TestLogsBatches(t *testing.T) {
	lt := logtree.New(logtree.WithNodeBacklog(2000))
	l := lt.LeveledFor("root")
	for i := range 1000 {
		l.Infof("entry %d", i)
	}
	// Large entries fill a batch by bytes before they reach the count.
	big := strings.Repeat("x", 100<<10)
	for range 5 {
		l.Info(big)
	}
	stream := newFakeStream(t.Context())
	if err := New(Config{LogTree: lt}).Logs(&api.LogsRequest{Dn: "root", Backlog: -1}, stream); err != nil {
		t.Fatalf("Logs: %v", err)
	}
	entries := stream.entries()
	if len(entries) != 1005 {
		t.Fatalf("Logs sent %d entries, want 1005", len(entries))
	}
	for i := range 1000 {
		if want := fmt.Sprintf("entry %d", i); entries[i].GetMessage() != want {
			t.Fatalf("entry %d = %q, want %q", i, entries[i].GetMessage(), want)
		}
	}
	var sizes []int
	for _, m := range stream.messages() {
		sizes = append(sizes, len(m.GetEntries()))
	}
	// 1000 small entries: 3 full batches and 232 left, to which two big
	// ones fit, then two batches of two big ones and one of the last.
	if diff := cmp.Diff([]int{256, 256, 256, 234, 2, 1}, sizes); diff != "" {
		t.Errorf("batch sizes (-want +got):\n%s", diff)
	}
}

// TestLogsFollow streams while loggers log, over gRPC: every entry logged
// after the stream is in place arrives, in order, and entries of other
// nodes or below the minimum severity do not.
func TestLogsFollow(t *testing.T) {
	lt := logtree.New()
	lt.LeveledFor("root.old").Info("before")
	client := serve(t, New(Config{LogTree: lt})).owner(t)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stream, err := client.Logs(ctx, &api.LogsRequest{
		Dn: "root", WithChildren: true, Backlog: -1, Follow: true,
		MinimumSeverity: api.LogSeverity_LOG_SEVERITY_WARNING,
	})
	if err != nil {
		t.Fatalf("Logs: %v", err)
	}
	if _, err := stream.Header(); err != nil {
		t.Fatalf("Header: %v", err)
	}

	const n = 300
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			lt.LeveledFor("root.x").Warningf("w%d", i)
			lt.LeveledFor("root.x").Infof("quiet %d", i)
			lt.LeveledFor("elsewhere").Errorf("e%d", i)
		}
	}()
	var got []string
	for len(got) < n {
		rsp, err := stream.Recv()
		if err != nil {
			t.Fatalf("Recv after %d entries: %v", len(got), err)
		}
		got = append(got, short(rsp.GetEntries())...)
	}
	<-done
	var want []string
	for i := range n {
		want = append(want, fmt.Sprintf("root.x w%d", i))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("followed entries (-want +got):\n%s", diff)
	}

	cancel()
	if _, err := stream.Recv(); status.Code(err) != codes.Canceled {
		t.Errorf("Recv after cancel = %v, want Canceled", err)
	}
}

// TestLogsFollowEndsOnCancel calls the handler directly: when the caller
// goes away, Logs returns nil.
func TestLogsFollowEndsOnCancel(t *testing.T) {
	lt := logtree.New()
	ctx, cancel := context.WithCancel(t.Context())
	stream := newFakeStream(ctx)
	done := make(chan error, 1)
	go func() {
		// The whole backlog too, so that "hello" arrives whether it is
		// logged before the handler reads or after.
		done <- New(Config{LogTree: lt}).Logs(&api.LogsRequest{Dn: "root", Backlog: -1, Follow: true}, stream)
	}()
	lt.LeveledFor("root").Info("hello")
	<-stream.sent
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Logs after cancel = %v, want nil", err)
	}
	if diff := cmp.Diff([]string{"root hello"}, short(stream.entries())); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
}

// TestLogsNeverBlocksLoggers stalls the stream and logs more than any
// buffer holds: the loggers finish regardless, and once the stream moves
// again the caller hears that entries were lost.
func TestLogsNeverBlocksLoggers(t *testing.T) {
	lt := logtree.New()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stream := newFakeStream(ctx)
	stream.blocked = make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- New(Config{LogTree: lt}).Logs(&api.LogsRequest{Dn: "root", Follow: true}, stream)
	}()
	<-stream.headers

	logged := make(chan struct{})
	go func() {
		defer close(logged)
		for i := range 10000 {
			lt.LeveledFor("root").Infof("entry %d", i)
		}
	}()
	select {
	case <-logged:
	case <-time.After(time.Minute):
		t.Fatalf("loggers still blocked after a minute by a stalled stream")
	}

	// An entry logged while the stream's buffer is still full is lost
	// too, so log "last" until one gets through.
	close(stream.blocked)
	for !hasMessage(stream.entries(), "last") {
		lt.LeveledFor("root").Info("last")
		select {
		case <-stream.sent:
		case <-time.After(100 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Logs = %v, want nil", err)
	}
	var warned bool
	for _, e := range stream.entries() {
		warned = warned || e.GetSeverity() == api.LogSeverity_LOG_SEVERITY_WARNING
	}
	if !warned {
		t.Errorf("no WARNING entry told the caller that entries were lost")
	}
}

func hasMessage(entries []*api.LogEntry, msg string) bool {
	for _, e := range entries {
		if e.GetMessage() == msg {
			return true
		}
	}
	return false
}

func TestLogsWithoutLogTree(t *testing.T) {
	stream, err := serve(t, New(Config{})).owner(t).Logs(t.Context(), &api.LogsRequest{Backlog: -1})
	if err == nil {
		_, _, err = recvAll(t, stream)
	}
	if status.Code(err) != codes.Unavailable {
		t.Errorf("Logs without a log tree = %v, want Unavailable", err)
	}
}
