package tpmseal

import (
	"bytes"
	"crypto/rsa"
	"crypto/sha256"
	"errors"
	"math/big"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-tpm/tpm2"
)

// testBlob is a well-formed blob with fake contents: a public part that fits
// sealTemplate, an arbitrary private part.
func testBlob() *blob {
	name := append([]byte{0x00, 0x0b}, bytes.Repeat([]byte{0xaa}, sha256.Size)...)
	return &blob{
		parentName: name,
		public:     tpm2.Marshal(sealTemplate),
		private:    []byte("not really encrypted"),
		ciphertext: bytes.Repeat([]byte{0xcc}, 12+5+16),
	}
}

// testBoundBlob is a well-formed bound blob with fake contents: a PCR key
// of a made-up modulus, and the policy that follows from it.
func testBoundBlob() *blob {
	b := testBlob()
	key := &rsa.PublicKey{N: new(big.Int).SetBytes(bytes.Repeat([]byte{0xc5}, PCRKeyBits/8)), E: 65537}
	b.keys = [][]byte{tpm2.Marshal(keyPublic(key))}
	b.pcr7 = bytes.Repeat([]byte{0x07}, sha256.Size)
	policy, err := boundPolicy([]*rsa.PublicKey{key}, b.pcr7)
	if err != nil {
		panic(err)
	}
	b.public = tpm2.Marshal(boundTemplate(policy))
	return b
}

func TestBlobRoundTrip(t *testing.T) {
	for _, want := range []*blob{testBlob(), testBoundBlob()} {
		data, err := want.marshal()
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		got, err := parseBlob(data)
		if err != nil {
			t.Fatalf("parseBlob(marshal()): %v", err)
		}
		if diff := cmp.Diff(want, got, cmp.AllowUnexported(blob{})); diff != "" {
			t.Errorf("parseBlob(marshal()) differs (-want +got):\n%s", diff)
		}
	}
}

func TestParseBlobRefuses(t *testing.T) {
	// withChecksum encodes a body under a valid header and checksum, so that
	// the field checks are what refuses it.
	withChecksum := func(body []byte) []byte {
		data := append(append(bytes.Clone(blobMagic), blobVersion), body...)
		sum := sha256.Sum256(data)
		return append(data, sum[:]...)
	}
	encode := func(modify func(*blob)) []byte {
		b := testBlob()
		modify(b)
		data, err := b.marshal()
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		return data
	}
	otherPublic := sealTemplate
	otherPublic.ObjectAttributes.FixedTPM = false
	rsaPublic := tpm2.RSASRKTemplate

	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"nil", nil},
		{"only a header", withChecksum(nil)[:5]},
		{"no fields", withChecksum(nil)},
		{"truncated length", withChecksum([]byte{0})},
		{"field longer than the body", withChecksum([]byte{0, 9, 1})},
		{"short name", encode(func(b *blob) { b.parentName = b.parentName[:10] })},
		{"name of another algorithm", encode(func(b *blob) { b.parentName[1] = 0x04 })},
		{"empty public", encode(func(b *blob) { b.public = nil })},
		{"public of an RSA key", encode(func(b *blob) { b.public = tpm2.Marshal(rsaPublic) })},
		{"public with other attributes", encode(func(b *blob) { b.public = tpm2.Marshal(otherPublic) })},
		{"public with a trailing byte", encode(func(b *blob) { b.public = append(b.public, 0) })},
		{"truncated public", encode(func(b *blob) { b.public = b.public[:len(b.public)-1] })},
		{"empty private", encode(func(b *blob) { b.private = nil })},
		{"short ciphertext", encode(func(b *blob) { b.ciphertext = b.ciphertext[:28] })},
		{"trailing bytes after the fields", withChecksum(append(fieldsOf(t, testBlob()), 7))},
		{"another version", func() []byte {
			d := encode(func(*blob) {})
			d[len(blobMagic)] = 2
			return d
		}()},
	} {
		b, err := parseBlob(tc.data)
		if !errors.Is(err, ErrMalformedBlob) {
			t.Errorf("parseBlob(%s) = %+v, %v; want ErrMalformedBlob", tc.name, b, err)
			continue
		}
		t.Logf("%s: %v", tc.name, err)
	}
}

// fieldsOf returns the encoded fields of b, without header and checksum.
func fieldsOf(t *testing.T, b *blob) []byte {
	t.Helper()
	data, err := b.marshal()
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return data[len(blobMagic)+1 : len(data)-sha256.Size]
}

// FuzzParseBlob feeds arbitrary bytes to the parser, both as they come and
// as the body of a blob with a valid header and checksum, so that the field
// decoders are reached. Whatever parses must encode back to the same bytes.
func FuzzParseBlob(f *testing.F) {
	good, err := testBlob().marshal()
	if err != nil {
		f.Fatalf("marshal: %v", err)
	}
	bound, err := testBoundBlob().marshal()
	if err != nil {
		f.Fatalf("marshal: %v", err)
	}
	two := testBoundBlob()
	second := &rsa.PublicKey{N: new(big.Int).SetBytes(bytes.Repeat([]byte{0xd7}, PCRKeyBits/8)), E: 65537}
	first, err := pcrKeyOf(two.keys[0])
	if err != nil {
		f.Fatal(err)
	}
	two.keys = append(two.keys, tpm2.Marshal(keyPublic(second)))
	policy, err := boundPolicy([]*rsa.PublicKey{first, second}, two.pcr7)
	if err != nil {
		f.Fatal(err)
	}
	two.public = tpm2.Marshal(boundTemplate(policy))
	twoKeys, err := two.marshal()
	if err != nil {
		f.Fatal(err)
	}
	if _, err := parseBlob(twoKeys); err != nil {
		f.Fatalf("a blob of two keys does not parse: %v", err)
	}
	for _, b := range [][]byte{good, bound, twoKeys} {
		f.Add(b)
		f.Add(b[len(blobMagic)+1 : len(b)-sha256.Size])
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		if b, err := parseBlob(data); err == nil {
			again, err := b.marshal()
			if err != nil || !bytes.Equal(again, data) {
				t.Errorf("parseBlob(%x) = %+v, which encodes to %x, %v", data, b, again, err)
			}
		}
		for _, v := range []byte{blobVersion, boundBlobVersion} {
			body := append(append(bytes.Clone(blobMagic), v), data...)
			sum := sha256.Sum256(body)
			whole := append(body, sum[:]...)
			if b, err := parseBlob(whole); err == nil {
				again, err := b.marshal()
				if err != nil || !bytes.Equal(again, whole) {
					t.Errorf("parseBlob(%x) = %+v, which encodes to %x, %v", whole, b, again, err)
				}
			}
		}
	})
}
