// Package etcdtest runs real etcd for tests: a single-member server
// embedded in the test binary, its data in the test's temporary directory,
// its clients on a unix socket there and its peer port on loopback. Tests
// of code built on etcd need no etcd binary and no cluster of their own,
// and everything is stopped and removed when the test ends.
//
// StartEtcd is what most tests want: a client to a fresh server. A test
// that stops and restarts etcd under a client uses NewServer.
package etcdtest

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"cairn.dev/cairn/pkg/fixture"
)

// startTimeout bounds how long a server may take to become ready.
const startTimeout = time.Minute

// StartEtcd starts a new server and returns a client to it. Both are
// closed when t ends.
func StartEtcd(t testing.TB) *clientv3.Client {
	t.Helper()
	s := NewServer(t)
	s.Start(t)
	return NewClient(t, s.Endpoint())
}

// Server is an embedded single-member etcd that can be stopped and started
// again on the same data and socket, as a node's etcd restarts under its
// clients.
type Server struct {
	dir  string
	peer url.URL
	e    *embed.Etcd
}

// NewServer prepares a server in t.TempDir() without starting it. It is
// stopped, if running, when t ends.
func NewServer(t testing.TB) *Server {
	t.Helper()
	peer := net.JoinHostPort("127.0.0.1", strconv.Itoa(fixture.FreePort(t)))
	s := &Server{dir: t.TempDir(), peer: url.URL{Scheme: "http", Host: peer}}
	t.Cleanup(s.Stop)
	return s
}

// Endpoint is the address clients reach the server at, running or not.
func (s *Server) Endpoint() string {
	u := s.socket()
	return u.String()
}

func (s *Server) socket() url.URL {
	return url.URL{Scheme: "unix", Path: filepath.Join(s.dir, "c.sock")}
}

// EtcdServer is the running server itself, for in-process clients; nil
// while it is stopped.
func (s *Server) EtcdServer() *etcdserver.EtcdServer {
	if s.e == nil {
		return nil
	}
	return s.e.Server
}

// Start starts the server and waits until it serves, failing the test if
// it does not within a minute.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	e, err := Embed(filepath.Join(s.dir, "data"), s.socket(), s.peer)
	if err != nil {
		t.Fatal(err)
	}
	s.e = e
}

// Embed starts a single-member etcd in this process, its data in dataDir,
// its clients on socket (a unix:// URL) and its peer port at peer, and
// waits until it serves, for at most a minute. The caller closes it.
func Embed(dataDir string, socket, peer url.URL) (*embed.Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Name = "test"
	cfg.Dir = dataDir
	cfg.ListenClientUrls = []url.URL{socket}
	// Clients are local only: nothing to advertise. (Not nil, which etcd
	// refuses.)
	cfg.AdvertiseClientUrls = []url.URL{}
	cfg.ListenPeerUrls = []url.URL{peer}
	cfg.AdvertisePeerUrls = []url.URL{peer}
	cfg.InitialCluster = fmt.Sprintf("%s=%s", cfg.Name, peer.String())
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("when starting etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcd stopped while starting: %w", err)
	case <-time.After(startTimeout):
		e.Close()
		return nil, fmt.Errorf("etcd not ready after %v", startTimeout)
	}
}

// Stop stops the server if it runs. Its data stays for the next Start.
func (s *Server) Stop() {
	if s.e != nil {
		s.e.Close()
		s.e = nil
	}
}

// NewClient returns a client to endpoint, closed when t ends.
func NewClient(t testing.TB, endpoint string) *clientv3.Client {
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

// LeakOptions lets goleak pass the goroutines that embedded etcd and its
// client leave behind after Close: they belong to etcd's dependencies, not
// to the package under test. Use it in TestMain:
//
//	goleak.VerifyTestMain(m, etcdtest.LeakOptions()...)
func LeakOptions() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreTopFunction("github.com/golang/glog.(*fileSink).flushDaemon"),
	}
}
