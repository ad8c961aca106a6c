package main

import (
	"context"
	"fmt"
	"net/netip"

	"cairn.dev/cairn/node/curator"
	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/node/logstore"
	"cairn.dev/cairn/node/metrics"
	"cairn.dev/cairn/node/parameters"
	"cairn.dev/cairn/node/ports"
	"cairn.dev/cairn/node/roleserve"
	"cairn.dev/cairn/node/timesync"
	"cairn.dev/cairn/pkg/event/memory"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/supervisor"
	"cairn.dev/cairn/pkg/tpmseal"
)

// A child is a named runnable the root starts. Each of the node's services
// is one entry of the list the core hands to rootRunnable: power first,
// then nodeChildren's (storage, network, enrolment, the role server and
// the rest).
type child struct {
	name string
	run  supervisor.Runnable
}

// nodeChildren returns the node's services, started after power: the
// network, time keeping, the storage, enrolment, the role server, node
// management and, in test images when test-only flags ask for them, test
// services (node/testhooks). printf writes phase lines; log takes what
// cannot start; request stops the node.
//
//	storage ─mounted─▶ parameters ─▶ network ─address─▶ enrolment ◀─┐
//	   └──────data ready (the data partition's modules)───▶ │      │
//	                        └──────────parameters───────────▶ │      │
//	                                                 membership│      │credentials,
//	                                                          ▼      │stored directory
//	              node management ◀─credentials, owner trust─ roleserve
//
//	network ─NTP servers─▶ timesync ─clock state─▶ roleserve (node status)
//	storage ─booted system slot─▶ roleserve (node status), update
//	update ─installer─▶ node management; roleserve ─health─▶ update
//	roleserve ─desired release─▶ update ─update status─▶ roleserve
//	enrolment ─membership (data partition mounted)─▶ logstore
//	roleserve ─credentials─▶ metrics (port 7836, to metrics certificates)
func nodeChildren(fl flags, printf func(string, ...any), log logtree.LeveledLogger, lt *logtree.LogTree, restarts *metrics.Restarts, request func(action)) []child {
	var (
		address    memory.Value[netip.Prefix]
		ntp        memory.Value[[]netip.Addr]
		clock      memory.Value[timesync.State]
		booted     memory.Value[*localstorage.BootedSystem]
		mounted    memory.Value[bool]
		dataReady  memory.Value[bool]
		membership memory.Value[*roleserve.Membership]
		params     memory.Value[*parameters.Loaded]
		installers memory.Value[*installer]
	)
	st, err := localstorage.New(localstorage.Config{})
	if err != nil {
		log.Errorf("no storage: %v", err)
		return []child{{"network", networkRunnable(nil, &address, &ntp, printf)}}
	}
	boot := bootSecurity(log)
	binding := pcrBinding(log, boot.GetSecureBoot())
	if binding != nil {
		fp := tpmseal.KeyFingerprint(binding.Key)
		boot.PcrKey = fp[:]
	}
	rs := roleserve.New(roleserve.Config{
		Membership:      &membership,
		ExternalAddress: &address,
		Storage:         st,
		Version:         version(),
		Clock:           &clock,
		System:          &booted,
		BootSecurity:    boot,
	})
	// Once per boot: it knows which boot is the running one.
	ls := logstore.New(logstore.Config{Tree: lt, Dir: st.Root.Data.Logs.FullPath()})
	gatherer := metrics.Gatherer("/proc", append(curator.Metrics(), restarts)...)
	cs := []child{
		{"storage", newStorage(st, fl, &booted, &mounted, &dataReady, printf, func() { request(firmwareReboot) }).run},
		{"parameters", parametersRunnable(st, &mounted, &params, printf)},
		{"network", networkRunnable(&params, &address, &ntp, printf)},
		{"timesync", timesyncRunnable(&ntp, &clock, printf)},
		{"cluster", enrolmentRunnable(st, &mounted, &dataReady, &address, &params, &membership, rs, boot.GetSecureBoot(), binding)},
		{"roleserve", rs.Run},
		{"update", updateRunnable(st, &booted, &mounted, rs, &installers, request, printf)},
		{"nodemanagement", nodeManagementRunnable(st, rs, &installers, lt, ls, gatherer, request)},
		{"logstore", logStoreRunnable(ls, &membership)},
		{"metrics", func(ctx context.Context) error {
			return metrics.Run(ctx, metrics.Config{Credentials: rs.Credentials(), Gatherer: gatherer, Port: ports.Metrics})
		}},
	}
	for _, s := range fl.test.Services(&address, st.Root.ESP.Cairn.SealedConfiguration.FullPath(), printf) {
		cs = append(cs, child{s.Name, s.Run})
	}
	return cs
}

// rootRunnable returns the root of the node's supervision tree. It starts
// children, each as a runnable of its own, says it is healthy, and runs
// until the tree is stopped. With fail set (a test hook) it fails at once
// with that error instead.
func rootRunnable(children []child, fail error) supervisor.Runnable {
	return func(ctx context.Context) error {
		if fail != nil {
			return fail
		}
		for _, c := range children {
			if err := supervisor.Run(ctx, c.name, c.run); err != nil {
				return fmt.Errorf("when starting %s: %w", c.name, err)
			}
		}
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		<-ctx.Done()
		return ctx.Err()
	}
}
