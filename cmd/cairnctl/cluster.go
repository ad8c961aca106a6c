package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"cairn.dev/cairn/node/clusterconfig"
	"cairn.dev/cairn/proto/api"
)

// clusterView is GetClusterInfo as cairnctl prints it.
type clusterView struct {
	// CAFingerprint is the SHA-256 of the cluster CA certificate, hex.
	CAFingerprint string `json:"ca_fingerprint"`
	// StorageSecurity is "encrypted" or "insecure".
	StorageSecurity string `json:"storage_security"`
	// TPM is "required", "best-effort" or "disabled".
	TPM string `json:"tpm"`
	// SecureBoot is "required" or "optional".
	SecureBoot string `json:"secure_boot"`
	// Directory lists the curators.
	Directory []directoryEntry `json:"directory"`
	// Registries is where workers pull images from.
	Registries registriesView `json:"registries"`
	// ReleaseKeys are the keys whose signed releases nodes install.
	ReleaseKeys []releaseKeyView `json:"release_keys"`
}

// directoryEntry is one curator of the cluster directory.
type directoryEntry struct {
	ID        string   `json:"id"`
	Addresses []string `json:"addresses"`
}

func newClusterCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Look at the cluster as a whole; back it up and rebuild it",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "info",
		Short: "Show the cluster's CA, configuration and curators",
		Args:  cobra.NoArgs,
		RunE:  a.ownerRun(func(ctx context.Context, o *owner, _ []string) error { return a.clusterInfo(ctx, o) }),
	}, &cobra.Command{
		Use:   "rotate-ticket",
		Short: "Replace the register ticket; parameters written before stop registering nodes",
		Long: "rotate-ticket replaces the cluster's register ticket with a fresh one. New\n" +
			"nodes register only with the new ticket: write their parameters again with\n" +
			"`cairnctl params register`. Nodes already registered (NEW, STANDBY or UP)\n" +
			"are not affected, as they commit and join with their own keys. It prints\n" +
			"SHA-256 fingerprints of the old and the new ticket, never the tickets.",
		Args: cobra.NoArgs,
		RunE: a.ownerRun(func(ctx context.Context, o *owner, _ []string) error { return a.rotateTicket(ctx, o) }),
	}, newRegistriesCommand(a), newReleaseKeysCommand(a), newClusterUpdateCommand(a), newBackupCommand(a), newRecoverCommand(a))
	return cmd
}

// rotateTicket replaces the register ticket it reads, and says which
// ticket replaced which.
func (a *app) rotateTicket(ctx context.Context, o *owner) error {
	var old, rotated []byte
	err := o.curator(ctx, "rotating the register ticket", func(ctx context.Context, conn *grpc.ClientConn) error {
		m := api.NewManagementClient(conn)
		res, err := m.GetRegisterTicket(ctx, &api.GetRegisterTicketRequest{})
		if err != nil {
			return err
		}
		old = res.GetTicket()
		rot, err := m.RotateRegisterTicket(ctx, &api.RotateRegisterTicketRequest{PreviousTicket: old})
		rotated = rot.GetTicket()
		return err
	})
	if err != nil {
		return err
	}
	a.printf("Rotated the register ticket: SHA256:%s replaced SHA256:%s.\n", ticketFingerprint(rotated), ticketFingerprint(old))
	a.printf("Register parameters written before no longer register nodes; write new ones\nwith `cairnctl params register`. Nodes already registered are not affected.\n")
	return nil
}

// ticketFingerprint names a register ticket without giving it away: the
// first 16 hex digits of its SHA-256.
func ticketFingerprint(ticket []byte) string {
	return fingerprint(ticket)[:16]
}

// getClusterInfo calls Management.GetClusterInfo; what says what for,
// in errors.
func getClusterInfo(ctx context.Context, o *owner, what string) (*api.GetClusterInfoResponse, error) {
	var info *api.GetClusterInfoResponse
	err := o.curator(ctx, what, func(ctx context.Context, conn *grpc.ClientConn) error {
		var err error
		info, err = api.NewManagementClient(conn).GetClusterInfo(ctx, &api.GetClusterInfoRequest{})
		return err
	})
	return info, err
}

func (a *app) clusterInfo(ctx context.Context, o *owner) error {
	info, err := getClusterInfo(ctx, o, "getting cluster info")
	if err != nil {
		return err
	}
	v := clusterView{
		CAFingerprint:   fingerprint(info.GetCaCertificate()),
		StorageSecurity: storageName(info.GetClusterConfiguration().GetStorageSecurityPolicy()),
		TPM:             tpmName(info.GetClusterConfiguration().GetTpmMode()),
		SecureBoot:      secureBootName(info.GetClusterConfiguration()),
		Directory:       []directoryEntry{},
		Registries:      viewRegistries(info.GetClusterConfiguration().GetRegistries()),
		ReleaseKeys:     viewReleaseKeys(info.GetClusterConfiguration().GetReleaseKeys()),
	}
	for _, n := range info.GetClusterDirectory().GetNodes() {
		e := directoryEntry{ID: n.GetId(), Addresses: []string{}}
		for _, addr := range n.GetAddresses() {
			e.Addresses = append(e.Addresses, addr.GetHost())
		}
		v.Directory = append(v.Directory, e)
	}
	if a.output == outputJSON {
		return writeJSON(a.out, v)
	}
	tw := tabwriter.NewWriter(a.out, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "CA fingerprint:\tSHA256:%s\n", v.CAFingerprint)
	fmt.Fprintf(tw, "Storage security:\t%s\n", v.StorageSecurity)
	fmt.Fprintf(tw, "TPM:\t%s\n", v.TPM)
	fmt.Fprintf(tw, "Secure Boot:\t%s\n", v.SecureBoot)
	label := "Registries:"
	for _, l := range clusterconfig.DescribeRegistries(info.GetClusterConfiguration().GetRegistries()) {
		fmt.Fprintf(tw, "%s\t%s\n", label, l)
		label = ""
	}
	label = "Release keys:"
	for _, l := range clusterconfig.DescribeReleaseKeys(info.GetClusterConfiguration().GetReleaseKeys()) {
		fmt.Fprintf(tw, "%s\t%s\n", label, l)
		label = ""
	}
	fmt.Fprintf(tw, "Curators:\t%d\n", len(v.Directory))
	for _, e := range v.Directory {
		fmt.Fprintf(tw, "  %s\t%s\n", e.ID, dash(strings.Join(e.Addresses, ", ")))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("when writing cluster info: %w", err)
	}
	return nil
}
