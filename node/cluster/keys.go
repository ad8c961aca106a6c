package cluster

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/pkg/logtree"
	private "cairn.dev/cairn/proto/private"
)

// A registering node is known to its cluster by its keys from its first
// RegisterNode on: the node ID is its node key's, and the curator keeps
// its join key. If those keys lived only in memory until the sealed
// configuration stores them, a power cut after RegisterNode would make the
// next boot register with new keys, and the cluster would list the same
// machine twice: the first record NEW or UP forever, the second NEW. The
// curator cannot replace the first record itself, as nothing tells it
// that a new key belongs to the same machine.
//
// So the node writes its keys onto the ESP (cairn/registration_keys.pb)
// before it calls RegisterNode, in the envelope of the sealed
// configuration and sealed by the TPM when the machine has one, and the
// next boot registers with them again:
//
//	boot 1: keys ─▶ registration_keys.pb ─▶ RegisterNode ─▶ CommitNode ─✂
//	boot 2: registration_keys.pb ─▶ RegisterNode, CommitNode: the curator
//	        answers as it did (same node, same join key), with the same
//	        cluster unlock key ─▶ MountNew with the same data key keeps a
//	        partition boot 1 finished ─▶ sealed configuration, then the
//	        file is removed
//
// The sealed configuration replaces the file: seal removes it once it has
// written the configuration, and join removes one a power cut left behind.
//
// A file that cannot be used (damaged, or a TPM that will not unseal it)
// is replaced by new keys, with a warning that the cluster may then list
// the machine twice: unlike the sealed configuration, it holds nothing
// that is lost with it, and refusing to go on would leave the machine
// unable to enrol at all. A file stored unsealed on a machine whose TPM
// works now is not trusted, for the same reason an unsealed sealed
// configuration is not (sealed.go): whoever could write the ESP could have
// put keys of their own there, and the node would register with keys
// someone else knows.

// registrationKeys returns the keys a registering node registers with:
// those of this boot when it has them, else those an earlier boot kept on
// the ESP, else new ones, which it keeps there before it returns them, so
// that no curator learns keys that a power cut could make the node forget.
func (s *Service) registrationKeys(log logtree.LeveledLogger) (*nodeKeys, error) {
	if s.keys != nil {
		return s.keys, nil
	}
	k, err := s.readRegistrationKeys(log)
	if err != nil {
		return nil, err
	}
	if k != nil {
		log.Infof("Registering with the keys an earlier boot kept, as %s: that boot did not finish enrolling", identity.NodeID(k.node.Public().(ed25519.PublicKey)))
		s.keys = k
		return k, nil
	}
	k, err = generateKeys(false)
	if err != nil {
		return nil, err
	}
	if err := s.writeRegistrationKeys(log, k); err != nil {
		return nil, err
	}
	s.keys = k
	return k, nil
}

// readRegistrationKeys returns the keys on the ESP, or nil when there are
// none or they cannot be used (it says why). Only a failure to look at the
// ESP is an error.
func (s *Service) readRegistrationKeys(log logtree.LeveledLogger) (*nodeKeys, error) {
	f := &s.root.ESP.Cairn.RegistrationKeys
	there, err := f.Exists()
	if err != nil || !there {
		return nil, err
	}
	b, err := f.Read()
	if err != nil {
		return nil, err
	}
	k, err := s.unsealRegistrationKeys(b)
	if err != nil {
		log.Warningf("Not using the registration keys an earlier boot kept (%v): registering with new keys; if that boot registered, the cluster lists this machine a second time, and the owner should delete the first record", err)
		return nil, nil
	}
	return k, nil
}

// unsealRegistrationKeys opens the envelope of the registration keys.
func (s *Service) unsealRegistrationKeys(b []byte) (*nodeKeys, error) {
	kind, payload, err := parseEnvelope(b)
	if err != nil {
		return nil, err
	}
	switch kind {
	case kindTPM:
		t, err := s.openTPM()
		if err != nil {
			return nil, fmt.Errorf("they were sealed by a TPM, which cannot be opened: %w", err)
		}
		defer t.Close()
		if payload, err = t.Unseal(payload); err != nil {
			return nil, fmt.Errorf("the TPM refused to unseal them: %w", err)
		}
	case kindPlain:
		if t, err := s.openTPM(); err == nil {
			t.Close()
			return nil, errors.New("they are stored unsealed, but this machine has a TPM that works: someone who could write the ESP may have put them there")
		}
	}
	return parseRegistrationKeys(payload)
}

// writeRegistrationKeys stores k on the ESP, atomically and synced,
// sealed by the TPM when the machine has one. The cluster's TPM mode is
// not known before RegisterNode answers: a TPM that opens is used
// whatever it turns out to be, and a machine without one keeps the keys
// unsealed, as it will its sealed configuration if the cluster allows it.
func (s *Service) writeRegistrationKeys(log logtree.LeveledLogger, k *nodeKeys) error {
	payload, err := proto.Marshal(&private.RegistrationKeys{
		NodeKey:       k.node.Seed(),
		JoinKey:       k.join.Seed(),
		NodeUnlockKey: k.nodeUnlockKey,
	})
	if err != nil {
		return fmt.Errorf("when marshalling the registration keys: %w", err)
	}
	var b []byte
	if t, err := s.openTPM(); err != nil {
		log.Warningf("No usable TPM (%v): keeping the registration keys unsealed on the ESP until the sealed configuration replaces them", err)
		b = marshalEnvelope(kindPlain, payload)
	} else {
		defer t.Close()
		blob, err := t.Seal(payload)
		if err != nil {
			return fmt.Errorf("when sealing the registration keys with the TPM: %w", err)
		}
		b = marshalEnvelope(kindTPM, blob)
	}
	if err := s.root.ESP.Cairn.RegistrationKeys.Write(b); err != nil {
		return fmt.Errorf("when writing the registration keys: %w", err)
	}
	return nil
}

// parseRegistrationKeys decodes and checks the payload of the
// registration keys' envelope, once unsealed.
func parseRegistrationKeys(payload []byte) (*nodeKeys, error) {
	var rk private.RegistrationKeys
	if err := proto.Unmarshal(payload, &rk); err != nil {
		return nil, fmt.Errorf("payload is not RegistrationKeys: %w", err)
	}
	for _, f := range []struct {
		name string
		b    []byte
		want int
	}{
		{"node_key", rk.GetNodeKey(), ed25519.SeedSize},
		{"join_key", rk.GetJoinKey(), ed25519.SeedSize},
		{"node_unlock_key", rk.GetNodeUnlockKey(), localstorage.KeySize},
	} {
		if len(f.b) != f.want {
			return nil, fmt.Errorf("%s is %d bytes, want %d", f.name, len(f.b), f.want)
		}
	}
	return &nodeKeys{
		node:          ed25519.NewKeyFromSeed(rk.GetNodeKey()),
		join:          ed25519.NewKeyFromSeed(rk.GetJoinKey()),
		nodeUnlockKey: rk.GetNodeUnlockKey(),
	}, nil
}

// removeRegistrationKeys deletes the registration keys from the ESP once
// the sealed configuration holds what the node keeps of them.
func (s *Service) removeRegistrationKeys(log logtree.LeveledLogger) error {
	f := &s.root.ESP.Cairn.RegistrationKeys
	there, err := f.Exists()
	if err != nil || !there {
		return err
	}
	if err := f.Remove(); err != nil {
		return fmt.Errorf("when removing the registration keys: %w", err)
	}
	log.Infof("Removed the registration keys from the ESP: the sealed configuration replaces them")
	return nil
}

// nodeKeys are the secrets a node makes when it enrols for the first time.
type nodeKeys struct {
	node             ed25519.PrivateKey
	join             ed25519.PrivateKey
	nodeUnlockKey    []byte
	clusterUnlockKey []byte // made by the bootstrapping node only
}

// newKeys makes the node's keys, once per boot: a bootstrapping node's.
// A registering node takes registrationKeys, which outlive the boot.
func (s *Service) newKeys(withClusterKey bool) (*nodeKeys, error) {
	if s.keys != nil {
		return s.keys, nil
	}
	k, err := generateKeys(withClusterKey)
	if err != nil {
		return nil, err
	}
	s.keys = k
	return k, nil
}

// generateKeys makes new node keys, with a cluster unlock key when asked.
func generateKeys(withClusterKey bool) (*nodeKeys, error) {
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
	return k, nil
}
