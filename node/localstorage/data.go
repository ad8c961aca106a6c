package localstorage

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"

	"cairn.dev/cairn/node/testpoint"
	"cairn.dev/cairn/pkg/devicemapper"
)

// KeySize is the length of the node unlock key and the cluster unlock key:
// XORed they are the dm-crypt AES-256-XTS key.
const KeySize = devicemapper.CryptKeySize

const (
	cryptName     = "data"
	headerMagic   = "CAIRNDAT"
	headerVersion = 1
	// payloadOffset is where the dm-crypt volume starts on the
	// partition, in sectors: 1 MiB, leaving room for the header.
	payloadOffset = 2048
	headerLen     = 4096
	// xfsMagic opens every XFS superblock.
	xfsMagic = "XFSB"
	// xfsInProgress is the offset of the superblock's sb_inprogress
	// byte: mkfs.xfs sets it in the superblocks it writes while it
	// works and clears it in the primary one as its last write, and the
	// kernel refuses to mount a filesystem that still has it set.
	xfsInProgress = 126
	// xfsMountOptions turns on project quotas, which the CSI provisioner
	// uses to size volumes.
	xfsMountOptions = "prjquota"

	securityEncrypted = 1
	securityInsecure  = 2
)

var (
	// ErrWrongKey says the data partition does not open with the keys
	// given. Nothing on it was changed.
	ErrWrongKey = errors.New("data partition did not decrypt: wrong key?")
	// errNoDataPartition is returned by a block layer when the boot disk
	// has no data partition.
	errNoDataPartition = errors.New("the boot disk has no data partition")
)

// dataKey is the dm-crypt key: node key XOR cluster key.
func dataKey(nodeKey, clusterKey []byte) ([]byte, error) {
	if len(nodeKey) != KeySize || len(clusterKey) != KeySize {
		return nil, fmt.Errorf("node key of %d bytes and cluster key of %d bytes, want %d each",
			len(nodeKey), len(clusterKey), KeySize)
	}
	if bytes.Equal(nodeKey, clusterKey) {
		return nil, errors.New("node key and cluster key are equal: their XOR would be zero")
	}
	key := make([]byte, KeySize)
	for i := range key {
		key[i] = nodeKey[i] ^ clusterKey[i]
	}
	return key, nil
}

// keyCheck is what the header stores to recognise the key.
func keyCheck(key []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("cairn data partition key check v1"))
	return m.Sum(nil)
}

// marshalHeader builds the partition's first 4 KiB.
func marshalHeader(security uint32, key []byte) []byte {
	b := make([]byte, headerLen)
	copy(b, headerMagic)
	binary.LittleEndian.PutUint32(b[8:], headerVersion)
	binary.LittleEndian.PutUint32(b[12:], security)
	copy(b[16:48], keyCheck(key))
	binary.LittleEndian.PutUint32(b[48:], crc32.ChecksumIEEE(b[:48]))
	return b
}

// partitionState is what the start of a data partition says.
type partitionState int

const (
	stateBlank     partitionState = iota // neither header nor filesystem
	stateEncrypted                       // a valid Cairn header
	stateInsecure                        // a bare XFS filesystem, mkfs finished
)

// readState reads the start of device; for encrypted partitions it also
// returns the stored key check.
func readState(device string) (partitionState, []byte, error) {
	f, err := os.Open(device)
	if err != nil {
		return 0, nil, fmt.Errorf("when opening the data partition: %w", err)
	}
	defer f.Close()
	b := make([]byte, headerLen)
	if _, err := io.ReadFull(f, b); err != nil {
		return 0, nil, fmt.Errorf("when reading the data partition header: %w", err)
	}
	switch {
	case string(b[:4]) == xfsMagic && b[xfsInProgress] == 0:
		return stateInsecure, nil, nil
	case string(b[:8]) == headerMagic &&
		binary.LittleEndian.Uint32(b[48:]) == crc32.ChecksumIEEE(b[:48]) &&
		binary.LittleEndian.Uint32(b[8:]) == headerVersion &&
		binary.LittleEndian.Uint32(b[12:]) == securityEncrypted:
		return stateEncrypted, b[16:48], nil
	}
	return stateBlank, nil, nil
}

// writeStart writes b over the start of device and syncs it.
func writeStart(device string, b []byte) error {
	f, err := os.OpenFile(device, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("when opening the data partition: %w", err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, 0); err != nil {
		return fmt.Errorf("when writing the data partition header: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("when syncing the data partition header: %w", err)
	}
	return nil
}

// hasXFS reports whether device starts with an XFS superblock.
func hasXFS(device string) (bool, error) {
	f, err := os.Open(device)
	if err != nil {
		return false, fmt.Errorf("when opening %s: %w", device, err)
	}
	defer f.Close()
	b := make([]byte, 4)
	if _, err := io.ReadFull(f, b); err != nil {
		return false, fmt.Errorf("when reading %s: %w", device, err)
	}
	return string(b) == xfsMagic, nil
}

// MountNew sets up the data partition of a node that has no sealed
// configuration yet, encrypted with nodeKey XOR clusterKey (KeySize bytes
// each), and mounts it at Root.Data. Whatever an earlier, unfinished
// enrolment left on the partition is replaced, unless it was made with
// the same keys, in which case it is mounted as it is.
func (s *Storage) MountNew(ctx context.Context, nodeKey, clusterKey []byte) error {
	key, err := dataKey(nodeKey, clusterKey)
	if err != nil {
		return fmt.Errorf("when setting up the data partition: %w", err)
	}
	defer clear(key)
	dev, sectors, err := s.block.dataPartition(true)
	if err != nil {
		return fmt.Errorf("when creating the data partition: %w", err)
	}
	if sectors <= payloadOffset {
		return fmt.Errorf("data partition of %d sectors is too small", sectors)
	}
	if err := testpoint.Reach(ctx, testpoint.GPTWritten); err != nil {
		return err
	}
	state, check, err := readState(dev)
	if err != nil {
		return err
	}
	if state == stateEncrypted && hmac.Equal(check, keyCheck(key)) {
		mapped, err := s.block.openCrypt(cryptName, dev, payloadOffset, sectors-payloadOffset, key)
		if err != nil {
			return fmt.Errorf("when opening the data partition: %w", err)
		}
		if ok, err := hasXFS(mapped); err == nil && ok {
			return s.mountData(mapped)
		}
	}
	// Invalidate first: from here until the header is written, the
	// partition reads as blank.
	if err := writeStart(dev, make([]byte, headerLen)); err != nil {
		return err
	}
	mapped, err := s.block.openCrypt(cryptName, dev, payloadOffset, sectors-payloadOffset, key)
	if err != nil {
		return fmt.Errorf("when opening the data partition: %w", err)
	}
	if err := testpoint.Reach(ctx, testpoint.CryptOpened); err != nil {
		s.block.closeCrypt(cryptName)
		return err
	}
	if err := s.block.mkfs(ctx, mapped); err != nil {
		s.block.closeCrypt(cryptName)
		return fmt.Errorf("when making the data filesystem: %w", err)
	}
	if err := testpoint.Reach(ctx, testpoint.MkfsDone); err != nil {
		s.block.closeCrypt(cryptName)
		return err
	}
	if err := writeStart(dev, marshalHeader(securityEncrypted, key)); err != nil {
		s.block.closeCrypt(cryptName)
		return err
	}
	return s.mountData(mapped)
}

// MountExisting opens and mounts the data partition made by MountNew with
// the same keys. It never formats: a missing partition, a missing header,
// an unencrypted partition or a wrong key each give an error and leave the
// partition untouched (ErrWrongKey for the last).
func (s *Storage) MountExisting(nodeKey, clusterKey []byte) error {
	key, err := dataKey(nodeKey, clusterKey)
	if err != nil {
		return fmt.Errorf("when opening the data partition: %w", err)
	}
	defer clear(key)
	dev, sectors, err := s.block.dataPartition(false)
	if err != nil {
		return fmt.Errorf("when looking for the data partition: %w", err)
	}
	state, check, err := readState(dev)
	if err != nil {
		return err
	}
	switch state {
	case stateBlank:
		return errors.New("data partition has no Cairn header: it was never set up completely")
	case stateInsecure:
		return errors.New("data partition is not encrypted, but this node's storage is")
	}
	if !hmac.Equal(check, keyCheck(key)) {
		return ErrWrongKey
	}
	mapped, err := s.block.openCrypt(cryptName, dev, payloadOffset, sectors-payloadOffset, key)
	if err != nil {
		return fmt.Errorf("when opening the data partition: %w", err)
	}
	ok, err := hasXFS(mapped)
	if err == nil && !ok {
		err = fmt.Errorf("%w (no XFS superblock inside)", ErrWrongKey)
	}
	if err != nil {
		s.block.closeCrypt(cryptName)
		return err
	}
	return s.mountData(mapped)
}

// MountNewInsecure is MountNew for a cluster whose policy allows
// unencrypted storage: a bare XFS filesystem on the partition. A finished
// filesystem left by an earlier, unfinished enrolment is mounted as it is;
// one whose mkfs was cut short is made again.
func (s *Storage) MountNewInsecure(ctx context.Context) error {
	dev, _, err := s.block.dataPartition(true)
	if err != nil {
		return fmt.Errorf("when creating the data partition: %w", err)
	}
	if err := testpoint.Reach(ctx, testpoint.GPTWritten); err != nil {
		return err
	}
	state, _, err := readState(dev)
	if err != nil {
		return err
	}
	if state != stateInsecure {
		if err := writeStart(dev, make([]byte, headerLen)); err != nil {
			return err
		}
		if err := s.block.mkfs(ctx, dev); err != nil {
			return fmt.Errorf("when making the data filesystem: %w", err)
		}
		if err := testpoint.Reach(ctx, testpoint.MkfsDone); err != nil {
			return err
		}
	}
	return s.mountData(dev)
}

// MountExistingInsecure mounts an unencrypted data partition made by
// MountNewInsecure. It never formats.
func (s *Storage) MountExistingInsecure() error {
	dev, _, err := s.block.dataPartition(false)
	if err != nil {
		return fmt.Errorf("when looking for the data partition: %w", err)
	}
	state, _, err := readState(dev)
	if err != nil {
		return err
	}
	switch state {
	case stateBlank:
		return errors.New("data partition holds no filesystem: it was never set up completely")
	case stateEncrypted:
		return errors.New("data partition is encrypted, but insecure storage was asked for")
	}
	return s.mountData(dev)
}

func (s *Storage) mountData(device string) error {
	target := s.Root.Data.FullPath()
	if err := os.MkdirAll(target, 0o755); err != nil {
		return fmt.Errorf("when creating %s: %w", target, err)
	}
	if err := s.block.mount(device, target, "xfs", 0, xfsMountOptions); err != nil {
		return fmt.Errorf("when mounting the data partition: %w", err)
	}
	return nil
}
