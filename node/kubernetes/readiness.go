package kubernetes

import (
	"context"
	"sync"
	"time"
)

// readyInterval is how often a component waiting for its apiserver asks
// whether it is ready.
const readyInterval = time.Second

// Readiness shares one node's questions to an apiserver whether it is
// ready. Each component that needs the apiserver waits for it at its
// start (apiClient.waitReady): on a new cluster's controller five
// components (the reconciler, the metrics API, the controller-manager,
// the scheduler, kube-proxy), on each worker three (the pod routes, DNS,
// the NetworkPolicy table), each asking /readyz every second: up to eleven
// questions a second on a cluster of make cluster, beside the
// apiserver's own (build/kubernetes/patches/apiserver-readyz-poll.patch).
// Every answer costs it what it can least spare, CPU: a client
// certificate's check, the readiness checks (etcd's among them), and,
// while it is too busy to finish handshakes in time, a new TLS connection
// each; on an emulated node one such request took it about 15 ms of CPU
// on a kept connection and 30 ms on a new one, at rest. With one
// Readiness per node, the node asks each apiserver at most once per
// readyInterval, whatever the number of its components waiting.
//
// A ready answer is shared as well: /readyz is open to every
// authenticated user once the apiserver is ready, so what one
// component's credential was told holds for the others'.
type Readiness struct {
	mu sync.Mutex
	// last is, for each apiserver URL, the question asked last.
	last map[string]*readyQuestion
}

// readyQuestion is one question to an apiserver, asked by one component
// and awaited by the others.
type readyQuestion struct {
	done chan struct{}
	// err and at are set before done is closed: the answer (nil when
	// ready) and when it came.
	err error
	at  time.Time
	// abandoned is whether the asker's own context ended first: its
	// answer says nothing of the apiserver, and whoever waited asks again.
	abandoned bool
}

// NewReadiness returns a node's Readiness, to give every component of the
// node that waits for an apiserver.
func NewReadiness() *Readiness {
	return &Readiness{last: map[string]*readyQuestion{}}
}

// ask reports whether c's apiserver is ready (nil) or why not. It waits
// for a question of another component to the same apiserver that is
// under way, takes the answer of one less than readyInterval old, and
// otherwise asks itself. A nil Readiness always asks.
func (r *Readiness) ask(ctx context.Context, c *apiClient) error {
	if r == nil {
		return c.ready(ctx)
	}
	for {
		q, mine := r.question(c.server)
		if mine {
			err := c.ready(ctx)
			q.err, q.at, q.abandoned = err, time.Now(), ctx.Err() != nil
			close(q.done)
			return err
		}
		select {
		case <-q.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		if !q.abandoned {
			return q.err
		}
	}
}

// question returns the question to ask server about, and whether the
// caller is to ask it: a new one unless another is under way or was
// answered less than readyInterval ago.
func (r *Readiness) question(server string) (q *readyQuestion, mine bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if q := r.last[server]; q != nil && !q.stale() {
		return q, false
	}
	q = &readyQuestion{done: make(chan struct{})}
	r.last[server] = q
	return q, true
}

// stale is whether q was answered, and its answer is too old or void to
// share.
func (q *readyQuestion) stale() bool {
	select {
	case <-q.done:
		return q.abandoned || time.Since(q.at) >= readyInterval
	default:
		return false
	}
}
