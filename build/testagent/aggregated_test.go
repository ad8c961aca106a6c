package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"
)

// newCA returns a CA's certificate and key, and a client certificate of
// it for cn.
func newCA(t *testing.T, cn string) (caPEM []byte, client tls.Certificate) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
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
