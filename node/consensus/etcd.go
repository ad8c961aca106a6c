package consensus

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"cairn.dev/cairn/pkg/supervisor"
)

// startTimeout bounds how long a starting member may take to become ready
// (a joining learner must fetch the cluster's data first).
const startTimeout = 5 * time.Minute

// instance is one started embedded etcd and its local client.
type instance struct {
	e      *embed.Etcd
	client *clientv3.Client
	trap   *fatalTrap
	log    *zap.Logger

	closeOnce sync.Once
}

// close stops the client and etcd. It may be called more than once.
func (i *instance) close() {
	i.closeOnce.Do(func() {
		if i.client != nil {
			i.client.Close()
		}
		i.e.Close()
	})
}

// memberConfig is the configuration of the member in normal operation:
// peers on the node IP with mTLS, trusting the peer CA alone (caFile) and
// refusing what its CRL lists. joining says whether it joins an existing
// cluster for the first time.
func (s *Service) memberConfig(joining bool) *embed.Config {
	peer := url.URL{Scheme: "https", Host: net.JoinHostPort(s.cfg.PeerIP.String(), strconv.Itoa(s.cfg.peerPort()))}
	cfg := s.baseConfig(peer)
	cfg.PeerTLSInfo = transport.TLSInfo{
		CertFile:       s.tlsPath(peerCertFile),
		KeyFile:        s.tlsPath(peerKeyFile),
		TrustedCAFile:  s.tlsPath(caFile),
		CRLFile:        s.tlsPath(crlFile),
		ClientCertAuth: true,
	}
	if joining {
		cfg.ClusterState = embed.ClusterStateFlagExisting
		cfg.InitialCluster = s.cfg.Join.InitialCluster
	}
	return cfg
}

// bootstrapConfig is the configuration of the first start of a new
// cluster: peers on localhost only, without TLS, since the CA that would
// secure them does not exist yet.
func (s *Service) bootstrapConfig() *embed.Config {
	peer := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(s.cfg.peerPort()))}
	cfg := s.baseConfig(peer)
	var token [8]byte
	rand.Read(token[:])
	// A fresh token makes the new cluster's ID unique, so that members of
	// two clusters can never mistake each other.
	cfg.InitialClusterToken = "cairn-" + hex.EncodeToString(token[:])
	// This etcd has one member and lives a few seconds, but its raft
	// waits out an election before it serves: up to a whole election
	// timeout past the tick etcd fast-forwards a lone member to, 0.5 s
	// on average with the default 100 ms ticks. Shorter ticks here put
	// that at 60 ms; the etcd that restarts with peer TLS, which other
	// members join, keeps the defaults.
	cfg.TickMs, cfg.ElectionMs = 20, 100
	return cfg
}

// slowRequest is how long an etcd request takes before etcd's log tells of
// it (logCore drops the shorter ones' traces).
const slowRequest = time.Second

func (s *Service) baseConfig(peer url.URL) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = s.cfg.Name
	cfg.Dir = s.etcdDir()
	sock := url.URL{Scheme: "unix", Path: s.cfg.SocketPath}
	cfg.ListenClientUrls = []url.URL{sock}
	// Clients are local only, so there is nothing to advertise (an empty,
	// non-nil list: etcd refuses nil).
	cfg.AdvertiseClientUrls = []url.URL{}
	cfg.ListenPeerUrls = []url.URL{peer}
	cfg.AdvertisePeerUrls = []url.URL{peer}
	cfg.InitialCluster = fmt.Sprintf("%s=%s", s.cfg.Name, peer.String())
	cfg.ClusterState = embed.ClusterStateFlagNew
	cfg.EnableGRPCGateway = false
	// Cairn's watchers need no history: each starts from a read and
	// reads again when its revision was compacted. With Kubernetes, the
	// apiserver compacts every five minutes (node/kubernetes); this
	// hourly compaction bounds the database of a cluster without one.
	cfg.AutoCompactionMode = "periodic"
	cfg.AutoCompactionRetention = "1h"
	// etcd warns of every request slower than 100 ms (300 ms for a
	// client's call), with the request's content. Under emulation that is
	// most requests: the warnings cost the node CPU it lacks and bury the
	// ones that matter. Zero would warn of every request.
	cfg.WarningApplyDuration = slowRequest
	cfg.WarningUnaryRequestDuration = slowRequest
	cfg.Logger = "zap"
	return cfg
}

// start starts etcd with cfg and waits until it is ready to serve, then
// connects a client to it through the unix socket. With probe set, a member
// that takes long to become ready asks its peers whether it was removed
// (see removalProbe).
func (s *Service) start(ctx context.Context, cfg *embed.Config, probe bool) (inst *instance, err error) {
	trap := newFatalTrap()
	zl := newZapLogger(supervisor.Logger(ctx), trap)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zl)

	if err := os.MkdirAll(filepath.Dir(s.cfg.SocketPath), 0o700); err != nil {
		return nil, fmt.Errorf("when creating socket directory: %w", err)
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("when creating data directory: %w", err)
	}

	// A Fatal logged by etcd while we start it panics back to us.
	trap.setStarting(true)
	defer trap.setStarting(false)
	defer trap.catch(&err, "starting")
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	inst = &instance{e: e, trap: trap, log: zl}
	if err := s.waitReady(ctx, inst, probe); err != nil {
		// Close alone hangs on a server that never became ready: it
		// waits for etcd's serving goroutines, which wait for the
		// server to be ready or stopping. Stop it first.
		e.Server.Stop()
		e.Close()
		return nil, err
	}
	// Only this node's root may use the socket.
	if err := os.Chmod(s.cfg.SocketPath, 0o600); err != nil {
		e.Close()
		return nil, fmt.Errorf("when restricting client socket: %w", err)
	}
	inst.client, err = clientv3.New(clientv3.Config{
		Endpoints:   []string{sock(s.cfg.SocketPath)},
		DialTimeout: 10 * time.Second,
		Logger:      zl.Named("client"),
	})
	if err != nil {
		e.Close()
		return nil, fmt.Errorf("when connecting to etcd: %w", err)
	}
	return inst, nil
}

// waitReady waits until the started etcd is ready to serve. It fails with
// ErrMemberRemoved when etcd stopped because this member was removed, or
// when, with probe set, the peers say so.
func (s *Service) waitReady(ctx context.Context, inst *instance, probe bool) error {
	e := inst.e
	timeout := time.NewTimer(startTimeout)
	defer timeout.Stop()
	var probeC <-chan time.Time
	if probe {
		t := time.NewTicker(probeAfter)
		defer t.Stop()
		probeC = t.C
	}
	var rp *removalProbe
	for {
		select {
		case <-e.Server.ReadyNotify():
			return nil
		case err := <-e.Err():
			return inst.removedOr(fmt.Errorf("while waiting for etcd: %w", err))
		case <-e.Server.StopNotify():
			return inst.removedOr(errors.New("etcd stopped while starting"))
		case <-inst.trap.trapped():
			return fmt.Errorf("etcd failed fatally while starting: %s", inst.trap.message())
		case <-timeout.C:
			return fmt.Errorf("etcd not ready after %v", startTimeout)
		case <-ctx.Done():
			return ctx.Err()
		case <-probeC:
			if rp == nil {
				var err error
				if rp, err = s.newRemovalProbe(inst); err != nil {
					return fmt.Errorf("when preparing to probe the peers: %w", err)
				}
			}
			removed, why := rp.removed(ctx)
			if removed {
				return fmt.Errorf("%w: peers refuse it while it starts (%s)", ErrMemberRemoved, why)
			}
			supervisor.Logger(ctx).Infof("etcd not ready yet; %s", why)
		}
	}
}

// removedOr returns ErrMemberRemoved if etcd stopped because this member
// was removed, err otherwise.
func (i *instance) removedOr(err error) error {
	if i.removed() {
		return fmt.Errorf("%w (%w)", ErrMemberRemoved, err)
	}
	return err
}

// removed tells whether this member was removed: a peer told it so, or
// it applied its own removal. Only valid once the server stopped.
func (i *instance) removed() bool {
	srv := i.e.Server
	return i.trap.wasRemoved() || !srv.IsMemberExist(srv.MemberID())
}

func sock(path string) string {
	u := url.URL{Scheme: "unix", Path: path}
	return u.String()
}
