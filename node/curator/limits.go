package curator

import (
	"context"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/rpc"
)

// The limits the curator sets on its callers, beyond those every gRPC
// server of a node has (node/rpc, limits.go). docs/security.md ("Limits")
// lists them all with their reasons.
//
// The rates and counts live in the leader's memory, like heartbeats: a new
// leader starts with full buckets. Only the cap on nodes in state NEW is
// counted in etcd, and so holds across leaders.
const (
	// DefaultMaxNewNodes is how many nodes may wait in state NEW for the
	// owner's approval. Registering needs only the register ticket, which
	// every registering node carries on its ESP; without a cap, one leaked
	// ticket could fill etcd with records. 128 is more than any batch of
	// machines an owner approves at once; WithMaxNewNodes changes it.
	DefaultMaxNewNodes = 128

	// escrowHelloTimeout bounds how long AAA.Escrow waits for its first
	// message, and escrowTimeout the whole exchange (hello, challenge,
	// proof, certificate). Escrow admits anyone: without them a caller
	// could hold streams open without sending. cairnctl sends its hello at
	// once and signs in microseconds; the certificate costs an etcd round
	// trip or two.
	escrowHelloTimeout = 10 * time.Second
	escrowTimeout      = 30 * time.Second

	// maxWatchesPerNode is how many Watch and WatchOwnerTrust streams one
	// node may have open at once. A node's role server opens three
	// (rolefetch: its own record; clusterwatch: every node's; ownertrust:
	// the owner trust); the rest is room for streams of an
	// earlier boot that the leader has not yet noticed are dead (see
	// keepalive in node/rpc) and for a restarted worker.
	maxWatchesPerNode = 8

	// statusWriteInterval and statusWriteBurst bound how often one node
	// may call UpdateNodeStatus: every call is a read and a write of its
	// record in etcd, which every Watch then sends to every node. A node
	// pushes its status when its address, its curator or its clock's
	// state changes (a newer clock sync at most every 15 minutes): a few
	// times at boot, rarely after. A refused node's statuspush worker
	// fails, and its supervisor restarts it after a backoff, pushing the
	// status as it is then; so nothing is lost, and the curator needs no
	// writer of its own to merge refused writes.
	statusWriteInterval = time.Second
	statusWriteBurst    = 5

	// maxStatusSize bounds a status as stored, unknown fields included;
	// a real one is under 100 bytes, or some 600 with the reason of a
	// failed update (maxUpdateReason).
	maxStatusSize = 2 << 10
	// maxVersionLength bounds the version a node reports ("dev-" and a
	// commit hash is 44 bytes).
	maxVersionLength = 128
	// maxClockReasonLength bounds the reason a node gives for a clock
	// known wrong; the node cuts longer ones (roleserve's statuspush).
	maxClockReasonLength = 256
	// maxStatusClockSkew is how far in the future, by the curator's
	// clock, a status timestamp may be. Nodes keep time with NTP, but only
	// once their network is up: a day leaves room for a wrong clock at
	// boot, and refuses a timestamp that would sort after every real one
	// for years.
	maxStatusClockSkew = 24 * time.Hour

	// registerInterval and registerBurst bound how often RegisterNode may
	// be called from one source (an IPv4 address, an IPv6 /64): 10 a
	// minute, 5 at once. The ticket is shared by the whole cluster, so a
	// rate per ticket would be one global rate, which a single source
	// could spend for everyone. Each call reads the ticket, the
	// configuration and every node from etcd. A rack of machines behind
	// one NAT registers 5 at once, then one every 6 s: the others retry.
	registerInterval = 6 * time.Second
	registerBurst    = 5

	// maxRateKeys bounds how many sources or nodes one rate remembers.
	// A full bucket is forgotten (a new one would be the same). To keep
	// this many non-full ones, a caller needs as many sources within one
	// refill (30 s for RegisterNode); until some refill, new sources are
	// refused, which the cap on nodes in NEW would soon do anyway.
	maxRateKeys = 4096

	// registerAttempts is how often RegisterNode counts the nodes in NEW
	// again when a node changed between its count and its write.
	registerAttempts = 5
)

// limits are the curator's limits that options may change.
type limits struct {
	maxNewNodes        int
	escrowHelloTimeout time.Duration
	escrowTimeout      time.Duration
	maxWatchesPerNode  int
	// A node may write its status statusWriteBurst times at once, then
	// once every statusWriteInterval; a source may register likewise.
	statusWriteInterval time.Duration
	statusWriteBurst    int
	registerInterval    time.Duration
	registerBurst       int
}

// defaultLimits are the limits of the constants above.
func defaultLimits() limits {
	return limits{
		maxNewNodes:         DefaultMaxNewNodes,
		escrowHelloTimeout:  escrowHelloTimeout,
		escrowTimeout:       escrowTimeout,
		maxWatchesPerNode:   maxWatchesPerNode,
		statusWriteInterval: statusWriteInterval,
		statusWriteBurst:    statusWriteBurst,
		registerInterval:    registerInterval,
		registerBurst:       registerBurst,
	}
}

// WithMaxNewNodes sets how many nodes may wait in state NEW for approval
// before RegisterNode refuses more (ResourceExhausted); 0 admits none. The
// default is DefaultMaxNewNodes.
func WithMaxNewNodes(n int) Option {
	return func(o *options) { o.limits.maxNewNodes = n }
}

// withLimits changes the limits: tests shrink them to see them act.
func withLimits(change func(*limits)) Option {
	return func(o *options) { change(&o.limits) }
}

// quotas are what callers have used of the limits, for one run of a
// curator.
type quotas struct {
	watches       watchSlots
	statusWrites  *keyedRate
	registrations *keyedRate
	// backups admits one Backup at a time (impl_management_backup.go).
	backups backupSlot
}

func newQuotas(l limits) *quotas {
	return &quotas{
		statusWrites:  newKeyedRate(l.statusWriteInterval, l.statusWriteBurst),
		registrations: newKeyedRate(l.registerInterval, l.registerBurst),
	}
}

// keyedRate is a token bucket per key (a node, a source address): burst
// tokens, one more every interval.
type keyedRate struct {
	interval time.Duration
	burst    int

	mu      sync.Mutex
	buckets map[string]*rate.Limiter
}

func newKeyedRate(interval time.Duration, burst int) *keyedRate {
	return &keyedRate{interval: interval, burst: burst, buckets: make(map[string]*rate.Limiter)}
}

// allow takes a token of key at now. It is false when key has none left,
// or when maxRateKeys other keys have used some lately.
func (k *keyedRate) allow(key string, now time.Time) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	b, ok := k.buckets[key]
	if !ok {
		if len(k.buckets) >= maxRateKeys {
			for other, ob := range k.buckets {
				if ob.TokensAt(now) >= float64(k.burst) {
					delete(k.buckets, other)
				}
			}
		}
		if len(k.buckets) >= maxRateKeys {
			return false
		}
		b = rate.NewLimiter(rate.Every(k.interval), k.burst)
		k.buckets[key] = b
	}
	return b.AllowN(now, 1)
}

// watchSlots counts the Watch streams each node has open.
type watchSlots struct {
	mu   sync.Mutex
	open map[string]int
}

// take gives node id a slot, unless it holds limit already.
func (w *watchSlots) take(id string, limit int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.open[id] >= limit {
		return false
	}
	if w.open == nil {
		w.open = make(map[string]int)
	}
	w.open[id]++
	return true
}

// release gives back a slot of node id.
func (w *watchSlots) release(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.open[id]--; w.open[id] <= 0 {
		delete(w.open, id)
	}
}

// openWatch takes one of the calling node's Watch slots, or refuses the
// stream with ResourceExhausted. The caller calls release when the stream
// ends.
func (c *curator) openWatch(ctx context.Context) (release func(), err error) {
	p, err := nodePeer(ctx)
	if err != nil {
		return nil, err
	}
	limit := c.opts.limits.maxWatchesPerNode
	if !c.quotas.watches.take(p.NodeID, limit) {
		return nil, status.Errorf(codes.ResourceExhausted, "node %s has %d Watch streams open, as many as a node may; close one before opening another", p.NodeID, limit)
	}
	return func() { c.quotas.watches.release(p.NodeID) }, nil
}

// allowStatusWrite takes one of node id's status writes, or refuses the
// call with ResourceExhausted.
func (c *curator) allowStatusWrite(id string) error {
	if !c.quotas.statusWrites.allow(id, time.Now()) {
		return status.Errorf(codes.ResourceExhausted, "node %s updates its status too often (at most %d at once, then one every %s); retry later", id, c.opts.limits.statusWriteBurst, c.opts.limits.statusWriteInterval)
	}
	return nil
}

// allowRegistration takes one of the RegisterNode calls of the caller's
// source, or refuses the call with ResourceExhausted.
func (c *curator) allowRegistration(ctx context.Context) error {
	src, ok := rpc.CallerAddress(ctx)
	if !ok {
		return status.Error(codes.Internal, "RegisterNode: the caller's address is unknown")
	}
	key := sourceOf(src)
	if !c.quotas.registrations.allow(key.String(), time.Now()) {
		return status.Errorf(codes.ResourceExhausted, "too many registrations from %s (at most %d at once, then one every %s); retry later", key, c.opts.limits.registerBurst, c.opts.limits.registerInterval)
	}
	return nil
}

// sourceOf is the source a caller's address counts for: the address
// itself for IPv4, its /64 for IPv6, the block one host usually has.
func sourceOf(addr netip.Addr) netip.Prefix {
	addr = addr.Unmap()
	bits := 32
	if addr.Is6() {
		bits = 64
	}
	p, _ := addr.Prefix(bits)
	return p
}

// registerInFlight bounds the RegisterNode calls of one curator between
// their count of the nodes in NEW and their write.
const registerInFlight = 64
