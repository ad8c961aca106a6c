package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"cairn.dev/cairn/node/clusterconfig"
	"cairn.dev/cairn/pkg/release"
	"cairn.dev/cairn/proto/api"
)

// readReleaseKey reads a release public key as the command line gives it:
// its text form (cairn-release-ed25519:<base64>), or @FILE for a file
// holding it, such as the out/release.pub that make release writes.
func readReleaseKey(arg string) (release.PublicKey, error) {
	path, ok := strings.CutPrefix(arg, "@")
	if !ok {
		return release.ParsePublicKey(arg)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("when reading the release key: %w", err)
	}
	k, err := release.ParsePublicKey(string(b))
	if err != nil {
		return nil, fmt.Errorf("in %s: %w", path, err)
	}
	return k, nil
}

// readReleaseKeys reads each of args with readReleaseKey into its
// canonical text form; errors name what, of what, was wrong.
func readReleaseKeys(what string, args []string) ([]string, error) {
	keys := make([]string, 0, len(args))
	for _, arg := range args {
		k, err := readReleaseKey(arg)
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", what, arg, err)
		}
		keys = append(keys, k.String())
	}
	return keys, nil
}

// releaseKeyView is a trusted release key as cairnctl prints it.
type releaseKeyView struct {
	// ID names the key in release signatures and errors.
	ID string `json:"id"`
	// Key is the key's text form.
	Key string `json:"key"`
}

func viewReleaseKeys(keys []string) []releaseKeyView {
	v := []releaseKeyView{}
	for _, s := range keys {
		kv := releaseKeyView{Key: s}
		if k, err := release.ParsePublicKey(s); err == nil {
			kv.ID = k.ID()
		}
		v = append(v, kv)
	}
	return v
}

func newReleaseKeysCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "release-keys",
		Short: "Show or change the release keys whose OS releases nodes install",
		Long: "release-keys shows and changes the release public keys the cluster\n" +
			"configuration trusts: nodes install only releases signed by one of them,\n" +
			"and none at all while it trusts none. Keys are given as their text form\n" +
			"(cairn-release-ed25519:<base64>) or as @FILE, such as @out/release.pub.\n" +
			"Only the owner may change them.",
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List the trusted release keys",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runAsOwner(cmd.Context(), args, func(ctx context.Context, o *owner, _ []string) error {
				return a.listReleaseKeys(ctx, o)
			})
		},
	}
	change := func(use, short string, remove bool) *cobra.Command {
		return &cobra.Command{
			Use:   use + " KEY|@FILE...",
			Short: short,
			Args:  cobra.MinimumNArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				// The keys are read before anything is dialled.
				keys, err := readReleaseKeys("release key", args)
				if err != nil {
					return err
				}
				req := &api.UpdateReleaseKeysRequest{Add: keys}
				if remove {
					req = &api.UpdateReleaseKeysRequest{Remove: keys}
				}
				return a.runAsOwner(cmd.Context(), nil, func(ctx context.Context, o *owner, _ []string) error {
					return a.updateReleaseKeys(ctx, o, req)
				})
			},
		}
	}
	cmd.AddCommand(list,
		change("add", "Trust release keys (a key already trusted stays)", false),
		change("remove", "Stop trusting release keys", true))
	return cmd
}

func (a *app) listReleaseKeys(ctx context.Context, o *owner) error {
	info, err := getClusterInfo(ctx, o, "getting the release keys")
	if err != nil {
		return err
	}
	return a.printReleaseKeys(info.GetClusterConfiguration().GetReleaseKeys())
}

func (a *app) updateReleaseKeys(ctx context.Context, o *owner, req *api.UpdateReleaseKeysRequest) error {
	var res *api.UpdateReleaseKeysResponse
	err := o.curator(ctx, "updating the release keys", func(ctx context.Context, conn *grpc.ClientConn) error {
		var err error
		res, err = api.NewManagementClient(conn).UpdateReleaseKeys(ctx, req)
		return err
	})
	if err != nil {
		return err
	}
	return a.printReleaseKeys(res.GetReleaseKeys())
}

func (a *app) printReleaseKeys(keys []string) error {
	if a.output == outputJSON {
		return writeJSON(a.out, viewReleaseKeys(keys))
	}
	for _, l := range clusterconfig.DescribeReleaseKeys(keys) {
		a.printf("%s\n", l)
	}
	return nil
}

// releaseKeyFlags are the flags that set the release keys of a bootstrap
// cluster configuration.
type releaseKeyFlags struct {
	keys []string
}

func (f *releaseKeyFlags) addFlags(cmd *cobra.Command) {
	cmd.Flags().StringArrayVar(&f.keys, "release-key", nil,
		"release public key whose signed OS releases nodes install, as cairn-release-ed25519:<base64> or @FILE such as @out/release.pub (repeatable); none: nodes install no release")
}

// releaseKeys turns the flags into checked release_keys.
func (f *releaseKeyFlags) releaseKeys() ([]string, error) {
	keys, err := readReleaseKeys("--release-key", f.keys)
	if err != nil {
		return nil, err
	}
	if err := clusterconfig.ValidateReleaseKeys(keys); err != nil {
		return nil, fmt.Errorf("--release-key: %w", err)
	}
	return keys, nil
}
