package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"cairn.dev/cairn/pkg/supervisor"
)

// Cairn gives each Node its part of PodRange itself, as soon as its kubelet
// registers it, instead of the controller-manager's range allocator: under
// emulation the controller-manager builds all its controllers for one to
// two minutes before its allocator runs, and a worker without a range is
// not Ready. Every controller's reconciler gives ranges at once, so the
// ranges are recorded in etcd, outside the apiserver's prefix, and each is
// taken in a transaction that fails when another controller took it
// first:
//
//	podranges/node/<node>    → the node's range, such as 10.192.3.0/24
//	podranges/range/<first>  → the node that holds the range starting there
//
// A Node's spec.podCIDR cannot change once set, so a node keeps its range
// while its Node lives; the range is freed only once the Node is gone and
// the node no longer holds KubernetesWorker (reconcileNodes).
const podRangesPrefix = "podranges/"

func podRangeNodeKey(node string) string { return podRangesPrefix + "node/" + node }

func podRangeKey(r netip.Prefix) string { return podRangesPrefix + "range/" + r.Addr().String() }

// recordAttempts bounds how often record reads the ranges again after
// another controller changed them between its read and its write: each
// time one of the controllers succeeds, so it takes one attempt per
// controller giving ranges at once, and more only when many Nodes register
// together.
const recordAttempts = 64

// errRangeTaken is a Node whose range another node holds: two allocators
// gave it twice (the controller-manager's, while a cluster moves to Cairn's,
// and Cairn's). Only deleting one of the Nodes mends it.
var errRangeTaken = errors.New("the range is recorded for another node")

// rangeBook records which node holds which part of pool.
type rangeBook struct {
	kv   clientv3.KV
	pool netip.Prefix
	bits int
}

func newRangeBook(kv clientv3.KV) *rangeBook {
	return &rangeBook{kv: kv, pool: podPrefix, bits: podMaskSize}
}

// A heldRange is a node's range and the revision that last wrote it.
type heldRange struct {
	r   netip.Prefix
	rev int64
}

// rangeRecords is everything recorded: ranges by node, nodes by range
// (the same records from both ends, written together).
type rangeRecords struct {
	byNode  map[string]heldRange
	byRange map[netip.Prefix]string
}

func (p *rangeBook) read(ctx context.Context) (rangeRecords, error) {
	resp, err := p.kv.Get(ctx, podRangesPrefix, clientv3.WithPrefix())
	if err != nil {
		return rangeRecords{}, fmt.Errorf("when reading the pod ranges: %w", err)
	}
	rs := rangeRecords{byNode: map[string]heldRange{}, byRange: map[netip.Prefix]string{}}
	for _, kv := range resp.Kvs {
		if node, ok := strings.CutPrefix(string(kv.Key), podRangesPrefix+"node/"); ok {
			r, err := netip.ParsePrefix(string(kv.Value))
			if err != nil {
				return rangeRecords{}, fmt.Errorf("the pod range recorded for node %s: %w", node, err)
			}
			rs.byNode[node] = heldRange{r: r, rev: kv.ModRevision}
		}
		if first, ok := strings.CutPrefix(string(kv.Key), podRangesPrefix+"range/"); ok {
			a, err := netip.ParseAddr(first)
			if err != nil {
				return rangeRecords{}, fmt.Errorf("the pod range key %q: %w", kv.Key, err)
			}
			rs.byRange[netip.PrefixFrom(a, p.bits)] = string(kv.Value)
		}
	}
	return rs, nil
}

// firstFree is the lowest range of the pool nobody holds.
func (p *rangeBook) firstFree(held map[netip.Prefix]string) (netip.Prefix, bool) {
	lo, hi := prefixBounds(p.pool)
	for a := uint64(lo); a <= uint64(hi); a += 1 << (32 - p.bits) {
		r := netip.PrefixFrom(addr4(uint32(a)), p.bits)
		if _, ok := held[r]; !ok {
			return r, true
		}
	}
	return netip.Prefix{}, false
}

// record returns node's range, recording it first if it is not: have, the
// range its Node has already, or else the lowest free one. Controllers that
// record the same node at once agree on its range.
func (p *rangeBook) record(ctx context.Context, node string, have netip.Prefix) (netip.Prefix, error) {
	for range recordAttempts {
		rs, err := p.read(ctx)
		if err != nil {
			return netip.Prefix{}, err
		}
		cur, held := rs.byNode[node]
		if held && (!have.IsValid() || cur.r == have) {
			return cur.r, nil
		}
		r := have
		if !r.IsValid() {
			var ok bool
			if r, ok = p.firstFree(rs.byRange); !ok {
				return netip.Prefix{}, fmt.Errorf("when giving node %s a pod range: all %d ranges of %s are held", node, len(rs.byRange), p.pool)
			}
		} else if owner, taken := rs.byRange[r]; taken {
			return netip.Prefix{}, fmt.Errorf("the Node %s has pod range %s, held by node %s: %w", node, r, owner, errRangeTaken)
		}
		ops := []clientv3.Op{clientv3.OpPut(podRangeNodeKey(node), r.String()), clientv3.OpPut(podRangeKey(r), node)}
		if held {
			// The Node has a range other than the recorded one (the
			// controller-manager gave it): the Node's is the truth.
			ops = append(ops, clientv3.OpDelete(podRangeKey(cur.r)))
		}
		resp, err := p.kv.Txn(ctx).If(
			clientv3.Compare(clientv3.ModRevision(podRangeNodeKey(node)), "=", cur.rev),
			clientv3.Compare(clientv3.CreateRevision(podRangeKey(r)), "=", 0),
		).Then(ops...).Commit()
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("when recording pod range %s for node %s: %w", r, node, err)
		}
		if resp.Succeeded {
			return r, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("when recording a pod range for node %s: the ranges changed under each of %d attempts", node, recordAttempts)
}

// release frees node's range h, as read, unless its record was written at
// revision before or later, or since it was read: a record older than a
// list of the Nodes that lacks the node's Node was not given to a Node that
// list could have missed.
func (p *rangeBook) release(ctx context.Context, node string, h heldRange, before int64) (bool, error) {
	if h.rev >= before {
		return false, nil
	}
	tr, err := p.kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(podRangeNodeKey(node)), "=", h.rev)).
		Then(clientv3.OpDelete(podRangeNodeKey(node)), clientv3.OpDelete(podRangeKey(h.r))).Commit()
	if err != nil {
		return false, fmt.Errorf("when freeing pod range %s of node %s: %w", h.r, node, err)
	}
	return tr.Succeeded, nil
}

// releaseGone frees the ranges of the nodes that have no Node in a list
// taken at revision listed and do not hold KubernetesWorker in nodes.
func (p *rangeBook) releaseGone(ctx context.Context, listed int64, kube map[string]bool, nodes []ClusterNode, logf func(string, ...any)) error {
	rs, err := p.read(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, node := range slices.Sorted(maps.Keys(rs.byNode)) {
		if kube[node] || slices.ContainsFunc(nodes, func(n ClusterNode) bool { return n.ID == node && n.Worker }) {
			continue
		}
		h := rs.byNode[node]
		freed, err := p.release(ctx, node, h, listed)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if freed {
			logf("Pod range %s of node %s freed: its Node is gone", h.r, node)
		}
	}
	return errors.Join(errs...)
}

// runPodRanges gives every Cairn Node without a pod range one, as soon as
// the apiserver reports it, and records the ranges Nodes have already. It
// starts once the apiserver lists Nodes, which it asks every
// readyInterval: until then a failed list would restart it with a backoff
// of up to 30 s.
func runPodRanges(ctx context.Context, cl *apiClient, p *rangeBook) error {
	lg := supervisor.Logger(ctx)
	err := waitUntil(ctx, "apiserver "+cl.server+" to list the Nodes", 30*time.Second, lg.Infof, func() (bool, error) {
		err := cl.do(ctx, http.MethodGet, "/api/v1/nodes?limit=1", "", nil, nil)
		return err == nil, err
	})
	if err != nil {
		return err
	}
	// known are the Nodes whose range is recorded, so that a Node's
	// status updates cost no etcd read.
	known := map[string]netip.Prefix{}
	// given are the Nodes this follower gave a range that it has not yet
	// seen them have, by name, each the UID of the Node it gave it to.
	// An event sent before the patch's own (the kubelet's status update)
	// still shows that Node without a range; a Node made again under the
	// same name has another UID.
	given := map[string]string{}
	return follow(ctx, cl, "/api/v1/nodes", healthyAfter(ctx, func(nodes map[string]kubeNode) error {
		next, nextGiven := map[string]netip.Prefix{}, map[string]string{}
		defer func() { known, given = next, nextGiven }()
		// The ranges Nodes have are recorded before any is given, so
		// that none is given twice.
		var without []kubeNode
		for _, k := range slices.Sorted(maps.Keys(nodes)) {
			name := nodes[k].Metadata.Name
			if !strings.HasPrefix(name, cairnNodePrefix) {
				continue
			}
			have, _ := netip.ParsePrefix(nodes[k].Spec.PodCIDR)
			uid := nodes[k].Metadata.UID
			switch {
			case !have.IsValid() && uid != "" && given[name] == uid:
				nextGiven[name] = uid
			case !have.IsValid():
				without = append(without, nodes[k])
			case known[name] == have:
				next[name] = have
			default:
				if _, err := p.record(ctx, name, have); errors.Is(err, errRangeTaken) {
					lg.Warningf("%v; delete one of the two Nodes to mend it", err)
				} else if err != nil {
					return err
				}
				next[name] = have
			}
		}
		for _, n := range without {
			name := n.Metadata.Name
			r, err := p.record(ctx, name, netip.Prefix{})
			if err != nil {
				return err
			}
			body := map[string]any{"spec": map[string]any{"podCIDR": r.String(), "podCIDRs": []string{r.String()}}}
			err = cl.do(ctx, http.MethodPatch, "/api/v1/nodes/"+name, "application/merge-patch+json", body, nil)
			if answered(err, http.StatusNotFound) {
				continue
			}
			if err != nil {
				return fmt.Errorf("when giving Node %s pod range %s: %w", name, r, err)
			}
			lg.Infof("Node %s given pod range %s", name, r)
			nextGiven[name] = n.Metadata.UID
		}
		return nil
	}))
}
