package tpmseal

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"

	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"
	"github.com/google/go-tpm/tpm2/transport/linuxtpm"
)

var (
	// ErrNoTPM means this machine has no TPM 2.0 (or the kernel has no
	// driver for it): there is no resource manager device.
	ErrNoTPM = errors.New("no TPM")
	// ErrWrongTPM means a blob was sealed by another TPM, or by this one
	// before its owner hierarchy was cleared: its storage key is gone.
	ErrWrongTPM = errors.New("sealed by another TPM (or before this TPM was cleared)")
	// ErrMalformedBlob means a blob is not one Seal wrote, or was damaged
	// since.
	ErrMalformedBlob = errors.New("malformed sealed blob")
)

// devicePath is the kernel's TPM resource manager, which lets several
// users share the TPM by swapping their objects and sessions in and out.
const devicePath = "/dev/tpmrm0"

// MaxSecretSize is the largest secret Seal takes. The secret itself is
// encrypted outside the TPM (see the package documentation), so the bound
// only keeps blobs small.
const MaxSecretSize = 32 << 10

// dataKeySize is the length of the AES-256 key sealed in the TPM, well below
// what a sealed data object holds (MAX_SYM_DATA, 128 bytes).
const dataKeySize = 32

// srkTemplate is the template of the storage primary key: the TCG's
// standard ECC P-256 SRK. ECC rather than RSA because a TPM derives an ECC
// primary key in milliseconds, an RSA one can take seconds.
var srkTemplate = tpm2.ECCSRKTemplate

// sealTemplate is the public template of a sealed data object: bound to this
// TPM and parent (FixedTPM, FixedParent), data supplied by the caller
// (no SensitiveDataOrigin), usable with its empty auth value (UserWithAuth)
// and outside dictionary-attack lockout (NoDA), as there is no secret to guess.
var sealTemplate = tpm2.TPMTPublic{
	Type:    tpm2.TPMAlgKeyedHash,
	NameAlg: tpm2.TPMAlgSHA256,
	ObjectAttributes: tpm2.TPMAObject{
		FixedTPM:     true,
		FixedParent:  true,
		UserWithAuth: true,
		NoDA:         true,
	},
	Parameters: tpm2.NewTPMUPublicParms(tpm2.TPMAlgKeyedHash, &tpm2.TPMSKeyedHashParms{
		Scheme: tpm2.TPMTKeyedHashScheme{Scheme: tpm2.TPMAlgNull},
	}),
}

// TPM is an open connection to a TPM 2.0 that seals and unseals secrets.
type TPM struct {
	mu      sync.Mutex
	tp      transport.TPMCloser // nil once closed
	binding *Binding            // set by Bind
}

// Open opens this machine's TPM through the kernel's resource manager
// (/dev/tpmrm0). It returns an error wrapping ErrNoTPM when there is none.
func Open() (*TPM, error) {
	return openPath(devicePath)
}

// openPath opens the TPM character device at path.
func openPath(path string) (*TPM, error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s does not exist", ErrNoTPM, path)
	}
	tp, err := linuxtpm.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	return openTransport(tp), nil
}

// openTransport returns a TPM that talks through tp, which it closes on
// Close. Tests use it to reach a software TPM.
func openTransport(tp transport.TPMCloser) *TPM {
	return &TPM{tp: tp}
}

// Close closes the connection to the TPM. Further calls fail.
func (t *TPM) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tp == nil {
		return nil
	}
	err := t.tp.Close()
	t.tp = nil
	if err != nil {
		return fmt.Errorf("closing the TPM: %w", err)
	}
	return nil
}

// Seal seals secret (1 to MaxSecretSize bytes) to this TPM and returns a
// blob that only this TPM can unseal. The blob is safe to store anywhere.
func (t *TPM) Seal(secret []byte) ([]byte, error) {
	return t.seal(secret, nil)
}

// seal is Seal; a bound seal trusts also, when not nil, besides the
// binding's key.
func (t *TPM) seal(secret []byte, also *rsa.PublicKey) ([]byte, error) {
	if len(secret) == 0 || len(secret) > MaxSecretSize {
		return nil, fmt.Errorf("cannot seal a secret of %d bytes: it must have 1 to %d", len(secret), MaxSecretSize)
	}
	key := make([]byte, dataKeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("generating the data key: %w", err)
	}
	b, err := t.sealKey(key, also)
	if err != nil {
		return nil, err
	}
	b.ciphertext, err = encrypt(key, secret)
	if err != nil {
		return nil, err
	}
	out, err := b.marshal()
	if err != nil {
		return nil, fmt.Errorf("encoding the sealed blob: %w", err)
	}
	return out, nil
}

// Unseal returns the secret sealed in blob. A blob sealed by another TPM
// gives an error wrapping ErrWrongTPM, a damaged one or one Seal did not
// write an error wrapping ErrMalformedBlob.
func (t *TPM) Unseal(blob []byte) ([]byte, error) {
	b, err := parseBlob(blob)
	if err != nil {
		return nil, err
	}
	secret, _, err := t.unseal(b)
	return secret, err
}

// unseal returns b's secret and, for a bound blob, the PCR key whose
// signature opened it.
func (t *TPM) unseal(b *blob) ([]byte, *rsa.PublicKey, error) {
	key, opener, err := t.unsealKey(b)
	if err != nil {
		return nil, nil, err
	}
	secret, err := decrypt(key, b.ciphertext)
	return secret, opener, err
}

// Rebind seals the secret of blob again when this TPM binds (Bind) and
// blob does not trust the binding's PCR key: a blob bound to the TPM
// alone is bound to the release; a bound blob, opened now by the
// signature of a key it trusts, trusts that key and the binding's. This
// is how a node follows a rotation of the PCR key: a release that
// rotates carries the new key in .pcrpkey and signatures of both, so it
// opens seals of the old key, and seals again for both; the node can
// still go back to a release of the old key, and later releases need
// only the new one. It returns the new blob and true, or blob and false
// when there is nothing to do.
func (t *TPM) Rebind(blob []byte) ([]byte, bool, error) {
	b, err := parseBlob(blob)
	if err != nil {
		return nil, false, err
	}
	t.mu.Lock()
	binding := t.binding
	t.mu.Unlock()
	if binding == nil {
		return blob, false, nil
	}
	keys, err := pcrKeysOf(b)
	if err != nil {
		return nil, false, fmt.Errorf("%w: %w", ErrMalformedBlob, err)
	}
	for _, k := range keys {
		if k.Equal(binding.Key) {
			return blob, false, nil
		}
	}
	secret, opener, err := t.unseal(b)
	if err != nil {
		return nil, false, err
	}
	out, err := t.seal(secret, opener)
	if err != nil {
		return nil, false, err
	}
	return out, true, nil
}

// sealKey creates a sealed data object holding key under the SRK and returns
// a blob without ciphertext. Bound, it trusts also (when not nil) and the
// binding's key, in that order.
func (t *TPM) sealKey(key []byte, also *rsa.PublicKey) (*blob, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tp == nil {
		return nil, errors.New("sealing: TPM closed")
	}
	srk, err := createSRK(t.tp)
	if err != nil {
		return nil, err
	}
	defer srk.flush(t.tp)

	b := &blob{parentName: srk.name.Buffer}
	template := sealTemplate
	if t.binding != nil {
		if b.pcr7, err = readPCR(t.tp, 7); err != nil {
			return nil, err
		}
		var trust []*rsa.PublicKey
		if also != nil && !also.Equal(t.binding.Key) {
			trust = append(trust, also)
		}
		trust = append(trust, t.binding.Key)
		policy, err := boundPolicy(trust, b.pcr7)
		if err != nil {
			return nil, err
		}
		for _, k := range trust {
			b.keys = append(b.keys, tpm2.Marshal(keyPublic(k)))
		}
		template = boundTemplate(policy)
	}
	rsp, err := tpm2.Create{
		ParentHandle: tpm2.AuthHandle{
			Handle: srk.handle,
			Name:   srk.name,
			Auth:   srk.session(tpm2.AESEncryption(128, tpm2.EncryptIn)),
		},
		InSensitive: tpm2.TPM2BSensitiveCreate{
			Sensitive: &tpm2.TPMSSensitiveCreate{
				Data: tpm2.NewTPMUSensitiveCreate(&tpm2.TPM2BSensitiveData{Buffer: key}),
			},
		},
		InPublic: tpm2.New2B(template),
	}.Execute(t.tp)
	if err != nil {
		return nil, fmt.Errorf("creating the sealed object: %w", err)
	}
	b.public = rsp.OutPublic.Bytes()
	b.private = rsp.OutPrivate.Buffer
	return b, nil
}

// unsealKey loads b's sealed object under the SRK, if the SRK is the one it
// was sealed under, and returns the key it holds and, bound, the PCR key
// that opened it.
func (t *TPM) unsealKey(b *blob) ([]byte, *rsa.PublicKey, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tp == nil {
		return nil, nil, errors.New("unsealing: TPM closed")
	}
	srk, err := createSRK(t.tp)
	if err != nil {
		return nil, nil, err
	}
	defer srk.flush(t.tp)
	if !bytes.Equal(srk.name.Buffer, b.parentName) {
		return nil, nil, fmt.Errorf("%w: its storage key is %x, this TPM's is %x", ErrWrongTPM, b.parentName, srk.name.Buffer)
	}

	loaded, err := tpm2.Load{
		ParentHandle: tpm2.AuthHandle{
			Handle: srk.handle,
			Name:   srk.name,
			Auth:   tpm2.PasswordAuth(nil),
		},
		InPrivate: tpm2.TPM2BPrivate{Buffer: b.private},
		InPublic:  tpm2.BytesAs2B[tpm2.TPMTPublic](b.public),
	}.Execute(t.tp)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: the TPM refused to load it: %w", ErrMalformedBlob, err)
	}
	defer flush(t.tp, loaded.ObjectHandle)

	var key []byte
	var opener *rsa.PublicKey
	if b.bound() {
		key, opener, err = t.unsealBound(srk, b, tpm2.NamedHandle{Handle: loaded.ObjectHandle, Name: loaded.Name})
		if err != nil {
			return nil, nil, err
		}
	} else {
		rsp, err := tpm2.Unseal{
			ItemHandle: tpm2.AuthHandle{
				Handle: loaded.ObjectHandle,
				Name:   loaded.Name,
				Auth:   srk.session(tpm2.AESEncryption(128, tpm2.EncryptOut)),
			},
		}.Execute(t.tp)
		if err != nil {
			return nil, nil, fmt.Errorf("unsealing: %w", err)
		}
		key = rsp.OutData.Buffer
	}
	if n := len(key); n != dataKeySize {
		return nil, nil, fmt.Errorf("%w: the sealed key has %d bytes, want %d", ErrMalformedBlob, n, dataKeySize)
	}
	return key, opener, nil
}

// encrypt seals plaintext with AES-256-GCM under key: a random nonce, then
// the ciphertext and tag.
func encrypt(key, plaintext []byte) ([]byte, error) {
	aead, err := newAEAD(key)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plaintext)+aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("generating a nonce: %w", err)
	}
	return aead.Seal(nonce, nonce, plaintext, blobMagic), nil
}

// decrypt reverses encrypt.
func decrypt(key, ciphertext []byte) ([]byte, error) {
	aead, err := newAEAD(key)
	if err != nil {
		return nil, err
	}
	if len(ciphertext) < aead.NonceSize()+aead.Overhead() {
		return nil, fmt.Errorf("%w: ciphertext of %d bytes is too short", ErrMalformedBlob, len(ciphertext))
	}
	nonce, sealed := ciphertext[:aead.NonceSize()], ciphertext[aead.NonceSize():]
	plaintext, err := aead.Open(nil, nonce, sealed, blobMagic)
	if err != nil {
		return nil, fmt.Errorf("%w: the ciphertext does not match its sealed key: %w", ErrMalformedBlob, err)
	}
	return plaintext, nil
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("making the AES cipher: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("making AES-GCM: %w", err)
	}
	return aead, nil
}

// srk is the storage primary key, loaded in the TPM for one Seal or Unseal.
type srk struct {
	handle tpm2.TPMHandle
	name   tpm2.TPM2BName
	public tpm2.TPMTPublic
}

// createSRK derives the storage primary key from the owner hierarchy. The
// same TPM always derives the same key, as long as its owner seed stays.
func createSRK(tp transport.TPM) (*srk, error) {
	rsp, err := tpm2.CreatePrimary{
		PrimaryHandle: tpm2.AuthHandle{
			Handle: tpm2.TPMRHOwner,
			Auth:   tpm2.PasswordAuth(nil),
		},
		InPublic: tpm2.New2B(srkTemplate),
	}.Execute(tp)
	if err != nil {
		return nil, fmt.Errorf("creating the storage primary key: %w", err)
	}
	pub, err := rsp.OutPublic.Contents()
	if err != nil {
		flush(tp, rsp.ObjectHandle)
		return nil, fmt.Errorf("decoding the storage primary key: %w", err)
	}
	return &srk{handle: rsp.ObjectHandle, name: rsp.Name, public: *pub}, nil
}

// session returns a one-use HMAC session salted to the SRK that encrypts
// the first parameter as encryption says (AES-128 in one direction), so that
// the secret crosses the bus only under a key an eavesdropper cannot derive.
func (s *srk) session(encryption tpm2.AuthOption) tpm2.Session {
	return tpm2.HMAC(tpm2.TPMAlgSHA256, 16, tpm2.Salted(s.handle, s.public), encryption)
}

func (s *srk) flush(tp transport.TPM) { flush(tp, s.handle) }

// flush unloads a transient object. Failing to is harmless beyond a slot
// held until the connection closes (the resource manager flushes then), so
// the error is dropped.
func flush(tp transport.TPM, h tpm2.TPMHandle) {
	_, _ = tpm2.FlushContext{FlushHandle: h}.Execute(tp)
}
