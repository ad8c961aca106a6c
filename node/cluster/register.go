package cluster

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/clusterconfig"
	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/node/marker"
	"cairn.dev/cairn/node/roleserve"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/node/testpoint"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/sleep"
	"cairn.dev/cairn/pkg/supervisor"
	api "cairn.dev/cairn/proto/api"
	private "cairn.dev/cairn/proto/private"
)

// register adds this node to an existing cluster:
//
//	keys, kept on the ESP (registrationKeys)
//	RegisterNode(ticket, join key)  ──▶ NEW, cluster configuration
//	CommitNode, until approved      ──▶ UP: certificate, cluster unlock key
//	MountNew ──▶ Membership; then (Run) identity.pem, sealed configuration
//
// Until the sealed configuration is written, a reboot registers again
// from the parameters, with the keys kept on the ESP: as the same node,
// which the curator takes as a retry (RegisterNode and CommitNode of a
// node it knows with these keys answer as they did), and with the same
// node unlock key, so that MountNew keeps a data partition it finished.
func (s *Service) register(ctx context.Context, p *api.NodeParameters_ClusterRegister) (*roleserve.Membership, error) {
	log := supervisor.Logger(ctx)
	if _, err := s.waitAddress(ctx); err != nil {
		return nil, err
	}
	keys, err := s.registrationKeys(log)
	if err != nil {
		return nil, err
	}
	id := identity.NodeID(keys.node.Public().(ed25519.PublicKey))
	targets := s.curatorTargets(p.GetClusterDirectory(), id)
	if len(targets) == 0 {
		return nil, errors.New("the register parameters list no curator")
	}
	ca := p.GetCaCertificate()

	if s.committed == nil {
		target, conf, err := s.registerNode(ctx, log, id, targets, ca, p.GetRegisterTicket(), keys)
		if err != nil {
			return nil, err
		}
		if err := testpoint.Reach(ctx, testpoint.Registered); err != nil {
			return nil, err
		}
		conf = clusterconfig.Resolve(conf)
		plan, err := planSealing(conf, s.openTPM)
		if err != nil {
			log.Errorf("Cannot register: %v", err)
			return nil, fmt.Errorf("when checking the TPM: %w", err)
		}
		commit, err := s.waitCommitted(ctx, log, id, target, targets, ca, keys.node, plan)
		if err != nil {
			return nil, err
		}
		// The curator commits a node once: a restarted enrolment goes on
		// from here.
		s.committed = &committed{conf: conf, res: commit}
		if err := testpoint.Reach(ctx, testpoint.Committed); err != nil {
			return nil, err
		}
	}
	conf, commit := s.committed.conf, s.committed.res
	plan, err := planSealing(conf, s.openTPM)
	if err != nil {
		log.Errorf("Cannot seal: %v", err)
		return nil, fmt.Errorf("when checking the TPM: %w", err)
	}
	if !bytes.Equal(commit.GetCaCertificate(), ca) {
		return nil, errors.New("the curator's CA certificate differs from the one in the register parameters")
	}
	node, err := identity.NewNode(keys.node, commit.GetNodeCertificate(), ca)
	if err != nil {
		return nil, fmt.Errorf("when checking the node certificate: %w", err)
	}
	sc := &private.SealedConfiguration{
		NodeUnlockKey:        keys.nodeUnlockKey,
		JoinKey:              keys.join.Seed(),
		ClusterCaCertificate: ca,
		StorageSecurity:      storageSecurity(conf),
		ClusterUnlockKey:     commit.GetClusterUnlockKey(),
		NodeId:               id,
	}
	if sc.StorageSecurity == private.StorageSecurity_STORAGE_SECURITY_INSECURE {
		sc.NodeUnlockKey = nil
		log.Warningf("The cluster's storage security policy is INSECURE: the data partition is not encrypted")
	} else if len(sc.ClusterUnlockKey) != localstorage.KeySize {
		return nil, fmt.Errorf("the curator handed out a cluster unlock key of %d bytes, want %d", len(sc.ClusterUnlockKey), localstorage.KeySize)
	}
	if !s.mounted {
		if err := s.mountNew(ctx, log, sc); err != nil {
			return nil, fmt.Errorf("when creating the data partition: %w", err)
		}
		s.mounted = true
	}
	s.unsealed = &unsealedEnrolment{node: node, sc: sc, plan: plan, done: marker.Committed}
	return &roleserve.Membership{
		NodeKey:          keys.node,
		Credentials:      node,
		ClusterDirectory: p.GetClusterDirectory(),
	}, nil
}

// committed is what a node learnt when it registered and committed.
type committed struct {
	conf *api.ClusterConfiguration
	res  *api.CommitNodeResponse
}

// registerNode calls RegisterNode on each curator in turn until one
// accepts, backing off between rounds, and more slowly after a refusal.
// It returns the curator that accepted and the cluster's configuration.
func (s *Service) registerNode(ctx context.Context, log logtree.LeveledLogger, id string, targets []string, ca, ticket []byte, keys *nodeKeys) (string, *api.ClusterConfiguration, error) {
	req := &api.RegisterNodeRequest{
		RegisterTicket: ticket,
		JoinKey:        keys.join.Public().(ed25519.PublicKey),
		SecureBoot:     s.cfg.SecureBoot,
	}
	wait := newBackoff(s.timing.retryMin, s.timing.retryMax)
	for {
		wasRefused := false
		for _, t := range targets {
			log.Infof("Registering with %s", t)
			marker.Log(log, marker.Registering, "node", id)
			var res *api.RegisterNodeResponse
			err := s.withCurator(ctx, t, ca, keys.node, func(ctx context.Context, c api.CuratorClient) error {
				var err error
				res, err = c.RegisterNode(ctx, req)
				return err
			})
			if err == nil {
				return t, res.GetClusterConfiguration(), nil
			}
			if ctx.Err() != nil {
				return "", nil, ctx.Err()
			}
			if refused(err) {
				log.Errorf("Refused: %s", reason(err))
				marker.Log(log, marker.Refused, "reason", reason(err))
				wasRefused = true
				break
			}
			log.Warningf("Registering with %s failed: %v", t, err)
		}
		var err error
		if wasRefused {
			err = sleep.For(ctx, s.timing.refusedRetry)
		} else {
			err = sleepNext(ctx, wait)
		}
		if err != nil {
			return "", nil, err
		}
	}
}

// waitCommitted asks, starting with the curator that took the
// registration, to commit the node until the owner has approved it,
// saying every approvalReport that it is still waiting. A node the owner
// decommissioned instead says so once, and waits for ctx without asking
// again.
func (s *Service) waitCommitted(ctx context.Context, log logtree.LeveledLogger, id, first string, targets []string, ca []byte, key ed25519.PrivateKey, plan sealPlan) (*api.CommitNodeResponse, error) {
	start := time.Now()
	var reported time.Time
	// An owner who approves as the node registers (an operator's script,
	// make cluster) is answered within a fraction of a second; one who
	// takes longer is asked every approvalPoll.
	poll := newBackoff(s.timing.approvalPoll/8, s.timing.approvalPoll)
	order := append([]string{first}, targets...)
	for i := 0; ; i++ {
		t := order[i%len(order)]
		var res *api.CommitNodeResponse
		err := s.withCurator(ctx, t, ca, key, func(ctx context.Context, c api.CuratorClient) error {
			var err error
			res, err = c.CommitNode(ctx, &api.CommitNodeRequest{SealsWithTpm: plan.useTPM, SealBound: plan.bound})
			return err
		})
		switch {
		case err == nil:
			return res, nil
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case rpc.IsDecommissioned(err):
			// Decommissioned while it waited, or while it was off: no
			// answer will ever change, so the node stops asking until
			// the machine is reinstalled (its kept keys name the same
			// node on every boot).
			log.Errorf("The cluster decommissioned this node before it committed (%s): it stops asking; reinstall the machine to enrol it again", reason(err))
			marker.Log(log, marker.Decommissioned, "node", id)
			<-ctx.Done()
			return nil, ctx.Err()
		case status.Code(err) == codes.FailedPrecondition:
			// NEW: not approved yet.
			if reported.IsZero() {
				marker.Log(log, marker.WaitingForApproval, "node", id)
			}
			if time.Since(reported) >= s.timing.approvalReport {
				log.Infof("Waiting for approval as %s (%s)", id, time.Since(start).Round(time.Second))
				reported = time.Now()
			}
			i-- // stay with a curator that answers
		case refused(err):
			log.Errorf("Refused: %s", reason(err))
			marker.Log(log, marker.Refused, "reason", reason(err))
			return nil, fmt.Errorf("when committing: %w", err)
		default:
			log.Warningf("Committing with %s failed: %v", t, err)
		}
		if err := sleepNext(ctx, poll); err != nil {
			return nil, err
		}
	}
}
