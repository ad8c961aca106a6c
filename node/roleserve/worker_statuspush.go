package roleserve

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/node/timesync"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/event/memory"
	"cairn.dev/cairn/pkg/supervisor"
	api "cairn.dev/cairn/proto/api"
)

const (
	// clockRefresh is how old the last sync in the pushed status may get
	// while the clock stays synchronized with the same server: the
	// service polls every minute or so at first, and a write of the
	// node's record goes to every node of the cluster.
	clockRefresh = 15 * time.Minute
	// maxReason is the longest reason (for a clock known wrong, for a
	// failed update) that the node puts in its status; longer ones are
	// cut. The curator stores no longer clock reasons, and the whole
	// status must stay small.
	maxReason = 256
)

// workerStatuspush tells the curator what this node reports about itself
// (its address, its version and system slot, its curator if it runs one,
// its clock, whether it booted under Secure Boot, and how it carries out
// its desired release) every time that changes.
type workerStatuspush struct {
	address      event.Watchable[netip.Prefix]
	credentials  event.Watchable[*identity.Node]
	curator      event.Watchable[*curatorConn]
	localCurator event.Watchable[netip.AddrPort]
	// clock is the clock's state; nil leaves it out of the status.
	clock event.Watchable[timesync.State]
	// system is the system slot the node booted; nil leaves it out of
	// the status. It is set once, before the role server has anything
	// to do.
	system event.Watchable[*localstorage.BootedSystem]
	// boot is what the firmware says of this boot; nil leaves it out of
	// the status.
	boot *api.BootSecurity
	// update is what the node says about its desired release; nil, or
	// no value, leaves it out of the status.
	update  event.Watchable[*api.UpdateStatus]
	version string
	// pushed is set once a status reached the curator leader; nil in
	// tests that do not care.
	pushed *memory.Value[bool]
	// updatePushed is set to the update status, as update held it, of
	// each status that reached the curator leader; nil in tests that do
	// not care.
	updatePushed *memory.Value[*api.UpdateStatus]
}

func (w *workerStatuspush) run(ctx context.Context) error {
	creds, err := waitFor(ctx, w.credentials, "credentials")
	if err != nil {
		return err
	}
	cc, err := waitFor(ctx, w.curator, "a curator connection")
	if err != nil {
		return err
	}
	var slot localstorage.Slot
	if w.system != nil {
		booted, err := waitFor(ctx, w.system, "the booted system slot")
		if err != nil {
			return err
		}
		slot = booted.Slot
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	addrC := make(chan netip.Prefix)
	localC := make(chan netip.AddrPort)
	clockC := make(chan timesync.State)
	updateC := make(chan *api.UpdateStatus)
	event.Pipe(pctx, w.address, addrC)
	event.Pipe(pctx, w.localCurator, localC)
	if w.clock != nil {
		event.Pipe(pctx, w.clock, clockC)
	}
	if w.update != nil {
		event.Pipe(pctx, w.update, updateC)
	}

	var (
		addr    netip.Prefix
		local   netip.AddrPort
		healthy bool
		// clock is the clock's latest state, pushed the one last sent.
		clock, pushed *timesync.State
		// update is the latest update status, pushedUpdate the one last
		// sent.
		update, pushedUpdate *api.UpdateStatus
	)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case addr = <-addrC:
		case local = <-localC:
		case c := <-clockC:
			clock = &c
			if !clockNews(pushed, c) {
				continue
			}
		case update = <-updateC:
			if proto.Equal(update, pushedUpdate) {
				continue
			}
		}
		if !addr.IsValid() {
			continue
		}
		st := &api.NodeStatus{
			ExternalAddress:    addr.Addr().String(),
			Version:            w.version,
			TimestampUnixNanos: time.Now().UnixNano(),
			Clock:              clockStatus(clock),
			SystemSlot:         string(slot),
			Update:             updateStatus(update),
			BootSecurity:       w.boot,
		}
		if local.IsValid() {
			st.RunningCurator = &api.NodeStatus_RunningCurator{Port: int32(local.Port())}
		}
		cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := cc.client().UpdateNodeStatus(cctx, &api.UpdateNodeStatusRequest{NodeId: creds.ID(), Status: st})
		ccancel()
		if err != nil {
			return fmt.Errorf("when updating the node's status: %w", err)
		}
		pushed, pushedUpdate = clock, update
		if w.updatePushed != nil {
			w.updatePushed.Set(update)
		}
		if !healthy {
			supervisor.Logger(ctx).Infof("Status pushed (address %s, curator %v)", st.ExternalAddress, local.IsValid())
			supervisor.Signal(ctx, supervisor.SignalHealthy)
			healthy = true
			if w.pushed != nil {
				w.pushed.Set(true)
			}
		}
	}
}

// clockNews tells whether the clock's state now is worth a status push
// after pushed was sent (nil: none was): when its state, server or reason
// changed, when the clock was stepped, or when the pushed last sync is
// clockRefresh old.
func clockNews(pushed *timesync.State, now timesync.State) bool {
	return pushed == nil || pushed.Sync != now.Sync || pushed.Server != now.Server || pushed.Reason != now.Reason ||
		now.Offset.Abs() > timesync.MaxOffset || now.LastSync.Sub(pushed.LastSync) >= clockRefresh
}

// clockStatus is the clock's state as the node's status says it; nil when
// the state is not known.
func clockStatus(st *timesync.State) *api.ClockStatus {
	if st == nil {
		return nil
	}
	c := &api.ClockStatus{
		State:       api.ClockState_CLOCK_STATE_UNSYNCHRONIZED,
		OffsetNanos: st.Offset.Nanoseconds(),
		Reason:      printableReason(st.Reason),
	}
	switch st.Sync {
	case timesync.Synchronized:
		c.State = api.ClockState_CLOCK_STATE_SYNCHRONIZED
	case timesync.KnownWrong:
		c.State = api.ClockState_CLOCK_STATE_KNOWN_WRONG
	}
	if st.Server.IsValid() {
		c.Server = st.Server.String()
	}
	if !st.LastSync.IsZero() {
		c.LastSyncUnixNanos = st.LastSync.UnixNano()
	}
	return c
}

// updateStatus is u as the node's status says it: a copy, with a reason
// the curator stores; nil for nil.
func updateStatus(u *api.UpdateStatus) *api.UpdateStatus {
	if u == nil {
		return nil
	}
	u = proto.Clone(u).(*api.UpdateStatus)
	u.Reason = printableReason(u.Reason)
	return u
}

// printableReason makes s what the curator stores: printable, at most
// maxReason bytes, cut at a character.
func printableReason(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return '?'
		}
		return r
	}, s)
	if len(s) <= maxReason {
		return s
	}
	cut := maxReason
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
