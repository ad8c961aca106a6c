package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"sigs.k8s.io/yaml"

	"cairn.dev/cairn/proto/api"
)

// Kubernetes access for stock kubectl:
//
//	cairnctl kubeconfig ─▶ kubeconfig: the apiserver, the Kubernetes CA,
//	                       and a user whose credential comes from
//	kubectl ─exec─▶ cairnctl kubernetes credential ─▶ IssueKubernetesCredential
//	                       (a fresh key, a certificate of an hour, cached in
//	                       the context's directory while it has ten minutes left)
//
// The kubeconfig holds no secret: the owner key stays in cairnctl's
// configuration directory, and every credential kubectl uses is short-lived.

// Names of what cairnctl kubeconfig writes into a kubeconfig.
const (
	kubeUserName = "cairn-owner"
	// kubeCredentialFile caches the last credential in the context's
	// directory.
	kubeCredentialFile = "kubernetes-credential.json"
	// kubeCredentialSlack is how long before its end a cached credential
	// is no longer handed out, and how long before its end kubectl is
	// told it expires: client-go keeps a credential until the expiry it
	// was told, so a certificate told to expire at its very end failed
	// the requests in flight then, and any that reached an apiserver
	// whose clock runs ahead, with 401 Unauthorized.
	kubeCredentialSlack = 10 * time.Minute
)

func newKubeconfigCommand(a *app) *cobra.Command {
	var out, apiserver, name string
	cmd := &cobra.Command{
		Use:   "kubeconfig",
		Short: "Write a kubeconfig with which stock kubectl reaches the cluster's Kubernetes",
		Long: "kubeconfig writes a context for kubectl into --out, else into the first file\n" +
			"of $KUBECONFIG, else ~/.kube/config, keeping what else the file holds. The\n" +
			"apiserver is verified against the cluster's Kubernetes CA. The credentials\n" +
			"are short-lived: kubectl gets them from `cairnctl kubernetes credential`\n" +
			"with the owner's credentials each time it needs them. The context points at\n" +
			"a current controller; run kubeconfig again after the controllers change.",
		Args: cobra.NoArgs,
		RunE: a.ownerRun(func(ctx context.Context, o *owner, _ []string) error {
			return a.kubeconfig(ctx, o, out, apiserver, name)
		}),
	}
	cmd.Flags().StringVar(&out, "out", "", "kubeconfig file to write or merge into (default: $KUBECONFIG's first file, else ~/.kube/config)")
	cmd.Flags().StringVar(&apiserver, "apiserver", "", "URL of the apiserver kubectl dials (default: the first controller the cluster lists)")
	cmd.Flags().StringVar(&name, "name", "cairn", "name of the kubeconfig's cluster and context")
	return cmd
}

func newKubernetesCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kubernetes",
		Short: "Kubernetes credentials for kubectl",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "credential",
		Short: "Print a short-lived Kubernetes credential as kubectl's exec plugin protocol wants it",
		Long: "credential prints an ExecCredential (client.authentication.k8s.io/v1) with a\n" +
			"client certificate of the cluster's Kubernetes CA for the owner, for kubectl\n" +
			"to run from the kubeconfig that `cairnctl kubeconfig` writes.",
		Args: cobra.NoArgs,
		RunE: a.ownerRun(func(ctx context.Context, o *owner, _ []string) error {
			return a.kubernetesCredential(ctx, o)
		}),
	})
	return cmd
}

// kubeCredential is a Kubernetes client credential and what came with it.
type kubeCredential struct {
	CertificatePEM string    `json:"certificate"`
	KeyPEM         string    `json:"key"`
	CAPEM          string    `json:"ca"`
	NotAfter       time.Time `json:"notAfter"`
	Endpoints      []string  `json:"endpoints"`
}

// issueKubeCredential draws a fresh key and has the cluster certify it.
func (a *app) issueKubeCredential(ctx context.Context, o *owner) (*kubeCredential, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("when generating a Kubernetes key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("when encoding the Kubernetes key: %w", err)
	}
	var res *api.IssueKubernetesCredentialResponse
	err = o.curator(ctx, "issuing a Kubernetes credential", func(ctx context.Context, conn *grpc.ClientConn) error {
		var err error
		res, err = api.NewManagementClient(conn).IssueKubernetesCredential(ctx, &api.IssueKubernetesCredentialRequest{PublicKey: pub})
		return err
	})
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(res.GetCertificate())
	if err != nil {
		return nil, fmt.Errorf("when parsing the Kubernetes certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("when encoding the Kubernetes key: %w", err)
	}
	return &kubeCredential{
		CertificatePEM: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: res.GetCertificate()})),
		KeyPEM:         string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})),
		CAPEM:          string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: res.GetCaCertificate()})),
		NotAfter:       cert.NotAfter,
		Endpoints:      res.GetApiserverEndpoints(),
	}, nil
}

// kubernetesCredential prints the cached credential while it is good for
// kubeCredentialSlack more, else a fresh one, which it caches. It tells
// kubectl the credential expires kubeCredentialSlack before the
// certificate does, when it would no longer hand it out either.
func (a *app) kubernetesCredential(ctx context.Context, o *owner) error {
	path := filepath.Join(o.dir, kubeCredentialFile)
	var cred *kubeCredential
	if b, err := os.ReadFile(path); err == nil {
		var c kubeCredential
		if json.Unmarshal(b, &c) == nil && a.now().Add(kubeCredentialSlack).Before(c.NotAfter) {
			cred = &c
		}
	}
	if cred == nil {
		var err error
		if cred, err = a.issueKubeCredential(ctx, o); err != nil {
			return err
		}
		b, err := json.Marshal(cred)
		if err != nil {
			return fmt.Errorf("when encoding the Kubernetes credential: %w", err)
		}
		// A cache that cannot be written costs only a call next time.
		if err := writeFileAtomic(o.dir, kubeCredentialFile, b, 0o600); err != nil {
			fmt.Fprintf(a.errOut, "cairnctl: not caching the Kubernetes credential: %v\n", err)
		}
	}
	return writeJSON(a.out, map[string]any{
		"apiVersion": "client.authentication.k8s.io/v1",
		"kind":       "ExecCredential",
		"status": map[string]any{
			"expirationTimestamp":   cred.NotAfter.Add(-kubeCredentialSlack).UTC().Format(time.RFC3339),
			"clientCertificateData": cred.CertificatePEM,
			"clientKeyData":         cred.KeyPEM,
		},
	})
}

// kubeconfig writes or merges the context name for the cluster into the
// kubeconfig file out (or the default one).
func (a *app) kubeconfig(ctx context.Context, o *owner, out, apiserver, name string) error {
	cred, err := a.issueKubeCredential(ctx, o)
	if err != nil {
		return err
	}
	if apiserver == "" {
		if len(cred.Endpoints) == 0 {
			return errors.New("no node of the cluster holds the KubernetesController role: add it with `cairnctl node add-role ID KubernetesController`")
		}
		apiserver = cred.Endpoints[0]
	}
	if !strings.HasPrefix(apiserver, "https://") {
		return fmt.Errorf("--apiserver %q: want an https:// URL", apiserver)
	}
	if out == "" {
		if out, err = defaultKubeconfig(); err != nil {
			return err
		}
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("when finding cairnctl's own path for kubectl: %w", err)
	}
	root, err := a.root()
	if err != nil {
		return err
	}
	if root, err = filepath.Abs(root); err != nil {
		return fmt.Errorf("when resolving the configuration directory: %w", err)
	}
	args := []string{"--config", root}
	if a.context != "" {
		args = append(args, "--context", a.context)
	}
	for _, ep := range a.endpoints {
		args = append(args, "--endpoint", ep)
	}
	args = append(args, "kubernetes", "credential")

	cfg, err := readKubeconfig(out)
	if err != nil {
		return err
	}
	user := kubeUserName + "@" + name
	setNamed(cfg, "clusters", name, "cluster", map[string]any{
		"server":                     apiserver,
		"certificate-authority-data": []byte(cred.CAPEM),
	})
	setNamed(cfg, "users", user, "user", map[string]any{
		"exec": map[string]any{
			"apiVersion":      "client.authentication.k8s.io/v1",
			"command":         self,
			"args":            args,
			"interactiveMode": "Never",
		},
	})
	setNamed(cfg, "contexts", name, "context", map[string]any{"cluster": name, "user": user})
	cfg["current-context"] = name
	cfg["apiVersion"] = "v1"
	cfg["kind"] = "Config"
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("when encoding the kubeconfig: %w", err)
	}
	if err := writeFileAtomic(filepath.Dir(out), filepath.Base(out), b, 0o600); err != nil {
		return err
	}
	a.printf("Wrote context %q to %s: kubectl reaches %s as the cluster's owner.\n", name, out, apiserver)
	return nil
}

// defaultKubeconfig is kubectl's own choice of file: the first of
// $KUBECONFIG, else ~/.kube/config.
func defaultKubeconfig() (string, error) {
	if env := os.Getenv("KUBECONFIG"); env != "" {
		for _, p := range filepath.SplitList(env) {
			if p != "" {
				return p, nil
			}
		}
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("when finding ~/.kube/config (set --out): %w", err)
	}
	return filepath.Join(home, ".kube", "config"), nil
}

// readKubeconfig reads the kubeconfig at path as generic YAML, so that
// merging keeps what cairnctl does not know; a missing file is empty.
func readKubeconfig(path string) (map[string]any, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]any{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("when reading the kubeconfig: %w", err)
	}
	cfg := map[string]any{}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("kubeconfig %s is not YAML cairnctl can merge into: %w", path, err)
	}
	if cfg == nil {
		cfg = map[string]any{}
	}
	return cfg, nil
}

// setNamed puts {name: name, field: v} into the list cfg[list], replacing
// the entry of that name.
func setNamed(cfg map[string]any, list, name, field string, v any) {
	entry := map[string]any{"name": name, field: v}
	items, _ := cfg[list].([]any)
	for i, it := range items {
		if m, ok := it.(map[string]any); ok && m["name"] == name {
			items[i] = entry
			cfg[list] = items
			return
		}
	}
	cfg[list] = append(items, entry)
}
