package curator

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"
	"unicode"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/proto/api"
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
	// (rolefetch: its own record; clusterdir: every node's; ownertrust:
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
	// a real one is under 100 bytes.
	maxStatusSize = 1 << 10
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
	// backups admits one Backup at a time (backup.go).
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

// registration is what RegisterNode judges a registration by, read in
// one linearizable transaction.
type registration struct {
	ticket []byte
	conf   *api.ClusterConfiguration
	// rev is the revision of the read: the count of nodes in NEW holds
	// as long as no waiting key was written after it (one deleted only
	// makes room).
	rev int64
	// far says that the count is so far below the cap that the write
	// needs no such compare, which concurrent registrations would keep
	// failing one another on: only the leading curator registers, at
	// most registerInFlight at once (the caller holds a token of
	// c.registering), and twice that covers a moment in which two
	// curators believe they lead.
	far bool
}

// readRegistration reads the register ticket, the cluster configuration,
// whether node id is registered and the count of the waiting index, in
// one read, and refuses with ResourceExhausted when the cap of nodes in
// state NEW is reached; a node already registered is not counted against
// it (its RegisterNode is a retry).
func (c *curator) readRegistration(ctx context.Context, id string) (*registration, error) {
	resp, err := c.etcd.Txn(ctx).Then(
		clientv3.OpGet(ticketKey),
		clientv3.OpGet(configurationKey),
		clientv3.OpGet(nodeKey(id), clientv3.WithCountOnly()),
		clientv3.OpGet(waitingPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly()),
	).Commit()
	if err != nil {
		return nil, fmt.Errorf("when reading the register ticket, the cluster configuration and the nodes that wait for approval: %w", err)
	}
	ticket, err := ticketFrom(resp.Responses[0].GetResponseRange().Kvs)
	if err != nil {
		return nil, err
	}
	conf, err := configurationFrom(resp.Responses[1].GetResponseRange().Kvs)
	if err != nil {
		return nil, err
	}
	r := &registration{ticket: ticket, conf: conf, rev: resp.Header.Revision, far: true}
	if resp.Responses[2].GetResponseRange().Count > 0 {
		return r, nil
	}
	waiting := resp.Responses[3].GetResponseRange().Count
	if waiting >= int64(c.opts.limits.maxNewNodes) {
		return nil, status.Errorf(codes.ResourceExhausted, "too many nodes wait for approval (%d); approve or delete some", waiting)
	}
	r.far = waiting+2*registerInFlight <= int64(c.opts.limits.maxNewNodes)
	return r, nil
}

// checkNodeStatus refuses, with InvalidArgument naming the field, a status
// a node may not store: the curator and every node read it.
func checkNodeStatus(st *api.NodeStatus) error {
	now := time.Now()
	if st == nil {
		return status.Error(codes.InvalidArgument, "status is missing")
	}
	if size := proto.Size(st); size > maxStatusSize {
		return status.Errorf(codes.InvalidArgument, "status is %d bytes, more than %d", size, maxStatusSize)
	}
	if a := st.ExternalAddress; a != "" {
		addr, err := netip.ParseAddr(a)
		switch {
		case err != nil:
			return status.Errorf(codes.InvalidArgument, "status.external_address %q is not an IP address", a)
		case addr.Zone() != "" || addr.IsUnspecified() || addr.IsMulticast():
			return status.Errorf(codes.InvalidArgument, "status.external_address %q is not an address other nodes can reach", a)
		}
	}
	if v := st.Version; len(v) > maxVersionLength {
		return status.Errorf(codes.InvalidArgument, "status.version is %d bytes, more than %d", len(v), maxVersionLength)
	} else if !printable(v) {
		return status.Errorf(codes.InvalidArgument, "status.version %q is not printable ASCII", v)
	}
	if rc := st.RunningCurator; rc != nil && (rc.Port < 1 || rc.Port > 65535) {
		return status.Errorf(codes.InvalidArgument, "status.running_curator.port %d is not a TCP port (1 to 65535)", rc.Port)
	}
	if err := checkStatusTime("status.timestamp_unix_nanos", st.TimestampUnixNanos, now); err != nil {
		return err
	}
	return checkClockStatus(st.Clock, now)
}

// checkClockStatus refuses a clock status with values no node sends.
func checkClockStatus(c *api.ClockStatus, now time.Time) error {
	if c == nil {
		return nil
	}
	if _, ok := api.ClockState_name[int32(c.State)]; !ok {
		return status.Errorf(codes.InvalidArgument, "status.clock.state %d is not a clock state", c.State)
	}
	if s := c.Server; s != "" {
		addr, err := netip.ParseAddr(s)
		if err != nil || addr.Zone() != "" || addr.IsUnspecified() || addr.IsMulticast() {
			return status.Errorf(codes.InvalidArgument, "status.clock.server %q is not a server's IP address", s)
		}
	}
	if err := checkStatusTime("status.clock.last_sync_unix_nanos", c.LastSyncUnixNanos, now); err != nil {
		return err
	}
	// Protobuf refuses strings that are not UTF-8; what is left to refuse
	// is what would garble a terminal or a log.
	if r := c.Reason; len(r) > maxClockReasonLength {
		return status.Errorf(codes.InvalidArgument, "status.clock.reason is %d bytes, more than %d", len(r), maxClockReasonLength)
	} else if strings.IndexFunc(r, func(c rune) bool { return !unicode.IsPrint(c) }) >= 0 {
		return status.Errorf(codes.InvalidArgument, "status.clock.reason %q is not printable text", r)
	}
	return nil
}

// checkStatusTime refuses a time of a node's status (nanoseconds since the
// Unix epoch, by the node's clock) before 1970 or far ahead of now.
func checkStatusTime(field string, ts int64, now time.Time) error {
	if ts < 0 {
		return status.Errorf(codes.InvalidArgument, "%s %d is before 1970", field, ts)
	} else if t := time.Unix(0, ts); t.After(now.Add(maxStatusClockSkew)) {
		return status.Errorf(codes.InvalidArgument, "%s is %s, more than %s ahead of the curator's clock (%s)", field, t.UTC().Format(time.RFC3339), maxStatusClockSkew, now.UTC().Format(time.RFC3339))
	}
	return nil
}

// printable says whether s is printable ASCII, spaces included.
func printable(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return r < ' ' || r > '~' }) < 0
}
