package kubernetes

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/etcdserver"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/pkg/etcdtest"
	"cairn.dev/cairn/pkg/supervisor/supervisortest"
)

// TestEtcdProxyConfinesToPrefix runs the proxy on a real etcd that also
// holds keys of Cairn's, and checks, through a real etcd client on the
// proxy's socket, that every way of reaching keys stays inside the
// prefix: reads and writes see only the apiserver's keys, without the
// prefix; ranges over "everything" and watches over everything see nothing
// else; deletions over everything delete nothing else; what would reach
// every key (snapshots, membership) is refused; and compaction goes
// through, as the apiserver's watch cache needs (an old revision is then
// gone). It runs twice: with KV and Watch through etcd's socket, and in
// process as a node runs it, where they must not reach etcd's gRPC
// server at all.
func TestEtcdProxyConfinesToPrefix(t *testing.T) {
	t.Run("through etcd's socket", func(t *testing.T) { testEtcdProxyConfines(t, false) })
	t.Run("in process", func(t *testing.T) { testEtcdProxyConfines(t, true) })
}

func testEtcdProxyConfines(t *testing.T, inProcess bool) {
	srv := etcdtest.NewServer(t)
	srv.Start(t)
	raw := etcdtest.NewClient(t, srv.Endpoint())
	var server *etcdserver.EtcdServer
	if inProcess {
		server = srv.EtcdServer()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Cairn's keys, around and next to the prefix.
	outside := []string{"curator/ca-key", "a", "\x00", "kubernetes", "kubernetes0", "kubernetes-pki/certs/ca/key", "kubernetes.", "zzz"}
	for _, k := range outside {
		if _, err := raw.Put(ctx, k, "secret"); err != nil {
			t.Fatal(err)
		}
	}
	sock := filepath.Join(t.TempDir(), "etcd.sock")
	watches := etcdCallsStarted(t)["etcdserverpb.Watch"]
	supervisortest.Harness(t, NewEtcdProxy(raw, server, "kubernetes/", sock).Run)
	var cl *clientv3.Client
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		cl, err = clientv3.New(clientv3.Config{Endpoints: []string{"unix://" + sock}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err == nil {
			if _, err = cl.Get(ctx, "probe"); err == nil {
				break
			}
			cl.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("the proxy does not serve: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	defer cl.Close()
	// The proxy's lease half follows etcd's leader with a watch of its
	// own through etcd's socket (grpcproxy's leader check), opened by a
	// goroutine of its own, at times after the proxy first answers: wait
	// for it, so that it is not counted among the calls below.
	for etcdCallsStarted(t)["etcdserverpb.Watch"] == watches {
		if time.Now().After(deadline) {
			t.Fatal("the proxy's lease half never watched etcd's leader")
		}
		time.Sleep(50 * time.Millisecond)
	}

	// In process, the proxy's reads, writes and watches do not cross
	// etcd's gRPC server; through its socket, each does.
	before := etcdCallsStarted(t)
	wctx0, wcancel0 := context.WithCancel(ctx)
	cl.Watch(wctx0, "/registry/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	for range 5 {
		if _, err := cl.Get(ctx, "/registry/none"); err != nil {
			t.Fatalf("Get: %v", err)
		}
	}
	if _, err := cl.Put(ctx, "/registry/counted", "x"); err != nil {
		t.Fatalf("Put: %v", err)
	}
	if _, err := cl.Delete(ctx, "/registry/counted"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	wcancel0()
	after := etcdCallsStarted(t)
	for _, svc := range []string{"etcdserverpb.KV", "etcdserverpb.Watch"} {
		switch n := after[svc] - before[svc]; {
		case inProcess && n != 0:
			t.Errorf("in process, %v calls of %s reached etcd's gRPC server, want none", n, svc)
		case !inProcess && n == 0:
			t.Errorf("through the socket, no call of %s reached etcd's gRPC server", svc)
		}
	}

	// Writes land under the prefix, reads come back without it.
	lease, err := cl.Grant(ctx, 60)
	if err != nil {
		t.Fatalf("Grant: %v", err)
	}
	if _, err := cl.Put(ctx, "/registry/pods/a", "pod", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatalf("Put: %v", err)
	}
	if r, err := raw.Get(ctx, "kubernetes//registry/pods/a"); err != nil || len(r.Kvs) != 1 || r.Kvs[0].Lease != int64(lease.ID) {
		t.Fatalf("the apiserver's key is not stored under the prefix with its lease: %v %v", r, err)
	}
	txn, err := cl.Txn(ctx).If(clientv3.Compare(clientv3.Value("/registry/pods/a"), "=", "pod")).
		Then(clientv3.OpPut("/registry/pods/b", "pod2"), clientv3.OpGet("", clientv3.WithFromKey())).Commit()
	if err != nil || !txn.Succeeded {
		t.Fatalf("Txn: %v %v", txn, err)
	}
	if kvs := txn.Responses[1].GetResponseRange().Kvs; len(kvs) != 2 || string(kvs[0].Key) != "/registry/pods/a" {
		t.Fatalf("a range in a Txn returned %v, want the apiserver's two keys without the prefix", kvs)
	}

	// Every range form stays inside.
	for _, r := range []struct {
		name string
		key  string
		opts []clientv3.OpOption
	}{
		{"from the empty key", "", []clientv3.OpOption{clientv3.WithFromKey()}},
		{"from \\x00", "\x00", []clientv3.OpOption{clientv3.WithFromKey()}},
		{"prefix of everything", "", []clientv3.OpOption{clientv3.WithPrefix()}},
		{"explicit range to the end", "", []clientv3.OpOption{clientv3.WithRange("\x00")}},
		{"range past the prefix", "/", []clientv3.OpOption{clientv3.WithRange("\xff")}},
		{"dot-dot key", "../curator/ca-key", nil},
		{"a key outside by name", "curator/ca-key", nil},
	} {
		res, err := cl.Get(ctx, r.key, r.opts...)
		if err != nil {
			// etcd refuses some of these forms outright, which leaks
			// nothing either.
			t.Logf("Get %s: %v", r.name, err)
			continue
		}
		for _, kv := range res.Kvs {
			if string(kv.Value) == "secret" {
				t.Errorf("Get %s returned Cairn's key %q", r.name, kv.Key)
			}
		}
	}

	// A watch over everything sees the apiserver's writes only.
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	wch := cl.Watch(wctx, "", clientv3.WithFromKey())
	if _, err := raw.Put(ctx, "curator/ca-key", "secret"); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Put(ctx, "/registry/pods/c", "pod3"); err != nil {
		t.Fatal(err)
	}
	select {
	case w := <-wch:
		for _, ev := range w.Events {
			if string(ev.Kv.Key) != "/registry/pods/c" {
				t.Errorf("a watch over everything saw %q", ev.Kv.Key)
			}
		}
	case <-ctx.Done():
		t.Fatal("the watch saw nothing")
	}

	// Progress requests, on which the apiserver's watch cache depends,
	// are answered.
	if err := cl.RequestProgress(wctx); err != nil {
		t.Fatalf("RequestProgress: %v", err)
	}
	for w := range wch {
		if w.IsProgressNotify() {
			break
		}
		if len(w.Events) > 0 {
			t.Errorf("unexpected events %v while waiting for progress", w.Events)
		}
	}

	// Deleting everything deletes only the apiserver's keys.
	if _, err := cl.Delete(ctx, "", clientv3.WithFromKey()); err != nil {
		t.Fatalf("Delete of everything: %v", err)
	}
	for _, k := range outside {
		if r, err := raw.Get(ctx, k); err != nil || len(r.Kvs) != 1 {
			t.Errorf("Cairn's key %q is gone after the apiserver deleted everything: %v", k, err)
		}
	}
	if r, err := raw.Get(ctx, "kubernetes/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || r.Count != 0 {
		t.Errorf("the apiserver's keys survived its delete of everything: %v %v", r, err)
	}

	// Status answers; what reaches every key is refused.
	if _, err := cl.Status(ctx, "unix://"+sock); err != nil {
		t.Errorf("Status: %v", err)
	}
	// The apiserver's compaction: it notes the revision under its key,
	// then compacts there.
	old, err := cl.Put(ctx, "compacted", "before")
	if err != nil {
		t.Fatal(err)
	}
	rev, err := cl.Put(ctx, "compact_rev_key", "0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Compact(ctx, rev.Header.Revision); err != nil {
		t.Errorf("Compact = %v, want the apiserver's compaction to go through", err)
	}
	if _, err := cl.Get(ctx, "compacted", clientv3.WithRev(old.Header.Revision)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Errorf("Get at revision %d after compacting at %d = %v, want %v", old.Header.Revision, rev.Header.Revision, err, rpctypes.ErrCompacted)
	}
	if r, err := raw.Get(ctx, "kubernetes/compact_rev_key"); err != nil || len(r.Kvs) != 1 {
		t.Errorf("the apiserver's compaction key is not under its prefix: %v %v", r, err)
	}
	rc, err := cl.Snapshot(ctx)
	if err == nil {
		_, err = rc.Read(make([]byte, 1))
		rc.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "does not allow snapshots") {
		t.Errorf("Snapshot = %v, want the proxy's refusal", err)
	}
	if _, err := cl.MemberAdd(ctx, []string{"http://127.0.0.1:1"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("MemberAdd = %v, want PermissionDenied", err)
	}
}

// etcdCallsStarted returns the calls etcd's gRPC servers in this process
// have started so far, by service.
func etcdCallsStarted(t *testing.T) map[string]float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatalf("when reading etcd's metrics: %v", err)
	}
	calls := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "grpc_server_started_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "grpc_service" {
					calls[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return calls
}
