package kubernetes

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// apiClient makes the few REST calls Cairn's own code needs of an
// apiserver, with a credential of the Kubernetes CA. It stays this small on
// purpose: client-go's dependencies would weigh on every build of the
// node for a handful of requests.
type apiClient struct {
	server string
	http   *http.Client
}

// newAPIClient returns a client of the apiserver at server (https://...)
// that presents cred and trusts only the Kubernetes CA.
func newAPIClient(server string, cred *credential) (*apiClient, error) {
	pair, err := tls.LoadX509KeyPair(cred.Cert, cred.Key)
	if err != nil {
		return nil, fmt.Errorf("when loading %s: %w", cred.Cert, err)
	}
	pool, err := loadPool(cred.CA)
	if err != nil {
		return nil, err
	}
	return apiClientWith(server, pair, pool), nil
}

// apiClientWith returns a client of the apiserver at server that presents
// cert and trusts only ca.
func apiClientWith(server string, cert tls.Certificate, ca *x509.CertPool) *apiClient {
	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: ca, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: 10 * time.Second,
	}
	return &apiClient{server: server, http: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// statusError is an answer of the apiserver other than 2xx.
type statusError struct {
	Code    int
	Message string
}

func (e *statusError) Error() string {
	return fmt.Sprintf("apiserver answered %d: %s", e.Code, e.Message)
}

// answered reports whether err is the apiserver's answer code.
func answered(err error, code int) bool {
	var se *statusError
	return errors.As(err, &se) && se.Code == code
}

// do sends a request with body (JSON, or nil) of contentType and decodes a
// JSON answer into out (nil to drop it).
func (c *apiClient) do(ctx context.Context, method, path, contentType string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("when encoding %s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.server+path, rd)
	if err != nil {
		return fmt.Errorf("when building %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/json")
	res, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("when calling %s %s: %w", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("when reading the answer to %s %s: %w", method, path, err)
	}
	if res.StatusCode/100 != 2 {
		var st struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(b, &st) != nil || st.Message == "" {
			st.Message = string(b)
		}
		return fmt.Errorf("%s %s: %w", method, path, &statusError{Code: res.StatusCode, Message: st.Message})
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("when decoding the answer to %s %s: %w", method, path, err)
	}
	return nil
}

// apply creates or updates the object at path (its REST path, with name)
// by server-side apply, as field manager "cairn": fields Cairn sets are
// set back when someone changes them, others are left alone. A role
// binding's role cannot change, so a binding that names another role (one
// Cairn bound to another role in an earlier version) is deleted and made
// again.
func (c *apiClient) apply(ctx context.Context, path string, obj any) error {
	patch := func() error {
		return c.do(ctx, http.MethodPatch, path+"?fieldManager=cairn&force=true", "application/apply-patch+yaml", obj, nil)
	}
	err := patch()
	if !answered(err, http.StatusUnprocessableEntity) || !strings.Contains(err.Error(), "cannot change roleRef") {
		return err
	}
	if err := c.do(ctx, http.MethodDelete, path, "", nil, nil); err != nil && !answered(err, http.StatusNotFound) {
		return fmt.Errorf("when deleting %s to bind it to another role: %w", path, err)
	}
	return patch()
}

// get decodes the object at path into out.
func (c *apiClient) get(ctx context.Context, path string, out any) error {
	return c.do(ctx, http.MethodGet, path, "", nil, out)
}

// ready reports whether the apiserver says it is ready to serve.
func (c *apiClient) ready(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.server+"/readyz", nil)
	if err != nil {
		return fmt.Errorf("when building the readiness request: %w", err)
	}
	res, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("when asking for readiness: %w", err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("not ready (%d): %s", res.StatusCode, bytes.TrimSpace(b))
	}
	return nil
}

// waitReady asks whether the apiserver is ready, every readyInterval
// through r (shared with the node's other components), until it is or ctx
// ends, saying every 30 s why it still waits: on an emulated CPU the
// apiserver's post-start hooks take minutes, so patience, not a fixed
// timer.
func (c *apiClient) waitReady(ctx context.Context, r *Readiness, logf func(string, ...any)) error {
	start := time.Now()
	err := waitUntil(ctx, "apiserver "+c.server, 30*time.Second, logf, func() (bool, error) {
		err := r.ask(ctx, c)
		return err == nil, err
	})
	if err == nil {
		logf("Apiserver %s ready after %s", c.server, time.Since(start).Round(time.Second))
	}
	return err
}

// waitUntil calls try every readyInterval until it reports done, and
// returns try's error then, or until ctx ends. From firstSay after its
// start, and every 30 s after that, it says through logf that it still
// waits for what, and why: try's last error.
func waitUntil(ctx context.Context, what string, firstSay time.Duration, logf func(string, ...any), try func() (done bool, err error)) error {
	start := time.Now()
	say := start.Add(firstSay)
	for {
		done, err := try()
		if done {
			return err
		}
		if !time.Now().Before(say) {
			logf("Still waiting for %s after %s: %v", what, time.Since(start).Round(time.Second), err)
			say = time.Now().Add(30 * time.Second)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("when waiting for %s: %w (last: %w)", what, ctx.Err(), err)
		case <-time.After(readyInterval):
		}
	}
}

// loadPool reads the CA certificates of the PEM file path into a pool.
func loadPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("when reading %s: %w", path, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("no certificate in %s", path)
	}
	return pool, nil
}
