//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"cairn.dev/cairn/proto/api"
	"cairn.dev/cairn/test/launch/cluster"
)

// probeInterval is how often the prober calls the cluster, probeTimeout
// how long one probe waits for an answer. On a loaded emulated machine a
// serving curator's etcd read has taken 3 s: a client that waits that
// long is served, and the prober counts it so.
const (
	probeInterval = 500 * time.Millisecond
	probeTimeout  = 5 * time.Second
)

// sample is one probe: whether some curator answered GetNodes.
type sample struct {
	// at is when the probe was sent, answered when its first success
	// arrived, or when it failed.
	at, answered time.Time
	ok           bool
	err          error
	// done: the probe has finished; until then it counts neither way.
	done bool
}

// prober calls Management.GetNodes as the owner, over and over, the way a
// client that knows every curator would: each probe asks every curator at
// once and counts as a success when one answers. A probe starts every
// probeInterval whether or not the ones before it finished: a probe waits
// up to probeTimeout for a dead curator, and probes that waited for each
// other would measure that wait instead of the cluster. The samples show
// when the cluster served and for how long it did not.
type prober struct {
	mu      sync.Mutex
	samples []sample // in the order the probes were sent
	cancel  context.CancelFunc
	done    chan struct{}
}

// startProber starts probing the cluster's nodes until the test ends.
func startProber(t *testing.T, c *cluster.Cluster, o *owner) *prober {
	t.Helper()
	var clients []api.ManagementClient
	for _, n := range c.Nodes() {
		clients = append(clients, api.NewManagementClient(dial(t, n.CuratorAddr(), o.creds(t))))
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &prober{cancel: cancel, done: make(chan struct{})}
	go p.run(ctx, clients)
	t.Cleanup(p.stop)
	return p
}

func (p *prober) run(ctx context.Context, clients []api.ManagementClient) {
	defer close(p.done)
	var probes sync.WaitGroup
	defer probes.Wait()
	tick := time.NewTicker(probeInterval)
	defer tick.Stop()
	for {
		p.mu.Lock()
		i := len(p.samples)
		p.samples = append(p.samples, sample{at: time.Now()})
		p.mu.Unlock()
		probes.Go(func() {
			s := p.probe(ctx, clients)
			p.mu.Lock()
			p.samples[i].answered, p.samples[i].ok, p.samples[i].err = s.answered, s.ok, s.err
			p.samples[i].done = true
			p.mu.Unlock()
		})
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// probe calls every curator at once and succeeds when one answers within
// probeTimeout. Asking all of them together keeps a hung curator from
// stretching the probe, so an outage measures the cluster, not the
// prober's timeouts.
func (p *prober) probe(ctx context.Context, clients []api.ManagementClient) sample {
	var s sample
	cctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	errs := make(chan error, len(clients))
	for _, c := range clients {
		go func() {
			_, err := c.GetNodes(cctx, &api.GetNodesRequest{})
			errs <- err
		}()
	}
	for range clients {
		err := <-errs
		if err == nil {
			s.ok, s.err = true, nil
			break
		}
		s.err = err
	}
	s.answered = time.Now()
	return s
}

func (p *prober) stop() {
	p.cancel()
	<-p.done
}

// stats summarizes the probes made between from and to.
type stats struct {
	ok, failed int
	// longest is the longest time without a successful probe, from the
	// last success before a failure to the next success (or to).
	longest time.Duration
	// lastErr is the error of the last failed probe.
	lastErr error
}

func (s stats) String() string {
	return fmt.Sprintf("%d ok, %d failed, longest outage %.1f s", s.ok, s.failed, s.longest.Seconds())
}

// between returns the stats of the probes between from and to.
func (p *prober) between(from, to time.Time) stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	var st stats
	lastOK := from
	down := false
	for _, s := range p.samples {
		if !s.done || s.at.Before(from) || s.at.After(to) {
			continue
		}
		if s.ok {
			st.ok++
			if down {
				st.longest = max(st.longest, s.at.Sub(lastOK))
				down = false
			}
			lastOK = s.at
			continue
		}
		st.failed++
		st.lastErr = s.err
		down = true
	}
	if down {
		st.longest = max(st.longest, to.Sub(lastOK))
	}
	return st
}

// waitOK waits for a successful probe sent after since and returns when
// its answer arrived: the moment a client that called then was served.
func (p *prober) waitOK(ctx context.Context, since time.Time) (time.Time, error) {
	for {
		p.mu.Lock()
		var first time.Time
		for _, s := range p.samples {
			if s.done && s.ok && !s.at.Before(since) && (first.IsZero() || s.answered.Before(first)) {
				first = s.answered
			}
		}
		var lastErr error
		for _, s := range p.samples {
			if s.done && !s.ok {
				lastErr = s.err
			}
		}
		p.mu.Unlock()
		if !first.IsZero() {
			return first, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("no successful Management call since %s: %w (last error: %v)", since.Format("15:04:05"), ctx.Err(), lastErr)
		case <-time.After(probeInterval / 2):
		}
	}
}
