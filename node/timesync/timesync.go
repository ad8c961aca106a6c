package timesync

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/cenkalti/backoff/v4"

	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/sntp"
	"cairn.dev/cairn/pkg/supervisor"
)

// stepThreshold is the offset above which the first answer of a boot is
// stepped rather than slewed (ntpd's step threshold).
const stepThreshold = 128 * time.Millisecond

// timing is how long the service waits between queries; see the package
// documentation ("Asking") for the node's.
type timing struct {
	// minPoll and maxPoll bound the wait after a good answer.
	minPoll, maxPoll time.Duration
	// firstRetry is the wait after no server answered, doubling up to
	// maxPoll.
	firstRetry time.Duration
	// query bounds one query.
	query time.Duration
}

var nodeTiming = timing{
	minPoll:    64 * time.Second,
	maxPoll:    1024 * time.Second,
	firstRetry: 16 * time.Second,
	query:      5 * time.Second,
}

// Config is what the service needs. Servers and State are required.
type Config struct {
	// Servers are the NTP servers to ask, most preferred first: today
	// the ones the network's DHCP lease names (network.Config.NTPServers).
	// An empty list leaves the clock as it is until the list changes.
	Servers event.Watchable[[]netip.Addr]
	// State is where the service publishes the clock's state. It is set
	// when the service starts and after every change.
	State event.Value[State]

	// Test overrides; zero values mean the node's behaviour.

	// clock reads and corrects the clock; nil means the system's.
	clock adjuster
	// port is the servers' UDP port; 0 means sntp.Port.
	port uint16
	// timing replaces nodeTiming.
	timing *timing
}

// adjuster reads and corrects a clock. systemClock is the node's; tests
// use a fake that never touches it.
type adjuster interface {
	// now reads the clock.
	now() time.Time
	// step moves the clock by d at once.
	step(d time.Duration) error
	// slew moves the clock by d gradually, replacing what is left of
	// an earlier slew.
	slew(d time.Duration) error
}

// Service keeps the clock. Create it with New and run Run under the
// supervisor.
type Service struct {
	c      Config
	timing timing
	// state is the state published last, and synced whether a server
	// answered this boot. Run keeps them across its restarts, which the
	// supervisor never overlaps.
	state  State
	synced bool
	// started is set once Run has published a first state.
	started bool
}

// New returns a Service for c. It does nothing until Run.
func New(c Config) *Service {
	if c.clock == nil {
		c.clock = systemClock{}
	}
	if c.port == 0 {
		c.port = sntp.Port
	}
	t := nodeTiming
	if c.timing != nil {
		t = *c.timing
	}
	return &Service{c: c, timing: t}
}

// Run keeps the clock until ctx is done. It is a supervisor.Runnable.
func (s *Service) Run(ctx context.Context) error {
	if s.c.Servers == nil || s.c.State == nil {
		return errors.New("config lacks Servers or State")
	}
	log := supervisor.Logger(ctx)
	if !s.started {
		st := State{Sync: Unsynchronized}
		if err := CheckFloor(s.c.clock.now()); err != nil {
			st = State{Sync: KnownWrong, Reason: err.Error()}
			log.Errorf("%v (until an NTP server corrects it)", err)
		}
		s.publish(st)
		s.started = true
	}
	serversC := make(chan []netip.Addr)
	event.Pipe(ctx, s.c.Servers, serversC)
	supervisor.Signal(ctx, supervisor.SignalHealthy)

	p := &poller{s: s, log: log, interval: s.timing.minPoll, retry: s.newRetryBackoff()}
	// next fires when the next poll is due; nil while there are no
	// servers to poll.
	var next *time.Timer
	var nextC <-chan time.Time
	schedule := func(d time.Duration) {
		if next != nil {
			next.Stop()
		}
		next = time.NewTimer(d)
		nextC = next.C
	}
	defer func() {
		if next != nil {
			next.Stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case servers := <-serversC:
			if slices.Equal(servers, p.servers) {
				continue
			}
			p.setServers(servers)
			if len(servers) == 0 {
				log.Infof("No NTP servers: the clock runs on its own")
				if next != nil {
					next.Stop()
				}
				nextC = nil
				continue
			}
			log.Infof("NTP servers: %v", servers)
			schedule(0)
		case <-nextC:
			wait := p.poll(ctx)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			schedule(wait)
		}
	}
}

// publish sets st as the state, on the Value too.
func (s *Service) publish(st State) {
	s.state = st
	s.c.State.Set(st)
}

// newRetryBackoff returns the waits after no server answered.
func (s *Service) newRetryBackoff() *backoff.ExponentialBackOff {
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(s.timing.firstRetry),
		backoff.WithMultiplier(2),
		backoff.WithMaxInterval(s.timing.maxPoll),
		backoff.WithRandomizationFactor(0.1),
		backoff.WithMaxElapsedTime(0),
	)
}

// poller is what one Run knows about its servers.
type poller struct {
	s   *Service
	log logtree.LeveledLogger
	// servers is the current list; refused holds those that sent DENY or
	// RSTR, not asked again until the list changes.
	servers []netip.Addr
	refused map[netip.Addr]bool
	// interval is the wait after the next good answer.
	interval time.Duration
	retry    *backoff.ExponentialBackOff
}

func (p *poller) setServers(servers []netip.Addr) {
	p.servers = servers
	p.refused = map[netip.Addr]bool{}
	p.interval = p.s.timing.minPoll
	p.retry.Reset()
}

// poll asks the servers in order until one gives an answer the service
// can use, and returns how long to wait before the next poll.
func (p *poller) poll(ctx context.Context) time.Duration {
	var errs []error
	for _, a := range p.servers {
		if p.refused[a] {
			continue
		}
		stepped, err := p.ask(ctx, a)
		if err == nil {
			p.retry.Reset()
			wait := p.interval
			if stepped {
				p.interval = p.s.timing.minPoll
			} else {
				p.interval = min(2*p.interval, p.s.timing.maxPoll)
			}
			return wait
		}
		if ctx.Err() != nil {
			return 0
		}
		var kiss *sntp.KissError
		if errors.As(err, &kiss) && kiss.Refused() {
			p.refused[a] = true
		}
		errs = append(errs, err)
	}
	wait := p.retry.NextBackOff()
	if len(errs) == 0 {
		p.log.Warningf("Every NTP server refused this node; asking again in %s", wait.Round(time.Millisecond))
	} else {
		p.log.Warningf("No usable NTP answer, asking again in %s: %v", wait.Round(time.Millisecond), errors.Join(errs...))
	}
	return wait
}

// ask queries one server and applies its answer. It reports whether the
// clock was stepped.
func (p *poller) ask(ctx context.Context, server netip.Addr) (bool, error) {
	s := p.s
	qctx, cancel := context.WithTimeout(ctx, s.timing.query)
	r, err := sntp.Query(qctx, netip.AddrPortFrom(server, s.c.port), sntp.WithLocalClock(s.c.clock.now))
	cancel()
	if err != nil {
		return false, err
	}
	if r.Time.Before(Floor) {
		return false, fmt.Errorf("%s says it is %s, before %s, which no Cairn build predates: not believed",
			server, r.Time.UTC().Format(time.RFC3339), Floor.Format(time.RFC3339))
	}
	step := r.Offset.Abs() > MaxOffset || (!s.synced && r.Offset.Abs() > stepThreshold)
	if step {
		if err := s.c.clock.step(r.Offset); err != nil {
			if r.Offset.Abs() > MaxOffset {
				reason := fmt.Sprintf("NTP server %s finds it %s off, more than %s, and stepping it failed: %v", server, r.Offset.Round(time.Millisecond), MaxOffset, err)
				if s.state.Sync != KnownWrong {
					p.log.Errorf("Clock known wrong: %s", reason)
				}
				s.publish(State{Sync: KnownWrong, Server: server, Offset: r.Offset, LastSync: s.state.LastSync, Reason: reason})
			}
			return false, fmt.Errorf("when stepping the clock by %s to the time of %s: %w", r.Offset, server, err)
		}
		p.log.Infof("Clock stepped by %s to the time of %s (stratum %d, round trip %s)", r.Offset, server, r.Stratum, r.Delay)
	} else if err := s.c.clock.slew(r.Offset); err != nil {
		return false, fmt.Errorf("when slewing the clock by %s: %w", r.Offset, err)
	}
	if !s.synced || s.state.Sync != Synchronized || s.state.Server != server {
		p.log.Infof("Clock synchronized with %s (offset %s, round trip %s)", server, r.Offset, r.Delay)
	}
	s.synced = true
	s.publish(State{Sync: Synchronized, Server: server, Offset: r.Offset, LastSync: s.c.clock.now()})
	return step, nil
}
