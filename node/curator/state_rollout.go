package curator

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/proto/api"
)

// The rollout's keys: the rollout last started (one at a time), and the
// releases recorded bad, which outlive rollouts until the owner clears
// them.
const (
	rolloutKey     = "rollout/current"
	badReleasesKey = "rollout/bad"
)

// getRollout reads the rollout last started and its mod revision; nil and
// 0 when none ever was.
func (c *curator) getRollout(ctx context.Context) (*api.Rollout, int64, error) {
	r := &api.Rollout{}
	rev, ok, err := c.getProto(ctx, rolloutKey, r, "the rollout")
	if err != nil || !ok {
		return nil, 0, err
	}
	return r, rev, nil
}

// putRollout stores r if the rollout is still the one of mod revision rev
// (0: none), and says whether it was.
func (c *curator) putRollout(ctx context.Context, r *api.Rollout, rev int64) (bool, error) {
	b, err := proto.Marshal(r)
	if err != nil {
		return false, fmt.Errorf("when encoding the rollout: %w", err)
	}
	return c.putAt(ctx, rolloutKey, b, rev, "the rollout")
}

// getBadReleases reads the releases recorded bad and their mod revision.
func (c *curator) getBadReleases(ctx context.Context) (*api.BadReleases, int64, error) {
	b := &api.BadReleases{}
	rev, _, err := c.getProto(ctx, badReleasesKey, b, "the bad releases")
	return b, rev, err
}

// changeBadReleases applies change to the bad releases and stores them,
// again on a concurrent change; errUnchanged from change stores nothing.
func (c *curator) changeBadReleases(ctx context.Context, change func(*api.BadReleases) error) error {
	for {
		bad, rev, err := c.getBadReleases(ctx)
		if err != nil {
			return err
		}
		if err := change(bad); err != nil {
			if err == errUnchanged {
				return nil
			}
			return err
		}
		b, err := proto.Marshal(bad)
		if err != nil {
			return fmt.Errorf("when encoding the bad releases: %w", err)
		}
		ok, err := c.putAt(ctx, badReleasesKey, b, rev, "the bad releases")
		if err != nil || ok {
			return err
		}
	}
}

// getProto reads key into m, and returns its mod revision and whether it
// exists; what names it in errors.
func (c *curator) getProto(ctx context.Context, key string, m proto.Message, what string) (int64, bool, error) {
	resp, err := c.etcd.Get(ctx, key)
	if err != nil {
		return 0, false, fmt.Errorf("when reading %s: %w", what, err)
	}
	if len(resp.Kvs) == 0 {
		return 0, false, nil
	}
	kv := resp.Kvs[0]
	if err := proto.Unmarshal(kv.Value, m); err != nil {
		return 0, false, fmt.Errorf("when decoding %s: %w", what, err)
	}
	return kv.ModRevision, true, nil
}
