package main

import (
	"context"
	"errors"
	"fmt"

	"cairn.dev/cairn/node/clusterconfig"
	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/node/update"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/release"
	api "cairn.dev/cairn/proto/api"
)

// newInstaller is the installer of releases (node/update) for node
// management, or an error saying why this node cannot install any: it did
// not boot from a verified system slot, or its own version is not a
// release version. booted is read as it is, without waiting: node
// management starts once the node is enrolled, long after the system
// slot was mounted, if it ever was.
func newInstaller(st *localstorage.Storage, booted event.Watchable[*localstorage.BootedSystem], config func(context.Context) (*api.ClusterConfiguration, error)) (*update.Installer, error) {
	w := booted.Watch()
	defer w.Close()
	sys, err := w.Get(context.Background(), event.BacklogOnly[*localstorage.BootedSystem](), event.NotNil[*localstorage.BootedSystem]())
	if errors.Is(err, event.ErrBacklogDone) {
		return nil, errors.New("the node did not boot from a verified system slot")
	}
	if err != nil {
		return nil, err
	}
	v, err := release.ParseVersion(version())
	if err != nil {
		return nil, fmt.Errorf("the node's own version is not a release version: %w", err)
	}
	return update.New(update.Config{
		Running:   sys.Slot,
		Version:   v,
		Partition: st.SystemPartition,
		Trust: func(ctx context.Context) (update.Trust, error) {
			c, err := config(ctx)
			if err != nil {
				return update.Trust{}, err
			}
			keys, err := clusterconfig.ReleaseKeys(c)
			if err != nil {
				return update.Trust{}, err
			}
			return update.Trust{Keys: keys, PlainHTTP: c.GetRegistries().GetPlainHttp()}, nil
		},
		Spool: &st.Root.Data.Update,
		Slots: &st.Root.ESP.Cairn.SystemSlots,
		UKIs:  &st.Root.ESP.EFI.Cairn,
	}), nil
}
