// Package tpmseal seals secrets of up to MaxSecretSize to this machine's
// TPM 2.0, so that what it returns is useless anywhere else: Cairn keeps a
// node's sealed configuration (its unlock keys) on the ESP, where a copied
// disk or a stolen ESP must not give it away.
//
// # How a secret is sealed
//
// The secret is encrypted with a fresh AES-256 key (AES-GCM), and that key
// is what the TPM seals: a sealed data object holds at most 128 bytes, a
// sealed configuration more.
//
//	      Seal(secret)                          Unseal(blob)
//	           │                                     │
//	key = 32 random bytes                       parse blob (magic, version,
//	ciphertext = AES-256-GCM(key, secret)         checksum, fields)
//	           │                                     │
//	CreatePrimary(owner, ECC P-256 SRK template)  CreatePrimary (same key again)
//	  same seed + same template = same key,     compare its name with the blob's
//	  so nothing is kept in the TPM               differs: ErrWrongTPM
//	           │                                     │
//	Create(sealed data object holding key,      Load(public, private) under SRK
//	  parent SRK); key encrypted on the bus          │
//	  by a session salted to the SRK            Unseal: key returned encrypted
//	           │                                  by a session salted to the SRK
//	           ▼                                     ▼
//	blob = magic, version, SRK name, public,    secret = AES-256-GCM open
//	       private, ciphertext, checksum          (key, ciphertext)
//
// The storage primary key (SRK) is derived by the TPM from the owner
// hierarchy's seed and the TCG's standard ECC SRK template, so every
// CreatePrimary gives the same key and nothing needs to be made persistent
// in the TPM. The sealed object's private part is encrypted and
// integrity-protected by the TPM with keys from that SRK, which never leaves
// the TPM. Only a TPM with the same owner seed can load it: another machine,
// or this one after its TPM was cleared, cannot.
//
// # Blob format (version 1)
//
//	"CTPM" | version 1 | name | public | private | ciphertext | SHA-256 of everything before
//
// where each field is a big-endian uint16 length and that many bytes: the
// SRK's TPM name, the sealed object's TPMT_PUBLIC and its TPM2B_PRIVATE
// contents exactly as the TPM returned them, and the GCM nonce followed by
// the encrypted secret and tag. The checksum is not a security measure
// (anyone can recompute it); it lets Unseal tell a damaged blob
// (ErrMalformedBlob) from one of another TPM (ErrWrongTPM). The TPM's own
// integrity check on the private part and GCM's tag are what stop forgeries.
//
// # What is protected, and what is not
//
// Protected:
//
//   - The blob off this machine. Without this TPM's owner seed nobody can
//     load the private part, so a copy of the ESP or disk reveals nothing.
//   - The secret on the bus between CPU and TPM (a discrete TPM is on an
//     LPC/SPI bus that can be sniffed). The secret never goes to the TPM;
//     its AES key does, in Create and Unseal, which run with an HMAC session
//     salted to the SRK's public key (ECDH P-256). The session encrypts the
//     key with AES-128-CFB: into the TPM for Create, out of it for Unseal.
//   - A swapped SRK at unseal time: the SRK's name recorded in the blob must
//     match the key the TPM derives now before the session is salted to it.
//
// Not protected, by an unbound seal (Seal without Bind):
//
//   - Anyone who can talk to this TPM can unseal: root on the running node,
//     or another operating system booted on the same machine. The sealed
//     object has an empty authorization value and no policy.
//   - An active attacker on the bus while sealing: the SRK public key is
//     taken on trust when Seal runs (there is no endorsement key check).
//   - An owner hierarchy with an authorization value set: Cairn assumes the
//     owner auth is empty, as firmware leaves it, and fails otherwise.
//
// # Bound seals (blob version 2)
//
// A TPM given a Binding (Bind: the release's RSA PCR key and the signed
// PCR 11 policies of the booted UKI) seals objects that only a policy
// opens: TPM2_PolicyAuthorize by the PCR key, then TPM2_PolicyPCR over
// PCR 7 as it was when sealing (see bound.go). The release signs, at
// build time, the policy "PCR 11 holds v" for the value v that systemd's
// stub leaves in PCR 11 after measuring its UKI (pcrsig.go: the
// signature file's format is systemd-measure's). So any UKI of a release
// signed by that key unseals, after an update as well, and nothing else:
// another kernel, initramfs or command line changes PCR 11, and turning
// Secure Boot off or changing its keys changes PCR 7. EndUnsealing then
// extends PCR 11 with a marker of Cairn's, so that nothing later in the
// same boot unseals again.
//
// A version 2 blob adds to version 1's fields PCR 7's value when sealing
// and the TPMT_PUBLIC of each PCR key it trusts (the policy names their
// TPM names), one or two. They are checked against the object's policy
// when parsing.
//
// The PCR keys are fixed into the object when sealing: a release signed
// by no key it trusts cannot unseal. To follow a rotation of the key,
// Rebind seals again, while the secret is at hand, trusting the key that
// opened the blob and the new one: the policy is then TPM2_PolicyOR of
// each key's branch, and the blob carries both keys (at most two).
//
// # Concurrency
//
// A TPM is safe for concurrent use; commands are serialised on it.
package tpmseal
