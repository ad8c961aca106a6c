package consensus

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// JoinCluster is what a node needs to join an existing cluster as a new
// member: the result of AddLearner on one of the cluster's members, handed
// to the new node's Config.Join.
type JoinCluster struct {
	// InitialCluster is etcd's initial cluster for the new member: every
	// member of the cluster, the new one included, as name=peerURL pairs.
	InitialCluster string
	// Peers are the peer URLs of the members the new one will talk to.
	Peers []string
	// CACertificate is the etcd peer CA's certificate, DER: the one CA the
	// new member's peer port trusts. It is not the cluster CA.
	CACertificate []byte
	// CRL is the peer CA's current CRL, DER.
	CRL []byte
	// PeerCertificate is the new member's peer certificate, DER, issued by
	// the peer CA for the public key given to AddLearner.
	PeerCertificate []byte
}

// validate checks that j is complete and its peer certificate is for pub and
// signed by its CA.
func (j *JoinCluster) validate(pub crypto.PublicKey) error {
	if j.InitialCluster == "" {
		return errors.New("no initial cluster")
	}
	ca, err := x509.ParseCertificate(j.CACertificate)
	if err != nil {
		return fmt.Errorf("when parsing CA certificate: %w", err)
	}
	peer, err := x509.ParseCertificate(j.PeerCertificate)
	if err != nil {
		return fmt.Errorf("when parsing peer certificate: %w", err)
	}
	if err := peer.CheckSignatureFrom(ca); err != nil {
		return fmt.Errorf("peer certificate not signed by the CA: %w", err)
	}
	if k, ok := peer.PublicKey.(ed25519.PublicKey); !ok || !k.Equal(pub) {
		return errors.New("peer certificate is not for this node's key")
	}
	if _, err := x509.ParseRevocationList(j.CRL); err != nil {
		return fmt.Errorf("when parsing CRL: %w", err)
	}
	return nil
}

// AddLearner adds a new member called name, reachable at peerURL, to the
// cluster as a learner and returns what it needs to join. Its peer
// certificate is issued by the peer CA for pub, the joining node's public
// key: no private key leaves that node. Once the learner has caught up
// with the cluster's data, a voting member promotes it (see the package
// documentation).
//
// Adding the same name and peer URL again, before the learner has started,
// returns the same data without adding a second member.
func (s *Status) AddLearner(ctx context.Context, name, peerURL string, pub ed25519.PublicKey) (*JoinCluster, error) {
	if !s.Running || s.Learner {
		return nil, errors.New("only a running voting member can add learners")
	}
	ip, err := peerIP(peerURL)
	if err != nil {
		return nil, err
	}
	caDER, peerDER, crlDER, err := issuePeer(ctx, s.raw, name, ip, pub)
	if err != nil {
		return nil, err
	}

	list, err := s.raw.MemberList(ctx)
	if err != nil {
		return nil, fmt.Errorf("when listing members: %w", err)
	}
	members := list.Members
	if m := memberByPeerURL(members, peerURL); m != nil {
		if m.Name != "" && m.Name != name {
			return nil, fmt.Errorf("peer URL %s already belongs to member %q", peerURL, m.Name)
		}
	} else {
		resp, err := s.addLearner(ctx, peerURL)
		if err != nil {
			return nil, fmt.Errorf("when adding learner: %w", err)
		}
		members = resp.Members
	}

	var initial, peers []string
	for _, m := range members {
		n := m.Name
		switch {
		case slices.Contains(m.PeerURLs, peerURL):
			n = name
		case n == "":
			// Another member that has not started yet. etcd matches
			// members by their peer URLs; the name only has to be there.
			n = fmt.Sprintf("unstarted-%x", m.ID)
			peers = append(peers, m.PeerURLs...)
		default:
			peers = append(peers, m.PeerURLs...)
		}
		for _, u := range m.PeerURLs {
			initial = append(initial, n+"="+u)
		}
	}
	return &JoinCluster{
		InitialCluster:  strings.Join(initial, ","),
		Peers:           peers,
		CACertificate:   caDER,
		CRL:             crlDER,
		PeerCertificate: peerDER,
	}, nil
}

// RemoveMember removes the member called name from the cluster and revokes
// its peer certificate, so that it cannot come back with it. If revoking
// fails after the removal, calling RemoveMember again finishes it; once
// nothing is left to do, it returns ErrNoMember. Removing the local member
// is allowed: its Service then stops with ErrMemberRemoved.
func (s *Status) RemoveMember(ctx context.Context, name string) error {
	if !s.Running || s.Learner {
		return errors.New("only a running voting member can remove members")
	}
	list, err := s.raw.MemberList(ctx)
	if err != nil {
		return fmt.Errorf("when listing members: %w", err)
	}
	var found *etcdserverpb.Member
	for _, m := range list.Members {
		if m.Name == name {
			found = m
		}
	}
	if found == nil {
		// Already removed, maybe by an earlier call that then failed
		// to revoke: make sure the certificate is revoked.
		revoked, err := s.revokePeer(ctx, name)
		if err == nil && !revoked {
			return fmt.Errorf("%w: %q", ErrNoMember, name)
		}
		return err
	}
	err = retryUnhealthy(ctx, func() error {
		_, err := s.raw.MemberRemove(ctx, found.ID)
		return err
	})
	if err != nil {
		return fmt.Errorf("when removing member %x: %w", found.ID, err)
	}
	// Revoke only once it is removed: the members' CRL files follow the
	// revocation after crlGrace, by which time the removed member has been
	// told (over peer TLS) that it is out, and stopped.
	_, err = s.revokePeer(ctx, name)
	return err
}

// Members lists the names of the cluster's members, learners included, as
// the local member knows them. A member that has not started yet has no
// name, and is listed as "".
func (s *Status) Members(ctx context.Context) ([]string, error) {
	if !s.Running {
		return nil, errors.New("etcd is not running")
	}
	list, err := s.raw.MemberList(ctx)
	if err != nil {
		return nil, fmt.Errorf("when listing members: %w", err)
	}
	names := make([]string, 0, len(list.Members))
	for _, m := range list.Members {
		names = append(names, m.Name)
	}
	slices.Sort(names)
	return names, nil
}

// revokePeer revokes and forgets the peer certificate of member name, and
// says whether there was one.
func (s *Status) revokePeer(ctx context.Context, name string) (bool, error) {
	key := PeerPKINamespace.CertificateKey(peerCertificateName(name))
	resp, err := s.raw.Get(ctx, key)
	if err != nil {
		return false, fmt.Errorf("when reading peer certificate of %q: %w", name, err)
	}
	if len(resp.Kvs) == 0 {
		return false, nil
	}
	cert, err := x509.ParseCertificate(resp.Kvs[0].Value)
	if err != nil {
		return false, fmt.Errorf("when parsing peer certificate of %q: %w", name, err)
	}
	if err := peerCA().Revoke(ctx, s.raw, cert.SerialNumber); err != nil {
		return false, err
	}
	// Forget it too, so that the node can be given a new one if it is
	// ever added again.
	if _, err := s.raw.Delete(ctx, key); err != nil {
		return false, fmt.Errorf("when deleting peer certificate of %q: %w", name, err)
	}
	return true, nil
}

// addLearner adds peerURL as a learner.
func (s *Status) addLearner(ctx context.Context, peerURL string) (*clientv3.MemberAddResponse, error) {
	var resp *clientv3.MemberAddResponse
	err := retryUnhealthy(ctx, func() error {
		var err error
		resp, err = s.raw.MemberAddAsLearner(ctx, []string{peerURL})
		return err
	})
	return resp, err
}

// retryUnhealthy runs a membership change f, again and again as long as ctx
// allows while etcd refuses it because the cluster is not healthy: with
// strict reconfiguration checks, etcd wants every voting member connected
// for a few seconds first, which a member promoted a moment ago is not yet.
func retryUnhealthy(ctx context.Context, f func() error) error {
	backoff := 250 * time.Millisecond
	for {
		err := f()
		if !errors.Is(err, rpctypes.ErrUnhealthy) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (gave up waiting: %w)", err, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func memberByPeerURL(members []*etcdserverpb.Member, peerURL string) *etcdserverpb.Member {
	for _, m := range members {
		if slices.Contains(m.PeerURLs, peerURL) {
			return m
		}
	}
	return nil
}

// peerIP returns the IP of a peer URL, which must be https://IP:port.
func peerIP(peerURL string) (net.IP, error) {
	u, err := url.Parse(peerURL)
	if err != nil {
		return nil, fmt.Errorf("invalid peer URL %q: %w", peerURL, err)
	}
	ip := net.ParseIP(u.Hostname())
	if u.Scheme != "https" || ip == nil || u.Port() == "" {
		return nil, fmt.Errorf("invalid peer URL %q: want https://IP:port", peerURL)
	}
	return ip, nil
}
