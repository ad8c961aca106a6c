package curator

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/proto/api"
)

// configuration reads the cluster configuration.
func (c *curator) configuration(ctx context.Context) (*api.ClusterConfiguration, error) {
	conf, _, err := c.configurationAt(ctx)
	return conf, err
}

// configurationAt reads the cluster configuration and the revision at
// which it was last changed, for a compare-and-swap.
func (c *curator) configurationAt(ctx context.Context) (*api.ClusterConfiguration, int64, error) {
	resp, err := c.etcd.Get(ctx, configurationKey)
	if err != nil {
		return nil, 0, fmt.Errorf("when reading the cluster configuration: %w", err)
	}
	conf, err := configurationFrom(resp.Kvs)
	if err != nil {
		return nil, 0, err
	}
	return conf, resp.Kvs[0].ModRevision, nil
}

// configurationFrom decodes the cluster configuration in kvs, a read of
// configurationKey.
func configurationFrom(kvs []*mvccpb.KeyValue) (*api.ClusterConfiguration, error) {
	if len(kvs) == 0 {
		return nil, status.Error(codes.FailedPrecondition, "the cluster has no configuration: it was not bootstrapped")
	}
	conf := &api.ClusterConfiguration{}
	if err := proto.Unmarshal(kvs[0].Value, conf); err != nil {
		return nil, fmt.Errorf("when decoding the cluster configuration: %w", err)
	}
	return conf, nil
}

// insecure says whether the cluster's nodes store their data unencrypted.
func insecure(c *api.ClusterConfiguration) bool {
	return c.GetStorageSecurityPolicy() == api.StorageSecurityPolicy_STORAGE_SECURITY_POLICY_INSECURE
}

// putConfiguration stores conf as the cluster configuration if the stored
// one is still the one of revision rev, and says whether it was.
func (c *curator) putConfiguration(ctx context.Context, conf *api.ClusterConfiguration, rev int64) (bool, error) {
	b, err := proto.Marshal(conf)
	if err != nil {
		return false, fmt.Errorf("when encoding the cluster configuration: %w", err)
	}
	return c.putAt(ctx, configurationKey, b, rev, "the cluster configuration")
}
