package curator

import (
	"context"
	"crypto/rand"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ticketSize is the length of a fresh register ticket.
const ticketSize = 32

// newTicket draws a fresh register ticket.
func newTicket() ([]byte, error) {
	ticket := make([]byte, ticketSize)
	if _, err := rand.Read(ticket); err != nil {
		return nil, fmt.Errorf("when drawing the register ticket: %w", err)
	}
	return ticket, nil
}

// registerTicket reads the cluster's register ticket.
func (c *curator) registerTicket(ctx context.Context) ([]byte, error) {
	ticket, _, err := c.storedTicket(ctx)
	return ticket, err
}

// storedTicket reads the cluster's register ticket and the revision that
// last wrote it.
func (c *curator) storedTicket(ctx context.Context) ([]byte, int64, error) {
	resp, err := c.etcd.Get(ctx, ticketKey)
	if err != nil {
		return nil, 0, fmt.Errorf("when reading the register ticket: %w", err)
	}
	ticket, err := ticketFrom(resp.Kvs)
	if err != nil {
		return nil, 0, err
	}
	return ticket, resp.Kvs[0].ModRevision, nil
}

// ticketFrom is the register ticket in kvs, a read of ticketKey.
func ticketFrom(kvs []*mvccpb.KeyValue) ([]byte, error) {
	if len(kvs) == 0 {
		return nil, status.Error(codes.FailedPrecondition, "the cluster has no register ticket: it was not bootstrapped")
	}
	return kvs[0].Value, nil
}

// putTicket stores ticket as the register ticket if the stored one is
// still the one of revision rev, and says whether it was.
func (c *curator) putTicket(ctx context.Context, ticket []byte, rev int64) (bool, error) {
	return c.putAt(ctx, ticketKey, ticket, rev, "the new register ticket")
}
