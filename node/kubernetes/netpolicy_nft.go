package kubernetes

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"reflect"
	"sync"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"

	"cairn.dev/cairn/pkg/supervisor"
)

// policyTable is the nftables table (family ip) in which a worker
// enforces NetworkPolicy for its pods; Cairn owns it whole.
const policyTable = "cairn-policy"

// setPolicies makes nf's policy table enforce rules, and only them. The
// table is replaced in one netlink batch, so no packet ever meets half
// of an old and half of a new program.
//
// Its one base chain, on the forward hook after kube-proxy has
// translated Service addresses (so rules see the pods really reached),
// lets answers through, then sends a packet from an egress-isolated pod
// of the node to that pod's egress chain, and one to an
// ingress-isolated pod to its ingress chain. A direction's chain returns
// for what some rule allows and drops the rest; a packet that passes
// both is accepted.
//
//	forward: ct established,related → accept
//	         ip saddr P → jump egress-N  ─┐ each: allowed → return
//	         ip daddr P → jump ingress-N ─┘       else    → drop
func setPolicies(nf *nftables.Conn, rules []podPolicy) error {
	table := emptyTable(nf, policyTable)
	accept := nftables.ChainPolicyAccept
	forward := nf.AddChain(&nftables.Chain{
		Name: "forward", Table: table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &accept,
	})
	nf.AddRule(&nftables.Rule{Table: table, Chain: forward, Exprs: []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: nativeUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
		&expr.Verdict{Kind: expr.VerdictAccept},
	}})
	for i, p := range rules {
		for _, d := range []struct {
			name   string
			allows []allow
			// self and peer are the offsets in the IPv4 header of the
			// pod's address and of the other end's.
			self, peer uint32
		}{
			{"egress", p.Egress, 12, 16},
			{"ingress", p.Ingress, 16, 12},
		} {
			if d.allows == nil {
				continue
			}
			chain := nf.AddChain(&nftables.Chain{Name: fmt.Sprintf("%s-%d", d.name, i), Table: table})
			nf.AddRule(&nftables.Rule{Table: table, Chain: forward, Exprs: []expr.Any{
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: d.self, Len: 4},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: p.IP.AsSlice()},
				&expr.Verdict{Kind: expr.VerdictJump, Chain: chain.Name},
			}, UserData: userdata.AppendString(nil, userdata.TypeComment, p.Pod)})
			for _, a := range d.allows {
				for _, m := range allowMatches(a, d.peer) {
					nf.AddRule(&nftables.Rule{Table: table, Chain: chain,
						Exprs: append(m, &expr.Verdict{Kind: expr.VerdictReturn})})
				}
			}
			nf.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: []expr.Any{
				&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop},
			}})
		}
	}
	if err := nf.Flush(); err != nil {
		return fmt.Errorf("when programming NetworkPolicy (nftables table %s): %w", policyTable, err)
	}
	return nil
}

// allowMatches is a's matches, one per rule: each of its peers (the
// other end's address at offset peer of the IPv4 header) with each of its
// ports.
func allowMatches(a allow, peer uint32) [][]expr.Any {
	peers := [][]expr.Any{nil}
	if a.Peers != nil {
		peers = peers[:0]
		for _, r := range a.Peers {
			peers = append(peers, []expr.Any{
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: peer, Len: 4},
				&expr.Range{Op: expr.CmpOpEq, Register: 1, FromData: r.From.AsSlice(), ToData: r.To.AsSlice()},
			})
		}
	}
	ports := [][]expr.Any{nil}
	if a.Ports != nil {
		ports = ports[:0]
		for _, p := range a.Ports {
			ports = append(ports, []expr.Any{
				&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p.Proto}},
				// The destination port, the same two bytes in TCP, UDP
				// and SCTP.
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
				&expr.Range{Op: expr.CmpOpEq, Register: 1, FromData: binary.BigEndian.AppendUint16(nil, p.From), ToData: binary.BigEndian.AppendUint16(nil, p.To)},
			})
		}
	}
	var out [][]expr.Any
	for _, pe := range peers {
		for _, po := range ports {
			out = append(out, append(append([]expr.Any{}, pe...), po...))
		}
	}
	return out
}

// nativeUint32 is v in the host's byte order, as the kernel keeps
// conntrack's state bits.
func nativeUint32(v uint32) []byte {
	return binary.NativeEndian.AppendUint32(nil, v)
}

// policyState is the cluster's NetworkPolicies, Namespaces and Pods as
// the worker last read them; changed is signalled after each change.
type policyState struct {
	mu         sync.Mutex
	policies   map[string]networkPolicy
	pods       map[string]policyPod
	namespaces map[string]kubeNamespace
	changed    chan struct{}
}

func newPolicyState() *policyState {
	return &policyState{changed: make(chan struct{}, 1)}
}

func setInto[T any](st *policyState, dst *map[string]T) func(map[string]T) error {
	return func(m map[string]T) error {
		st.mu.Lock()
		*dst = maps.Clone(m)
		st.mu.Unlock()
		select {
		case st.changed <- struct{}{}:
		default:
		}
		return nil
	}
}

// rules is what the node's pods may do, once all three collections were
// read.
func (st *policyState) rules(node string) ([]podPolicy, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.policies == nil || st.pods == nil || st.namespaces == nil {
		return nil, false
	}
	return policyRules(node, st.policies, st.pods, st.namespaces), true
}

// runNetworkPolicy enforces NetworkPolicy for the node's pods: it follows
// the NetworkPolicies, Namespaces and Pods with the node's credential,
// and programs the policy table after each change, at most every 200 ms.
// Until it has read all three once, it leaves the table as it was (empty
// on a fresh boot). It starts again with a fresh credential when that is
// due for renewal; the table stays meanwhile.
func (w *Worker) runNetworkPolicy(ctx context.Context) error {
	defer w.cfg.Routing.hold(ctx)()
	cl, cred, err := w.nodeAPIClient(ctx, w.dir("networkpolicy"))
	if err != nil {
		return err
	}
	nf, err := nftables.New(w.cfg.Routing.nfOpts...)
	if err != nil {
		return fmt.Errorf("when opening nftables: %w", err)
	}
	if err := cl.waitReady(ctx, w.cfg.Readiness, supervisor.Logger(ctx).Infof); err != nil {
		return err
	}
	rctx, cancel := context.WithDeadlineCause(ctx, cred.renewAt, errRenew)
	defer cancel()
	st := newPolicyState()
	err = supervisor.RunGroup(ctx, map[string]supervisor.Runnable{
		"policies": func(ctx context.Context) error {
			return follow(ctx, cl, "/apis/networking.k8s.io/v1/networkpolicies", healthyAfter(ctx, setInto(st, &st.policies)))
		},
		"namespaces": func(ctx context.Context) error {
			return follow(ctx, cl, "/api/v1/namespaces", healthyAfter(ctx, setInto(st, &st.namespaces)))
		},
		"pods": func(ctx context.Context) error {
			return follow(ctx, cl, "/api/v1/pods", healthyAfter(ctx, setInto(st, &st.pods)))
		},
	})
	if err != nil {
		return fmt.Errorf("when starting to follow NetworkPolicies, Namespaces and Pods: %w", err)
	}
	lg := supervisor.Logger(ctx)
	var programmed []podPolicy
	first := true
	for {
		select {
		case <-rctx.Done():
			return stopped(ctx)
		case <-st.changed:
		}
		rules, ok := st.rules(w.cfg.NodeID)
		if !ok || (!first && reflect.DeepEqual(rules, programmed)) {
			continue
		}
		if err := setPolicies(nf, rules); err != nil {
			return err
		}
		if first {
			supervisor.Signal(ctx, supervisor.SignalHealthy)
		}
		first = false
		programmed = rules
		lg.Infof("NetworkPolicy: %s", describePolicies(rules))
		// Changes come in bursts (a Deployment's pods, one after
		// another): take them together.
		select {
		case <-rctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// describePolicies says which of the node's pods are isolated.
func describePolicies(rules []podPolicy) string {
	if len(rules) == 0 {
		return "no pod of this node is isolated"
	}
	s := fmt.Sprintf("%d of this node's pods isolated:", len(rules))
	for _, r := range rules {
		dirs := ""
		if r.Ingress != nil {
			dirs += fmt.Sprintf(" ingress (%d rules)", len(r.Ingress))
		}
		if r.Egress != nil {
			dirs += fmt.Sprintf(" egress (%d rules)", len(r.Egress))
		}
		s += fmt.Sprintf(" %s %s%s;", r.Pod, r.IP, dirs)
	}
	return s[:len(s)-1]
}
