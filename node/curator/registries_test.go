package curator

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/proto/api"
)

// TestRegistries: the owner changes the registry settings, a node
// watching the configuration sees the backlog and then the change, the
// rest of the configuration is kept, and bad settings are refused with
// nothing stored.
func TestRegistries(t *testing.T) {
	c := newTestCluster(t)
	ctx := fixture.Context(t)
	addr := c.nodes[0].addr.String()
	m := c.mgmt(t, addr)
	stream, conf := watchConfiguration(t, c.nodes[0], addr)
	if !proto.Equal(conf, c.config) {
		t.Fatalf("Watch backlog = %v, want the bootstrap configuration %v", conf, c.config)
	}

	want := &api.Registries{
		Mirrors:   []*api.Registries_Mirror{{Registry: "docker.io", Endpoints: []string{"http://10.42.0.1:5000"}}},
		PlainHttp: []string{"10.42.0.1:5000"},
	}
	resp, err := m.UpdateRegistries(ctx, &api.UpdateRegistriesRequest{Registries: want})
	if err != nil || !proto.Equal(resp.Registries, want) {
		t.Fatalf("UpdateRegistries = %v, %v, want %v", resp, err, want)
	}
	ev := recvEvent(t, stream)
	if !proto.Equal(ev.Configuration.GetRegistries(), want) || ev.Configuration.GetTpmMode() != c.config.TpmMode || ev.Configuration.GetStorageSecurityPolicy() != c.config.StorageSecurityPolicy {
		t.Fatalf("Watch after UpdateRegistries = %v, want %v with the rest kept", ev.Configuration, want)
	}

	_, err = m.UpdateRegistries(ctx, &api.UpdateRegistriesRequest{Registries: &api.Registries{
		Mirrors: []*api.Registries_Mirror{{Registry: "docker.io", Endpoints: []string{"http://10.42.0.2:5000"}}},
	}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("UpdateRegistries with an unpermitted plain-HTTP mirror = %v, want InvalidArgument", err)
	}
	info, err := m.GetClusterInfo(ctx, &api.GetClusterInfoRequest{})
	if err != nil || !proto.Equal(info.ClusterConfiguration.GetRegistries(), want) {
		t.Fatalf("GetClusterInfo = %v, %v, want the registries kept as %v", info.GetClusterConfiguration(), err, want)
	}

	if _, err := m.UpdateRegistries(ctx, &api.UpdateRegistriesRequest{}); err != nil {
		t.Fatalf("UpdateRegistries clearing: %v", err)
	}
	if ev = recvEvent(t, stream); ev.Configuration.GetRegistries() != nil {
		t.Fatalf("Watch after clearing = %v, want no registries", ev.Configuration)
	}
}
