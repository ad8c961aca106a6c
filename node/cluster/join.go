package cluster

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/marker"
	"cairn.dev/cairn/node/roleserve"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/sleep"
	"cairn.dev/cairn/pkg/supervisor"
	"cairn.dev/cairn/pkg/tpmseal"
	api "cairn.dev/cairn/proto/api"
	private "cairn.dev/cairn/proto/private"
)

// join brings back a node that enrolled before: it unseals its
// configuration, asks the curators for the cluster's half of the data
// partition key (JoinNode), opens the partition and loads its identity.
//
// When no curator answers, the node starts cold from the copy of the
// cluster unlock key in its sealed configuration: at once when its cluster
// directory lists no other node, otherwise after coldStartAfter. A curator
// that refuses the node stops a cold start: the node then keeps asking,
// slowly, and touches nothing. It also remembers the refusal on the ESP
// (cairn/refusal.txt), so that no later boot starts cold either because
// nobody happened to answer then; only a successful join removes it. A
// curator that answers Unavailable while it names a leader shows a live
// cluster, which rules out a cold start as well.
func (s *Service) join(ctx context.Context) (*roleserve.Membership, error) {
	log := supervisor.Logger(ctx)
	opened, err := s.openSealed(log)
	if err != nil {
		return nil, err
	}
	sc, kind := opened.sc, opened.kind
	// A power cut may have come between sealing and removing the
	// registration keys and the parameters of the first enrolment.
	if err := s.removeRegistrationKeys(log); err != nil {
		return nil, err
	}
	if err := s.removeParameters(log); err != nil {
		return nil, err
	}
	id := sc.GetNodeId()
	log.Infof("Joining as %s (configuration %s)", id, kind)
	dir, dirErr := s.readDirectory()
	if dirErr != nil {
		log.Warningf("%v; only a cold start can bring this node back", dirErr)
		dir = &api.ClusterDirectory{}
	}
	if _, err := s.waitAddress(ctx); err != nil {
		return nil, err
	}
	targets := s.curatorTargets(dir, id)
	joinKey := ed25519.NewKeyFromSeed(sc.GetJoinKey())
	refusal, err := s.readRefusal()
	if err != nil {
		return nil, err
	}
	if refusal != "" {
		log.Warningf("A curator refused this node before (%s); it will not start cold, only join through a curator", refusal)
	}

	start := time.Now()
	wait := newBackoff(s.timing.retryMin, s.timing.retryMax)
	for round := 0; ; round++ {
		r, err := s.joinRound(ctx, log, round, &api.JoinNodeRequest{NodeId: id, UnsealedWithTpm: kind == kindTPM, SecureBoot: s.cfg.SecureBoot, SealBound: opened.bound}, targets, sc.GetClusterCaCertificate(), joinKey)
		if err != nil {
			return nil, err
		}
		if r.through != "" {
			m, err := s.openExisting(ctx, log, sc, r.clusterKey, dir)
			if err != nil {
				log.Errorf("Cannot open the data partition: %v", err)
				return nil, err
			}
			s.takeCertificate(log, m.Credentials, r.certificate)
			if refusal != "" {
				if err := s.root.ESP.Cairn.Refusal.Remove(); err != nil {
					log.Warningf("Cannot remove the record of an earlier refusal: %v", err)
				}
			}
			log.Infof("Joined through %s", r.through)
			marker.Log(log, marker.Joined, "node", id, "via", "curator")
			return m, nil
		}
		lone := dirErr == nil && len(targets) == 0
		if !r.answered && refusal == "" && (lone || time.Since(start) >= s.timing.coldStartAfter) {
			m, err := s.openExisting(ctx, log, sc, sc.GetClusterUnlockKey(), dir)
			if err != nil {
				log.Errorf("Cannot open the data partition: %v", err)
				return nil, err
			}
			log.Infof("Cold start from the sealed configuration: no curator answered")
			marker.Log(log, marker.Joined, "node", id, "via", "cold-start")
			return m, nil
		}
		if r.refused {
			if refusal == "" {
				refusal = r.reason
				if err := s.root.ESP.Cairn.Refusal.Write([]byte(refusal + "\n")); err != nil {
					log.Errorf("Cannot record the refusal on the ESP: %v", err)
				}
			}
			err = sleep.For(ctx, s.timing.refusedRetry)
		} else {
			err = sleepNext(ctx, wait)
		}
		if err != nil {
			return nil, err
		}
	}
}

// openSealed reads and unseals the sealed configuration, once a boot: a
// join that starts over takes what the first one opened. When this boot
// binds (Config.Binding), a configuration sealed with the TPM that does
// not trust this boot's PCR key is sealed again (pkg/tpmseal's Rebind):
// one bound to the TPM alone, so that a node that came to Secure Boot
// after it enrolled gets the protection too, and one of an older PCR key,
// so that the node follows a rotation of the key. Then unsealing ends for
// the boot.
func (s *Service) openSealed(log logtree.LeveledLogger) (*openedConfiguration, error) {
	if s.joining != nil {
		return s.joining, nil
	}
	b, err := s.root.ESP.Cairn.SealedConfiguration.Read()
	if err != nil {
		log.Errorf("Sealed configuration is unusable: %v", err)
		return nil, fmt.Errorf("when reading the sealed configuration: %w", err)
	}
	sc, err := unseal(b, s.openTPM)
	if err != nil {
		log.Errorf("Sealed configuration is unusable: %v", err)
		return nil, fmt.Errorf("when unsealing the configuration: %w", err)
	}
	// unseal has parsed the envelope already: this cannot fail.
	kind, payload, _ := parseEnvelope(b)
	o := &openedConfiguration{sc: sc, kind: kind, bound: kind == kindTPM && tpmseal.IsBound(payload)}
	if kind == kindTPM && s.cfg.Binding != nil {
		if err := s.rebind(log, payload); err != nil {
			log.Warningf("Cannot seal the configuration again for this release's PCR key (%v): it stays as it was sealed", err)
		} else {
			o.bound = true
		}
	}
	s.joining = o
	s.endUnsealing(log)
	return o, nil
}

// rebind seals the configuration blob payload again, and writes it, when
// it does not trust this boot's PCR key (see openSealed).
func (s *Service) rebind(log logtree.LeveledLogger, payload []byte) error {
	t, err := s.openTPM()
	if err != nil {
		return err
	}
	defer t.Close()
	blob, changed, err := t.Rebind(payload)
	if err != nil || !changed {
		return err
	}
	if err := s.root.ESP.Cairn.SealedConfiguration.Write(marshalEnvelope(kindTPM, blob)); err != nil {
		return fmt.Errorf("when writing the sealed configuration: %w", err)
	}
	log.Infof("Sealed the configuration again, bound to this release's PCR key (and to the key that opened it, if another): only a boot of a release they signed, under the same Secure Boot keys, can open it")
	marker.Log(log, marker.ConfigurationSealed, "tpm", "true", "bound", "true", "rebound", "true")
	return nil
}

// joinResult is the outcome of one round of JoinNode calls.
type joinResult struct {
	// clusterKey and through are the cluster unlock key and the curator
	// that handed it out, when one did, and certificate the node
	// certificate it handed out with it.
	clusterKey  []byte
	through     string
	certificate []byte
	// answered says that some curator answered, with a refusal or an
	// error of its own: the cluster is up, which rules out a cold start.
	answered bool
	// refused says that some curator refused the node, and reason why.
	refused bool
	reason  string
}

// joinRound calls JoinNode on each curator in turn until one hands out
// the cluster unlock key. round counts the rounds of this boot.
func (s *Service) joinRound(ctx context.Context, log logtree.LeveledLogger, round int, req *api.JoinNodeRequest, targets []string, ca []byte, joinKey ed25519.PrivateKey) (joinResult, error) {
	var r joinResult
	for _, t := range targets {
		var res *api.JoinNodeResponse
		var trailer metadata.MD
		err := s.withCurator(ctx, t, ca, joinKey, func(ctx context.Context, c api.CuratorClient) error {
			var err error
			res, err = c.JoinNode(ctx, req, grpc.Trailer(&trailer))
			return err
		})

		switch {
		case err == nil:
			return joinResult{clusterKey: res.GetClusterUnlockKey(), through: t, certificate: res.GetNodeCertificate(), answered: true}, nil
		case ctx.Err() != nil:
			return r, ctx.Err()
		case liveCluster(err, trailer):
			log.Infof("%s answered while %s leads: %v", t, trailer.Get(rpc.LeaderTrailer)[0], err)
			r.answered = true
		case unreachable(err):
			if round%10 == 0 { // say it now and then, not every round
				log.Infof("No answer from %s: %v", t, err)
			}
		case refused(err):
			log.Errorf("Refused: %s", reason(err))
			marker.Log(log, marker.Refused, "reason", reason(err))
			r.answered, r.refused = true, true
			r.reason = fmt.Sprintf("%s refused it at %s: %s", t, time.Now().UTC().Format(time.RFC3339), reason(err))
		default:
			log.Warningf("Joining through %s failed: %v", t, err)
			r.answered = true
		}
	}
	return r, nil
}

// openExisting opens the data partition with clusterKey, loads the
// node's identity from it and checks that it is the node the sealed
// configuration names.
func (s *Service) openExisting(ctx context.Context, log logtree.LeveledLogger, sc *private.SealedConfiguration, clusterKey []byte, dir *api.ClusterDirectory) (*roleserve.Membership, error) {
	if !s.mounted {
		if err := s.awaitDataModules(ctx, log); err != nil {
			return nil, err
		}
		start := time.Now()
		if err := mountExisting(s.storage, sc, clusterKey); err != nil {
			return nil, fmt.Errorf("when opening the data partition: %w", err)
		}
		s.mounted = true
		log.Infof("Data partition opened and mounted in %v", time.Since(start).Round(time.Millisecond))
	}
	node, err := readIdentity(s.root)
	if err != nil {
		return nil, err
	}
	if node.ID() != sc.GetNodeId() {
		return nil, fmt.Errorf("the data partition holds the identity of %s, but the sealed configuration names %s", node.ID(), sc.GetNodeId())
	}
	return &roleserve.Membership{
		NodeKey:          node.PrivateKey(),
		Credentials:      node,
		ClusterDirectory: dir,
	}, nil
}

// takeCertificate makes der, the node certificate a curator handed out
// with JoinNode, the node's certificate when it ends later than the one
// kept on the data partition, and keeps it there. A node that was powered
// off for longer than its certificate's lifetime comes back with an
// expired one, which no other node would accept. Failing here is not
// fatal: the certificate kept still serves while it is valid, and the role
// server renews it.
func (s *Service) takeCertificate(log logtree.LeveledLogger, node *identity.Node, der []byte) {
	if len(der) == 0 || bytes.Equal(der, node.Certificate().Raw) {
		return
	}
	if err := node.Renew(der); err != nil {
		log.Warningf("Not using the node certificate handed out with JoinNode: %v", err)
		return
	}
	if err := writeIdentity(s.root, node); err != nil {
		log.Warningf("Using the node certificate handed out with JoinNode, but cannot keep it: %v", err)
		return
	}
	log.Infof("Node certificate renewed at join, valid until %s", node.Certificate().NotAfter.UTC().Format(time.RFC3339))
}

// readRefusal returns the record of an earlier refusal, "" when there is
// none.
func (s *Service) readRefusal() (string, error) {
	f := &s.root.ESP.Cairn.Refusal
	there, err := f.Exists()
	if err != nil || !there {
		return "", err
	}
	b, err := f.Read()
	if err != nil {
		return "", fmt.Errorf("when reading the record of an earlier refusal: %w", err)
	}
	if r := strings.TrimSpace(string(b)); r != "" {
		return r, nil
	}
	return "refused, reason not recorded", nil
}
