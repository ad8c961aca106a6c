package cluster

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"time"

	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/curator"
	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/node/roleserve"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/supervisor"
	api "cairn.dev/cairn/proto/api"
	private "cairn.dev/cairn/proto/private"
)

// Config is what enrolment needs.
type Config struct {
	// Storage is the node's storage, its ESP already mounted. Enrolment
	// mounts the data partition on it.
	Storage *localstorage.Storage
	// ExternalAddress is the node's address on its network, published by
	// the network service. Enrolment waits for it before it dials the
	// cluster or names itself in the cluster directory.
	ExternalAddress event.Value[netip.Prefix]
	// Membership is where enrolment publishes the node's membership, once,
	// when the node belongs to a cluster and its data partition is
	// mounted.
	Membership event.Value[*roleserve.Membership]
	// Parameters are the node parameters, as ReadParameters returned them.
	// When nil, Run reads them itself (from FWCfgPath and the ESP) and
	// reads them again while it waits, so that it can report garbled
	// parameters on its own console line.
	Parameters *api.NodeParameters
	// FWCfgPath is the fw_cfg file of the node parameters, normally
	// FWCfgParametersPath. Empty means only the ESP copy is read.
	FWCfgPath string

	// Test overrides; zero values mean the node's behaviour.

	// storage replaces Storage's mount methods (Storage.Root still gives
	// the paths).
	storage storage
	// openTPM replaces the machine's TPM.
	openTPM func() (sealer, error)
	// curatorPort replaces the curator port when dialling curators.
	curatorPort int
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
	// approved; approvalReport how often it says it is still waiting.
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
	port    int
	timing  timing

	// keys, mounted and committed survive restarts of Run within one
	// boot, so that a restarted enrolment neither mounts nor commits twice
	// nor changes its keys half way through.
	keys      *nodeKeys
	mounted   bool
	committed *committed
}

// nodeKeys are the secrets a node makes when it enrols for the first time.
type nodeKeys struct {
	node             ed25519.PrivateKey
	join             ed25519.PrivateKey
	nodeUnlockKey    []byte
	clusterUnlockKey []byte // made by the bootstrapping node only
}

// New returns the enrolment Service for cfg. Nothing happens until Run.
func New(cfg Config) *Service {
	s := &Service{
		cfg:     cfg,
		storage: cfg.storage,
		openTPM: cfg.openTPM,
		port:    cfg.curatorPort,
		timing:  defaultTiming,
	}
	if cfg.Storage != nil {
		s.root = cfg.Storage.Root
		if s.storage == nil {
			s.storage = cfg.Storage
		}
	}
	if s.openTPM == nil {
		s.openTPM = openMachineTPM
	}
	if s.port == 0 {
		s.port = curator.Port
	}
	if cfg.timing != nil {
		s.timing = *cfg.timing
	}
	return s
}

// Run enrols the node: it joins its cluster when the ESP holds a sealed
// configuration, and otherwise bootstraps or registers as the node
// parameters say. It publishes the Membership and returns nil once the
// node belongs to a cluster; it returns an error, for its supervisor to
// restart it with backoff, when its inputs are unusable.
func (s *Service) Run(ctx context.Context) error {
	m, err := s.enrol(ctx)
	if err != nil {
		return err
	}
	s.cfg.Membership.Set(m)
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	supervisor.Signal(ctx, supervisor.SignalDone)
	return nil
}

// enrol decides what the node does and does it.
func (s *Service) enrol(ctx context.Context) (*roleserve.Membership, error) {
	log := supervisor.Logger(ctx)
	if s.root == nil || s.cfg.ExternalAddress == nil || s.cfg.Membership == nil {
		return nil, errors.New("enrolment needs Storage, ExternalAddress and Membership in its Config")
	}
	announced := false
	for wait := newBackoff(s.timing.retryMin, s.timing.retryMax); ; {
		sealed, err := s.root.ESP.Cairn.SealedConfiguration.Exists()
		if err != nil {
			log.Errorf("enrolment: sealed configuration is unusable: %v", err)
			return nil, fmt.Errorf("when looking for the sealed configuration: %w", err)
		}
		if sealed {
			// A disk that holds a cluster is never bootstrapped or
			// registered again, whatever the parameters say.
			return s.join(ctx)
		}
		p, err := s.parameters()
		if err != nil {
			log.Errorf("enrolment: node parameters are invalid: %v", err)
			return nil, fmt.Errorf("when reading node parameters: %w", err)
		}
		switch {
		case p.GetClusterBootstrap() != nil:
			return s.bootstrap(ctx, p.GetClusterBootstrap())
		case p.GetClusterRegister() != nil:
			return s.register(ctx, p.GetClusterRegister())
		}
		if !announced {
			log.Infof("enrolment: no sealed configuration and no node parameters: nothing to do, waiting for parameters")
			announced = true
		}
		if err := wait.sleep(ctx); err != nil {
			return nil, err
		}
	}
}

// parameters returns the configured node parameters, validated, or reads
// them from fw_cfg and the ESP. Nil means there are none.
func (s *Service) parameters() (*api.NodeParameters, error) {
	if p := s.cfg.Parameters; p != nil {
		if err := ValidateParameters(p); err != nil {
			return nil, err
		}
		return p, nil
	}
	return ReadParameters(s.cfg.FWCfgPath, s.root.ESP.Cairn.Parameters.FullPath())
}

// newKeys makes the node's keys, once per boot.
func (s *Service) newKeys(withClusterKey bool) (*nodeKeys, error) {
	if s.keys != nil {
		return s.keys, nil
	}
	k := &nodeKeys{}
	var err error
	if k.node, err = identity.GenerateKey(); err != nil {
		return nil, fmt.Errorf("when generating the node key: %w", err)
	}
	if _, k.join, err = ed25519.GenerateKey(rand.Reader); err != nil {
		return nil, fmt.Errorf("when generating the join key: %w", err)
	}
	k.nodeUnlockKey = make([]byte, localstorage.KeySize)
	if _, err := rand.Read(k.nodeUnlockKey); err != nil {
		return nil, fmt.Errorf("when generating the node unlock key: %w", err)
	}
	if withClusterKey {
		k.clusterUnlockKey = make([]byte, localstorage.KeySize)
		if _, err := rand.Read(k.clusterUnlockKey); err != nil {
			return nil, fmt.Errorf("when generating the cluster unlock key: %w", err)
		}
	}
	s.keys = k
	return k, nil
}

// waitAddress waits for the node's external address.
func (s *Service) waitAddress(ctx context.Context) (netip.Addr, error) {
	w := s.cfg.ExternalAddress.Watch()
	defer w.Close()
	p, err := w.Get(ctx, event.Filter(func(p netip.Prefix) bool { return p.IsValid() }))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("when waiting for an external address: %w", err)
	}
	return p.Addr(), nil
}

// writeSealed seals sc as plan says and writes it onto the ESP.
func (s *Service) writeSealed(log logtree.LeveledLogger, sc *private.SealedConfiguration, plan sealPlan) error {
	if plan.warning != "" {
		log.Warningf("enrolment: no TPM: storing the configuration unsealed (%s): whoever can read the ESP has this node's join and unlock keys", plan.warning)
	}
	b, err := seal(sc, plan, s.openTPM)
	if err != nil {
		return err
	}
	if err := s.root.ESP.Cairn.SealedConfiguration.Write(b); err != nil {
		return fmt.Errorf("when writing the sealed configuration: %w", err)
	}
	if plan.useTPM {
		log.Infof("enrolment: configuration sealed with the TPM")
	} else {
		log.Infof("enrolment: configuration stored unsealed")
	}
	return nil
}

// writeDirectory stores the cluster directory on the ESP.
func (s *Service) writeDirectory(d *api.ClusterDirectory) error {
	b, err := proto.Marshal(d)
	if err != nil {
		return fmt.Errorf("when marshalling the cluster directory: %w", err)
	}
	if err := s.root.ESP.Cairn.ClusterDirectory.Write(b); err != nil {
		return fmt.Errorf("when writing the cluster directory: %w", err)
	}
	return nil
}

// readDirectory reads the cluster directory from the ESP.
func (s *Service) readDirectory() (*api.ClusterDirectory, error) {
	b, err := s.root.ESP.Cairn.ClusterDirectory.Read()
	if errors.Is(err, os.ErrNotExist) {
		return nil, errors.New("there is no cluster directory on the ESP")
	}
	if err != nil {
		return nil, fmt.Errorf("when reading the cluster directory: %w", err)
	}
	var d api.ClusterDirectory
	if err := proto.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("the cluster directory does not parse: %w", err)
	}
	if err := validateDirectory(&d); err != nil {
		return nil, fmt.Errorf("the cluster directory is invalid: %w", err)
	}
	return &d, nil
}

// backoff is an exponential wait between retries.
type backoff struct {
	next, max time.Duration
}

func newBackoff(min, max time.Duration) *backoff {
	return &backoff{next: min, max: max}
}

// sleep waits for the current interval, then doubles it up to the maximum.
func (b *backoff) sleep(ctx context.Context) error {
	d := b.next
	b.next = min(2*b.next, b.max)
	return sleepCtx(ctx, d)
}

// sleepCtx waits for d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
