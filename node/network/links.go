package network

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"cairn.dev/cairn/pkg/supervisor"
)

// link is an Ethernet link as the address workers need it.
type link struct {
	index int
	name  string
	hw    net.HardwareAddr
}

// isEthernet tells whether l is an Ethernet link the node should use:
// a physical NIC or, in tests, a veth. Bridges, bonds, VLANs and tunnels
// are built on top of links and are not the service's business, and
// neither are the host ends of pods' veth pairs, which the CNI plugin
// names veth… and configures itself.
func isEthernet(l netlink.Link) bool {
	if l.Attrs().EncapType != "ether" {
		return false
	}
	switch l.Type() {
	case "device":
		return true
	case "veth":
		return !strings.HasPrefix(l.Attrs().Name, "veth")
	}
	return false
}

// runLinks is the links worker. It follows every link of the namespace:
// it sets loopback and each Ethernet link administratively up, and
// publishes the Ethernet links that have carrier. Ethernet links are set
// up whether they have carrier or not, because a driver only reports
// carrier on a link that is up; a cable plugged in later then shows as a
// link update with carrier.
func (s *Service) runLinks(ctx context.Context) error {
	log := supervisor.Logger(ctx)
	nl, err := s.netlinkHandle()
	if err != nil {
		return err
	}
	defer nl.Close()
	updates := make(chan netlink.LinkUpdate, 32)
	done := make(chan struct{})
	errC := make(chan error, 1)
	opts := netlink.LinkSubscribeOptions{
		ListExisting: true,
		ErrorCallback: func(err error) {
			select {
			case errC <- err:
			default:
			}
		},
	}
	if s.c.Namespace > 0 {
		opts.Namespace = &s.c.Namespace
	}
	if err := netlink.LinkSubscribeWithOptions(updates, done, opts); err != nil {
		return fmt.Errorf("when subscribing to link updates: %w", err)
	}
	defer func() {
		// Closing done closes the subscription's socket; its goroutine
		// then closes updates. Draining lets it finish a pending send.
		close(done)
		for range updates {
		}
	}()
	supervisor.Signal(ctx, supervisor.SignalHealthy)

	withCarrier := make(map[int]link)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errC:
			return fmt.Errorf("link subscription failed: %w", err)
		case u, ok := <-updates:
			if !ok {
				return fmt.Errorf("link subscription ended")
			}
			if handleLinkUpdate(ctx, nl, u, withCarrier) {
				s.publishCarrier(withCarrier)
				log.Infof("Links with carrier: %s", linkNames(withCarrier))
			}
		}
	}
}

// handleLinkUpdate acts on one link update and records in withCarrier
// whether the link has carrier. It reports whether withCarrier changed.
func handleLinkUpdate(ctx context.Context, nl *netlink.Handle, u netlink.LinkUpdate, withCarrier map[int]link) bool {
	log := supervisor.Logger(ctx)
	attrs := u.Link.Attrs()
	_, had := withCarrier[attrs.Index]
	if u.Header.Type == unix.RTM_DELLINK {
		delete(withCarrier, attrs.Index)
		return had
	}
	isLoopback := attrs.EncapType == "loopback"
	if !isLoopback && !isEthernet(u.Link) {
		return false
	}
	if u.IfInfomsg.Flags&unix.IFF_UP == 0 {
		if err := nl.LinkSetUp(u.Link); err != nil {
			// The next update of the link retries; a link that cannot
			// be set up stays unused.
			log.Warningf("Could not set link %s up: %v", attrs.Name, err)
		} else {
			log.Infof("Set link %s up", attrs.Name)
		}
	}
	if isLoopback {
		return false
	}
	hasCarrier := u.IfInfomsg.Flags&unix.IFF_LOWER_UP != 0
	switch {
	case hasCarrier && !had:
		withCarrier[attrs.Index] = link{index: attrs.Index, name: attrs.Name, hw: slices.Clone(attrs.HardwareAddr)}
		log.Infof("Link %s (%s) gained carrier", attrs.Name, attrs.HardwareAddr)
		return true
	case !hasCarrier && had:
		delete(withCarrier, attrs.Index)
		log.Infof("Link %s lost carrier", attrs.Name)
		return true
	}
	return false
}

// publishCarrier sets s.carrier to a fresh, sorted copy of withCarrier.
func (s *Service) publishCarrier(withCarrier map[int]link) {
	links := make([]link, 0, len(withCarrier))
	for _, l := range withCarrier {
		links = append(links, l)
	}
	slices.SortFunc(links, func(a, b link) int { return a.index - b.index })
	s.carrier.Set(links)
}

func linkNames(m map[int]link) []string {
	var names []string
	for _, l := range m {
		names = append(names, l.name)
	}
	slices.Sort(names)
	return names
}

// waitLink blocks until a link with carrier is there that pick accepts,
// and returns the first of them.
func (s *Service) waitLink(ctx context.Context, pick func(link) bool) (link, error) {
	w := s.carrier.Watch()
	defer w.Close()
	for {
		links, err := w.Get(ctx)
		if err != nil {
			return link{}, fmt.Errorf("when waiting for a link with carrier: %w", err)
		}
		for _, l := range links {
			if pick(l) {
				return l, nil
			}
		}
	}
}
