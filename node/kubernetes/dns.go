package kubernetes

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/net/dns/dnsmessage"

	"cairn.dev/cairn/node/ports"
	"cairn.dev/cairn/pkg/dnsserver"
	"cairn.dev/cairn/pkg/supervisor"
)

// podPrefix and clusterDNSAddr are PodRange and ClusterDNS, parsed once:
// the DNS server checks every query against them.
var (
	podPrefix      = netip.MustParsePrefix(PodRange)
	clusterDNSAddr = netip.MustParseAddr(ClusterDNS)
)

// runDNS serves the cluster's DNS on the node's address, port 53: the
// names of Services and pods from the zone it keeps (clusterZone), other
// names forwarded to the node's own resolvers. Pods ask ClusterDNS, the
// kube-dns Service, whose endpoints are every worker's DNS with a hint
// that keeps each node's queries on the node (reconciler, dnsEndpoints).
// It reads Services and EndpointSlices as the node's kubelet identity,
// which the reconciler binds to cairn:node-proxier (what
// system:node-proxier allows).
//
//	apiserver ──watch Services, EndpointSlices──▶ clusterZone
//	pod ──10.96.0.10:53──kube-proxy──▶ <node address>:53 ──▶ zone, or
//	                                                  node's resolv.conf
func (w *Worker) runDNS(ctx context.Context) error {
	lg := supervisor.Logger(ctx)
	st := &dnsState{}
	resolvConf := filepath.Join(w.cfg.Layout.Etc, "resolv.conf")
	srv := dnsserver.New(dnsserver.Config{
		Zone:      st.answer,
		Allow:     w.dnsClient,
		Upstreams: func() []netip.AddrPort { return upstreams(resolvConf, w.cfg.IP) },
		Logf:      lg.Warningf,
	})
	addr := netip.AddrPortFrom(w.cfg.IP, ports.ClusterDNS)
	conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
	if err != nil {
		return fmt.Errorf("when listening for DNS on %s/udp: %w", addr, err)
	}
	ln, err := net.Listen("tcp", addr.String())
	if err != nil {
		conn.Close()
		return fmt.Errorf("when listening for DNS on %s/tcp: %w", addr, err)
	}
	err = supervisor.RunGroup(ctx, map[string]supervisor.Runnable{
		"udp":  func(ctx context.Context) error { return srv.ServeUDP(ctx, conn) },
		"tcp":  func(ctx context.Context) error { return srv.ServeTCP(ctx, ln) },
		"zone": func(ctx context.Context) error { return w.runDNSZone(ctx, st) },
	})
	if err != nil {
		conn.Close()
		ln.Close()
		return fmt.Errorf("when starting the DNS server: %w", err)
	}
	lg.Infof("Serving the cluster DNS (%s) on %s", ClusterDomain, addr)
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	<-ctx.Done()
	return ctx.Err()
}

// runDNSZone keeps st's zone: it follows the Services and EndpointSlices
// with a credential of its own, and starts again with a new one when
// that is due for renewal (its children, the followers, end with it).
// The sockets of runDNS stay open meanwhile, and the zone answers as it
// last was.
func (w *Worker) runDNSZone(ctx context.Context, st *dnsState) error {
	cl, cred, err := w.nodeAPIClient(ctx, w.dir("dns"))
	if err != nil {
		return err
	}
	if err := cl.waitReady(ctx, w.cfg.Readiness, supervisor.Logger(ctx).Infof); err != nil {
		return err
	}
	rctx, cancel := context.WithDeadlineCause(ctx, cred.renewAt, errRenew)
	defer cancel()
	err = supervisor.RunGroup(ctx, map[string]supervisor.Runnable{
		"services": func(ctx context.Context) error {
			return follow(ctx, cl, "/api/v1/services", healthyAfter(ctx, st.setServices))
		},
		"endpointslices": func(ctx context.Context) error {
			return follow(ctx, cl, "/apis/discovery.k8s.io/v1/endpointslices", healthyAfter(ctx, st.setEndpointSlices))
		},
	})
	if err != nil {
		return fmt.Errorf("when starting to follow Services and EndpointSlices: %w", err)
	}
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	<-rctx.Done()
	return stopped(ctx)
}

// dnsClient reports whether a may ask the node's DNS: its pods, and the
// node itself (kube-proxy gives the node's own queries to 10.96.0.10 the
// node's address or loopback as their source).
func (w *Worker) dnsClient(a netip.Addr) bool {
	return podPrefix.Contains(a) || a == w.cfg.IP || a.IsLoopback()
}

// dnsState is the cluster zone, rebuilt from the Services and
// EndpointSlices each time either changes. Until both were listed once,
// the zone answers SERVFAIL, so that no pod is told a name is missing
// only because the node has not read it yet.
type dnsState struct {
	mu       sync.Mutex
	services map[string]service
	slices   map[string]endpointSlice
	zone     atomic.Pointer[clusterZone]
}

func (st *dnsState) setServices(m map[string]service) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.services = maps.Clone(m)
	st.rebuild()
	return nil
}

func (st *dnsState) setEndpointSlices(m map[string]endpointSlice) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.slices = maps.Clone(m)
	st.rebuild()
	return nil
}

// rebuild makes the zone anew; st.mu is held.
func (st *dnsState) rebuild() {
	if st.services != nil && st.slices != nil {
		st.zone.Store(newClusterZone(ClusterDomain, st.services, st.slices))
	}
}

// answer is the dnsserver.Zone of the state.
func (st *dnsState) answer(q dnsmessage.Question) (dnsserver.Answer, bool) {
	z := st.zone.Load()
	if z == nil {
		if strings.HasSuffix(dnsserver.Canonical(q.Name.String()), "."+ClusterDomain+".") {
			return dnsserver.Answer{RCode: dnsmessage.RCodeServerFailure}, true
		}
		return dnsserver.Answer{}, false
	}
	return z.answer(q)
}

// upstreams reads the nameservers of the node's resolv.conf, port 53,
// leaving out the cluster DNS and the node's own address, which would
// send a question back here.
func upstreams(resolvConf string, self netip.Addr) []netip.AddrPort {
	b, err := os.ReadFile(resolvConf)
	if err != nil {
		return nil
	}
	var out []netip.AddrPort
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		a, err := netip.ParseAddr(f[1])
		if err != nil || a == clusterDNSAddr || a == self || a.IsLoopback() {
			continue
		}
		out = append(out, netip.AddrPortFrom(a, 53))
	}
	return out
}
