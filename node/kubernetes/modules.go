package kubernetes

import (
	"context"
	"time"

	"cairn.dev/cairn/node/modules"
	"cairn.dev/cairn/pkg/supervisor"
)

// networkModules are the kernel modules that the pod tunnel, the
// masquerade and NetworkPolicy rules and kube-proxy ask for by name in
// their first minute, those asked for first first. Without them loaded
// ahead, the kernel loads each on request through modprobe mode, which
// starts /init anew: on an emulated node those runs took 6 to 7 s of a
// worker's first 10 s after its role, and 6 s of a controller's while its
// apiserver started.
var networkModules = []string{
	"nfnetlink", "nf_tables", "wireguard", "nft_chain_nat", "nft_ct", "nft_masq",
	"nft_reject_ipv4", "nft_reject_ipv6", "nft_fib_ipv4", "nft_fib_ipv6",
	"nft_nat", "nft_numgen", "nf_conntrack_netlink",
}

// podModules are what a worker's first pod asks for: its network link and
// its root filesystem, loaded on request while its sandbox started.
var podModules = []string{"veth", "overlay"}

// loadModules returns a runnable that loads names ahead, in this process
// (modules.Load), once, and is done. A module it cannot load is logged
// and left to the kernel's request for it, which says why it failed where
// it is needed.
func loadModules(names []string) supervisor.Runnable {
	return func(ctx context.Context) error {
		start := time.Now()
		n, err := modules.Load(ctx, supervisor.Logger(ctx), names...)
		if err != nil {
			supervisor.Logger(ctx).Warningf("Not loaded ahead: %v", err)
		} else {
			supervisor.Logger(ctx).Infof("Loaded %d modules ahead in %s", n, time.Since(start).Round(10*time.Millisecond))
		}
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		supervisor.Signal(ctx, supervisor.SignalDone)
		return nil
	}
}
