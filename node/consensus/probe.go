package consensus

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"syscall"
	"time"
)

// A member removed from the cluster while its etcd was down does not learn
// it from etcd on its next start: once the cluster's CRL has reached its
// peers, they close every connection it makes right after the TLS
// handshake, and it waits for a leader forever. (Before that, they answer
// it that it was removed, its server stops, and the fatal trap spots why.)
//
// So while a member with data takes long to become ready, start asks its
// peers itself, over peer TLS with its own certificate:
//
//	GET https://<peer>/members
//	   200, this member listed ───────────▶ member   (keep waiting)
//	   200 without it, or 410 Gone ───────▶ removed
//	   handshake done, then closed ───────▶ refused  (revoked certificate)
//	   anything else ─────────────────────▶ unknown
//
// The member counts as removed when no peer lists it and at least one
// removed or refused it, on two probes in a row. A refusal counts only
// when the connection left from an IP of this member's certificate:
// otherwise etcd's check of the source address would refuse it as well.
const (
	// probeAfter is how long a start waits before probing the peers,
	// probeInterval how long between two probes.
	probeAfter    = 5 * time.Second
	probeInterval = 5 * time.Second
	// probeTimeout bounds one probe of one peer.
	probeTimeout = 3 * time.Second
)

// peerAnswer is what one peer said of this member.
type peerAnswer int

const (
	answerUnknown peerAnswer = iota
	answerMember
	answerRemoved
	answerRefused
)

func (a peerAnswer) String() string {
	return [...]string{"unknown", "member", "removed", "refused"}[a]
}

// removalProbe asks the peers of a starting member whether they still
// count it in.
type removalProbe struct {
	id      uint64
	cluster string
	peers   []string
	tls     *tls.Config
	certIPs []net.IP
	// verdicts counts the probes in a row that found the member removed.
	verdicts int
}

// newRemovalProbe prepares a probe of the peers of inst (its view of the
// cluster) with the member's peer TLS files.
func (s *Service) newRemovalProbe(inst *instance) (*removalProbe, error) {
	srv := inst.e.Server
	p := &removalProbe{id: uint64(srv.MemberID()), cluster: srv.Cluster().ID().String()}
	for _, m := range srv.Cluster().Members() {
		if uint64(m.ID) != p.id {
			p.peers = append(p.peers, m.PeerURLs...)
		}
	}
	pair, err := tls.LoadX509KeyPair(s.tlsPath(peerCertFile), s.tlsPath(peerKeyFile))
	if err != nil {
		return nil, fmt.Errorf("when loading peer certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("when parsing peer certificate: %w", err)
	}
	caPEM, err := os.ReadFile(s.tlsPath(caFile))
	if err != nil {
		return nil, fmt.Errorf("when reading peer CA: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("no peer CA certificate in its file")
	}
	p.certIPs = cert.IPAddresses
	p.tls = &tls.Config{
		Certificates: []tls.Certificate{pair},
		RootCAs:      roots,
		MinVersion:   tls.VersionTLS12,
	}
	return p, nil
}

// removed probes every peer once and tells whether this probe and the one
// before found the member removed. why says what the peers answered.
func (p *removalProbe) removed(ctx context.Context) (removed bool, why string) {
	counts := make(map[peerAnswer]int)
	for _, u := range p.peers {
		counts[p.ask(ctx, u)]++
	}
	why = fmt.Sprintf("of %d peers, %d refused this member, %d do not list it, %d list it, %d did not tell",
		len(p.peers), counts[answerRefused], counts[answerRemoved], counts[answerMember], counts[answerUnknown])
	if counts[answerMember] == 0 && counts[answerRefused]+counts[answerRemoved] > 0 {
		p.verdicts++
	} else {
		p.verdicts = 0
	}
	return p.verdicts >= 2, why
}

// ask asks the peer at peerURL for its member list.
func (p *removalProbe) ask(ctx context.Context, peerURL string) peerAnswer {
	u, err := url.Parse(peerURL)
	if err != nil || u.Scheme != "https" {
		return answerUnknown
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	cfg := p.tls.Clone()
	cfg.ServerName = u.Hostname()
	d := tls.Dialer{Config: cfg}
	conn, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return answerUnknown
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		conn.SetDeadline(deadline)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, peerURL+"/members", nil)
	if err != nil {
		return answerUnknown
	}
	req.Close = true
	if err := req.Write(conn); err != nil {
		return p.refusal(conn, err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return p.refusal(conn, err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("X-Etcd-Cluster-ID") != p.cluster {
		return answerUnknown
	}
	switch resp.StatusCode {
	case http.StatusGone:
		return answerRemoved
	case http.StatusOK:
	default:
		return answerUnknown
	}
	var members []struct {
		ID uint64 `json:"id"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&members); err != nil {
		return answerUnknown
	}
	for _, m := range members {
		if m.ID == p.id {
			return answerMember
		}
	}
	return answerRemoved
}

// refusal classifies an error on a connection whose handshake succeeded:
// a close without a word, from an address that the peer's check of our
// certificate accepts, is the peer refusing our certificate.
func (p *removalProbe) refusal(conn net.Conn, err error) peerAnswer {
	if !closedByPeer(err) {
		return answerUnknown
	}
	local, ok := conn.LocalAddr().(*net.TCPAddr)
	if !ok || !slices.ContainsFunc(p.certIPs, local.IP.Equal) {
		return answerUnknown
	}
	return answerRefused
}

// closedByPeer tells whether err, met writing to or reading from a
// connection, says that the peer closed it: without a word (EOF) or
// abruptly.
func closedByPeer(err error) bool {
	for _, closed := range []error{io.EOF, io.ErrUnexpectedEOF, syscall.ECONNRESET, syscall.EPIPE} {
		if errors.Is(err, closed) {
			return true
		}
	}
	return false
}
