package curator

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/pkg/pki"
	"cairn.dev/cairn/proto/api"
	"cairn.dev/cairn/proto/private"
)

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
	// known is the record already stored under the node's ID, nil when
	// there is none (or it cannot be read).
	known *private.Node
}

// readRegistration reads the register ticket, the cluster configuration,
// the record of node id if it is registered and the count of the waiting
// index, in one read, and refuses with ResourceExhausted when the cap of
// nodes in state NEW is reached; a node already registered is not counted
// against it (its RegisterNode is a retry).
func (c *curator) readRegistration(ctx context.Context, id string) (*registration, error) {
	resp, err := c.etcd.Txn(ctx).Then(
		clientv3.OpGet(ticketKey),
		clientv3.OpGet(configurationKey),
		clientv3.OpGet(nodeKey(id)),
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
	if kvs := resp.Responses[2].GetResponseRange().Kvs; len(kvs) > 0 {
		known := &private.Node{}
		if proto.Unmarshal(kvs[0].Value, known) == nil {
			r.known = known
		}
		return r, nil
	}
	waiting := resp.Responses[3].GetResponseRange().Count
	if waiting >= int64(c.opts.limits.maxNewNodes) {
		return nil, status.Errorf(codes.ResourceExhausted, "too many nodes wait for approval (%d); approve or delete some", waiting)
	}
	r.far = waiting+2*registerInFlight <= int64(c.opts.limits.maxNewNodes)
	return r, nil
}

// commitView is what CommitNode decides by, read at once through the
// curator's root client: the node's record and the certificate live in
// different namespaces.
type commitView struct {
	node             *private.Node
	conf             *api.ClusterConfiguration
	nodeKey, certKey string
	// cert is the stored node certificate, nil when there is none;
	// nodeRev and certRev are the keys' mod revisions (0 when missing).
	cert             []byte
	nodeRev, certRev int64
}

// readCommit reads node id's record, the cluster configuration and the
// stored certificate cert, in one read.
func (c *curator) readCommit(ctx context.Context, id string, cert *pki.Certificate) (*commitView, error) {
	v := &commitView{nodeKey: c.etcd.Prefix() + nodeKey(id), certKey: cert.Namespace.CertificateKey(cert.Name)}
	resp, err := c.root.Txn(ctx).Then(
		clientv3.OpGet(v.nodeKey),
		clientv3.OpGet(c.etcd.Prefix()+configurationKey),
		clientv3.OpGet(v.certKey),
	).Commit()
	if err != nil {
		return nil, fmt.Errorf("when reading node %s, its certificate and the cluster configuration: %w", id, err)
	}
	if v.node, v.nodeRev, err = nodeFrom(id, resp.Responses[0].GetResponseRange().Kvs); err != nil {
		return nil, err
	}
	if v.conf, err = configurationFrom(resp.Responses[1].GetResponseRange().Kvs); err != nil {
		return nil, err
	}
	if kvs := resp.Responses[2].GetResponseRange().Kvs; len(kvs) > 0 {
		v.cert, v.certRev = kvs[0].Value, kvs[0].ModRevision
	}
	return v, nil
}

// createNode stores data, the record of node id in state NEW, and its
// waiting key, as read in r: only if node id has no record, and, unless
// r.far, only if no node joined the waiting index since r was read. When
// it stored nothing it returns what is stored for node id (nothing when
// the waiting index changed).
func (c *curator) createNode(ctx context.Context, id string, data []byte, r *registration) (bool, []*mvccpb.KeyValue, error) {
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(nodeKey(id)), "=", 0)}
	if !r.far {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(waitingPrefix).WithPrefix(), "<", r.rev+1))
	}
	resp, err := c.etcd.Txn(ctx).
		If(cmps...).
		Then(clientv3.OpPut(nodeKey(id), string(data)), clientv3.OpPut(waitingKey(id), "")).
		Else(clientv3.OpGet(nodeKey(id))).
		Commit()
	if err != nil {
		return false, nil, fmt.Errorf("when registering node %s: %w", id, err)
	}
	if resp.Succeeded {
		return true, nil, nil
	}
	return false, resp.Responses[0].GetResponseRange().Kvs, nil
}

// writeCommit applies ops, the commit of node id, if neither its record
// nor its certificate changed since v was read, and says whether they had
// not.
func (c *curator) writeCommit(ctx context.Context, id string, v *commitView, ops []clientv3.Op) (bool, error) {
	resp, err := c.root.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(v.nodeKey), "=", v.nodeRev), clientv3.Compare(clientv3.ModRevision(v.certKey), "=", v.certRev)).
		Then(ops...).
		Commit()
	if err != nil {
		return false, fmt.Errorf("when committing node %s: %w", id, err)
	}
	return resp.Succeeded, nil
}
