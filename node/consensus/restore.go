package consensus

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"

	"cairn.dev/cairn/node/marker"
	"cairn.dev/cairn/pkg/etcdsnapshot"
	"cairn.dev/cairn/pkg/supervisor"
)

// ErrBadBackup is returned (wrapped) by StageRestore for a backup that
// cannot be restored here: damaged, cut short, not the one announced, or
// of another cluster.
var ErrBadBackup = errors.New("unusable backup")

// ErrNoData is returned (wrapped) by StageRestore when the data directory
// holds no etcd member: only a consensus member restores a backup.
var ErrNoData = errors.New("no etcd data here")

// Paths of a restore, inside Config.DataDir:
//
//	restore/backup.db     the staged backup (StageRestore), complete
//	restore/etcd/         the backup restored as a cluster of one
//	restore/peer-tls/     the peer TLS files that go with it
//	restore/prepared      both are complete
//	before-restore/       the member's data before the restore, kept
const (
	restoreDir       = "restore"
	stagedBackup     = "backup.db"
	preparedMarker   = "prepared"
	beforeRestoreDir = "before-restore"
)

// restoreRevisionBump is how far a restore moves etcd's revision on. The
// clients of the lost cluster (Kubernetes' informers and watch caches
// above all) hold revisions that the backup may not have reached yet; a
// revision far beyond them, with everything before marked compacted, makes
// them list again instead of missing changes. It is the amount etcd's own
// documentation recommends for Kubernetes.
const restoreRevisionBump = 1_000_000_000

// RestoredKey is the etcd key under which a restore leaves its Restored
// record, until the curator has finished it (FinishRestore).
const RestoredKey = "consensus/restored"

// Restored is what a restore of a backup records in etcd for the curator,
// which owns the node records that still name the lost members.
type Restored struct {
	// Member is the name (node ID) of the member that restored the
	// backup: the one member of the restored cluster.
	Member string `json:"member"`
	// LostMembers are the names (node IDs) of the other members of the
	// cluster the backup was taken of. None is a member of the restored
	// cluster, and none could take part in it: the restored cluster has a
	// new cluster ID and a new peer CA.
	LostMembers []string `json:"lost_members"`
	// BackupRevision is the etcd revision of the backup.
	BackupRevision int64 `json:"backup_revision"`
	// At is when the backup was restored.
	At time.Time `json:"at"`
}

// PendingRestore returns the record of a restore that the curator has not
// finished yet, or nil, and the revision at which it was read (for
// FinishRestore). kv reaches the whole key space.
func PendingRestore(ctx context.Context, kv clientv3.KV) (*Restored, int64, error) {
	resp, err := kv.Get(ctx, RestoredKey)
	if err != nil {
		return nil, 0, fmt.Errorf("when reading the record of a restore: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, nil
	}
	r := &Restored{}
	if err := json.Unmarshal(resp.Kvs[0].Value, r); err != nil {
		return nil, 0, fmt.Errorf("when decoding the record of a restore: %w", err)
	}
	return r, resp.Kvs[0].ModRevision, nil
}

// FinishRestore removes the record of a restore that PendingRestore read
// at rev, once everything it asked for is done.
func FinishRestore(ctx context.Context, kv clientv3.KV, rev int64) error {
	_, err := kv.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(RestoredKey), "=", rev)).
		Then(clientv3.OpDelete(RestoredKey)).
		Commit()
	if err != nil {
		return fmt.Errorf("when removing the record of a restore: %w", err)
	}
	return nil
}

// StageRestore receives a backup (Management.Backup's file) from r for the
// member whose Config.DataDir is dataDir, to be restored on its next start
// (see the package documentation). The backup must be size bytes long,
// have the SHA-256 sum, and hold the cluster CA whose certificate is
// clusterCA (DER), the CA of the node's own identity: a backup of another
// cluster is refused (ErrBadBackup), as is staging on a node without etcd
// data (ErrNoData). Nothing changes until the whole backup has been
// received and checked. It returns the backup's etcd revision.
func StageRestore(dataDir string, r io.Reader, size int64, sum, clusterCA []byte) (int64, error) {
	has, err := HasData(dataDir)
	if err != nil {
		return 0, err
	}
	if !has {
		return 0, fmt.Errorf("%w: this node runs no etcd member to restore the backup", ErrNoData)
	}
	dir := filepath.Join(dataDir, restoreDir)
	if _, err := os.Stat(filepath.Join(dir, preparedMarker)); err == nil {
		return 0, errors.New("a restore is under way already; it ends when etcd starts")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, fmt.Errorf("when creating the restore directory: %w", err)
	}
	// What a staging cut short by a crash left.
	stale, _ := filepath.Glob(filepath.Join(dir, ".tmp-*"))
	for _, p := range stale {
		if err := os.Remove(p); err != nil {
			return 0, fmt.Errorf("when removing a backup received in part: %w", err)
		}
	}
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return 0, fmt.Errorf("when creating the backup file: %w", err)
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	// One byte more than announced shows a backup that is too long.
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(r, size+1))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return 0, fmt.Errorf("when receiving the backup: %w", err)
	case n != size:
		return 0, fmt.Errorf("%w: received %d bytes, the header announced %d", ErrBadBackup, n, size)
	case !bytes.Equal(h.Sum(nil), sum):
		return 0, fmt.Errorf("%w: its SHA-256 is %x, the header announced %x", ErrBadBackup, h.Sum(nil), sum)
	}
	rev, err := checkBackup(tmp.Name(), clusterCA)
	if err != nil {
		return 0, err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, stagedBackup)); err != nil {
		return 0, fmt.Errorf("when keeping the backup: %w", err)
	}
	return rev, nil
}

// checkBackup checks that the backup file at path is an etcd snapshot of
// the cluster whose CA certificate is clusterCA, and returns its revision.
func checkBackup(path string, clusterCA []byte) (int64, error) {
	f, err := etcdsnapshot.Open(path)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrBadBackup, err)
	}
	defer f.Close()
	ca, err := f.Get(PKINamespace.CertificateKey(ClusterCA().Name))
	if errors.Is(err, etcdsnapshot.ErrNotFound) {
		return 0, fmt.Errorf("%w: it holds no cluster CA", ErrBadBackup)
	}
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrBadBackup, err)
	}
	if !bytes.Equal(ca, clusterCA) {
		return 0, fmt.Errorf("%w: it is a backup of another cluster (its CA is not this node's)", ErrBadBackup)
	}
	return f.Revision(), nil
}

func (s *Service) restorePath(f ...string) string {
	return filepath.Join(append([]string{s.cfg.DataDir, restoreDir}, f...)...)
}

// restoreStaged tells whether a restore waits for this start.
func (s *Service) restoreStaged() bool {
	for _, f := range []string{stagedBackup, preparedMarker} {
		if _, err := os.Stat(s.restorePath(f)); err == nil {
			return true
		}
	}
	return false
}

// restore restores the staged backup before etcd starts, in two parts:
// prepare builds the restored member beside the current one, and swap puts
// it in place. Each step can be repeated after a crash anywhere: prepare
// starts over until it has written its marker, and swap looks at what is
// where.
func (s *Service) restore(ctx context.Context) error {
	lg := supervisor.Logger(ctx)
	if _, err := os.Stat(s.restorePath(preparedMarker)); err != nil {
		marker.Log(lg, marker.EtcdRestoring)
		if err := s.prepareRestore(ctx); err != nil {
			return fmt.Errorf("when preparing the restore: %w", err)
		}
	}
	if err := s.swapRestored(); err != nil {
		return fmt.Errorf("when putting the restored data in place: %w", err)
	}
	lg.Warningf("Restored etcd from a backup as a new cluster of this one member; its former data is in %s", filepath.Join(s.cfg.DataDir, beforeRestoreDir))
	return nil
}

// prepareRestore restores the staged backup into restore/etcd as a new
// cluster of this one member, with a new cluster ID, and makes it what the
// cluster of the backup lost: it starts etcd on it with peers on localhost
// without TLS (as a bootstrap does), replaces the peer CA, issues this
// member's peer certificate from the new one, records the lost members for
// the curator (RestoredKey), moves the member's advertised peer URL to the
// real one, and writes the peer TLS files beside.
func (s *Service) prepareRestore(ctx context.Context) error {
	lg := supervisor.Logger(ctx)
	etcdDir, tlsDir := s.restorePath("etcd"), s.restorePath("peer-tls")
	for _, d := range []string{etcdDir, tlsDir} {
		if err := os.RemoveAll(d); err != nil {
			return fmt.Errorf("when clearing %s: %w", d, err)
		}
	}
	backup := s.restorePath(stagedBackup)
	f, err := etcdsnapshot.Open(backup)
	if err != nil {
		return fmt.Errorf("when reading the staged backup: %w", err)
	}
	rev := f.Revision()
	f.Close()

	peer := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(s.cfg.peerPort()))}
	var token [8]byte
	rand.Read(token[:])
	lg.Infof("Restoring the backup of revision %d into a new cluster of this member", rev)
	err = s.restoreSnapshot(ctx, snapshot.RestoreConfig{
		SnapshotPath:  backup,
		Name:          s.cfg.Name,
		OutputDataDir: etcdDir,
		PeerURLs:      []string{peer.String()},
		// The backup's cluster lives on in its lost members' data: a new
		// token makes a new cluster ID, which their etcd refuses to talk
		// to, and ours theirs.
		InitialCluster:      s.cfg.Name + "=" + peer.String(),
		InitialClusterToken: "cairn-" + hex.EncodeToString(token[:]),
		RevisionBump:        restoreRevisionBump,
		MarkCompacted:       true,
	})
	if err != nil {
		return err
	}

	cfg := s.baseConfig(peer)
	cfg.Dir = etcdDir
	inst, err := s.start(ctx, cfg, false)
	if err != nil {
		return fmt.Errorf("when starting the restored etcd: %w", err)
	}
	defer inst.close()
	lost, err := lostMembers(ctx, inst.client, s.cfg.Name)
	if err != nil {
		return err
	}
	// A new peer CA: no peer certificate issued before the restore, a lost
	// member's or one from any other backup, passes the handshake of the
	// restored cluster's peer port.
	if _, err := inst.client.Delete(ctx, PeerPKINamespace.Prefix, clientv3.WithPrefix()); err != nil {
		return fmt.Errorf("when removing the former peer CA: %w", err)
	}
	caDER, peerDER, crlDER, err := issuePeer(ctx, inst.client, s.cfg.Name, s.cfg.PeerIP, s.cfg.PrivateKey.Public())
	if err != nil {
		return err
	}
	record, err := json.Marshal(&Restored{Member: s.cfg.Name, LostMembers: lost, BackupRevision: rev, At: time.Now().UTC()})
	if err != nil {
		return fmt.Errorf("when encoding the record of the restore: %w", err)
	}
	if _, err := inst.client.Put(ctx, RestoredKey, string(record)); err != nil {
		return fmt.Errorf("when recording the restore: %w", err)
	}
	id := uint64(inst.e.Server.MemberID())
	if _, err := inst.client.MemberUpdate(ctx, id, []string{s.cfg.PeerURL()}); err != nil {
		return fmt.Errorf("when advertising peer URL %s: %w", s.cfg.PeerURL(), err)
	}
	inst.close()
	if err := s.writeTLSFilesTo(tlsDir, caDER, crlDER, peerDER); err != nil {
		return err
	}
	lg.Infof("Restored member %x; lost members: %s", id, strings.Join(lost, ", "))
	return writeFile(s.restorePath(preparedMarker), nil)
}

// restoreSnapshot runs etcd's snapshot restore with the member's logger. A
// Fatal that etcd logs meanwhile comes back as an error.
func (s *Service) restoreSnapshot(ctx context.Context, cfg snapshot.RestoreConfig) (err error) {
	trap := newFatalTrap()
	trap.setStarting(true)
	defer trap.setStarting(false)
	defer trap.catch(&err, "restoring the backup")
	if err := snapshot.NewV3(newZapLogger(supervisor.Logger(ctx), trap)).Restore(cfg); err != nil {
		return fmt.Errorf("when restoring the backup: %w", err)
	}
	return nil
}

// lostMembers lists the members that the backup's cluster had besides
// self: those the peer CA issued a certificate to (a removed member's is
// deleted when it is revoked).
func lostMembers(ctx context.Context, kv clientv3.KV, self string) ([]string, error) {
	prefix := PeerPKINamespace.CertificateKey(peerCertificateName(""))
	prefix = strings.TrimSuffix(prefix, "/cert")
	resp, err := kv.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("when listing the backup's members: %w", err)
	}
	var lost []string
	for _, kv := range resp.Kvs {
		name, ok := strings.CutSuffix(strings.TrimPrefix(string(kv.Key), prefix), "/cert")
		if ok && name != self && !slices.Contains(lost, name) {
			lost = append(lost, name)
		}
	}
	slices.Sort(lost)
	return lost, nil
}

// swapRestored puts the prepared restore in place: the member's current
// data and peer TLS files go to before-restore/ (replacing what an earlier
// restore left there), the restored ones take their place, and the restore
// directory and any removal marker go.
func (s *Service) swapRestored() error {
	aside := filepath.Join(s.cfg.DataDir, beforeRestoreDir)
	restored := s.restorePath("etcd")
	if exists(restored) {
		if exists(s.etcdDir()) {
			if err := os.RemoveAll(aside); err != nil {
				return fmt.Errorf("when clearing %s: %w", aside, err)
			}
			if err := os.MkdirAll(aside, 0o700); err != nil {
				return fmt.Errorf("when creating %s: %w", aside, err)
			}
			if err := os.Rename(s.etcdDir(), filepath.Join(aside, "etcd")); err != nil {
				return fmt.Errorf("when setting the former data aside: %w", err)
			}
		}
		if exists(s.tlsDir()) && !exists(filepath.Join(aside, "peer-tls")) {
			if err := os.Rename(s.tlsDir(), filepath.Join(aside, "peer-tls")); err != nil {
				return fmt.Errorf("when setting the former peer TLS files aside: %w", err)
			}
		}
		if err := os.Rename(restored, s.etcdDir()); err != nil {
			return fmt.Errorf("when moving the restored data in place: %w", err)
		}
	}
	if err := os.MkdirAll(s.tlsDir(), 0o700); err != nil {
		return fmt.Errorf("when creating the peer TLS directory: %w", err)
	}
	// The peer certificate last: its presence says the directory is
	// complete.
	for _, name := range []string{caFile, crlFile, peerKeyFile, peerCertFile} {
		b, err := os.ReadFile(s.restorePath("peer-tls", name))
		if err != nil {
			return fmt.Errorf("when reading the restored peer TLS files: %w", err)
		}
		if err := writeFile(s.tlsPath(name), b); err != nil {
			return err
		}
	}
	if err := os.Remove(s.removedMarker()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("when removing the removal marker: %w", err)
	}
	if err := os.RemoveAll(s.restorePath()); err != nil {
		return fmt.Errorf("when removing the restore directory: %w", err)
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
