package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/clusterconfig"
	"cairn.dev/cairn/node/esp"
	"cairn.dev/cairn/pkg/espimage"
	"cairn.dev/cairn/proto/api"
)

// paramsTarget is where params commands write: an image's ESP, a new
// parameters disk, or a file.
type paramsTarget struct {
	image string
	disk  string
	out   string
}

func (t *paramsTarget) addFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&t.image, "image", "", "disk image whose ESP receives "+esp.ParametersPath)
	cmd.Flags().StringVar(&t.disk, "disk", "", "new image of a parameters disk (FAT, holding "+esp.ParametersPath+") to write onto a stick or attach to a node that waits for parameters")
	cmd.Flags().StringVar(&t.out, "out", "", "file to write the parameters to instead (for qemu fw_cfg)")
	cmd.MarkFlagsOneRequired("image", "disk", "out")
	cmd.MarkFlagsMutuallyExclusive("image", "disk", "out")
}

// write encodes params, writes them and says where they went.
func (t *paramsTarget) write(params *api.NodeParameters) (string, error) {
	data, err := proto.Marshal(params)
	if err != nil {
		return "", fmt.Errorf("when encoding parameters: %w", err)
	}
	if t.image != "" {
		if err := espimage.WriteFile(t.image, esp.ParametersPath, data); err != nil {
			return "", fmt.Errorf("when writing parameters into the image: %w", err)
		}
		return fmt.Sprintf("%s on the ESP of %s", esp.ParametersPath, t.image), nil
	}
	if t.disk != "" {
		if err := espimage.NewDisk(t.disk, esp.ParametersPath, data); err != nil {
			return "", fmt.Errorf("when making the parameters disk: %w", err)
		}
		// It holds the register ticket, a secret, as the file below does.
		if err := os.Chmod(t.disk, 0o600); err != nil {
			return "", fmt.Errorf("when making the parameters disk private: %w", err)
		}
		return fmt.Sprintf("%s on the new parameters disk %s", esp.ParametersPath, t.disk), nil
	}
	// Register parameters hold the register ticket, a secret.
	if err := os.WriteFile(t.out, data, 0o600); err != nil {
		return "", fmt.Errorf("when writing parameters: %w", err)
	}
	return t.out, nil
}

func newParamsCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "params",
		Short: "Write node parameters onto an image or into a file",
	}
	cmd.AddCommand(newParamsBootstrapCommand(a), newParamsRegisterCommand(a))
	return cmd
}

func newParamsBootstrapCommand(a *app) *cobra.Command {
	var t paramsTarget
	var storage, tpm, secureBoot string
	var registries registryFlags
	var releaseKeys releaseKeyFlags
	cmd := &cobra.Command{
		Use:   "bootstrap (--image IMG | --out FILE)",
		Short: "Write parameters that make a node create a new cluster",
		Long: "bootstrap writes parameters that make the node booting them create a new\n" +
			"cluster owned by the owner key of the configuration directory. The key is\n" +
			"created there (owner-key.pem, mode 0600) when there is none.",
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			cc, err := parseClusterConfiguration(storage, tpm, secureBoot)
			if err != nil {
				return err
			}
			if cc.Registries, err = registries.registries(); err != nil {
				return err
			}
			if cc.ReleaseKeys, err = releaseKeys.releaseKeys(); err != nil {
				return err
			}
			return a.paramsBootstrap(&t, cc)
		},
	}
	t.addFlags(cmd)
	cmd.Flags().StringVar(&storage, "storage-security", "encrypted", "data partition protection: encrypted or insecure")
	cmd.Flags().StringVar(&tpm, "tpm", "required", "TPM use when sealing: required, best-effort or disabled")
	cmd.Flags().StringVar(&secureBoot, "secure-boot", "optional", "whether every node must boot under Secure Boot: required, bound (required, and its TPM seal bound to signed releases) or optional")
	registries.addFlags(cmd)
	releaseKeys.addFlags(cmd)
	return cmd
}

// parseClusterConfiguration turns the bootstrap flags into the initial
// cluster configuration.
func parseClusterConfiguration(storage, tpm, secureBoot string) (*api.ClusterConfiguration, error) {
	cc := &api.ClusterConfiguration{}
	switch strings.ToLower(storage) {
	case "encrypted":
		cc.StorageSecurityPolicy = api.StorageSecurityPolicy_STORAGE_SECURITY_POLICY_ENCRYPTED
	case "insecure":
		cc.StorageSecurityPolicy = api.StorageSecurityPolicy_STORAGE_SECURITY_POLICY_INSECURE
	default:
		return nil, fmt.Errorf("--storage-security %q: want encrypted or insecure", storage)
	}
	switch strings.ToLower(tpm) {
	case "required":
		cc.TpmMode = api.TPMMode_TPM_MODE_REQUIRED
	case "best-effort":
		cc.TpmMode = api.TPMMode_TPM_MODE_BEST_EFFORT
	case "disabled":
		cc.TpmMode = api.TPMMode_TPM_MODE_DISABLED
	default:
		return nil, fmt.Errorf("--tpm %q: want required, best-effort or disabled", tpm)
	}
	switch strings.ToLower(secureBoot) {
	case "required":
		cc.SecureBootRequired = true
	case "bound":
		cc.SecureBootRequired, cc.BoundSealRequired = true, true
	case "optional":
	default:
		return nil, fmt.Errorf("--secure-boot %q: want required, bound or optional", secureBoot)
	}
	if err := clusterconfig.Validate(cc); err != nil {
		return nil, fmt.Errorf("--secure-boot %s with --tpm %s: %w", secureBoot, tpm, err)
	}
	return cc, nil
}

func (a *app) paramsBootstrap(t *paramsTarget, cc *api.ClusterConfiguration) error {
	dir, err := a.dir()
	if err != nil {
		return err
	}
	key, created, err := ensureOwnerKey(dir)
	if err != nil {
		return err
	}
	pub := key.Public().(ed25519.PublicKey)
	if created {
		a.printf("Created owner key %s/%s.\n", dir, ownerKeyFile)
	}
	params := &api.NodeParameters{Cluster: &api.NodeParameters_ClusterBootstrap_{
		ClusterBootstrap: &api.NodeParameters_ClusterBootstrap{
			OwnerPublicKey:              pub,
			InitialClusterConfiguration: cc,
		},
	}}
	where, err := t.write(params)
	if err != nil {
		return err
	}
	a.printf("Wrote bootstrap parameters to %s\n  owner key %x (from %s)\n  storage %s, TPM %s, Secure Boot %s\n",
		where, []byte(pub), dir, storageName(cc.GetStorageSecurityPolicy()), tpmName(cc.GetTpmMode()), secureBootName(cc))
	for _, l := range clusterconfig.DescribeRegistries(cc.GetRegistries()) {
		a.printf("  %s\n", l)
	}
	if len(cc.GetReleaseKeys()) == 0 {
		a.printf("  no release key: nodes install no release (trust one with --release-key)\n")
		return nil
	}
	for _, l := range clusterconfig.DescribeReleaseKeys(cc.GetReleaseKeys()) {
		a.printf("  release key %s\n", l)
	}
	return nil
}

func newParamsRegisterCommand(a *app) *cobra.Command {
	var t paramsTarget
	cmd := &cobra.Command{
		Use:   "register (--image IMG | --out FILE)",
		Short: "Write parameters that make a node register with this cluster",
		Long: "register asks the cluster for its register ticket and directory and\n" +
			"writes parameters that make the node booting them register; it then waits\n" +
			"for `cairnctl node approve`.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := a.withTimeout(cmd.Context())
			defer cancel()
			return a.paramsRegister(ctx, &t)
		},
	}
	t.addFlags(cmd)
	return cmd
}

func (a *app) paramsRegister(ctx context.Context, t *paramsTarget) error {
	o, err := a.renewedOwner(ctx)
	if err != nil {
		return err
	}
	var ticket *api.GetRegisterTicketResponse
	var info *api.GetClusterInfoResponse
	err = o.curator(ctx, "getting the register ticket", func(ctx context.Context, conn *grpc.ClientConn) error {
		m := api.NewManagementClient(conn)
		var err error
		if ticket, err = m.GetRegisterTicket(ctx, &api.GetRegisterTicketRequest{}); err != nil {
			return err
		}
		info, err = m.GetClusterInfo(ctx, &api.GetClusterInfoRequest{})
		return err
	})
	if err != nil {
		return explainOwnerRefusal(o, err)
	}
	if !bytes.Equal(info.GetCaCertificate(), o.caDER) {
		return fmt.Errorf("the cluster reports CA SHA256:%s, but %s holds CA SHA256:%s: refusing to mix clusters",
			fingerprint(info.GetCaCertificate()), o.dir, fingerprint(o.caDER))
	}
	if len(info.GetClusterDirectory().GetNodes()) == 0 {
		return fmt.Errorf("the cluster's directory lists no curator: a node could not find the cluster")
	}
	params := &api.NodeParameters{Cluster: &api.NodeParameters_ClusterRegister_{
		ClusterRegister: &api.NodeParameters_ClusterRegister{
			RegisterTicket:   ticket.GetTicket(),
			ClusterDirectory: info.GetClusterDirectory(),
			CaCertificate:    o.caDER,
		},
	}}
	where, err := t.write(params)
	if err != nil {
		return err
	}
	a.printf("Wrote register parameters to %s\n  %d curator(s) in the directory, CA SHA256:%s\n  register ticket SHA256:%s\n",
		where, len(info.GetClusterDirectory().GetNodes()), fingerprint(o.caDER), ticketFingerprint(ticket.GetTicket()))
	return nil
}
