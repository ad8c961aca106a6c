package main

import (
	"crypto/ed25519"
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"net"
	"net/http"
	"slices"
	"testing"

	"cairn.dev/cairn/node/identity/identitytest"
	"cairn.dev/cairn/pkg/pki"
)

// newCA returns a CA's certificate, and a client certificate of it for
// cn.
func newCA(t *testing.T, cn string) (caPEM []byte, client tls.Certificate) {
	t.Helper()
	ca := identitytest.NewCA(t, "test CA")
	key := identitytest.NewKey(t)
	der := ca.Issue(t, pki.Client(cn), key.Public().(ed25519.PublicKey))
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.DER()}),
		tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestAggregatedWhoami: discovery answers anyone; whoami answers a client
// certificate of the given CA alone, with the names in its headers.
func TestAggregatedWhoami(t *testing.T) {
	caPEM, proxy := newCA(t, "cairn:front-proxy-client")
	_, stranger := newCA(t, "cairn:front-proxy-client")
	srv, err := aggregatedServer(caPEM)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	base := "https://" + ln.Addr().String() + "/apis/test.cairn.dev/v1"

	get := func(cert *tls.Certificate, url string) (*http.Response, error) {
		cfg := &tls.Config{InsecureSkipVerify: true}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("X-Remote-User", "cairn:owner")
		req.Header.Add("X-Remote-Group", "cairn:owners")
		req.Header.Add("X-Remote-Group", "system:authenticated")
		return (&http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}).Do(req)
	}

	resp, err := get(nil, base)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("discovery without a certificate = %v, %v; want 200", resp, err)
	}
	resp.Body.Close()
	resp, err = get(nil, base+"/whoami")
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("whoami without a certificate = %v, %v; want 401", resp, err)
	}
	if resp != nil {
		resp.Body.Close()
	}
	// Another CA's certificate fails the handshake.
	if resp, err := get(&stranger, base+"/whoami"); err == nil {
		resp.Body.Close()
		t.Errorf("whoami with another CA's certificate = %s, want a refused handshake", resp.Status)
	}
	resp, err = get(&proxy, base+"/whoami")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("whoami with the proxy's certificate = %v, %v; want 200", resp, err)
	}
	defer resp.Body.Close()
	var who Whoami
	if err := json.NewDecoder(resp.Body).Decode(&who); err != nil {
		t.Fatal(err)
	}
	want := Whoami{Proxy: "cairn:front-proxy-client", User: "cairn:owner", Groups: []string{"cairn:owners", "system:authenticated"}}
	if who.Proxy != want.Proxy || who.User != want.User || !slices.Equal(who.Groups, want.Groups) {
		t.Errorf("whoami = %+v, want %+v", who, want)
	}
}
