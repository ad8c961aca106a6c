package tpmseal

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/google/go-tpm/tpm2"
)

// blobMagic starts every blob, so that a blob handed to the wrong parser
// (or a file of something else) is recognised at once.
var blobMagic = []byte("CTPM")

// The versions of the blob format: 1 for a seal bound to the TPM alone,
// 2 for one bound to a signed release as well (Bind).
const (
	blobVersion      = 1
	boundBlobVersion = 2
)

// blob is what Seal returns, before encoding: enough to load the sealed object
// again under the same SRK, and to notice when the SRK is another one.
type blob struct {
	// parentName is the TPM name of the SRK the object was created under.
	parentName []byte
	// public is the sealed object's TPMT_PUBLIC as the TPM returned it.
	public []byte
	// private is the contents of the object's TPM2B_PRIVATE.
	private []byte
	// ciphertext is the secret, encrypted with AES-256-GCM under the key
	// the sealed object holds: nonce, then ciphertext and tag.
	ciphertext []byte
	// pcr7 and keys, in a bound blob only (nil otherwise): PCR 7 as it
	// was when sealing, and the TPMT_PUBLIC of each release PCR key the
	// policy trusts (1 to maxTrustedKeys).
	pcr7 []byte
	keys [][]byte
}

// bound says b is a bound seal.
func (b *blob) bound() bool { return len(b.keys) > 0 }

// fields are b's fields in the order of its version's format.
func (b *blob) fields() [][]byte {
	f := [][]byte{b.parentName, b.public, b.private, b.ciphertext}
	if b.bound() {
		f = append(append(f, b.pcr7), b.keys...)
	}
	return f
}

// version is the format version b is written in.
func (b *blob) version() byte {
	if b.bound() {
		return boundBlobVersion
	}
	return blobVersion
}

// maxField bounds each field; a uint16 length cannot say more anyway.
const maxField = 0xffff

// marshal encodes b in its version's format (see the package
// documentation).
func (b *blob) marshal() ([]byte, error) {
	var buf bytes.Buffer
	buf.Write(blobMagic)
	buf.WriteByte(b.version())
	for _, f := range b.fields() {
		if len(f) > maxField {
			return nil, fmt.Errorf("blob field of %d bytes is too long", len(f))
		}
		binary.Write(&buf, binary.BigEndian, uint16(len(f)))
		buf.Write(f)
	}
	sum := sha256.Sum256(buf.Bytes())
	buf.Write(sum[:])
	return buf.Bytes(), nil
}

// parseBlob decodes a blob and checks everything that can be checked without
// a TPM. Every error wraps ErrMalformedBlob.
func parseBlob(data []byte) (*blob, error) {
	header := len(blobMagic) + 1
	if len(data) < header+sha256.Size {
		return nil, fmt.Errorf("%w: %d bytes is too short", ErrMalformedBlob, len(data))
	}
	if !bytes.Equal(data[:len(blobMagic)], blobMagic) {
		return nil, fmt.Errorf("%w: not a sealed blob (magic %q)", ErrMalformedBlob, data[:len(blobMagic)])
	}
	v := data[len(blobMagic)]
	if v != blobVersion && v != boundBlobVersion {
		return nil, fmt.Errorf("%w: unknown version %d (this code reads %d and %d)", ErrMalformedBlob, v, blobVersion, boundBlobVersion)
	}
	body, sum := data[:len(data)-sha256.Size], data[len(data)-sha256.Size:]
	if want := sha256.Sum256(body); !bytes.Equal(sum, want[:]) {
		return nil, fmt.Errorf("%w: checksum mismatch, the blob is damaged", ErrMalformedBlob)
	}
	b, err := parseFields(body[header:], v == boundBlobVersion)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformedBlob, err)
	}
	return b, nil
}

// parseFields decodes the length-prefixed fields of a blob's body, four or,
// bound, five and its PCR keys, and checks that they hold what Seal
// writes.
func parseFields(body []byte, bound bool) (*blob, error) {
	names := []string{"parent name", "public part", "private part", "ciphertext"}
	if bound {
		names = append(names, "PCR 7")
		for len(names) < 5+maxTrustedKeys {
			names = append(names, "PCR key")
		}
	}
	var fields [][]byte
	for _, name := range names {
		if len(body) == 0 && len(fields) > 5 {
			break // the bound blob's last key
		}
		if len(body) < 2 {
			return nil, fmt.Errorf("%s: truncated length", name)
		}
		n := int(binary.BigEndian.Uint16(body))
		body = body[2:]
		if len(body) < n {
			return nil, fmt.Errorf("%s: %d bytes announced, %d left", name, n, len(body))
		}
		fields = append(fields, body[:n:n])
		body = body[n:]
	}
	if len(body) != 0 {
		return nil, fmt.Errorf("%d bytes after the last field", len(body))
	}
	b := &blob{parentName: fields[0], public: fields[1], private: fields[2], ciphertext: fields[3]}
	if err := checkName(b.parentName); err != nil {
		return nil, fmt.Errorf("parent name: %w", err)
	}
	want := sealTemplate
	if bound {
		b.pcr7, b.keys = fields[4], fields[5:]
		if len(b.pcr7) != sha256.Size {
			return nil, fmt.Errorf("PCR 7: %d bytes, want %d", len(b.pcr7), sha256.Size)
		}
		keys, err := pcrKeysOf(b)
		if err != nil {
			return nil, err
		}
		if len(keys) == 2 && keys[0].Equal(keys[1]) {
			return nil, errors.New("PCR keys: the same key twice")
		}
		policy, err := boundPolicy(keys, b.pcr7)
		if err != nil {
			return nil, err
		}
		want = boundTemplate(policy)
	}
	if err := checkPublic(b.public, want); err != nil {
		return nil, fmt.Errorf("public part: %w", err)
	}
	if len(b.private) == 0 {
		return nil, errors.New("private part: empty")
	}
	// A nonce (12 bytes), at least one byte of secret and the tag (16).
	if n := len(b.ciphertext); n < 12+1+16 {
		return nil, fmt.Errorf("ciphertext: %d bytes is too short", n)
	}
	return b, nil
}

// checkName accepts the name of an object with a SHA-256 name algorithm, as
// the SRK template asks for: the algorithm ID and a digest.
func checkName(name []byte) error {
	if len(name) != 2+sha256.Size {
		return fmt.Errorf("%d bytes, want %d", len(name), 2+sha256.Size)
	}
	if alg := tpm2.TPMAlgID(binary.BigEndian.Uint16(name)); alg != tpm2.TPMAlgSHA256 {
		return fmt.Errorf("name algorithm %#04x, want SHA-256", uint16(alg))
	}
	return nil
}

// checkPublic accepts a TPMT_PUBLIC of a sealed data object as Seal creates
// them, and nothing else: it must decode whole and match want (sealTemplate,
// or a bound object's template) in type, name algorithm, attributes and
// policy. The TPM checks the rest when loading.
func checkPublic(data []byte, want tpm2.TPMTPublic) error {
	pub, err := unmarshalPublic(data)
	if err != nil {
		return err
	}
	if pub.Type != tpm2.TPMAlgKeyedHash {
		return fmt.Errorf("object type %#04x, want a keyed hash (sealed data)", uint16(pub.Type))
	}
	if pub.NameAlg != tpm2.TPMAlgSHA256 {
		return fmt.Errorf("name algorithm %#04x, want SHA-256", uint16(pub.NameAlg))
	}
	if pub.ObjectAttributes != want.ObjectAttributes {
		return fmt.Errorf("object attributes %x, want %x", tpm2.Marshal(pub.ObjectAttributes), tpm2.Marshal(want.ObjectAttributes))
	}
	if !bytes.Equal(pub.AuthPolicy.Buffer, want.AuthPolicy.Buffer) {
		return fmt.Errorf("policy %x, want %x", pub.AuthPolicy.Buffer, want.AuthPolicy.Buffer)
	}
	return nil
}

// unmarshalPublic decodes a TPMT_PUBLIC that must span all of data and
// encode back to it. go-tpm walks the bytes by reflection, and its Marshal
// panics on a value it cannot encode; a panic here becomes an error, so that
// no blob can crash its caller.
func unmarshalPublic(data []byte) (pub *tpm2.TPMTPublic, err error) {
	defer func() {
		if r := recover(); r != nil {
			pub, err = nil, fmt.Errorf("undecodable TPMT_PUBLIC: %v", r)
		}
	}()
	pub, err = tpm2.Unmarshal[tpm2.TPMTPublic](data)
	if err != nil {
		return nil, fmt.Errorf("decoding TPMT_PUBLIC: %w", err)
	}
	if again := tpm2.Marshal(*pub); !bytes.Equal(again, data) {
		return nil, fmt.Errorf("TPMT_PUBLIC of %d bytes does not encode back to itself (trailing or non-canonical bytes)", len(data))
	}
	return pub, nil
}
