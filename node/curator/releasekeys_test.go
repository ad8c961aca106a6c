package curator

import (
	"crypto/ed25519"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/pkg/release/releasetest"
	"cairn.dev/cairn/proto/api"
)

// TestReleaseKeys: the owner adds and removes release keys, a node
// watching the configuration sees each change with the rest kept, bad
// requests are refused with nothing stored, and a node may not change
// them.
func TestReleaseKeys(t *testing.T) {
	c := newTestCluster(t)
	ctx := fixture.Context(t)
	addr := c.nodes[0].addr.String()
	m := c.mgmt(t, addr)
	stream, conf := watchConfiguration(t, c.nodes[0], addr)
	if len(conf.GetReleaseKeys()) != 0 {
		t.Fatalf("Watch backlog = %v, want no release key", conf)
	}
	a, b := releasetest.PublicKey(1).String(), releasetest.PublicKey(2).String()

	update := func(add, remove []string) ([]string, error) {
		t.Helper()
		res, err := m.UpdateReleaseKeys(ctx, &api.UpdateReleaseKeysRequest{Add: add, Remove: remove})
		return res.GetReleaseKeys(), err
	}
	// Surrounding space is trimmed: keys are stored in their canonical
	// text form.
	if got, err := update([]string{" " + a + "\n", b}, nil); err != nil || !slices.Equal(got, []string{a, b}) {
		t.Fatalf("UpdateReleaseKeys adding a and b = %q, %v, want [a b]", got, err)
	}
	ev := recvEvent(t, stream)
	if !slices.Equal(ev.Configuration.GetReleaseKeys(), []string{a, b}) || ev.Configuration.GetTpmMode() != c.config.TpmMode {
		t.Fatalf("Watch after adding = %v, want keys a and b with the rest kept", ev.Configuration)
	}
	if got, err := update([]string{a}, nil); err != nil || !slices.Equal(got, []string{a, b}) {
		t.Fatalf("UpdateReleaseKeys adding a again = %q, %v, want [a b] unchanged", got, err)
	}

	for _, tc := range []struct {
		name        string
		add, remove []string
		want        codes.Code
	}{
		{"not a key", []string{"cairn-release-ed25519:AAAA"}, nil, codes.InvalidArgument},
		{"added and removed", []string{a}, []string{a}, codes.InvalidArgument},
		{"added twice", []string{releasetest.PublicKey(3).String(), releasetest.PublicKey(3).String()}, nil, codes.InvalidArgument},
		{"removing an untrusted key", nil, []string{a, releasetest.PublicKey(4).String()}, codes.NotFound},
	} {
		if _, err := update(tc.add, tc.remove); status.Code(err) != tc.want {
			t.Errorf("UpdateReleaseKeys %s = %v, want %v", tc.name, err, tc.want)
		}
	}
	nodeMgmt := api.NewManagementClient(dial(t, addr, rpc.NodeCredentials(c.nodes[0].ident)))
	if _, err := nodeMgmt.UpdateReleaseKeys(ctx, &api.UpdateReleaseKeysRequest{Remove: []string{a}}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("UpdateReleaseKeys by a node = %v, want PermissionDenied", err)
	}
	info, err := m.GetClusterInfo(ctx, &api.GetClusterInfoRequest{})
	if err != nil || !slices.Equal(info.GetClusterConfiguration().GetReleaseKeys(), []string{a, b}) {
		t.Fatalf("GetClusterInfo after refused changes = %v, %v, want keys a and b kept", info.GetClusterConfiguration(), err)
	}

	if got, err := update(nil, []string{a, b}); err != nil || len(got) != 0 {
		t.Fatalf("UpdateReleaseKeys removing both = %q, %v, want none", got, err)
	}
	if ev = recvEvent(t, stream); len(ev.Configuration.GetReleaseKeys()) != 0 {
		t.Fatalf("Watch after removing = %v, want no release key", ev.Configuration)
	}
}

// TestReleaseKeysConcurrent: changes made at once, of the release keys
// and of the registries, are all kept, as each is a compare-and-swap of
// the whole configuration.
func TestReleaseKeysConcurrent(t *testing.T) {
	c := newTestCluster(t)
	ctx := fixture.Context(t)
	m := c.mgmt(t, c.nodes[0].addr.String())
	registries := &api.Registries{PlainHttp: []string{"10.42.0.1:5000"}}
	const n = 6
	var wg sync.WaitGroup
	errs := make(chan error, n+1)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := m.UpdateReleaseKeys(ctx, &api.UpdateReleaseKeysRequest{Add: []string{releasetest.PublicKey(byte(i)).String()}}); err != nil {
				errs <- fmt.Errorf("adding key %d: %w", i, err)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := m.UpdateRegistries(ctx, &api.UpdateRegistriesRequest{Registries: registries}); err != nil {
			errs <- fmt.Errorf("updating the registries: %w", err)
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	info, err := m.GetClusterInfo(ctx, &api.GetClusterInfoRequest{})
	if err != nil {
		t.Fatalf("GetClusterInfo: %v", err)
	}
	conf := info.GetClusterConfiguration()
	for i := range n {
		if !slices.Contains(conf.GetReleaseKeys(), releasetest.PublicKey(byte(i)).String()) {
			t.Errorf("release keys %q lack key %d", conf.GetReleaseKeys(), i)
		}
	}
	if len(conf.GetReleaseKeys()) != n || !proto.Equal(conf.GetRegistries(), registries) {
		t.Errorf("configuration = %v, want %d keys and the registries %v", conf, n, registries)
	}
}

// TestBootstrapRefusesBadReleaseKeys: a cluster is never created with a
// release key that does not parse, whatever checked its parameters.
func TestBootstrapRefusesBadReleaseKeys(t *testing.T) {
	key := releasetest.PublicKey(9)
	b := BootstrapState{
		OwnerPublicKey: ed25519.PublicKey(key), NodePublicKey: ed25519.PublicKey(key), JoinPublicKey: ed25519.PublicKey(key),
		Configuration: &api.ClusterConfiguration{
			StorageSecurityPolicy: api.StorageSecurityPolicy_STORAGE_SECURITY_POLICY_INSECURE,
			TpmMode:               api.TPMMode_TPM_MODE_DISABLED,
			ReleaseKeys:           []string{key.String(), key.String()},
		},
	}
	if err := b.validate(); err == nil || !strings.Contains(err.Error(), "release_keys[1]") {
		t.Errorf("validate with a key given twice = %v, want an error naming release_keys[1]", err)
	}
	b.Configuration.ReleaseKeys = b.Configuration.ReleaseKeys[:1]
	if err := b.validate(); err != nil {
		t.Errorf("validate with one key = %v, want no error", err)
	}
}
