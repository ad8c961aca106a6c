package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"cairn.dev/cairn/node/clusterconfig"
	"cairn.dev/cairn/pkg/supervisor"
	"cairn.dev/cairn/proto/api"
)

// runRegistries keeps containerd's registry host configuration (one
// directory per registry under w.dir("registry"), which containerd reads
// at every pull) equal to the cluster configuration's registry settings,
// which it watches through the curator.
func (w *Worker) runRegistries(ctx context.Context) error {
	stream, err := w.cfg.Curator.Watch(ctx, &api.WatchRequest{Kind: &api.WatchRequest_Configuration_{Configuration: &api.WatchRequest_Configuration{}}})
	if err != nil {
		return fmt.Errorf("when watching the cluster configuration: %w", err)
	}
	lg := supervisor.Logger(ctx)
	for {
		ev, err := stream.Recv()
		if err != nil {
			return fmt.Errorf("when watching the cluster configuration: %w", err)
		}
		if ev.GetConfiguration() == nil {
			continue
		}
		r := ev.GetConfiguration().GetRegistries()
		if err := writeHosts(w.dir("registry"), r); err != nil {
			return err
		}
		lg.Infof("Registries: %s", strings.Join(clusterconfig.DescribeRegistries(r), "; "))
		supervisor.Signal(ctx, supervisor.SignalHealthy)
	}
}

// writeHosts makes dir hold the host configuration of r, and nothing
// else: a directory for each registry that has mirrors or is reached over
// plain HTTP, with its hosts.toml.
func writeHosts(dir string, r *api.Registries) error {
	want := hostsFiles(r)
	if err := mkdirs(dir); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("when listing %s: %w", dir, err)
	}
	var errs []error
	for _, e := range entries {
		if _, ok := want[e.Name()]; !ok {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				errs = append(errs, fmt.Errorf("when removing the stale registry configuration: %w", err))
			}
		}
	}
	for host, content := range want {
		if err := mkdirs(filepath.Join(dir, host)); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := writeFile(filepath.Join(dir, host, "hosts.toml"), []byte(content), 0o644); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// hostsFiles renders containerd's hosts.toml for each registry r
// configures, keyed by the registry's directory name (its host[:port]).
// Mirrors are tried in order, then the registry itself.
func hostsFiles(r *api.Registries) map[string]string {
	plain := r.GetPlainHttp()
	out := map[string]string{}
	for _, m := range r.GetMirrors() {
		var b strings.Builder
		fmt.Fprintf(&b, "server = %s\n", strconv.Quote(upstreamURL(m.GetRegistry(), plain)))
		for _, e := range m.GetEndpoints() {
			fmt.Fprintf(&b, "\n[host.%s]\n  capabilities = [\"pull\", \"resolve\"]\n", strconv.Quote(e))
		}
		out[m.GetRegistry()] = b.String()
	}
	hosts := slices.Clone(plain)
	sort.Strings(hosts)
	for _, h := range hosts {
		if _, ok := out[h]; ok {
			continue
		}
		out[h] = fmt.Sprintf("server = %s\n", strconv.Quote(upstreamURL(h, plain)))
	}
	return out
}

// upstreamURL is where containerd reaches registry itself: Docker Hub's
// API host for docker.io, and plain HTTP only for permitted hosts.
func upstreamURL(registry string, plainHTTP []string) string {
	switch {
	case registry == "docker.io":
		return "https://registry-1.docker.io"
	case slices.Contains(plainHTTP, registry):
		return "http://" + registry
	}
	return "https://" + registry
}
