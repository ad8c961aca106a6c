package curator

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/clusterconfig"
	"cairn.dev/cairn/pkg/release"
	"cairn.dev/cairn/proto/api"
)

// UpdateReleaseKeys implements Management.UpdateReleaseKeys: the release
// keys of the cluster configuration changed in one compare-and-swap, so
// that a concurrent change of the configuration (registries, other keys)
// is never lost. Keys are stored in their canonical text form.
func (m management) UpdateReleaseKeys(ctx context.Context, req *api.UpdateReleaseKeysRequest) (*api.UpdateReleaseKeysResponse, error) {
	add, err := parseRequestKeys("add", req.GetAdd())
	if err != nil {
		return nil, err
	}
	remove, err := parseRequestKeys("remove", req.GetRemove())
	if err != nil {
		return nil, err
	}
	for _, k := range add {
		if containsKey(remove, k) {
			return nil, status.Errorf(codes.InvalidArgument, "release key %s is both added and removed", k.ID())
		}
	}
	for {
		conf, rev, err := m.configurationAt(ctx)
		if err != nil {
			return nil, err
		}
		keys, changed, err := changeReleaseKeys(conf.GetReleaseKeys(), add, remove)
		if err != nil {
			return nil, err
		}
		if !changed {
			return &api.UpdateReleaseKeysResponse{ReleaseKeys: conf.GetReleaseKeys()}, nil
		}
		conf.ReleaseKeys = keys
		ok, err := m.putConfiguration(ctx, conf, rev)
		if err != nil {
			return nil, err
		}
		if ok {
			return &api.UpdateReleaseKeysResponse{ReleaseKeys: keys}, nil
		}
		// The configuration changed in between: apply to the new one.
	}
}

// parseRequestKeys parses the keys of the request's field, refusing a
// key that does not parse or that the field names twice.
func parseRequestKeys(field string, texts []string) ([]release.PublicKey, error) {
	keys := make([]release.PublicKey, 0, len(texts))
	for i, s := range texts {
		k, err := release.ParsePublicKey(s)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "%s[%d]: %v", field, i, err)
		}
		if containsKey(keys, k) {
			return nil, status.Errorf(codes.InvalidArgument, "%s[%d]: release key %s is named twice", field, i, k.ID())
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// changeReleaseKeys returns stored, the release_keys of the cluster
// configuration, without remove and with add (after the keys it keeps,
// in the order given), each in its canonical text form, and whether that
// differs from stored in any key. Removing a key stored does not hold is
// NotFound, a result beyond clusterconfig.MaxReleaseKeys InvalidArgument.
func changeReleaseKeys(stored []string, add, remove []release.PublicKey) ([]string, bool, error) {
	current, err := clusterconfig.ParseReleaseKeys(stored)
	if err != nil {
		// Validated when stored: a bad entry is the curator's fault.
		return nil, false, fmt.Errorf("when reading the stored release keys: %w", err)
	}
	for _, k := range remove {
		if !containsKey(current, k) {
			return nil, false, status.Errorf(codes.NotFound, "release key %s is not trusted by the cluster; nothing was changed", k.ID())
		}
	}
	changed := len(remove) > 0
	var keys []string
	for _, k := range current {
		if !containsKey(remove, k) {
			keys = append(keys, k.String())
		}
	}
	for _, k := range add {
		if !containsKey(current, k) {
			keys = append(keys, k.String())
			changed = true
		}
	}
	if len(keys) > clusterconfig.MaxReleaseKeys {
		return nil, false, status.Errorf(codes.InvalidArgument, "the cluster would trust %d release keys, more than the %d it holds; remove some first", len(keys), clusterconfig.MaxReleaseKeys)
	}
	return keys, changed, nil
}

// containsKey says whether keys holds k.
func containsKey(keys []release.PublicKey, k release.PublicKey) bool {
	return slices.ContainsFunc(keys, func(x release.PublicKey) bool { return bytes.Equal(x, k) })
}
