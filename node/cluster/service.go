package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/node/marker"
	"cairn.dev/cairn/node/parameters"
	"cairn.dev/cairn/node/ports"
	"cairn.dev/cairn/node/roleserve"
	"cairn.dev/cairn/node/testpoint"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/supervisor"
	"cairn.dev/cairn/pkg/tpmseal"
	api "cairn.dev/cairn/proto/api"
	private "cairn.dev/cairn/proto/private"
)

// Config is what enrolment needs. Every field but Ports, SecureBoot,
// Binding and DataModules is required.
type Config struct {
	// Storage is the node's storage, its ESP already mounted. Enrolment
	// mounts the data partition on it.
	Storage *localstorage.Storage
	// ExternalAddress is the node's address on its network, published by
	// the network service. Enrolment waits for it before it dials the
	// cluster or names itself in the cluster directory.
	ExternalAddress event.Watchable[netip.Prefix]
	// Parameters are the node parameters as read once at boot. Garbled
	// ones are reported on the console, and Run fails, to be run again
	// with backoff, until the value changes.
	Parameters event.Watchable[*parameters.Loaded]
	// Membership is where enrolment hands the role server the node's
	// membership, once, when the node belongs to a cluster and its data
	// partition is mounted.
	Membership event.Value[*roleserve.Membership]
	// Credentials are the role server's (roleserve.Service.Credentials):
	// on the boot that creates the cluster, enrolment waits there for the
	// identity the role server makes, to store it and seal it.
	Credentials event.Watchable[*identity.Node]
	// StoredDirectory is the role server's
	// (roleserve.Service.StoredDirectory): a newly enrolled node seals its
	// configuration only once the cluster directory is on the ESP.
	StoredDirectory event.Watchable[*api.ClusterDirectory]
	// Ports are the cluster's ports; zero fields mean the fixed ones.
	// Enrolment dials the curators of a cluster directory on Curator.
	Ports ports.Table
	// SecureBoot says whether the node's firmware booted it under Secure
	// Boot. The node says so in RegisterNode and JoinNode, and refuses to
	// bootstrap a cluster that requires Secure Boot without it.
	SecureBoot bool
	// Binding is what binds seals to the release this boot came from
	// (pkg/tpmseal): its PCR key and signed PCR 11 values. Nil when the
	// boot cannot bind (no Secure Boot, or a UKI without them): seals are
	// then bound to the TPM alone.
	Binding *tpmseal.Binding
	// DataModules, when set, turns true once the data partition's kernel
	// modules (dm-crypt, XFS, the CPU's AES) are loaded. Enrolment waits
	// for it only when it comes to mount the data partition, so that what
	// comes before (unsealing with the TPM, the network, the curator's
	// answer) overlaps their loading. Nil: they are loaded already.
	DataModules event.Watchable[bool]

	// Test overrides; zero values mean the node's behaviour.

	// storage replaces Storage's mount methods (Storage.Root still gives
	// the paths).
	storage storage
	// openTPM replaces the machine's TPM.
	openTPM func() (sealer, error)
	// timing replaces the default intervals.
	timing *timing
}

// timing are the intervals with which enrolment waits and retries.
type timing struct {
	// retryMin and retryMax bound the backoff between rounds of dialling.
	retryMin, retryMax time.Duration
	// refusedRetry is the wait after the cluster refused the node.
	refusedRetry time.Duration
	// callTimeout bounds one call to one curator.
	callTimeout time.Duration
	// approvalPoll is how often a registered node asks whether it was
	// approved, once it has waited a while (it asks sooner at first);
	// approvalReport how often it says it is still waiting.
	approvalPoll, approvalReport time.Duration
	// coldStartAfter is how long a joining node tries to reach a curator
	// before it starts from its own sealed configuration.
	coldStartAfter time.Duration
}

var defaultTiming = timing{
	retryMin:       500 * time.Millisecond,
	retryMax:       30 * time.Second,
	refusedRetry:   60 * time.Second,
	callTimeout:    5 * time.Second,
	approvalPoll:   time.Second,
	approvalReport: 5 * time.Second,
	coldStartAfter: 10 * time.Second,
}

// Service is the node's enrolment. Build it with New and run Run under a
// supervisor.
type Service struct {
	cfg     Config
	root    *localstorage.Root
	storage storage
	openTPM func() (sealer, error)
	timing  timing

	// keys, mounted, committed, handedOver and unsealed survive restarts
	// of Run within one boot, so that a restarted enrolment neither
	// mounts nor commits nor hands over twice, nor changes its keys half
	// way through. A registering node's keys also survive the boot, on
	// the ESP (registrationKeys).
	keys       *nodeKeys
	mounted    bool
	committed  *committed
	handedOver bool
	// unsealed is what a first enrolment still has to store once the
	// membership is handed over; nil when nothing is left (a join).
	unsealed *unsealedEnrolment
	// joining is the sealed configuration a join opened: a join that
	// starts over uses it, since the TPM unseals a bound seal only once a
	// boot (endUnsealing).
	joining *openedConfiguration
	// unsealingEnded says endUnsealing ran.
	unsealingEnded bool
}

// openedConfiguration is a sealed configuration as a join opened it.
type openedConfiguration struct {
	sc   *private.SealedConfiguration
	kind envelopeKind
	// bound says the TPM seal is bound to a release (pkg/tpmseal).
	bound bool
}

// unsealedEnrolment is a first enrolment (bootstrap or register) whose
// membership was handed to the role server but whose identity and sealed
// configuration are not stored yet.
type unsealedEnrolment struct {
	// node is the node's identity; nil on bootstrap, where the role
	// server makes it.
	node *identity.Node
	sc   *private.SealedConfiguration
	plan sealPlan
	// done is the marker that says the enrolment is complete.
	done marker.Name
}

// New returns the enrolment Service for cfg. Nothing happens until Run.
func New(cfg Config) *Service {
	cfg.Ports = cfg.Ports.WithDefaults()
	s := &Service{
		cfg:     cfg,
		storage: cfg.storage,
		openTPM: cfg.openTPM,
		timing:  defaultTiming,
	}
	if cfg.Storage != nil {
		s.root = cfg.Storage.Root
		if s.storage == nil {
			s.storage = cfg.Storage
		}
	}
	if s.openTPM == nil {
		s.openTPM = func() (sealer, error) { return openMachineTPM(cfg.Binding) }
	}
	if cfg.timing != nil {
		s.timing = *cfg.timing
	}
	return s
}

// Run enrols the node: it joins its cluster when the ESP holds a sealed
// configuration, and otherwise bootstraps or registers as the node
// parameters say. It hands the Membership to the role server as soon as
// the node belongs to a cluster; a first enrolment then stores the node's
// identity and, last, its sealed configuration. Run returns nil once all
// of that is done, and an error, for its supervisor to run it again with
// backoff, when its inputs are unusable.
func (s *Service) Run(ctx context.Context) error {
	if !s.handedOver {
		m, err := s.enrol(ctx)
		if err != nil {
			return err
		}
		s.cfg.Membership.Set(m)
		s.handedOver = true
	}
	if s.unsealed != nil {
		if err := s.seal(ctx, s.unsealed); err != nil {
			return err
		}
		s.unsealed = nil
	}
	s.endUnsealing(supervisor.Logger(ctx))
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	supervisor.Signal(ctx, supervisor.SignalDone)
	return nil
}

// enrol decides what the node does and does it, up to the membership.
func (s *Service) enrol(ctx context.Context) (*roleserve.Membership, error) {
	log := supervisor.Logger(ctx)
	if s.root == nil || s.cfg.ExternalAddress == nil || s.cfg.Membership == nil || s.cfg.Parameters == nil ||
		s.cfg.Credentials == nil || s.cfg.StoredDirectory == nil {
		return nil, errors.New("enrolment needs every value of its Config")
	}
	sealed, err := s.root.ESP.Cairn.SealedConfiguration.Exists()
	if err != nil {
		log.Errorf("Sealed configuration is unusable: %v", err)
		return nil, fmt.Errorf("when looking for the sealed configuration: %w", err)
	}
	if sealed {
		// A disk that holds a cluster is never bootstrapped or
		// registered again, whatever the parameters say.
		return s.join(ctx)
	}
	w := s.cfg.Parameters.Watch()
	defer w.Close()
	for announced := false; ; announced = true {
		l, err := w.Get(ctx, event.NotNil[*parameters.Loaded]())
		if err != nil {
			return nil, fmt.Errorf("when waiting for node parameters: %w", err)
		}
		if l.Err != nil {
			log.Errorf("Node parameters are invalid: %v", l.Err)
			marker.Log(log, marker.ParametersInvalid, "reason", l.Err.Error())
			return nil, fmt.Errorf("when reading node parameters: %w", l.Err)
		}
		p := l.Parameters
		switch {
		case p.GetClusterBootstrap() != nil:
			return s.bootstrap(ctx, p.GetClusterBootstrap())
		case p.GetClusterRegister() != nil:
			return s.register(ctx, p.GetClusterRegister())
		}
		if !announced {
			log.Infof("No sealed configuration and no node parameters: nothing to do, waiting for parameters")
		}
	}
}

// seal stores what a first enrolment keeps, once the role server has the
// membership: the node's identity on the data partition, then, once the
// role server has stored the cluster directory, the sealed configuration,
// whose presence makes every later boot a join. Until it is written, a
// reboot starts the first enrolment over.
func (s *Service) seal(ctx context.Context, u *unsealedEnrolment) error {
	log := supervisor.Logger(ctx)
	node := u.node
	if node == nil {
		var err error
		node, err = event.Get(ctx, s.cfg.Credentials, event.NotNil[*identity.Node]())
		if err != nil {
			return fmt.Errorf("when waiting for the bootstrapped identity: %w", err)
		}
	}
	if err := writeIdentity(s.root, node); err != nil {
		return err
	}
	if _, err := event.Get(ctx, s.cfg.StoredDirectory, event.NotNil[*api.ClusterDirectory]()); err != nil {
		return fmt.Errorf("when waiting for the cluster directory to be stored: %w", err)
	}
	sc := cloneSealed(u.sc)
	sc.ClusterCaCertificate = node.CACertificate().Raw
	if err := s.writeSealed(log, sc, u.plan); err != nil {
		return err
	}
	if err := testpoint.Reach(ctx, testpoint.Sealed); err != nil {
		return err
	}
	if err := s.removeRegistrationKeys(log); err != nil {
		return err
	}
	marker.Log(log, u.done, "node", node.ID())
	return s.removeParameters(log)
}

// removeParameters takes the enrolment out of the node parameters on the
// ESP once the sealed configuration replaces them: they hold the register
// ticket (or the owner's public key), which nobody should find on a disk
// that left the cluster. An operator's network configuration is the
// node's on every boot, so parameters that carry one are written back
// with it alone; others are deleted. Only after the sealed configuration
// is written: a power cut before leaves the parameters for a new first
// enrolment, one after leaves them for the next join to remove. The
// fw_cfg copy is the hypervisor's, not the node's to change.
func (s *Service) removeParameters(log logtree.LeveledLogger) error {
	f := &s.root.ESP.Cairn.Parameters
	there, err := f.Exists()
	if err != nil || !there {
		return err
	}
	b, err := f.Read()
	if err != nil {
		return fmt.Errorf("when reading the node parameters: %w", err)
	}
	var p api.NodeParameters
	if err := proto.Unmarshal(b, &p); err != nil {
		// Not parameters the node can use (this boot said so): gone.
		p.Reset()
	}
	switch {
	case p.GetCluster() == nil && p.GetNetworkConfig() != nil:
		return nil // what an earlier removal left
	case p.GetNetworkConfig() != nil:
		kept, err := proto.Marshal(&api.NodeParameters{NetworkConfig: p.GetNetworkConfig()})
		if err != nil {
			return fmt.Errorf("when encoding the network configuration: %w", err)
		}
		if err := f.Write(kept); err != nil {
			return fmt.Errorf("when removing the enrolment from the node parameters: %w", err)
		}
		log.Infof("Removed the enrolment from the node parameters on the ESP, keeping their network configuration: the sealed configuration replaces it")
		return nil
	}
	if err := f.Remove(); err != nil {
		return fmt.Errorf("when removing the node parameters: %w", err)
	}
	log.Infof("Removed the node parameters from the ESP: the sealed configuration replaces them")
	return nil
}

// waitAddress waits for the node's external address.
func (s *Service) waitAddress(ctx context.Context) (netip.Addr, error) {
	p, err := event.Get(ctx, s.cfg.ExternalAddress, event.Filter(func(p netip.Prefix) bool { return p.IsValid() }))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("when waiting for an external address: %w", err)
	}
	return p.Addr(), nil
}
