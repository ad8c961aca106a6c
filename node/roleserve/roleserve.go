package roleserve

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"path/filepath"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/consensus"
	"cairn.dev/cairn/node/curator"
	"cairn.dev/cairn/node/curator/resolver"
	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/kubernetes"
	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/node/ports"
	"cairn.dev/cairn/node/timesync"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/event/memory"
	"cairn.dev/cairn/pkg/supervisor"
	api "cairn.dev/cairn/proto/api"
)

// Config is what the role server needs. Membership, ExternalAddress and
// Storage are required.
type Config struct {
	// Membership is set once by enrolment, when the node belongs to a
	// cluster and its data partition is mounted. Nothing runs before.
	Membership event.Watchable[*Membership]
	// ExternalAddress is the node's address on the cluster network. Its
	// IP is where etcd's peers and the curator listen, and what the node
	// reports in its status.
	ExternalAddress event.Watchable[netip.Prefix]
	// Storage is the node's storage: the data partition holds etcd's data
	// and the copy of the node's roles, the ESP the cluster directory.
	Storage *localstorage.Storage
	// Version is the node's software version, reported in its status.
	Version string
	// Clock is the state of the node's clock (node/timesync), reported in
	// its status. Nil leaves the clock out of the status.
	Clock event.Watchable[timesync.State]
	// System is the system slot the node booted (node/localstorage),
	// set before the storage child lets anything else start: reported
	// in the node's status. Nil leaves the slot out of the status.
	System event.Watchable[*localstorage.BootedSystem]
	// BootSecurity is what the firmware says of this boot (Secure Boot),
	// reported in the node's status. Nil leaves it out of the status.
	BootSecurity *api.BootSecurity
	// Ports are the ports this node's etcd and curator listen on; zero
	// fields mean the fixed ones.
	Ports ports.Table

	// Test overrides; zero values mean the node's behaviour.

	// clusterPorts are the ports of the other nodes of the cluster: the
	// curators of the cluster directory (Curator) and the etcd peer port
	// this node's curator gives joining nodes (EtcdPeer). Production nodes
	// all use the same ports; test nodes share an address.
	clusterPorts ports.Table
	// afterBootstrap runs once bootstrapCluster wrote a new cluster's
	// state, with the client it used.
	afterBootstrap func(ctx context.Context, etcd *consensus.Client) error
	// curatorOptions are added to the options of this node's curator.
	curatorOptions []curator.Option
}

// Service is the role server. Build it with New and run Run under a
// supervisor.
type Service struct {
	cfg Config

	// The values the workers share; each has one writer, named here.

	// credentials is the node's identity, set once known (credentials).
	credentials memory.Value[*identity.Node]
	// bootstrapped is the identity made by the bootstrap of a new
	// cluster (controlplane).
	bootstrapped memory.Value[*identity.Node]
	// roles is the node's roles: the local copy, then the curator's
	// (rolefetch).
	roles memory.Value[*api.NodeRoles]
	// curator is the ClientConn to the curator leader; nil while there is
	// none (connection).
	curator memory.Value[*curatorConn]
	// localCurator is where this node's own curator serves; invalid while
	// it does not (controlplane).
	localCurator memory.Value[netip.AddrPort]
	// curators are the host:port of the cluster's curators, unset until
	// the cluster was heard (clusterwatch).
	curators memory.Value[[]string]
	// directory is the cluster directory the cluster's nodes make, unset
	// until the cluster was heard (clusterwatch).
	directory memory.Value[*api.ClusterDirectory]
	// storedDirectory is the cluster directory last written to the ESP
	// (clusterdir).
	storedDirectory memory.Value[*api.ClusterDirectory]
	// ownerTrust is the cluster's owner trust, for node management
	// (ownertrust).
	ownerTrust memory.Value[*api.OwnerTrust]
	// localEtcd is the node's etcd member while it votes and the curator
	// serves on it, nil otherwise (controlplane).
	localEtcd memory.Value[*consensus.Status]
	// apiservers are the host:port of the apiservers of the cluster's
	// Kubernetes controllers (clusterwatch).
	apiservers memory.Value[[]string]
	// kubeNodes are the UP nodes and their Kubernetes roles
	// (clusterwatch).
	kubeNodes memory.Value[[]kubernetes.ClusterNode]
	// tunnelPeers are the nodes the pod tunnel reaches (clusterwatch).
	tunnelPeers memory.Value[[]kubernetes.TunnelPeer]
	// statusPushed is set once the node's status reached the curator
	// leader (statuspush).
	statusPushed memory.Value[bool]
	// kubeletReady is the Ready condition of the node's Node object
	// (kubeworker).
	kubeletReady memory.Value[bool]
	// health is the node's health (health).
	health memory.Value[Health]
	// desiredRelease is the release a cluster rollout gave the node, nil
	// when none did (rolefetch).
	desiredRelease memory.Value[*api.DesiredRelease]
	// updateStatus is what the node says about its desired release
	// (SetUpdateStatus).
	updateStatus memory.Value[*api.UpdateStatus]
	// updatePushed is the update status (as set) of the node's status
	// last pushed to the curator leader (statuspush).
	updatePushed memory.Value[*api.UpdateStatus]
	// decommissioned is set once a curator refused the node as
	// decommissioned, for good (rolefetch).
	decommissioned memory.Value[bool]

	workers map[string]supervisor.Runnable
}

// curatorConn is a ClientConn that follows the curator leader, and the
// resolver behind it.
type curatorConn struct {
	conn     *grpc.ClientConn
	resolver *resolver.Resolver
}

func (c *curatorConn) client() api.CuratorClient { return api.NewCuratorClient(c.conn) }

// New returns a role server for cfg. Nothing happens until Run.
func New(cfg Config) *Service {
	cfg.Ports = cfg.Ports.WithDefaults()
	if cfg.clusterPorts == (ports.Table{}) {
		cfg.clusterPorts = cfg.Ports
	}
	cfg.clusterPorts = cfg.clusterPorts.WithDefaults()
	s := &Service{cfg: cfg}
	s.localCurator.Set(netip.AddrPort{})
	s.localEtcd.Set(nil)
	s.apiservers.Set(nil)
	s.kubeNodes.Set(nil)
	s.tunnelPeers.Set(nil)
	s.decommissioned.Set(false)
	paths := nodePaths{
		etcd:   cfg.Storage.Root.Data.Etcd.FullPath(),
		socket: filepath.Join(cfg.Storage.Root.Ephemeral.FullPath(), "etcd", "client.sock"),
		node:   &cfg.Storage.Root.Data.Node,
	}
	kube := kubeUnit{
		roles:       &s.roles,
		address:     cfg.ExternalAddress,
		credentials: &s.credentials,
		curator:     &s.curator,
		layout:      kubernetesLayout(cfg),
		routing:     kubernetes.NewRouting(),
		readiness:   kubernetes.NewReadiness(),
		ports:       cfg.Ports,
	}
	s.workers = map[string]supervisor.Runnable{
		"credentials": (&workerCredentials{
			membership:   cfg.Membership,
			bootstrapped: &s.bootstrapped,
			credentials:  &s.credentials,
		}).run,
		"connection": (&workerConnection{
			membership:     cfg.Membership,
			credentials:    &s.credentials,
			localCurator:   &s.localCurator,
			curators:       &s.curators,
			directoryPort:  cfg.clusterPorts.Curator,
			decommissioned: &s.decommissioned,
			curator:        &s.curator,
		}).run,
		"rolefetch": (&workerRolefetch{
			membership:     cfg.Membership,
			credentials:    &s.credentials,
			curator:        &s.curator,
			paths:          paths,
			roles:          &s.roles,
			release:        &s.desiredRelease,
			decommissioned: &s.decommissioned,
		}).run,
		"controlplane": (&workerControlplane{
			membership:     cfg.Membership,
			address:        cfg.ExternalAddress,
			roles:          &s.roles,
			credentials:    &s.credentials,
			curator:        &s.curator,
			paths:          paths,
			ports:          cfg.Ports,
			joinPeerPort:   cfg.clusterPorts.EtcdPeer,
			afterBootstrap: cfg.afterBootstrap,
			curatorOptions: cfg.curatorOptions,
			clock:          cfg.Clock,
			bootstrapped:   &s.bootstrapped,
			localCurator:   &s.localCurator,
			localEtcd:      &s.localEtcd,
		}).run,
		"statuspush": (&workerStatuspush{
			address:      cfg.ExternalAddress,
			credentials:  &s.credentials,
			curator:      &s.curator,
			localCurator: &s.localCurator,
			clock:        cfg.Clock,
			system:       cfg.System,
			boot:         cfg.BootSecurity,
			update:       &s.updateStatus,
			version:      cfg.Version,
			pushed:       &s.statusPushed,
			updatePushed: &s.updatePushed,
		}).run,
		"health": (&workerHealth{
			statusPushed: &s.statusPushed,
			roles:        &s.roles,
			localEtcd:    &s.localEtcd,
			localCurator: &s.localCurator,
			kubeletReady: &s.kubeletReady,
			health:       &s.health,
		}).run,
		"heartbeat": (&workerHeartbeat{curator: &s.curator}).run,
		"renew": (&workerRenew{
			credentials: &s.credentials,
			curator:     &s.curator,
			node:        paths.node,
			now:         time.Now,
		}).run,
		"ownertrust": (&workerOwnertrust{
			membership: cfg.Membership,
			curator:    &s.curator,
			node:       paths.node,
			trust:      &s.ownerTrust,
		}).run,
		"clusterwatch": (&workerClusterwatch{
			curator:     &s.curator,
			apiPort:     cfg.clusterPorts.KubernetesAPI,
			curators:    &s.curators,
			directory:   &s.directory,
			apiservers:  &s.apiservers,
			kubeNodes:   &s.kubeNodes,
			tunnelPeers: &s.tunnelPeers,
		}).run,
		"clusterdir": (&workerClusterdir{
			membership: cfg.Membership,
			directory:  &s.directory,
			file:       &cfg.Storage.Root.ESP.Cairn,
			stored:     &s.storedDirectory,
		}).run,
		"kubecontroller": (&workerKubeController{
			kubeUnit:  kube,
			localEtcd: &s.localEtcd,
			kubeNodes: &s.kubeNodes,
		}).run,
		"kubeworker":   (&workerKubeWorker{kubeUnit: kube, apiservers: &s.apiservers, tunnelPeers: &s.tunnelPeers, ready: &s.kubeletReady}).run,
		"kubeservices": (&workerKubeServices{kubeUnit: kube, localEtcd: &s.localEtcd, tunnelPeers: &s.tunnelPeers}).run,
	}
	return s
}

// Credentials is the node's identity: Membership.Credentials, or what the
// bootstrap made on the boot that created the cluster. It is set once,
// when known.
func (s *Service) Credentials() event.Watchable[*identity.Node] { return &s.credentials }

// Health is the node's health: whether it serves what its roles ask
// for, and what it waits for while it does not. It holds no value until
// the role server ran for a moment.
func (s *Service) Health() event.Watchable[Health] { return &s.health }

// StoredDirectory is the cluster directory that the role server last
// wrote to the ESP: first Membership.ClusterDirectory, then what the
// cluster says. Enrolment waits for it before it seals the node's
// configuration, since a node that joins again dials the curators it
// lists.
func (s *Service) StoredDirectory() event.Watchable[*api.ClusterDirectory] {
	return &s.storedDirectory
}

// OwnerTrust is the cluster's owner trust, by which node management
// judges the owner (rpc.Server.JudgeOwners): the copy on the data
// partition or the bootstrap owner key at first, then what the curators
// say. It holds no value while the node knows neither.
func (s *Service) OwnerTrust() event.Watchable[*api.OwnerTrust] { return &s.ownerTrust }

// DesiredRelease is the release a cluster rollout gave this node to
// install and boot (Node.desired_release), nil when none did. It holds no
// value until a curator told the node about itself.
func (s *Service) DesiredRelease() event.Watchable[*api.DesiredRelease] {
	return &s.desiredRelease
}

// SetUpdateStatus sets what the node says about its desired release: the
// role server pushes it in the node's status (NodeStatus.update), its
// reason cut to what the curator stores; nil leaves it out. Only what acts
// on DesiredRelease calls it.
func (s *Service) SetUpdateStatus(st *api.UpdateStatus) {
	if st != nil {
		st = proto.Clone(st).(*api.UpdateStatus)
	}
	s.updateStatus.Set(st)
}

// UpdatePushed is the update status, as SetUpdateStatus set it, of the
// node's status that last reached the curator leader (nil: one without
// any), so that what sets it can wait for the cluster to hear it before
// the node reboots. It holds no value until a status reached the leader.
func (s *Service) UpdatePushed() event.Watchable[*api.UpdateStatus] { return &s.updatePushed }

// ClusterConfiguration reads the cluster configuration from the curator
// leader, waiting for the node's connection to the curators: for what
// acts on the owner's request (the installer, node/update), which must go
// by the configuration of that moment, not by a copy.
func (s *Service) ClusterConfiguration(ctx context.Context) (*api.ClusterConfiguration, error) {
	cc, err := waitFor(ctx, &s.curator, "the connection to the curators")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := cc.client().Watch(ctx, &api.WatchRequest{Kind: &api.WatchRequest_Configuration_{Configuration: &api.WatchRequest_Configuration{}}})
	if err != nil {
		return nil, fmt.Errorf("when reading the cluster configuration: %w", err)
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			return nil, fmt.Errorf("when reading the cluster configuration: %w", err)
		}
		if c := ev.GetConfiguration(); c != nil {
			return c, nil
		}
	}
}

// Run runs every worker until ctx is done.
func (s *Service) Run(ctx context.Context) error {
	for _, n := range slices.Sorted(maps.Keys(s.workers)) {
		if err := supervisor.Run(ctx, n, s.workers[n]); err != nil {
			return fmt.Errorf("when starting %s: %w", n, err)
		}
	}
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	<-ctx.Done()
	return ctx.Err()
}

// errInputChanged is returned by a worker whose inputs changed, so that its
// supervisor runs it again on the new ones (see the package documentation).
var errInputChanged = fmt.Errorf("inputs changed: %w", supervisor.ErrRestart)

// waitFor returns the first non-nil value of v; what names it in the
// error.
func waitFor[T any](ctx context.Context, v event.Watchable[*T], what string) (*T, error) {
	x, err := event.Get(ctx, v, event.NotNil[*T]())
	if err != nil {
		return nil, fmt.Errorf("when waiting for %s: %w", what, err)
	}
	return x, nil
}

// nodePaths are the places of the node's storage that workers use.
type nodePaths struct {
	// etcd is etcd's data directory, on the data partition.
	etcd string
	// socket is etcd's client socket, on /ephemeral.
	socket string
	// node is the data partition's node/ directory, which holds the copy
	// of the roles (roles.pb).
	node *localstorage.NodeDirectory
}
