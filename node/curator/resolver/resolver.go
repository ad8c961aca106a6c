package resolver

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/resolver"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/ports"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/event/memory"
	api "cairn.dev/cairn/proto/api"
)

// Scheme is the URI scheme of the targets the Resolver resolves. Dial builds
// the target; other code never needs to spell it.
const Scheme = "cairn-curator"

// Resolver follows the curator leadership of one cluster on behalf of the
// ClientConns dialled through it. Run it under a supervisor; until it has
// heard of a leader, ClientConns are given every known endpoint.
type Resolver struct {
	creds credentials.TransportCredentials
	seeds []string

	// known wakes Run when endpoints appear while it knows none.
	known memory.Value[[]string]

	// probeInterval and probeTimeout pace the liveness probe of the
	// curator Run follows; tests shorten them.
	probeInterval time.Duration
	probeTimeout  time.Duration

	// mu guards everything below, and orders the updates sent to the
	// ClientConns.
	mu sync.Mutex
	// local is the endpoint of SetLocal, "" when none.
	local string
	// curators are the endpoints of SetCurators.
	curators []string
	// heard are the leaders GetCurrentLeader named, in the order heard.
	heard []string
	// leader is the current leader's host:port, "" while unknown.
	leader string
	// fallback is set while ClientConns should also try the endpoints
	// other than the leader: the session that told us about the leader
	// ended, or gRPC asked to resolve again after a failure.
	fallback bool
	// next is the index in endpoints of the endpoint Run tries next.
	next int
	// failed is the endpoint of the last session that failed (Run), ""
	// while none has; nextEndpoint passes over it.
	failed string
	conns  map[*ccResolver]struct{}
}

// New returns a Resolver that authenticates as node and starts from the
// curator endpoints seeds ("host:port"), usually those of the cluster
// directory (see DirectoryEndpoints).
func New(node *identity.Node, seeds []string) *Resolver {
	r := &Resolver{
		creds:         rpc.NodeCredentials(node),
		seeds:         dedup(seeds),
		probeInterval: 5 * time.Second,
		probeTimeout:  3 * time.Second,
		conns:         make(map[*ccResolver]struct{}),
	}
	r.known.Set(r.endpointsLocked())
	return r
}

// DirectoryEndpoints returns the curator endpoints of a cluster directory:
// every address of every node, on port (ports.Curator when zero).
func DirectoryEndpoints(dir *api.ClusterDirectory, port int) []string {
	if port == 0 {
		port = ports.Curator
	}
	var eps []string
	for _, n := range dir.GetNodes() {
		for _, a := range n.GetAddresses() {
			if a.GetHost() != "" {
				eps = append(eps, ports.Join(a.GetHost(), port))
			}
		}
	}
	return eps
}

// SetCurators replaces the curators learned from elsewhere than the seeds,
// usually every node of a Watch that runs a curator. The seeds stay.
func (r *Resolver) SetCurators(eps []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	eps = dedup(eps)
	if slices.Equal(eps, r.curators) {
		return
	}
	r.curators = eps
	r.changedLocked()
}

// SetLocal names the curator of the node the Resolver runs on ("" when it
// runs none). It is an endpoint like the others, tried first when no leader
// is known: reaching it costs no network, and it forwards to the leader.
func (r *Resolver) SetLocal(ep string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ep == r.local {
		return
	}
	r.local = ep
	r.changedLocked()
}

// Leader returns the current leader's host:port, "" while none is known.
func (r *Resolver) Leader() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.leader
}

// Dial returns a ClientConn whose calls go to the current leader, with
// the node's credentials, a retry policy for UNAVAILABLE on every Cairn
// service and quick reconnects (rpc.ReconnectQuickly). opts come after those and may override them. Close the
// ClientConn when done; Run must run for it to follow the leader.
func (r *Resolver) Dial(opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	all := []grpc.DialOption{
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(r.creds),
		grpc.WithDefaultServiceConfig(serviceConfig),
		rpc.ReconnectQuickly(),
	}
	cc, err := grpc.NewClient(Scheme+":///leader", append(all, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("when creating client: %w", err)
	}
	return cc, nil
}

// serviceConfig picks the first address that works (the leader, when
// known) and retries calls that found no curator to answer them: the
// window in which leadership moves.
const serviceConfig = `{
  "loadBalancingConfig": [{"pick_first": {}}],
  "methodConfig": [{
    "name": [
      {"service": "cairn.api.Curator"},
      {"service": "cairn.api.Management"},
      {"service": "cairn.api.AAA"}
    ],
    "retryPolicy": {
      "maxAttempts": 5,
      "initialBackoff": "0.25s",
      "maxBackoff": "2s",
      "backoffMultiplier": 2,
      "retryableStatusCodes": ["UNAVAILABLE"]
    }
  }]
}`

// Scheme implements resolver.Builder.
func (r *Resolver) Scheme() string { return Scheme }

// Build implements resolver.Builder: gRPC calls it for every ClientConn
// dialled through r, whatever the target's path.
func (r *Resolver) Build(_ resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	c := &ccResolver{r: r, cc: cc}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.conns[c] = struct{}{}
	c.update(r.addressesLocked())
	return c, nil
}

// ccResolver is the resolver of one ClientConn.
type ccResolver struct {
	r  *Resolver
	cc resolver.ClientConn
}

// ResolveNow is gRPC's hint that the addresses it has do not work: the
// leader went away. Offer every endpoint until a leader is heard of again.
func (c *ccResolver) ResolveNow(resolver.ResolveNowOptions) {
	r := c.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.fallback {
		r.fallback = true
		r.pushLocked()
	}
}

func (c *ccResolver) Close() {
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	delete(c.r.conns, c)
}

func (c *ccResolver) update(addrs []string) {
	st := resolver.State{}
	for _, a := range addrs {
		st.Addresses = append(st.Addresses, resolver.Address{Addr: a})
	}
	if len(addrs) == 0 {
		c.cc.ReportError(errNoEndpoints)
		return
	}
	// An error here means the balancer did not like the addresses; it
	// asks to resolve again, which sends them anew.
	_ = c.cc.UpdateState(st)
}

var errNoEndpoints = fmt.Errorf("no curator endpoint known yet")

// setLeader records what a GetCurrentLeader stream said: the leader's
// host:port, or "" while an election runs.
func (r *Resolver) setLeader(leader string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if leader != "" && !slices.Contains(r.heard, leader) {
		r.heard = append(r.heard, leader)
		r.changedLocked()
	}
	if leader == r.leader && r.fallback == (leader == "") {
		return
	}
	r.leader = leader
	r.fallback = leader == ""
	r.pushLocked()
}

// lostLeader records that the session that named the leader ended: the
// leader may still lead, but ClientConns may also try the others.
func (r *Resolver) lostLeader() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.fallback {
		r.fallback = true
		r.pushLocked()
	}
}

// changedLocked publishes a changed set of endpoints.
func (r *Resolver) changedLocked() {
	r.known.Set(r.endpointsLocked())
	r.pushLocked()
}

// pushLocked sends the current addresses to every ClientConn.
func (r *Resolver) pushLocked() {
	addrs := r.addressesLocked()
	for c := range r.conns {
		c.update(addrs)
	}
}

// addressesLocked are the addresses ClientConns should use, best first.
func (r *Resolver) addressesLocked() []string {
	if r.leader != "" && !r.fallback {
		return []string{r.leader}
	}
	var addrs []string
	if r.leader != "" {
		addrs = append(addrs, r.leader)
	}
	return dedup(append(addrs, r.endpointsLocked()...))
}

// endpoints is every known curator endpoint.
func (r *Resolver) endpoints() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.endpointsLocked()
}

// endpointsLocked is every known curator endpoint.
func (r *Resolver) endpointsLocked() []string {
	eps := slices.Concat([]string{r.local}, r.seeds, r.curators, r.heard)
	return dedup(eps)
}

// dedup returns eps without empty strings and repeats, in their order.
func dedup(eps []string) []string {
	var out []string
	for _, e := range eps {
		if e != "" && !slices.Contains(out, e) {
			out = append(out, e)
		}
	}
	return out
}
