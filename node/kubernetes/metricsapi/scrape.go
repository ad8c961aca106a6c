package metricsapi

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// A Kubelet is a node's kubelet, to be scraped at Addr (host:port).
type Kubelet struct {
	Node, Addr string
}

// Config is what a Server needs.
type Config struct {
	Authorizer Authorizer
	Selector   Selector
	// Proxies are the names the front proxy's client certificate may
	// carry.
	Proxies []string
	// Kubelets is the client the kubelets are scraped with: it presents
	// a credential the kubelets let read nodes/metrics, and trusts their
	// serving certificates.
	Kubelets *http.Client
	// Interval is how often every kubelet is scraped; usage is the mean
	// over about that long.
	Interval time.Duration
}

// New returns a Server that has scraped nothing yet. A node's usage is
// kept for three intervals after its kubelet last answered.
func New(cfg Config) *Server {
	return &Server{
		store:    newStore(3 * cfg.Interval),
		authz:    cfg.Authorizer,
		sel:      cfg.Selector,
		proxies:  cfg.Proxies,
		kubelets: cfg.Kubelets,
		interval: cfg.Interval,
		now:      time.Now,
	}
}

// Scrape scrapes the kubelets that kubelets returns every interval, until
// ctx is done, and after each round calls round with the kubelets that
// did not answer, by node (none: an empty map). A kubelet that does not
// answer holds up no other, and is tried again at the next round.
func (s *Server) Scrape(ctx context.Context, kubelets func() []Kubelet, round func(failed map[string]error)) error {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		ks := kubelets()
		names := make([]string, 0, len(ks))
		var (
			wg     sync.WaitGroup
			mu     sync.Mutex
			failed = map[string]error{}
		)
		for _, k := range ks {
			names = append(names, k.Node)
			wg.Go(func() {
				if err := s.scrapeOne(ctx, k); err != nil {
					mu.Lock()
					failed[k.Node] = err
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		s.store.retain(names)
		if ctx.Err() == nil {
			round(failed)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// scrapeOne reads kubelet k's resource metrics into the store.
func (s *Server) scrapeOne(ctx context.Context, k Kubelet) error {
	ctx, cancel := context.WithTimeout(ctx, s.interval)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+k.Addr+"/metrics/resource", nil)
	if err != nil {
		return fmt.Errorf("when asking node %s's kubelet: %w", k.Node, err)
	}
	resp, err := s.kubelets.Do(req)
	if err != nil {
		return fmt.Errorf("when scraping node %s's kubelet: %w", k.Node, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("node %s's kubelet answered %s: %s", k.Node, resp.Status, msg)
	}
	sc, err := parseScrape(io.LimitReader(resp.Body, maxScrape))
	if err != nil {
		return fmt.Errorf("node %s: %w", k.Node, err)
	}
	if !sc.node.complete() {
		return fmt.Errorf("node %s's kubelet reported no usage of the node", k.Node)
	}
	s.store.add(k.Node, sc)
	return nil
}

// maxScrape bounds what is read of one kubelet's answer: a few hundred
// bytes a container.
const maxScrape = 16 << 20
