package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"time"
)

// aggregatedGroupVersion is the API the agent serves as an aggregated
// apiserver.
const aggregatedGroupVersion = "test.cairn.dev/v1"

// Whoami is the answer of GET /apis/test.cairn.dev/v1/whoami: who the
// request came through and whom it speaks for.
type Whoami struct {
	// Proxy is the common name of the client certificate the request
	// came with, verified against the front proxy CA.
	Proxy string `json:"proxy"`
	// User and Groups are what the proxy named in X-Remote-User and
	// X-Remote-Group.
	User   string   `json:"user"`
	Groups []string `json:"groups"`
}

// aggregated serves aggregatedGroupVersion on addr, trusting the client
// certificates of the CA in the file caPath.
func aggregated(addr, caPath string) error {
	caPEM, err := os.ReadFile(caPath)
	if err != nil {
		return fmt.Errorf("when reading the front proxy CA: %w", err)
	}
	srv, err := aggregatedServer(caPEM)
	if err != nil {
		return err
	}
	srv.Addr = addr
	fmt.Printf("agent: serving %s on %s\n", aggregatedGroupVersion, addr)
	return srv.ListenAndServeTLS("", "")
}

// aggregatedServer returns the server of aggregatedGroupVersion, with a
// certificate it makes itself (the APIService skips verifying it),
// trusting the client certificates of the CA caPEM.
func aggregatedServer(caPEM []byte) (*http.Server, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("no certificate in the front proxy CA's file")
	}
	cert, err := selfSigned()
	if err != nil {
		return nil, err
	}
	prefix := "/apis/" + aggregatedGroupVersion
	mux := http.NewServeMux()
	// Discovery, which the apiserver's availability check and kubectl
	// read: a group version without resources.
	mux.HandleFunc("GET "+prefix, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{
			"kind": "APIResourceList", "apiVersion": "v1",
			"groupVersion": aggregatedGroupVersion, "resources": []any{},
		})
	})
	mux.HandleFunc("GET "+prefix+"/whoami", func(w http.ResponseWriter, r *http.Request) {
		// The TLS stack verified any certificate given; one must be.
		if len(r.TLS.VerifiedChains) == 0 {
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "no client certificate of the front proxy CA"})
			return
		}
		writeJSON(w, http.StatusOK, Whoami{
			Proxy:  r.TLS.VerifiedChains[0][0].Subject.CommonName,
			User:   r.Header.Get("X-Remote-User"),
			Groups: r.Header.Values("X-Remote-Group"),
		})
	})
	return &http.Server{
		Handler: mux,
		TLSConfig: &tls.Config{
			Certificates: []tls.Certificate{cert},
			ClientCAs:    pool,
			ClientAuth:   tls.VerifyClientCertIfGiven,
		},
		ReadHeaderTimeout: 10 * time.Second,
	}, nil
}

// selfSigned makes a serving certificate of its own.
func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("when generating the serving key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "agent"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("when making the serving certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}
