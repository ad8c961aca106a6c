package main

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// TestKubeconfig runs kubeconfig and kubernetes credential against a real
// curator: the kubeconfig merges into an existing file, pins the
// Kubernetes CA, and runs cairnctl for credentials; the credential is the
// owner's, of that CA, is cached while it is good, and is told to expire
// before its certificate does.
func TestKubeconfig(t *testing.T) {
	dir := t.TempDir()
	c := ownedControlPlane(t, dir)
	mustRun(t, dir, "--endpoint", c.Addr, "takeownership")
	out := filepath.Join(t.TempDir(), "config")
	other := "apiVersion: v1\nkind: Config\nclusters:\n- name: other\n  cluster:\n    server: https://other:6443\n" +
		"contexts:\n- name: other\n  context:\n    cluster: other\n    user: other\ncurrent-context: other\nusers:\n- name: other\n  user:\n    token: x\n"
	if err := os.WriteFile(out, []byte(other), 0o600); err != nil {
		t.Fatal(err)
	}

	// Without a controller there is nothing to point at.
	if _, err := run(t, dir, "kubeconfig", "--out", out); err == nil || !strings.Contains(err.Error(), "KubernetesController") {
		t.Errorf("kubeconfig without a controller = %v, want an error naming the role", err)
	}
	runUntilOK(t, dir, "node", "add-role", c.Node.ID(), "KubernetesController")
	mustRun(t, dir, "kubeconfig", "--out", out, "--apiserver", "https://127.0.0.1:7843")

	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Clusters []struct {
			Name    string
			Cluster map[string]string
		}
		Users []struct {
			Name string
			User struct {
				Exec struct {
					APIVersion string `json:"apiVersion"`
					Command    string
					Args       []string
				}
				Token string
			}
		}
		Contexts []struct {
			Name    string
			Context map[string]string
		}
		CurrentContext string `json:"current-context"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("the kubeconfig is not YAML: %v\n%s", err, b)
	}
	if cfg.CurrentContext != "cairn" || len(cfg.Clusters) != 2 || len(cfg.Users) != 2 || len(cfg.Contexts) != 2 {
		t.Fatalf("kubeconfig = %+v, want the other context kept and cairn's added and current", cfg)
	}
	if cfg.Users[0].User.Token != "x" || cfg.Clusters[0].Cluster["server"] != "https://other:6443" {
		t.Errorf("the other context changed: %+v", cfg)
	}
	cl := cfg.Clusters[1].Cluster
	if cl["server"] != "https://127.0.0.1:7843" || cl["insecure-skip-tls-verify"] != "" {
		t.Errorf("cairn's cluster = %v, want the given apiserver, verified", cl)
	}
	caPEM, err := base64.StdEncoding.DecodeString(cl["certificate-authority-data"])
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(caPEM)
	if block == nil {
		t.Fatal("certificate-authority-data holds no PEM certificate")
	}
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil || ca.Subject.CommonName != "Cairn Kubernetes CA" {
		t.Fatalf("the kubeconfig pins %v (%v), want the Kubernetes CA", ca, err)
	}
	exec := cfg.Users[1].User.Exec
	if exec.APIVersion != "client.authentication.k8s.io/v1" || !slices.Contains(exec.Args, "credential") || !slices.Contains(exec.Args, dir) {
		t.Fatalf("exec = %+v, want cairnctl's kubernetes credential with the configuration directory", exec)
	}

	// What kubectl would run.
	credential := func() string {
		var ec struct {
			Kind   string
			Status struct {
				ExpirationTimestamp   time.Time
				ClientCertificateData string
				ClientKeyData         string
			}
		}
		if err := json.Unmarshal([]byte(mustRun(t, "", exec.Args...)), &ec); err != nil {
			t.Fatal(err)
		}
		block, _ := pem.Decode([]byte(ec.Status.ClientCertificateData))
		if ec.Kind != "ExecCredential" || block == nil || !strings.Contains(ec.Status.ClientKeyData, "PRIVATE KEY") {
			t.Fatalf("credential = %+v", ec)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if err := cert.CheckSignatureFrom(ca); err != nil || cert.Subject.CommonName != "cairn:owner" {
			t.Errorf("the credential is %q (%v), want the owner's of the Kubernetes CA", cert.Subject.CommonName, err)
		}
		// client-go uses a credential until the expiry it is told; told
		// the certificate's own end, its last requests fail.
		if want := cert.NotAfter.Add(-kubeCredentialSlack); !ec.Status.ExpirationTimestamp.Equal(want) {
			t.Errorf("expirationTimestamp = %v, want %v: %v before the certificate's end, %v",
				ec.Status.ExpirationTimestamp, want, kubeCredentialSlack, cert.NotAfter)
		}
		return ec.Status.ClientCertificateData
	}
	if first := credential(); credential() != first {
		t.Error("a second credential call did not reuse the cached credential")
	}
}
