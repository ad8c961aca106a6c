package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"cairn.dev/cairn/pkg/etcdsnapshot"
	"cairn.dev/cairn/proto/api"
)

// defaultTransferTimeout replaces --timeout's default for the commands
// that move a whole backup (cluster backup, cluster recover): etcd's
// database may hold up to a few GiB.
const defaultTransferTimeout = 10 * time.Minute

// backupView is what cluster backup prints with -o json.
type backupView struct {
	File        string `json:"file"`
	Size        int64  `json:"size"`
	Revision    int64  `json:"revision"`
	SHA256      string `json:"sha256"`
	EtcdVersion string `json:"etcd_version"`
}

// transferTimeout makes a command that moves a backup use
// defaultTransferTimeout unless --timeout was given.
func (a *app) transferTimeout(cmd *cobra.Command) {
	if !cmd.Flags().Changed("timeout") {
		a.timeout = defaultTransferTimeout
	}
}

// waitTimeout gives a command that waits d on purpose (a CPU profile, the
// interval of resources --over) d more than --timeout's default, unless
// --timeout was given.
func (a *app) waitTimeout(cmd *cobra.Command, d time.Duration) {
	if !cmd.Flags().Changed("timeout") {
		a.timeout += d
	}
}

func newBackupCommand(a *app) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "backup --out FILE",
		Short: "Save a consistent snapshot of the cluster's etcd, to rebuild the cluster from",
		Long: "backup saves a snapshot of the cluster's etcd, taken by the curator leader,\n" +
			"into FILE (mode 0600). It is written under a temporary name beside FILE and\n" +
			"renamed only once its size and SHA-256 match what the curator sent, so FILE\n" +
			"is either the whole backup or untouched. It prints the size, the etcd\n" +
			"revision and the SHA-256.\n\n" +
			"The file holds the cluster CA's private key and every node's cluster\n" +
			"unlock key, unencrypted: keep it as safe as the owner key (docs/recovery.md\n" +
			"says how). `cairnctl cluster recover` rebuilds a cluster from it.\n\n" +
			"--timeout defaults to 10m here.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return errors.New("give --out FILE")
			}
			a.transferTimeout(cmd)
			return a.ownerRun(func(ctx context.Context, o *owner, _ []string) error { return a.backup(ctx, o, out) })(cmd, args)
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "file to write the backup to")
	return cmd
}

// backup takes a backup through the curators into the file out.
func (a *app) backup(ctx context.Context, o *owner, out string) error {
	tmp, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".*.partial")
	if err != nil {
		return fmt.Errorf("when creating the backup file: %w", err)
	}
	// Until it is renamed, the temporary file goes whatever happens.
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	if err := tmp.Chmod(0o600); err != nil {
		return fmt.Errorf("when restricting the backup file: %w", err)
	}
	// One attempt may take the whole deadline: a backup is streamed for as
	// long as it takes. Attempts that fail start over.
	t := o.timing
	t.attempt = a.timeout
	var trailer *api.BackupTrailer
	_, err = failover(ctx, o.endpoints, o.creds, t, "taking a backup", func(ctx context.Context, conn *grpc.ClientConn) error {
		if err := rewind(tmp); err != nil {
			return err
		}
		var err error
		trailer, err = receiveBackup(ctx, api.NewManagementClient(conn), tmp)
		return err
	})
	if err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("when writing the backup file: %w", err)
	}
	if err := checkBackupFile(tmp.Name(), trailer); err != nil {
		return fmt.Errorf("the backup was not kept: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("when writing the backup file: %w", err)
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return fmt.Errorf("when naming the backup file %s: %w", out, err)
	}
	if err := fsyncDir(filepath.Dir(out)); err != nil {
		// The file is complete and verified; only its name may not
		// survive a power cut yet.
		fmt.Fprintf(a.errOut, "warning: %v\n", err)
	}

	v := backupView{File: out, Size: trailer.Size, Revision: trailer.Revision, SHA256: hex.EncodeToString(trailer.Sha256), EtcdVersion: trailer.EtcdVersion}
	if a.output == outputJSON {
		return writeJSON(a.out, v)
	}
	a.printf("Backup written to %s: %d bytes, etcd revision %d, SHA256:%s.\n", v.File, v.Size, v.Revision, v.SHA256)
	a.printf("It holds the cluster CA's private key and every node's cluster unlock key,\nunencrypted: keep it as safe as the owner key.\n")
	return nil
}

// rewind empties f for another attempt.
func rewind(f *os.File) error {
	if err := f.Truncate(0); err != nil {
		return fmt.Errorf("when emptying the backup file: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("when emptying the backup file: %w", err)
	}
	return nil
}

// receiveBackup calls Backup and writes the snapshot it streams to w, and
// returns the trailer that ends it.
func receiveBackup(ctx context.Context, m api.ManagementClient, w io.Writer) (*api.BackupTrailer, error) {
	stream, err := m.Backup(ctx, &api.BackupRequest{})
	if err != nil {
		return nil, err
	}
	var trailer *api.BackupTrailer
	for {
		res, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if trailer != nil {
			return nil, errors.New("the curator sent data after the backup's trailer")
		}
		if _, err := w.Write(res.GetData()); err != nil {
			return nil, fmt.Errorf("when writing the backup file: %w", err)
		}
		trailer = res.GetTrailer()
	}
	if trailer == nil {
		return nil, errors.New("the backup stream ended without its trailer: the backup is incomplete")
	}
	return trailer, nil
}

// checkBackupFile reads the backup file at path back and checks it against
// the trailer the curator sent, then checks the SHA-256 etcd put at its
// end.
func checkBackupFile(path string, trailer *api.BackupTrailer) error {
	size, sum, err := hashFile(path, sha256.New())
	if err != nil {
		return err
	}
	switch {
	case size != trailer.GetSize():
		return fmt.Errorf("the file has %d bytes, the curator sent %d", size, trailer.GetSize())
	case !bytes.Equal(sum, trailer.GetSha256()):
		return fmt.Errorf("checksum mismatch: the file's SHA-256 is %x, the curator sent %x", sum, trailer.GetSha256())
	}
	if err := etcdsnapshot.Verify(path); err != nil {
		return err
	}
	return nil
}

// hashFile returns the size of the file at path and its hash by h.
func hashFile(path string, h hash.Hash) (int64, []byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, nil, fmt.Errorf("when reading %s back: %w", path, err)
	}
	defer f.Close()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, nil, fmt.Errorf("when reading %s back: %w", path, err)
	}
	return n, h.Sum(nil), nil
}
