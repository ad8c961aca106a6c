package cluster

import (
	"bytes"
	"crypto/rand"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/node/parameters/parameterstest"
	api "cairn.dev/cairn/proto/api"
	private "cairn.dev/cairn/proto/private"
)

func randomBytes(t testing.TB, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func testSealed(t testing.TB) *private.SealedConfiguration {
	t.Helper()
	return &private.SealedConfiguration{
		NodeUnlockKey:        randomBytes(t, localstorage.KeySize),
		JoinKey:              randomBytes(t, 32),
		ClusterCaCertificate: parameterstest.CA(t),
		StorageSecurity:      private.StorageSecurity_STORAGE_SECURITY_ENCRYPTED,
		ClusterUnlockKey:     randomBytes(t, localstorage.KeySize),
		NodeId:               "cairn-0123456789abcdef",
	}
}

func TestSealRoundTrip(t *testing.T) {
	tpm := newFakeTPM()
	for _, tc := range []struct {
		name string
		plan sealPlan
		kind envelopeKind
	}{
		{"plain", sealPlan{warning: "test"}, kindPlain},
		{"TPM", sealPlan{useTPM: true}, kindTPM},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := testSealed(t)
			b, err := seal(sc, tc.plan, tpm.open)
			if err != nil {
				t.Fatalf("seal: %v", err)
			}
			kind, payload, err := parseEnvelope(b)
			if err != nil || kind != tc.kind {
				t.Fatalf("parseEnvelope = %v, %v, want %v", kind, err, tc.kind)
			}
			if tc.kind == kindTPM && bytes.Contains(payload, sc.NodeUnlockKey) {
				t.Errorf("TPM envelope holds the node unlock key in the clear")
			}
			got, err := unseal(b, tpm.open)
			if err != nil {
				t.Fatalf("unseal: %v", err)
			}
			if d := cmp.Diff(sc, got, protocmp.Transform()); d != "" {
				t.Errorf("unseal(seal(sc)) differs (-want +got):\n%s", d)
			}
		})
	}
}

func TestUnsealDamaged(t *testing.T) {
	tpm := newFakeTPM()
	good, err := seal(testSealed(t), sealPlan{useTPM: true}, tpm.open)
	if err != nil {
		t.Fatal(err)
	}
	if err := markSealing(tpm.open); err != nil {
		t.Fatal(err)
	}
	plain, err := seal(testSealed(t), sealPlan{}, tpm.open)
	if err != nil {
		t.Fatal(err)
	}
	flip := func(b []byte, i int) []byte {
		b = bytes.Clone(b)
		b[i] ^= 0x40
		return b
	}
	otherTPM := newFakeTPM()
	for _, tc := range []struct {
		name   string
		b      []byte
		open   func() (sealer, error)
		errHas string
	}{
		{"empty", nil, tpm.open, "too short"},
		{"garbage", []byte(strings.Repeat("garbage!", 10)), tpm.open, "bad magic"},
		{"truncated", good[:len(good)-1], tpm.open, "truncated"},
		{"oversized", marshalEnvelope(kindPlain, make([]byte, maxSealedSize)), tpm.open, "more than any sealed configuration"},
		{"bit flip in payload", flip(good, headerSize+3), tpm.open, "checksum mismatch"},
		{"unknown version", flip(good, 8), tpm.open, "unknown sealed configuration version"},
		{"TPM blob without TPM", good, noTPM, "sealed by a TPM, which cannot be opened"},
		{"TPM blob on another machine", good, otherTPM.open, "TPM refused to unseal"},
		{"plain payload is not a proto", marshalEnvelope(kindPlain, []byte("\xff\xff\xff")), otherTPM.open, "not a SealedConfiguration"},
		{"plain payload misses fields", marshalEnvelope(kindPlain, nil), otherTPM.open, "node_id"},
		{"plain where the TPM sealed", plain, tpm.open, "swapped in"},
		{"plain reads without a TPM", plain, noTPM, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := unseal(tc.b, tc.open)
			switch {
			case tc.errHas == "" && err != nil:
				t.Errorf("unseal = %v, want no error", err)
			case tc.errHas != "" && (err == nil || !strings.Contains(err.Error(), tc.errHas)):
				t.Errorf("unseal = %v, want an error containing %q", err, tc.errHas)
			}
		})
	}
}

func TestValidateSealed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		edit   func(sc *private.SealedConfiguration)
		errHas string
	}{
		{"complete", func(*private.SealedConfiguration) {}, ""},
		{"insecure", func(sc *private.SealedConfiguration) {
			sc.StorageSecurity = private.StorageSecurity_STORAGE_SECURITY_INSECURE
			sc.NodeUnlockKey, sc.ClusterUnlockKey = nil, nil
		}, ""},
		{"insecure with keys", func(sc *private.SealedConfiguration) {
			sc.StorageSecurity = private.StorageSecurity_STORAGE_SECURITY_INSECURE
		}, "unlock keys present"},
		{"unspecified security", func(sc *private.SealedConfiguration) { sc.StorageSecurity = 0 }, "not a setting"},
		{"no cluster unlock key", func(sc *private.SealedConfiguration) { sc.ClusterUnlockKey = nil }, "unlock keys are"},
		{"short join key", func(sc *private.SealedConfiguration) { sc.JoinKey = sc.JoinKey[:5] }, "join_key is 5 bytes"},
		{"bad node ID", func(sc *private.SealedConfiguration) { sc.NodeId = "node-1" }, "not a node ID"},
		{"bad CA", func(sc *private.SealedConfiguration) { sc.ClusterCaCertificate = []byte{1} }, "cluster_ca_certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := testSealed(t)
			tc.edit(sc)
			err := validateSealed(sc)
			switch {
			case tc.errHas == "" && err != nil:
				t.Errorf("validateSealed = %v, want no error", err)
			case tc.errHas != "" && (err == nil || !strings.Contains(err.Error(), tc.errHas)):
				t.Errorf("validateSealed = %v, want an error containing %q", err, tc.errHas)
			}
		})
	}
}

func TestPlanSealing(t *testing.T) {
	tpm := newFakeTPM()
	broken := func() (sealer, error) { return nil, errors.New("TPM self test failed") }
	for _, tc := range []struct {
		mode    api.TPMMode
		open    func() (sealer, error)
		useTPM  bool
		warning bool
		errHas  string
	}{
		{api.TPMMode_TPM_MODE_REQUIRED, tpm.open, true, false, ""},
		{api.TPMMode_TPM_MODE_REQUIRED, noTPM, false, false, "REQUIRED, but this machine has no usable TPM"},
		{api.TPMMode_TPM_MODE_REQUIRED, broken, false, false, "TPM self test failed"},
		{api.TPMMode_TPM_MODE_BEST_EFFORT, tpm.open, true, false, ""},
		{api.TPMMode_TPM_MODE_BEST_EFFORT, noTPM, false, true, ""},
		{api.TPMMode_TPM_MODE_BEST_EFFORT, broken, false, true, ""},
		{api.TPMMode_TPM_MODE_DISABLED, tpm.open, false, true, ""},
		{api.TPMMode_TPM_MODE_DISABLED, noTPM, false, true, ""},
	} {
		plan, err := planSealing(&api.ClusterConfiguration{TpmMode: tc.mode}, tc.open)
		if tc.errHas != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("planSealing(%v) = %+v, %v, want an error containing %q", tc.mode, plan, err, tc.errHas)
			}
			continue
		}
		if err != nil || plan.useTPM != tc.useTPM || (plan.warning != "") != tc.warning {
			t.Errorf("planSealing(%v) = %+v, %v, want useTPM %v, warning %v", tc.mode, plan, err, tc.useTPM, tc.warning)
		}
	}

	// A cluster that requires a bound seal takes a TPM that binds.
	required := &api.ClusterConfiguration{TpmMode: api.TPMMode_TPM_MODE_REQUIRED, BoundSealRequired: true}
	if plan, err := planSealing(required, tpm.open); err == nil || !strings.Contains(err.Error(), "requires a seal bound") {
		t.Errorf("planSealing(bound required) with a TPM that does not bind = %+v, %v; want refused", plan, err)
	}
	binding := newFakeTPM()
	binding.bound = true
	if plan, err := planSealing(required, binding.open); err != nil || !plan.useTPM || !plan.bound {
		t.Errorf("planSealing(bound required) with a TPM that binds = %+v, %v; want a bound TPM seal", plan, err)
	}
}

func FuzzUnseal(f *testing.F) {
	tpm := newFakeTPM()
	for _, plan := range []sealPlan{{}, {useTPM: true}} {
		b, err := seal(testSealed(f), plan, tpm.open)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(envelopeMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		sc, err := unseal(b, tpm.open)
		if err != nil {
			return
		}
		if err := validateSealed(sc); err != nil {
			t.Fatalf("unseal accepted an invalid configuration: %v", err)
		}
	})
}

// TestUnsealedSwapRefused plays someone who can write the ESP: on a machine
// whose node sealed its configuration with the TPM, they put an unsealed
// configuration of theirs in its place. The TPM remembers the sealing,
// and the swap is refused; an unsealed configuration is accepted where
// the TPM never sealed one, or where there is no TPM.
func TestUnsealedSwapRefused(t *testing.T) {
	tpm := newFakeTPM()
	plain, err := seal(testSealed(t), sealPlan{warning: "test"}, tpm.open)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unseal(plain, tpm.open); err != nil {
		t.Fatalf("unseal(unsealed) before the TPM sealed anything: %v", err)
	}
	if err := markSealing(tpm.open); err != nil {
		t.Fatal(err)
	}
	if _, err := unseal(plain, tpm.open); !errors.Is(err, errUnsealedOnSealingTPM) {
		t.Errorf("unseal(swapped-in unsealed configuration) = %v, want %v", err, errUnsealedOnSealingTPM)
	}
	if _, err := unseal(plain, noTPM); err != nil {
		t.Errorf("unseal(unsealed) without a TPM = %v, want it accepted", err)
	}
}
