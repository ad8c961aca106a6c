package cluster

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/node/marker"
	"cairn.dev/cairn/node/parameters"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/tpmseal"
	api "cairn.dev/cairn/proto/api"
	private "cairn.dev/cairn/proto/private"
)

// The sealed configuration file (cairn/sealed_configuration.pb) is a small
// envelope around the payload, so that a reader knows, before touching a
// TPM, how the payload was stored, and can tell a damaged file from a
// configuration that is merely wrong:
//
//	offset  size  field
//	0       8     magic "CAIRNSCF"
//	8       1     version, 1
//	9       1     kind: 1 plain (marshalled SealedConfiguration),
//	              2 TPM (a tpmseal blob of the marshalled SealedConfiguration)
//	10      2     zero
//	12      4     payload length n, big endian
//	16      n     payload
//	16+n    32    SHA-256 of bytes 0 to 16+n
//
// The checksum guards against damage on the FAT ESP, which has no journal;
// it is no protection against an attacker, who could recompute it. Against
// tampering, a TPM blob protects itself, and a plain payload cannot.
const (
	envelopeMagic   = "CAIRNSCF"
	envelopeVersion = 1
	headerSize      = 16

	// maxSealedSize bounds the file: real ones are well under 4 KiB.
	maxSealedSize = 64 << 10
)

// envelopeKind says how the payload of a sealed configuration is stored.
type envelopeKind uint8

const (
	kindPlain envelopeKind = 1
	kindTPM   envelopeKind = 2
)

func (k envelopeKind) String() string {
	switch k {
	case kindPlain:
		return "plain"
	case kindTPM:
		return "TPM-sealed"
	}
	return fmt.Sprintf("kind %d", uint8(k))
}

// marshalEnvelope wraps payload in the envelope.
func marshalEnvelope(kind envelopeKind, payload []byte) []byte {
	b := make([]byte, 0, headerSize+len(payload)+sha256.Size)
	b = append(b, envelopeMagic...)
	b = append(b, envelopeVersion, byte(kind), 0, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(len(payload)))
	b = append(b, payload...)
	sum := sha256.Sum256(b)
	return append(b, sum[:]...)
}

// parseEnvelope checks an envelope and returns its kind and payload.
func parseEnvelope(b []byte) (envelopeKind, []byte, error) {
	if len(b) < headerSize+sha256.Size {
		return 0, nil, fmt.Errorf("file is %d bytes, too short for a sealed configuration", len(b))
	}
	if len(b) > maxSealedSize {
		return 0, nil, fmt.Errorf("file is %d bytes, more than any sealed configuration (%d)", len(b), maxSealedSize)
	}
	if !bytes.Equal(b[:8], []byte(envelopeMagic)) {
		return 0, nil, errors.New("not a sealed configuration (bad magic)")
	}
	if b[8] != envelopeVersion {
		return 0, nil, fmt.Errorf("unknown sealed configuration version %d", b[8])
	}
	kind := envelopeKind(b[9])
	if kind != kindPlain && kind != kindTPM {
		return 0, nil, fmt.Errorf("unknown payload kind %d", b[9])
	}
	if b[10] != 0 || b[11] != 0 {
		return 0, nil, errors.New("reserved header bytes are not zero")
	}
	n := binary.BigEndian.Uint32(b[12:16])
	if uint64(n) != uint64(len(b)-headerSize-sha256.Size) {
		return 0, nil, fmt.Errorf("payload length %d does not match the file length %d (truncated?)", n, len(b))
	}
	end := headerSize + int(n)
	sum := sha256.Sum256(b[:end])
	if !bytes.Equal(sum[:], b[end:]) {
		return 0, nil, errors.New("checksum mismatch: the file is damaged")
	}
	return kind, b[headerSize:end], nil
}

// parseSealedConfiguration decodes and validates the payload of an
// envelope, once unsealed.
func parseSealedConfiguration(payload []byte) (*private.SealedConfiguration, error) {
	var sc private.SealedConfiguration
	if err := proto.Unmarshal(payload, &sc); err != nil {
		return nil, fmt.Errorf("payload is not a SealedConfiguration: %w", err)
	}
	if err := validateSealed(&sc); err != nil {
		return nil, err
	}
	return &sc, nil
}

// validateSealed checks every field of a sealed configuration. Enrolment
// writes every field, so anything missing is damage, never an old format.
func validateSealed(sc *private.SealedConfiguration) error {
	if !identity.ValidNodeID(sc.GetNodeId()) {
		return fmt.Errorf("node_id %q is not a node ID", sc.GetNodeId())
	}
	if n := len(sc.GetJoinKey()); n != ed25519.SeedSize {
		return fmt.Errorf("join_key is %d bytes, want %d", n, ed25519.SeedSize)
	}
	if err := parameters.ValidateCA(sc.GetClusterCaCertificate()); err != nil {
		return fmt.Errorf("cluster_ca_certificate: %w", err)
	}
	nk, ck := len(sc.GetNodeUnlockKey()), len(sc.GetClusterUnlockKey())
	switch sc.GetStorageSecurity() {
	case private.StorageSecurity_STORAGE_SECURITY_ENCRYPTED:
		if nk != localstorage.KeySize || ck != localstorage.KeySize {
			return fmt.Errorf("unlock keys are %d and %d bytes, want %d", nk, ck, localstorage.KeySize)
		}
	case private.StorageSecurity_STORAGE_SECURITY_INSECURE:
		if nk != 0 || ck != 0 {
			return errors.New("unlock keys present on insecure storage")
		}
	default:
		return fmt.Errorf("storage_security %v is not a setting", sc.GetStorageSecurity())
	}
	return nil
}

// sealer is what enrolment needs of a TPM; pkg/tpmseal's TPM is one.
type sealer interface {
	Seal(secret []byte) ([]byte, error)
	Unseal(blob []byte) ([]byte, error)
	// SetSealingMarker records in the TPM that a configuration was sealed
	// with it; SealingMarker reads that record (see pkg/tpmseal).
	SetSealingMarker() error
	SealingMarker() (bool, error)
	// Bound reports whether Seal binds what it seals to the release this
	// boot came from; Rebind seals a blob again when it does not trust
	// this boot's PCR key; EndUnsealing makes sure that no bound seal
	// opens again in this boot (see pkg/tpmseal).
	Bound() bool
	Rebind(blob []byte) ([]byte, bool, error)
	EndUnsealing() error
	Close() error
}

// errUnsealedOnSealingTPM is unseal's answer for an unsealed envelope on a
// machine whose TPM says its node sealed its configuration: someone who
// could write the ESP swapped a configuration of theirs in.
var errUnsealedOnSealingTPM = errors.New("the configuration on the ESP is stored unsealed, but this machine's TPM says this node sealed it with the TPM: refusing a configuration that was swapped in")

// errNoTPM is what an openTPM returns when the machine has no TPM.
var errNoTPM = errors.New("no TPM on this machine")

// openMachineTPM opens the machine's TPM through the kernel's resource
// manager, sealing bound to binding when there is one. A machine without
// one gives errNoTPM.
func openMachineTPM(binding *tpmseal.Binding) (sealer, error) {
	t, err := tpmseal.Open()
	if errors.Is(err, tpmseal.ErrNoTPM) {
		return nil, fmt.Errorf("%w: %w", errNoTPM, err)
	}
	if err != nil {
		return nil, fmt.Errorf("when opening the TPM: %w", err)
	}
	if binding != nil {
		if err := t.Bind(binding); err != nil {
			t.Close()
			return nil, fmt.Errorf("when binding seals to this boot's release: %w", err)
		}
	}
	return t, nil
}

// endUnsealing ends, once enrolment has unsealed what it needs or sealed
// what it keeps, this boot's ability to open a bound seal: nothing that
// runs later in this boot (a workload that took the node, say) can unseal
// the configuration. Only a boot that binds has bound seals to protect.
// A TPM that refuses is logged: the node has its keys already and goes
// on, but the console says it is exposed.
func (s *Service) endUnsealing(log logtree.LeveledLogger) {
	if s.cfg.Binding == nil || s.unsealingEnded {
		return
	}
	err := func() error {
		t, err := s.openTPM()
		if err != nil {
			return err
		}
		defer t.Close()
		return t.EndUnsealing()
	}()
	if err != nil {
		log.Errorf("Cannot end unsealing for this boot (%v): anything that runs as root on this node can unseal its configuration until it reboots", err)
		return
	}
	s.unsealingEnded = true
	log.Infof("Unsealing is over for this boot: PCR 11 holds Cairn's marker, and no seal bound to a release opens again until the node restarts")
}

// markSealing sets the TPM's sealing marker, before a TPM-sealed
// configuration is written: from then on an unsealed configuration on
// this machine is a swap.
func markSealing(open func() (sealer, error)) error {
	t, err := open()
	if err != nil {
		return fmt.Errorf("when opening the TPM: %w", err)
	}
	defer t.Close()
	return t.SetSealingMarker()
}

// checkNoSealingMarker refuses an unsealed configuration on a machine
// whose TPM holds the sealing marker. Without a TPM that opens, there is
// nothing to check: the configuration was stored unsealed on purpose.
func checkNoSealingMarker(open func() (sealer, error)) error {
	t, err := open()
	if err != nil {
		return nil
	}
	defer t.Close()
	marked, err := t.SealingMarker()
	if err != nil {
		return fmt.Errorf("when asking the TPM whether this node sealed its configuration: %w", err)
	}
	if marked {
		return errUnsealedOnSealingTPM
	}
	return nil
}

// sealPlan is the decision how to store the sealed configuration, taken
// from the cluster's TPM mode and the machine, before anything is written.
type sealPlan struct {
	// useTPM says the payload is sealed by the TPM.
	useTPM bool
	// bound says the TPM binds the seal to this boot's release (a
	// tpmseal.Binding): planSealing found a TPM that binds.
	bound bool
	// warning, when not empty, is why the configuration is stored
	// unsealed; it is logged loudly.
	warning string
}

// planSealing decides how to seal under the cluster's configuration conf,
// opening (and closing again) the TPM to see whether there is one. It
// refuses when conf requires a TPM and the machine has none that works,
// or requires a bound seal and this boot cannot bind.
func planSealing(conf *api.ClusterConfiguration, open func() (sealer, error)) (sealPlan, error) {
	plan, err := planTPM(conf.GetTpmMode(), open)
	if err == nil && conf.GetBoundSealRequired() && !plan.bound {
		err = errors.New("the cluster requires a seal bound to signed releases, and this boot cannot bind one (Secure Boot off, or a UKI without a PCR signature)")
	}
	return plan, err
}

// planTPM decides whether to seal with the TPM under mode.
func planTPM(mode api.TPMMode, open func() (sealer, error)) (sealPlan, error) {
	if mode == api.TPMMode_TPM_MODE_DISABLED {
		return sealPlan{warning: "the cluster's TPM mode is DISABLED"}, nil
	}
	t, err := open()
	if err == nil {
		defer t.Close()
		return sealPlan{useTPM: true, bound: t.Bound()}, nil
	}
	if mode == api.TPMMode_TPM_MODE_BEST_EFFORT {
		return sealPlan{warning: fmt.Sprintf("the cluster's TPM mode is BEST_EFFORT and the TPM is unusable: %v", err)}, nil
	}
	return sealPlan{}, fmt.Errorf("the cluster's TPM mode is REQUIRED, but this machine has no usable TPM: %w", err)
}

// seal marshals sc into an envelope as plan says.
func seal(sc *private.SealedConfiguration, plan sealPlan, open func() (sealer, error)) ([]byte, error) {
	if err := validateSealed(sc); err != nil {
		return nil, fmt.Errorf("refusing to seal a bad configuration: %w", err)
	}
	payload, err := proto.Marshal(sc)
	if err != nil {
		return nil, fmt.Errorf("when marshalling the sealed configuration: %w", err)
	}
	if !plan.useTPM {
		return marshalEnvelope(kindPlain, payload), nil
	}
	t, err := open()
	if err != nil {
		return nil, fmt.Errorf("when opening the TPM: %w", err)
	}
	defer t.Close()
	blob, err := t.Seal(payload)
	if err != nil {
		return nil, fmt.Errorf("when sealing with the TPM: %w", err)
	}
	return marshalEnvelope(kindTPM, blob), nil
}

// unseal opens an envelope read from the ESP, with the TPM when it was
// sealed by one.
func unseal(b []byte, open func() (sealer, error)) (*private.SealedConfiguration, error) {
	kind, payload, err := parseEnvelope(b)
	if err != nil {
		return nil, err
	}
	if kind == kindPlain {
		if err := checkNoSealingMarker(open); err != nil {
			return nil, err
		}
	}
	if kind == kindTPM {
		t, err := open()
		if err != nil {
			return nil, fmt.Errorf("it was sealed by a TPM, which cannot be opened: %w", err)
		}
		defer t.Close()
		payload, err = t.Unseal(payload)
		if err != nil {
			return nil, fmt.Errorf("the TPM refused to unseal it: %w", err)
		}
	}
	return parseSealedConfiguration(payload)
}

// TryUnseal opens b, the bytes of a sealed configuration file, with this
// machine's TPM bound to binding, as a join does, and drops what it
// opened. The test hook cairn.test.unseal-again calls it once enrolment
// has ended unsealing, to show that the TPM then refuses.
func TryUnseal(b []byte, binding *tpmseal.Binding) error {
	_, err := unseal(b, func() (sealer, error) { return openMachineTPM(binding) })
	return err
}

// writeSealed seals sc as plan says and writes it onto the ESP.
func (s *Service) writeSealed(log logtree.LeveledLogger, sc *private.SealedConfiguration, plan sealPlan) error {
	if plan.warning != "" {
		log.Warningf("No TPM: storing the configuration unsealed (%s): whoever can read the ESP has this node's join and unlock keys", plan.warning)
	}
	b, err := seal(sc, plan, s.openTPM)
	if err != nil {
		return err
	}
	if plan.useTPM {
		// The TPM's owner hierarchy may be locked with a password that
		// Cairn does not know; sealing works without it, the marker not.
		if err := markSealing(s.openTPM); err != nil {
			log.Warningf("Cannot record the sealing in the TPM (%v): an unsealed configuration swapped in later will not be noticed", err)
		}
	}
	if err := s.root.ESP.Cairn.SealedConfiguration.Write(b); err != nil {
		return fmt.Errorf("when writing the sealed configuration: %w", err)
	}
	if plan.bound {
		log.Infof("Sealed the configuration bound to this release's PCR key and to PCR 7: only a boot of a release that key signed, under the same Secure Boot keys, can open it")
	}
	marker.Log(log, marker.ConfigurationSealed, "tpm", strconv.FormatBool(plan.useTPM), "bound", strconv.FormatBool(plan.bound))
	return nil
}
