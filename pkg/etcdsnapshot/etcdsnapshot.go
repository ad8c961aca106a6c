// Package etcdsnapshot reads an etcd snapshot file, as etcd's Maintenance
// API streams it (and `etcdctl snapshot save` writes it), without running
// etcd: it checks the file's integrity and reads the latest value of keys.
//
// Why not restore it and ask etcd? Whoever receives a backup wants to know
// what it is before anything acts on it (is it whole, is it of this
// cluster), and restoring means writing a data directory and starting a
// server. Reading is enough for that, and it is cheap.
//
// # The file
//
//	┌─────────────────────────────────────────────┬────────────────────┐
//	│ etcd's bbolt database ("key" bucket: one     │ SHA-256 of what    │
//	│ entry per revision of a key, mvccpb.KeyValue)│ comes before it    │
//	└─────────────────────────────────────────────┴────────────────────┘
//	 a multiple of 512 bytes                        32 bytes
//
// Open checks the SHA-256 before bbolt sees a byte, so a damaged or
// truncated file is refused as such, and only files that etcd (or someone
// who bothered to compute the checksum) wrote reach the database parser.
package etcdsnapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// ErrNotFound is returned by Get for a key that the snapshot does not hold,
// or holds only as deleted.
var ErrNotFound = errors.New("no such key in the snapshot")

// hashSize is the size of the SHA-256 etcd appends to a snapshot, and
// sectorSize the unit the database part is a multiple of.
const (
	hashSize   = sha256.Size
	sectorSize = 512
)

// The parts of etcd's database this package reads: the bucket of key
// revisions, and in the meta bucket the revision of the last compaction.
var (
	keyBucket          = []byte("key")
	metaBucket         = []byte("meta")
	finishedCompactKey = []byte("finishedCompactRev")
)

// File is an open snapshot file. Close it when done.
type File struct {
	db *bolt.DB
	// revision is the latest revision the file holds.
	revision int64
}

// Open checks the snapshot file at path and opens it for reading: the
// SHA-256 at its end must be that of the rest, and the rest an etcd
// database.
func Open(path string) (*File, error) {
	if err := Verify(path); err != nil {
		return nil, err
	}
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("when opening the snapshot's database: %w", err)
	}
	f := &File{db: db}
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(keyBucket)
		if b == nil {
			return errors.New("the snapshot's database has no key bucket: it is not etcd's")
		}
		if k, _ := b.Cursor().Last(); k != nil {
			rev, _, err := parseRevision(k)
			if err != nil {
				return err
			}
			f.revision = rev
		}
		// A compaction may have removed the latest entry (a deletion);
		// etcd then counts from the compaction's revision, and so do we.
		if m := tx.Bucket(metaBucket); m != nil {
			if v := m.Get(finishedCompactKey); v != nil {
				rev, _, err := parseRevision(v)
				if err != nil {
					return fmt.Errorf("when reading the snapshot's compaction: %w", err)
				}
				f.revision = max(f.revision, rev)
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	return f, nil
}

// Verify checks that the file at path ends with the SHA-256 of what comes
// before it, as etcd writes snapshots.
func Verify(path string) error {
	fh, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("when opening the snapshot: %w", err)
	}
	defer fh.Close()
	info, err := fh.Stat()
	if err != nil {
		return fmt.Errorf("when reading the snapshot's size: %w", err)
	}
	size := info.Size()
	if size < hashSize+sectorSize || size%sectorSize != hashSize {
		return fmt.Errorf("the snapshot is %d bytes: not an etcd snapshot with its SHA-256 (cut short?)", size)
	}
	h := sha256.New()
	if _, err := io.CopyN(h, fh, size-hashSize); err != nil {
		return fmt.Errorf("when reading the snapshot: %w", err)
	}
	want := make([]byte, hashSize)
	if _, err := io.ReadFull(fh, want); err != nil {
		return fmt.Errorf("when reading the snapshot's SHA-256: %w", err)
	}
	if !bytes.Equal(h.Sum(nil), want) {
		return errors.New("the snapshot's SHA-256 does not match its contents: the file is damaged")
	}
	return nil
}

// Revision is the latest etcd revision the snapshot holds.
func (f *File) Revision() int64 { return f.revision }

// Get returns the value key had at the snapshot's revision, or ErrNotFound.
// It reads every revision the snapshot kept, so it costs a pass over the
// database.
func (f *File) Get(key string) ([]byte, error) {
	var value []byte
	found := false
	err := f.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(keyBucket).ForEach(func(k, v []byte) error {
			_, tombstone, err := parseRevision(k)
			if err != nil {
				return err
			}
			var kv mvccpb.KeyValue
			if err := kv.Unmarshal(v); err != nil {
				return fmt.Errorf("when decoding the snapshot's entry at %x: %w", k, err)
			}
			if string(kv.Key) != key {
				return nil
			}
			// Entries come in revision order: the last one wins.
			found = !tombstone
			value = bytes.Clone(kv.Value)
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, key)
	}
	return value, nil
}

// Close closes the file.
func (f *File) Close() error { return f.db.Close() }

// parseRevision decodes a key of etcd's key bucket: the main revision (8
// bytes, big-endian), '_', the sub revision (8 bytes), and a trailing 't'
// when the entry deletes its key.
func parseRevision(k []byte) (main int64, tombstone bool, err error) {
	switch {
	case len(k) == 18 && k[17] == 't':
		tombstone = true
	case len(k) == 17:
	default:
		return 0, false, fmt.Errorf("the snapshot's key bucket holds an entry of %d bytes, not a revision", len(k))
	}
	if k[8] != '_' {
		return 0, false, fmt.Errorf("the snapshot's key bucket holds an entry %x that is not a revision", k)
	}
	main = int64(binary.BigEndian.Uint64(k[:8]))
	if main < 0 {
		return 0, false, fmt.Errorf("the snapshot's key bucket holds a negative revision %d", main)
	}
	return main, tombstone, nil
}
