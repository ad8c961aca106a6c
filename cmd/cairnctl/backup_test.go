package main

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/proto/api"
)

// Backup streams s.backup in pieces of 1000 bytes, then its trailer.
func (s *testServer) Backup(_ *api.BackupRequest, srv grpc.ServerStreamingServer[api.BackupResponse]) error {
	s.mu.Lock()
	data, trailer := s.backup, s.backupTrailer
	s.mu.Unlock()
	if trailer == nil {
		sum := sha256.Sum256(data)
		trailer = &api.BackupTrailer{Size: int64(len(data)), Sha256: sum[:], Revision: 7, EtcdVersion: "3.6.0"}
	}
	for len(data) > 0 {
		n := min(len(data), 1000)
		if err := srv.Send(&api.BackupResponse{Data: data[:n]}); err != nil {
			return err
		}
		data = data[n:]
	}
	if proto.Equal(trailer, &api.BackupTrailer{}) {
		return nil
	}
	return srv.Send(&api.BackupResponse{Trailer: trailer})
}

// fakeSnapshot is random bytes shaped like an etcd snapshot: a database
// of whole sectors, then its SHA-256.
func fakeSnapshot(t *testing.T) []byte {
	t.Helper()
	db := make([]byte, 3*4096)
	rand.Read(db)
	sum := sha256.Sum256(db)
	return append(db, sum[:]...)
}

// TestBackupCommand takes a backup from a test server: the file holds
// exactly what was sent, readable by its owner alone, and cairnctl prints
// its size, revision and SHA-256.
func TestBackupCommand(t *testing.T) {
	dir, s := bootstrapped(t)
	mustRun(t, dir, "--endpoint", s.addr, "takeownership")
	s.backup = fakeSnapshot(t)
	sum := sha256.Sum256(s.backup)
	out := filepath.Join(t.TempDir(), "cluster.backup")

	printed := mustRun(t, dir, "cluster", "backup", "--out", out)
	want := "Backup written to " + out + ": 12320 bytes, etcd revision 7, SHA256:" + hex.EncodeToString(sum[:]) + "."
	if !strings.HasPrefix(printed, want) {
		t.Errorf("cluster backup printed %q, want it to start with %q", printed, want)
	}
	got, err := os.ReadFile(out)
	if err != nil || !bytes.Equal(got, s.backup) {
		t.Fatalf("backup file = %d bytes, %v, want the %d bytes sent", len(got), err, len(s.backup))
	}
	if info, err := os.Stat(out); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("backup file mode = %v, %v, want 0600", info.Mode().Perm(), err)
	}

	var v backupView
	if err := json.Unmarshal([]byte(mustRun(t, dir, "-o", "json", "cluster", "backup", "--out", out)), &v); err != nil {
		t.Fatalf("cluster backup -o json: %v", err)
	}
	if want := (backupView{File: out, Size: 12320, Revision: 7, SHA256: hex.EncodeToString(sum[:]), EtcdVersion: "3.6.0"}); v != want {
		t.Errorf("cluster backup -o json = %+v, want %+v", v, want)
	}
	if entries, _ := os.ReadDir(filepath.Dir(out)); len(entries) != 1 {
		t.Errorf("backup directory holds %d files, want only the backup", len(entries))
	}
}

// TestBackupRefused has the server send backups that do not check out:
// cairnctl fails, leaves no file behind, and keeps an earlier backup of
// the same name as it was.
func TestBackupRefused(t *testing.T) {
	dir, s := bootstrapped(t)
	mustRun(t, dir, "--endpoint", s.addr, "takeownership")
	good := fakeSnapshot(t)
	goodSum := sha256.Sum256(good)
	notEtcd := bytes.Clone(good)
	notEtcd[0] ^= 1
	notEtcdSum := sha256.Sum256(notEtcd)
	for _, tc := range []struct {
		name    string
		data    []byte
		trailer *api.BackupTrailer
		want    string
	}{
		{"checksum mismatch", good, &api.BackupTrailer{Size: int64(len(good)), Sha256: make([]byte, 32)}, "checksum mismatch"},
		{"size mismatch", good, &api.BackupTrailer{Size: 1, Sha256: goodSum[:]}, "the curator sent 1"},
		{"not an etcd snapshot", notEtcd, &api.BackupTrailer{Size: int64(len(notEtcd)), Sha256: notEtcdSum[:]}, "damaged"},
		{"no trailer", good, &api.BackupTrailer{}, "without its trailer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.mu.Lock()
			s.backup, s.backupTrailer = tc.data, tc.trailer
			s.mu.Unlock()
			outDir := t.TempDir()
			out := filepath.Join(outDir, "cluster.backup")
			_, err := run(t, dir, "cluster", "backup", "--out", out)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("cluster backup of a backup with %s = %v, want an error saying %q", tc.name, err, tc.want)
			}
			if entries, _ := os.ReadDir(outDir); len(entries) != 0 {
				t.Errorf("cluster backup of a backup with %s left %d files behind", tc.name, len(entries))
			}

			// An earlier backup of that name stays as it was.
			if err := os.WriteFile(out, []byte("earlier backup"), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := run(t, dir, "cluster", "backup", "--out", out); err == nil {
				t.Errorf("cluster backup of a backup with %s over an earlier one succeeded", tc.name)
			}
			if got, _ := os.ReadFile(out); string(got) != "earlier backup" {
				t.Errorf("cluster backup of a backup with %s changed the earlier backup to %d bytes", tc.name, len(got))
			}
		})
	}
}
