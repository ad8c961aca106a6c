package etcd

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/goleak"
	"go.uber.org/zap"
)

// startEtcd runs a single-member etcd in t.TempDir(), clients on a unix
// socket, and returns a client to it. Both are closed when t ends.
func startEtcd(t testing.TB) *clientv3.Client {
	t.Helper()
	s := newTestServer(t)
	s.start(t)
	return newClient(t, s.endpoint())
}

// testServer is an embedded single-member etcd that can be stopped and
// started again on the same data and socket.
type testServer struct {
	dir  string
	peer url.URL
	e    *embed.Etcd
}

func newTestServer(t testing.TB) *testServer {
	s := &testServer{dir: t.TempDir(), peer: url.URL{Scheme: "http", Host: freeAddr(t)}}
	t.Cleanup(s.stop)
	return s
}

func (s *testServer) endpoint() string {
	u := url.URL{Scheme: "unix", Path: filepath.Join(s.dir, "c.sock")}
	return u.String()
}

func (s *testServer) start(t testing.TB) {
	t.Helper()
	sock := url.URL{Scheme: "unix", Path: filepath.Join(s.dir, "c.sock")}
	cfg := embed.NewConfig()
	cfg.Name = "test"
	cfg.Dir = filepath.Join(s.dir, "data")
	cfg.ListenClientUrls = []url.URL{sock}
	// Clients are local only: nothing to advertise. (Not nil, which etcd
	// refuses.)
	cfg.AdvertiseClientUrls = []url.URL{}
	cfg.ListenPeerUrls = []url.URL{s.peer}
	cfg.AdvertisePeerUrls = []url.URL{s.peer}
	cfg.InitialCluster = fmt.Sprintf("%s=%s", cfg.Name, s.peer.String())
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("StartEtcd: %v", err)
	}
	s.e = e
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(time.Minute):
		t.Fatal("etcd not ready after a minute")
	}
}

func (s *testServer) stop() {
	if s.e != nil {
		s.e.Close()
		s.e = nil
	}
}

func newClient(t testing.TB, endpoint string) *clientv3.Client {
	t.Helper()
	cl, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 10 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatalf("clientv3.New: %v", err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// freeAddr returns a 127.0.0.1 address with a port that was free a moment
// ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

// etcdLeaks lists goroutines that embedded etcd and its client leave behind
// after Close: they belong to etcd and grpc, not to this package.
func etcdLeaks() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreTopFunction("github.com/golang/glog.(*fileSink).flushDaemon"),
	}
}
