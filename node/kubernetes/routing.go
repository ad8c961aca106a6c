package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"cairn.dev/cairn/pkg/supervisor"
)

// proxyTable is the nftables table kube-proxy programs in each family it
// serves (ip, ip6): its ClusterIPs and NodePorts.
const proxyTable = "kube-proxy"

// Routing is what Kubernetes programs into a node's kernel for Services
// and pods: kube-proxy's nftables tables, Cairn's pod tunnel with its
// routes and its guard, and a worker's NetworkPolicy table. A worker
// programs it, and so do the Services of a controller that is no worker;
// a node changing roles starts one as the
// other stops. kube-proxy leaves its tables behind when it exits, so
// without Routing a node that lost its last Kubernetes role kept answering
// ClusterIPs and NodePorts, and routing pod ranges, until it rebooted.
//
// Routing counts the runnables that program it (kube-proxy's and the pod
// routes', of whichever unit runs them) and removes all of it when the
// last one ends because its unit stopped. A runnable that crashes or
// restarts to renew its certificates keeps it. A node has one Routing,
// which all its Kubernetes units share (NewRouting).
type Routing struct {
	mu    sync.Mutex
	users int
	// opts open nftables and netlink where the routing is: the node's own
	// network namespace, or a test's.
	nfOpts []nftables.ConnOption
	nlOpen func() (*netlink.Handle, error)
}

// NewRouting returns the Routing of the node's network namespace.
func NewRouting() *Routing {
	return &Routing{nlOpen: func() (*netlink.Handle, error) { return netlink.NewHandle(unix.NETLINK_ROUTE) }}
}

// hold counts the runnable of ctx as programming the routing until the
// function it returns is called, as the runnable returns. If that
// runnable was the last, and ctx is done (its unit stopped, rather than
// the runnable failing on its own), the function removes the routing and
// logs what it removed.
func (r *Routing) hold(ctx context.Context) (release func()) {
	r.mu.Lock()
	r.users++
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.users--
		if r.users > 0 || ctx.Err() == nil {
			return
		}
		// The lock stays held: a unit starting meanwhile waits, and then
		// programs what it needs from scratch.
		removed, err := r.remove()
		lg := supervisor.Logger(ctx)
		if err != nil {
			lg.Warningf("Removing what kube-proxy and the pod routes programmed, after the last of them stopped: %v", err)
			return
		}
		lg.Infof("No Kubernetes role runs kube-proxy or the pod routes here any more: removed %s", removed)
	}
}

// remove deletes kube-proxy's tables, the NetworkPolicy table, Cairn's
// pod routes and the pod tunnel with its guard, and says what it deleted.
func (r *Routing) remove() (string, error) {
	nf, err := nftables.New(r.nfOpts...)
	if err != nil {
		return "", fmt.Errorf("when opening nftables: %w", err)
	}
	tables, err := nf.ListTables()
	if err != nil {
		return "", fmt.Errorf("when listing the nftables tables: %w", err)
	}
	var removed []string
	for _, t := range tables {
		if t.Name != proxyTable && !((t.Name == policyTable || t.Name == guardTable) && t.Family == nftables.TableFamilyIPv4) {
			continue
		}
		nf.DelTable(t)
		if err := nf.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
			return "", fmt.Errorf("when removing nftables table %s: %w", tableName(t), err)
		}
		removed = append(removed, "nftables table "+tableName(t))
	}
	nl, err := r.nlOpen()
	if err != nil {
		return "", fmt.Errorf("when opening netlink: %w", err)
	}
	defer nl.Close()
	routes, err := removePodRoutes(nl)
	if err != nil {
		return "", err
	}
	if routes == 1 {
		removed = append(removed, "1 pod route")
	} else {
		removed = append(removed, fmt.Sprintf("%d pod routes", routes))
	}
	if had, err := removeTunnel(nl); err != nil {
		return "", err
	} else if had {
		removed = append(removed, "the pod tunnel "+tunnelDevice)
	}
	return strings.Join(removed, ", "), nil
}

// tableName is how nft names table t: its family, then its name.
func tableName(t *nftables.Table) string {
	family := map[nftables.TableFamily]string{
		nftables.TableFamilyIPv4: "ip", nftables.TableFamilyIPv6: "ip6", nftables.TableFamilyINet: "inet",
	}[t.Family]
	if family == "" {
		family = fmt.Sprintf("family %d", t.Family)
	}
	return family + " " + t.Name
}
