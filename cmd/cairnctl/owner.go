package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/proto/api"
)

// The owner's credentials: renewing the owner certificate before owner
// commands, the `owner` commands, and what cairnctl says when the cluster
// refuses the certificate.
//
//	every owner command (renewedOwner)
//	  certificate not for the key held, expired, or less than a third of
//	  its lifetime left ─▶ AAA.Escrow with the owner key, pinned to the
//	  CA ─▶ owner-certificate.pem, one line on stderr
//	owner rotate-key
//	  new key ─▶ owner-key.new.pem ─▶ RotateOwnerKey ─▶ copy owner-key.pem
//	  to owner-key.old.pem ─▶ rename owner-key.new.pem to owner-key.pem ─▶
//	  owner-certificate.pem ─▶ remove owner-key.old.pem
//
// A rotation never loses a key the cluster may trust: the new key is on
// disk before the cluster hears of it, and stays in owner-key.new.pem until
// it is installed. When the answer is lost, or cairnctl stops, rotate-key
// run again first escrows with that key: the cluster accepts it only if it
// took the rotation, and then rotate-key installs it; otherwise it rotates
// to that same key. A stop between the rename and the certificate's write
// leaves a certificate of the old key beside the new key, which the next
// command renews.

// renewalTimeout bounds the escrow that renews the owner certificate before
// a command, so that a cluster without a leader costs a command that much,
// not its whole deadline.
const renewalTimeout = 10 * time.Second

// renewalDue says why the owner certificate certDER should be renewed at
// now, "" when it need not be: it is not for key (a rotation stopped
// between its two writes), it expired, or less than a third of its
// lifetime is left. Renewing at a third leaves the curator, which issues a
// new certificate once half has passed, room for clocks that are apart.
func renewalDue(key ed25519.PrivateKey, certDER []byte, now time.Time) (string, error) {
	cert, err := x509.ParseCertificate(certDER)
	if err != nil {
		return "", fmt.Errorf("when parsing the owner certificate: %w", err)
	}
	pub, ok := cert.PublicKey.(ed25519.PublicKey)
	switch {
	case !ok || !pub.Equal(key.Public()):
		return "it is not for the owner key held", nil
	case !now.Before(cert.NotAfter):
		return "it expired at " + cert.NotAfter.UTC().Format(time.RFC3339), nil
	case cert.NotAfter.Sub(now) < cert.NotAfter.Sub(cert.NotBefore)/3:
		return "less than a third of its lifetime is left", nil
	}
	return "", nil
}

// renewedOwner is owner, with the owner certificate renewed first when it
// is due. A renewal that fails is reported on stderr, and the command goes
// on with the certificate it has: the call says whether it still serves.
func (a *app) renewedOwner(ctx context.Context) (*owner, error) {
	o, err := a.loadOwner()
	if err != nil {
		return nil, err
	}
	if pending := filepath.Join(o.dir, ownerKeyNewFile); exists(pending) {
		fmt.Fprintf(a.errOut, "cairnctl: an owner key rotation is unfinished (%s holds the new key): run `cairnctl owner rotate-key` to finish it\n", pending)
	}
	why, err := renewalDue(o.key, o.certDER, time.Now())
	if err != nil {
		return nil, err
	}
	if why != "" {
		rctx, cancel := context.WithTimeout(ctx, min(renewalTimeout, a.timeout/3))
		defer cancel()
		if err := a.renewOwnerCertificate(rctx, o, why); err != nil {
			fmt.Fprintf(a.errOut, "cairnctl: could not renew the owner certificate (%s): %v\n", why, err)
		}
	}
	if err := o.setCertificate(o.certDER); err != nil {
		return nil, fmt.Errorf("%w; `cairnctl owner renew` gets a certificate for the owner key once the cluster answers", err)
	}
	return o, nil
}

// renewOwnerCertificate escrows a new owner certificate with o's key,
// stores it and makes o dial with it, and says so on stderr; why says why
// it was due.
func (a *app) renewOwnerCertificate(ctx context.Context, o *owner, why string) error {
	res, err := escrowPinned(ctx, o, o.key)
	if err != nil {
		return err
	}
	if bytes.Equal(res.ownerCert, o.certDER) {
		return errSameCertificate
	}
	if err := writeCertificate(o.dir, ownerCertFile, res.ownerCert); err != nil {
		return err
	}
	o.certDER = res.ownerCert
	cert, err := x509.ParseCertificate(res.ownerCert)
	if err != nil {
		return fmt.Errorf("when parsing the renewed owner certificate: %w", err)
	}
	fmt.Fprintf(a.errOut, "Renewed the owner certificate (%s): serial %s, valid until %s.\n", why, rpc.FormatSerial(cert.SerialNumber.Bytes()), cert.NotAfter.UTC().Format(time.RFC3339))
	return nil
}

// errSameCertificate is renewOwnerCertificate's error when the cluster
// hands back the certificate held, as it does while that one has more than
// half of its lifetime left.
var errSameCertificate = errors.New("the cluster handed back the certificate held: it renews one only once half of its lifetime has passed (are the clocks of this machine and of the cluster apart?)")

// escrowPinned runs AAA.Escrow with key on o's curators, trusting only
// servers of o's cluster CA (unlike takeownership, which has no CA yet).
func escrowPinned(ctx context.Context, o *owner, key ed25519.PrivateKey) (*escrowResult, error) {
	creds, err := rpc.EphemeralCredentials(o.caDER, nil)
	if err != nil {
		return nil, fmt.Errorf("with the CA in %s: %w", o.dir, err)
	}
	var res *escrowResult
	_, err = failover(ctx, o.endpoints, creds, o.timing, "escrowing an owner certificate", func(ctx context.Context, conn *grpc.ClientConn) error {
		var err error
		res, err = escrowOn(ctx, conn, key)
		return err
	})
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(res.caDER, o.caDER) {
		return nil, fmt.Errorf("the cluster answered with CA SHA256:%s, but %s holds CA SHA256:%s: refusing to mix clusters", fingerprint(res.caDER), o.dir, fingerprint(o.caDER))
	}
	return res, nil
}

// explainOwnerRefusal adds to err, when it is the cluster refusing o's
// owner certificate, how the operator recovers.
func explainOwnerRefusal(o *owner, err error) error {
	r := rpc.OwnerRefusalOf(err)
	switch r.GetReason() {
	case api.OwnerCertificateRefusal_REASON_REVOKED:
		return fmt.Errorf("%w\nThe cluster revoked the owner certificate in %s (serial %s). While the owner key there is the cluster's, `cairnctl owner renew` gets a new certificate for it; if the key may be in other hands, rotate it with `cairnctl owner rotate-key` after that", err, o.dir, rpc.FormatSerial(r.GetSerial()))
	case api.OwnerCertificateRefusal_REASON_KEY_ROTATED:
		if pending := filepath.Join(o.dir, ownerKeyNewFile); exists(pending) {
			return fmt.Errorf("%w\nAn unfinished rotation left the new owner key in %s: run `cairnctl owner rotate-key` to finish it", err, pending)
		}
		return fmt.Errorf("%w\nThe owner key in %s is no longer the cluster's: it was rotated, here or on another machine. Copy the configuration of the machine that rotated it (`cairnctl config add-context NAME --from DIR`)", err, o.dir)
	}
	return err
}

// exists says whether path names a file.
func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func newOwnerCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "owner",
		Short: "Look at and change the owner's key and certificates",
		Long: "The owner key (owner-key.pem) is what the cluster trusts; the owner\n" +
			"certificate (owner-certificate.pem) is what every call shows, and cairnctl\n" +
			"renews it before any command once less than a third of its lifetime is left.",
	}
	var force bool
	revoke := &cobra.Command{
		Use:   "revoke SERIAL",
		Short: "Make every node refuse the owner certificate with serial SERIAL (hex)",
		Long: "revoke makes every node refuse an owner certificate until it expires: the\n" +
			"curators at once, the other nodes within a moment. SERIAL is hex, as `owner\n" +
			"show` prints it. Revoking withdraws a certificate, not the key: whoever holds\n" +
			"the owner key gets a new certificate. After a lost machine, rotate the key.\n" +
			"Revoking the certificate this configuration holds needs --force; get a new\n" +
			"one after that with `owner renew`.",
		Args: exactArgs("SERIAL"),
		RunE: func(cmd *cobra.Command, args []string) error {
			serial, err := parseSerial(args[0])
			if err != nil {
				return err
			}
			return a.runAsOwner(cmd.Context(), args, func(ctx context.Context, o *owner, _ []string) error {
				return a.revokeOwnerCertificate(ctx, o, serial, force)
			})
		},
	}
	revoke.Flags().BoolVar(&force, "force", false, "revoke the certificate even when it is the one this configuration holds")
	cmd.AddCommand(&cobra.Command{
		Use:   "show",
		Short: "Show the owner certificate held, and the owner key and certificates the cluster trusts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runAsOwner(cmd.Context(), args, a.ownerShow)
		},
	}, &cobra.Command{
		Use:   "renew",
		Short: "Get a new owner certificate for the owner key now",
		Long: "renew trades a proof of the owner key for a new owner certificate (AAA.Escrow),\n" +
			"as cairnctl does by itself before a command when the certificate nears its end.\n" +
			"Use it after the certificate was revoked, or expired.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := a.withTimeout(cmd.Context())
			defer cancel()
			o, err := a.loadOwner()
			if err != nil {
				return err
			}
			err = a.renewOwnerCertificate(ctx, o, "asked for")
			if errors.Is(err, errSameCertificate) {
				a.printf("The owner certificate held is current: the cluster handed it back.\n")
				return nil
			}
			return explainOwnerRefusal(o, err)
		},
	}, &cobra.Command{
		Use:   "rotate-key",
		Short: "Replace the owner key: the cluster refuses the old one from then on",
		Long: "rotate-key makes a new owner key, proves it to the cluster, and installs it\n" +
			"with its certificate in place of the old ones. From then on every node refuses\n" +
			"certificates of the old key, and Escrow refuses the old key: copy this\n" +
			"configuration to every other machine that acts as the owner. The new key is\n" +
			"kept in owner-key.new.pem until it is installed; if the command stops before,\n" +
			"run it again: it checks whether the cluster took that key and finishes.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runAsOwner(cmd.Context(), args, func(ctx context.Context, o *owner, _ []string) error {
				return a.rotateOwnerKey(ctx, o)
			})
		},
	}, revoke)
	return cmd
}

// parseSerial reads a certificate serial number in hex, as `owner show`
// prints it; colons between bytes are allowed, as other tools print them.
func parseSerial(s string) ([]byte, error) {
	digits := strings.ReplaceAll(strings.TrimPrefix(strings.ToLower(s), "0x"), ":", "")
	n, ok := new(big.Int).SetString(digits, 16)
	if digits == "" || !ok || n.Sign() <= 0 || len(n.Bytes()) > 20 {
		return nil, fmt.Errorf("%q is not a certificate serial number: want up to 40 hex digits, as `cairnctl owner show` prints them", s)
	}
	return n.Bytes(), nil
}

// ownerCertificateView is an owner certificate as `owner show` prints it.
type ownerCertificateView struct {
	// Serial is the serial number in hex.
	Serial string `json:"serial"`
	// Key names the owner key the certificate is for
	// (rpc.OwnerKeyFingerprint).
	Key       string    `json:"key"`
	NotBefore time.Time `json:"not_before"`
	NotAfter  time.Time `json:"not_after"`
	// State is "valid", "revoked", or "old key" for a certificate of a
	// key the cluster no longer trusts.
	State string `json:"state"`
	// Held marks the certificate this configuration holds.
	Held bool `json:"held"`
}

// ownerView is `owner show -o json`.
type ownerView struct {
	Dir string `json:"dir"`
	// Key names the owner key this configuration holds; ClusterKey the
	// one the cluster trusts.
	Key        string `json:"key"`
	ClusterKey string `json:"cluster_key"`
	// Certificate is the owner certificate held.
	Certificate ownerCertificateView `json:"certificate"`
	// RenewAfter is when cairnctl renews it before a command.
	RenewAfter time.Time `json:"renew_after"`
	// Certificates are those the cluster issued that have not expired.
	Certificates []ownerCertificateView `json:"certificates"`
}

func (a *app) ownerShow(ctx context.Context, o *owner, _ []string) error {
	var res *api.GetOwnerTrustResponse
	err := o.curator(ctx, "getting the owner trust", func(ctx context.Context, conn *grpc.ClientConn) error {
		var err error
		res, err = api.NewManagementClient(conn).GetOwnerTrust(ctx, &api.GetOwnerTrustRequest{})
		return err
	})
	if err != nil {
		return err
	}
	trust := res.GetTrust()
	state := func(serial, key []byte) string {
		switch {
		case !bytes.Equal(key, trust.GetOwnerPublicKey()):
			return "old key"
		case revokedIn(trust, serial):
			return "revoked"
		}
		return "valid"
	}
	held, err := x509.ParseCertificate(o.certDER)
	if err != nil {
		return fmt.Errorf("when parsing the owner certificate: %w", err)
	}
	heldSerial := held.SerialNumber.Bytes()
	pub := o.key.Public().(ed25519.PublicKey)
	v := ownerView{
		Dir:        o.dir,
		Key:        rpc.OwnerKeyFingerprint(pub),
		ClusterKey: rpc.OwnerKeyFingerprint(trust.GetOwnerPublicKey()),
		Certificate: ownerCertificateView{
			Serial: rpc.FormatSerial(heldSerial), Key: rpc.OwnerKeyFingerprint(pub),
			NotBefore: held.NotBefore.UTC(), NotAfter: held.NotAfter.UTC(),
			State: state(heldSerial, pub), Held: true,
		},
		RenewAfter:   held.NotAfter.Add(-held.NotAfter.Sub(held.NotBefore) / 3).UTC(),
		Certificates: []ownerCertificateView{},
	}
	for _, c := range res.GetCertificates() {
		v.Certificates = append(v.Certificates, ownerCertificateView{
			Serial:    rpc.FormatSerial(c.GetSerial()),
			Key:       rpc.OwnerKeyFingerprint(c.GetOwnerPublicKey()),
			NotBefore: time.Unix(0, c.GetNotBeforeUnixNanos()).UTC(),
			NotAfter:  time.Unix(0, c.GetNotAfterUnixNanos()).UTC(),
			State:     state(c.GetSerial(), c.GetOwnerPublicKey()),
			Held:      bytes.Equal(c.GetSerial(), heldSerial),
		})
	}
	if a.output == outputJSON {
		return writeJSON(a.out, v)
	}
	tw := tabwriter.NewWriter(a.out, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "Owner key held:\t%s\n", v.Key)
	fmt.Fprintf(tw, "Cluster's owner key:\t%s\n", v.ClusterKey)
	fmt.Fprintf(tw, "Certificate held:\tserial %s, %s, valid until %s\n", v.Certificate.Serial, v.Certificate.State, v.Certificate.NotAfter.Format(time.RFC3339))
	fmt.Fprintf(tw, "Renewed after:\t%s\n", v.RenewAfter.Format(time.RFC3339))
	fmt.Fprintf(tw, "Issued by the cluster:\t%d\n", len(v.Certificates))
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("when writing the owner credentials: %w", err)
	}
	tw = tabwriter.NewWriter(a.out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "  SERIAL\tKEY\tNOT AFTER\tSTATE\tHELD")
	for _, c := range v.Certificates {
		mark := ""
		if c.Held {
			mark = "*"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", c.Serial, c.Key, c.NotAfter.Format(time.RFC3339), c.State, mark)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("when writing the owner credentials: %w", err)
	}
	return nil
}

// revokedIn says whether trust revokes serial.
func revokedIn(trust *api.OwnerTrust, serial []byte) bool {
	for _, r := range trust.GetRevoked() {
		if bytes.Equal(r.GetSerial(), serial) {
			return true
		}
	}
	return false
}

func (a *app) revokeOwnerCertificate(ctx context.Context, o *owner, serial []byte, force bool) error {
	held, err := x509.ParseCertificate(o.certDER)
	if err != nil {
		return fmt.Errorf("when parsing the owner certificate: %w", err)
	}
	own := bytes.Equal(held.SerialNumber.Bytes(), serial)
	if own && !force {
		return fmt.Errorf("owner certificate %s is the one %s holds and this command calls with: once it is revoked, cairnctl must get a new one (`cairnctl owner renew`) before its next command. Give --force if that is what you want", rpc.FormatSerial(serial), o.dir)
	}
	var res *api.RevokeOwnerCertificateResponse
	err = o.curator(ctx, "revoking owner certificate "+rpc.FormatSerial(serial), func(ctx context.Context, conn *grpc.ClientConn) error {
		var err error
		res, err = api.NewManagementClient(conn).RevokeOwnerCertificate(ctx, &api.RevokeOwnerCertificateRequest{Serial: serial, AllowOwn: force})
		return err
	})
	if err != nil {
		return err
	}
	a.printf("Revoked owner certificate %s: every node refuses it from now on, until it expires at %s.\n",
		rpc.FormatSerial(serial), time.Unix(0, res.GetRevoked().GetNotAfterUnixNanos()).UTC().Format(time.RFC3339))
	if own {
		a.printf("It was the certificate %s holds: run `cairnctl owner renew` for a new one.\n", o.dir)
	}
	return nil
}

// rotateOwnerKey runs `owner rotate-key` (see the top of this file).
func (a *app) rotateOwnerKey(ctx context.Context, o *owner) error {
	pending := filepath.Join(o.dir, ownerKeyNewFile)
	next, err := readKeyFile(o.dir, ownerKeyNewFile)
	switch {
	case err == nil:
		a.printf("Found the new owner key %s of an unfinished rotation; asking the cluster whether it took it.\n", pending)
		res, err := escrowPinned(ctx, o, next)
		if err == nil {
			return a.installOwnerKey(o, next, res.ownerCert)
		}
		if status.Code(err) != codes.PermissionDenied {
			return fmt.Errorf("when asking the cluster whether it took the owner key in %s (run rotate-key again): %w", pending, err)
		}
		// The cluster never took it: rotate to that key now.
	case errors.Is(err, os.ErrNotExist):
		if next, err = newKeyFile(o.dir, ownerKeyNewFile); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%w (an unfinished rotation left it; if the cluster refuses the old key, that file holds the owner key)", err)
	}
	var res *api.RotateOwnerKeyResponse
	_, err = failover(ctx, o.endpoints, o.creds, o.timing, "rotating the owner key", func(ctx context.Context, conn *grpc.ClientConn) error {
		var err error
		res, err = rotateOwnerKeyOn(ctx, conn, o.key, next)
		return err
	})
	if err != nil {
		// The answer may have been lost after the cluster took the key.
		if res, eerr := escrowPinned(ctx, o, next); eerr == nil {
			return a.installOwnerKey(o, next, res.ownerCert)
		}
		return fmt.Errorf("%w\nThe new owner key stays in %s: run `cairnctl owner rotate-key` again, which first asks the cluster whether it took it", err, pending)
	}
	if !bytes.Equal(res.GetCaCertificate(), o.caDER) {
		return fmt.Errorf("the cluster answered with CA SHA256:%s, but %s holds CA SHA256:%s; the new key stays in %s", fingerprint(res.GetCaCertificate()), o.dir, fingerprint(o.caDER), pending)
	}
	return a.installOwnerKey(o, next, res.GetOwnerCertificate())
}

// rotateOwnerKeyOn calls RotateOwnerKey on conn, as the owner of key, with
// a proof of next bound to the call's TLS session.
func rotateOwnerKeyOn(ctx context.Context, conn *grpc.ClientConn, key, next ed25519.PrivateKey) (*api.RotateOwnerKeyResponse, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := api.NewManagementClient(conn).RotateOwnerKey(ctx)
	if err != nil {
		return nil, err
	}
	cs, ok := rpc.TLSConnectionState(stream.Context())
	if !ok {
		return nil, errors.New("rotation stream runs without TLS")
	}
	nextPub := next.Public().(ed25519.PublicKey)
	payload, err := rpc.OwnerRotationProofPayload(key.Public().(ed25519.PublicKey), nextPub, cs)
	if err != nil {
		return nil, fmt.Errorf("when building the proof: %w", err)
	}
	// A refused stream may be closed before the request leaves; the
	// verdict comes with CloseAndRecv.
	_ = stream.Send(&api.RotateOwnerKeyRequest{NewOwnerPublicKey: nextPub, Proof: ed25519.Sign(next, payload)})
	res, err := stream.CloseAndRecv()
	if err != nil {
		return nil, err
	}
	if _, err := rpc.OwnerCredentials(next, res.GetOwnerCertificate(), res.GetCaCertificate()); err != nil {
		return nil, fmt.Errorf("refusing the returned owner certificate: %w", err)
	}
	return res, nil
}

// installOwnerKey makes next, which the cluster took, and certDER, its
// certificate, the context's owner key and certificate. The old key is
// kept in owner-key.old.pem until the new one is in place.
func (a *app) installOwnerKey(o *owner, next ed25519.PrivateKey, certDER []byte) error {
	old, err := os.ReadFile(filepath.Join(o.dir, ownerKeyFile))
	if err != nil {
		return fmt.Errorf("when keeping the old owner key: %w", err)
	}
	if err := writeFileAtomic(o.dir, ownerKeyOldFile, old, 0o600); err != nil {
		return fmt.Errorf("when keeping the old owner key: %w", err)
	}
	if err := os.Rename(filepath.Join(o.dir, ownerKeyNewFile), filepath.Join(o.dir, ownerKeyFile)); err != nil {
		return fmt.Errorf("when installing the new owner key: %w", err)
	}
	if err := fsyncDir(o.dir); err != nil {
		return fmt.Errorf("when installing the new owner key: %w", err)
	}
	if err := writeCertificate(o.dir, ownerCertFile, certDER); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(o.dir, ownerKeyOldFile)); err != nil {
		return fmt.Errorf("when removing the old owner key: %w", err)
	}
	cert, err := x509.ParseCertificate(certDER)
	if err != nil {
		return fmt.Errorf("when parsing the new owner certificate: %w", err)
	}
	a.printf("Rotated the owner key: %s replaced %s. Every node refuses certificates of\nthe old key from now on; copy %s to the other machines that act as the owner.\n",
		rpc.OwnerKeyFingerprint(next.Public().(ed25519.PublicKey)), rpc.OwnerKeyFingerprint(o.key.Public().(ed25519.PublicKey)), o.dir)
	a.printf("Owner certificate %s, valid until %s.\n", rpc.FormatSerial(cert.SerialNumber.Bytes()), cert.NotAfter.UTC().Format(time.RFC3339))
	return nil
}
