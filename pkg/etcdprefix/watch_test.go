package etcdprefix

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"cairn.dev/cairn/pkg/etcdtest"
)

func TestPrefixEnd(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"kubernetes/", "kubernetes0"},
		{"a\xff", "b"},
		{"\xff\xff", "\x00"},
	} {
		if got := PrefixEnd([]byte(tc.in)); !bytes.Equal(got, []byte(tc.want)) {
			t.Errorf("PrefixEnd(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestWatchConfined watches over everything through the relay of a real
// etcd: it sees the prefix's keys without the prefix and nothing else,
// and progress requests are answered.
func TestWatchConfined(t *testing.T) {
	raw := etcdtest.StartEtcd(t)
	ws, err := NewWatchServer(pb.NewWatchClient(raw.ActiveConnection()), "kubernetes/")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterWatchServer(srv, ws)
	sock := filepath.Join(t.TempDir(), "w.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()
	cl, err := clientv3.New(clientv3.Config{Endpoints: []string{"unix://" + sock}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	wch := cl.Watch(clientv3.WithRequireLeader(ctx), "", clientv3.WithFromKey(), clientv3.WithPrevKV(), clientv3.WithCreatedNotify())
	if w := <-wch; !w.Created {
		t.Fatalf("first response %+v, want the watch created", w)
	}
	for _, k := range []string{"curator/ca-key", "kubernetes", "kubernetes0", "kubernetes/a"} {
		if _, err := raw.Put(ctx, k, "v"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := raw.Put(ctx, "kubernetes/a", "v2"); err != nil {
		t.Fatal(err)
	}
	var seen []string
	for len(seen) < 2 {
		w := <-wch
		if err := w.Err(); err != nil {
			t.Fatal(err)
		}
		for _, ev := range w.Events {
			seen = append(seen, string(ev.Kv.Key))
			if ev.PrevKv != nil && string(ev.PrevKv.Key) != "a" {
				t.Errorf("previous value's key %q, want a", ev.PrevKv.Key)
			}
		}
	}
	if len(seen) != 2 || seen[0] != "a" || seen[1] != "a" {
		t.Errorf("the watch over everything saw %q, want a twice", seen)
	}
	// A progress request is answered with a progress notification.
	if err := cl.RequestProgress(clientv3.WithRequireLeader(ctx)); err != nil {
		t.Fatalf("RequestProgress: %v", err)
	}
	select {
	case w := <-wch:
		if !w.IsProgressNotify() {
			t.Errorf("after RequestProgress got %+v, want a progress notification", w)
		}
	case <-ctx.Done():
		t.Fatal("no progress notification")
	}
}
