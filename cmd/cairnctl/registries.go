package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"cairn.dev/cairn/node/clusterconfig"
	"cairn.dev/cairn/proto/api"
)

// registryFlags are the flags that set the registry settings of a cluster
// configuration.
type registryFlags struct {
	mirrors   []string
	plainHTTP []string
}

func (f *registryFlags) addFlags(cmd *cobra.Command) {
	cmd.Flags().StringArrayVar(&f.mirrors, "registry-mirror", nil,
		"REGISTRY=URL[,URL...]: pull REGISTRY's images from these mirrors first (repeatable), like docker.io=http://10.42.0.1:5000")
	cmd.Flags().StringArrayVar(&f.plainHTTP, "plain-http-registry", nil,
		"HOST[:PORT] that may be reached over plain HTTP, as a registry or a mirror (repeatable)")
}

// set reports whether any registry flag was given.
func (f *registryFlags) set() bool {
	return len(f.mirrors) > 0 || len(f.plainHTTP) > 0
}

// registries turns the flags into checked registry settings; nil when no
// flag was given.
func (f *registryFlags) registries() (*api.Registries, error) {
	if !f.set() {
		return nil, nil
	}
	r := &api.Registries{PlainHttp: f.plainHTTP}
	for _, m := range f.mirrors {
		mirror, err := clusterconfig.ParseMirror(m)
		if err != nil {
			return nil, fmt.Errorf("--registry-mirror: %w", err)
		}
		r.Mirrors = append(r.Mirrors, mirror)
	}
	if err := clusterconfig.ValidateRegistries(r); err != nil {
		return nil, err
	}
	return r, nil
}

// registriesView is the registry settings as cairnctl prints them.
type registriesView struct {
	// Mirrors maps each registry to its mirrors' URLs.
	Mirrors map[string][]string `json:"mirrors"`
	// PlainHTTP lists the hosts that may be reached over plain HTTP.
	PlainHTTP []string `json:"plain_http"`
}

func viewRegistries(r *api.Registries) registriesView {
	v := registriesView{Mirrors: map[string][]string{}, PlainHTTP: append([]string{}, r.GetPlainHttp()...)}
	for _, m := range r.GetMirrors() {
		v.Mirrors[m.GetRegistry()] = m.GetEndpoints()
	}
	return v
}

func newRegistriesCommand(a *app) *cobra.Command {
	var f registryFlags
	var clear bool
	cmd := &cobra.Command{
		Use:   "registries [--registry-mirror REGISTRY=URL]... [--plain-http-registry HOST]... | --clear",
		Short: "Show or replace where workers pull container images from",
		Long: "registries shows the cluster's registry mirrors and plain-HTTP hosts. With\n" +
			"flags, it replaces them whole (name every mirror you want to keep), and\n" +
			"workers follow within seconds; --clear removes them all.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			// The flags are checked before anything is dialled.
			r, err := f.registries()
			switch {
			case err != nil:
				return err
			case clear && r != nil:
				return errors.New("--clear takes no other registry flag")
			}
			return a.ownerRun(func(ctx context.Context, o *owner, _ []string) error {
				if !clear && r == nil {
					return a.showRegistries(ctx, o)
				}
				return a.updateRegistries(ctx, o, r)
			})(cmd, args)
		},
	}
	f.addFlags(cmd)
	cmd.Flags().BoolVar(&clear, "clear", false, "remove every mirror and plain-HTTP host")
	return cmd
}

func (a *app) showRegistries(ctx context.Context, o *owner) error {
	info, err := getClusterInfo(ctx, o, "getting the registry settings")
	if err != nil {
		return err
	}
	return a.printRegistries(info.GetClusterConfiguration().GetRegistries())
}

func (a *app) updateRegistries(ctx context.Context, o *owner, r *api.Registries) error {
	var res *api.UpdateRegistriesResponse
	err := o.curator(ctx, "updating the registry settings", func(ctx context.Context, conn *grpc.ClientConn) error {
		var err error
		res, err = api.NewManagementClient(conn).UpdateRegistries(ctx, &api.UpdateRegistriesRequest{Registries: r})
		return err
	})
	if err != nil {
		return err
	}
	return a.printRegistries(res.GetRegistries())
}

func (a *app) printRegistries(r *api.Registries) error {
	if a.output == outputJSON {
		return writeJSON(a.out, viewRegistries(r))
	}
	for _, l := range clusterconfig.DescribeRegistries(r) {
		a.printf("%s\n", l)
	}
	return nil
}
