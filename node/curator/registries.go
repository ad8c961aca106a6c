package curator

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/clusterconfig"
	"cairn.dev/cairn/proto/api"
)

// UpdateRegistries implements Management.UpdateRegistries: the cluster
// configuration's registry settings replaced in one compare-and-swap, so
// that a concurrent change of the configuration is never lost. Workers
// follow through Curator.Watch.
func (m management) UpdateRegistries(ctx context.Context, req *api.UpdateRegistriesRequest) (*api.UpdateRegistriesResponse, error) {
	if err := clusterconfig.ValidateRegistries(req.GetRegistries()); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "registries: %v", err)
	}
	for {
		conf, rev, err := m.configurationAt(ctx)
		if err != nil {
			return nil, err
		}
		conf.Registries = req.GetRegistries()
		if len(conf.Registries.GetMirrors()) == 0 && len(conf.Registries.GetPlainHttp()) == 0 {
			conf.Registries = nil
		}
		b, err := proto.Marshal(conf)
		if err != nil {
			return nil, fmt.Errorf("when encoding the cluster configuration: %w", err)
		}
		txn, err := m.etcd.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(configurationKey), "=", rev)).
			Then(clientv3.OpPut(configurationKey, string(b))).
			Commit()
		if err != nil {
			return nil, fmt.Errorf("when storing the cluster configuration: %w", err)
		}
		if txn.Succeeded {
			return &api.UpdateRegistriesResponse{Registries: conf.GetRegistries()}, nil
		}
		// The configuration changed in between: apply to the new one.
	}
}
