package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"cairn.dev/cairn/pkg/ociimage"
	"cairn.dev/cairn/test/launch/netns"
)

// RegistryPort is the port of the harness's registry on the bridge
// address: nodes pull from 10.42.0.1:5000.
const RegistryPort = 5000

// RegistryName is the harness registry's host name, which the harness's
// DNS server on the network answers: nodes resolve it, and pods through
// their node's cluster DNS.
const RegistryName = "registry.cairn.test"

// RegistryAddr is where nodes reach the harness's registry.
func RegistryAddr() string {
	return fmt.Sprintf("%s:%d", netns.BridgeAddr, RegistryPort)
}

// registryFlags are the cairnctl params bootstrap flags that make the
// harness's registry the mirror of docker.io, reached over plain HTTP.
func registryFlags() []string {
	return []string{"--registry-mirror", "docker.io=http://" + RegistryAddr(), "--plain-http-registry", RegistryAddr()}
}

// startRegistry runs the OCI distribution registry (Config.Registry) on
// the host side of the network, its storage in Dir/registry and its log
// in Dir/registry.log, forwards it to the host, and pushes Config.Images
// into it once it answers.
func (c *Cluster) startRegistry(ctx context.Context) error {
	dir := filepath.Join(c.cfg.Dir, "registry")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("when making the registry's directory: %w", err)
	}
	secret := make([]byte, 16)
	if _, err := rand.Read(secret); err != nil {
		return fmt.Errorf("when making the registry's secret: %w", err)
	}
	config := filepath.Join(dir, "config.yml")
	yml := fmt.Sprintf("version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\n"+
		"storage:\n  filesystem:\n    rootdirectory: %q\n  delete:\n    enabled: true\n"+
		"http:\n  addr: %q\n  secret: %q\n", filepath.Join(dir, "data"), RegistryAddr(), hex.EncodeToString(secret))
	if err := os.WriteFile(config, []byte(yml), 0o644); err != nil {
		return fmt.Errorf("when writing the registry's configuration: %w", err)
	}
	logFile, err := os.Create(filepath.Join(c.cfg.Dir, "registry.log"))
	if err != nil {
		return fmt.Errorf("when making the registry's log: %w", err)
	}
	defer logFile.Close()
	cmd := c.net.Cmd(c.cfg.Registry, "serve", config)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("when starting the registry: %w", err)
	}
	c.registry = cmd
	from := c.cfg.RegistryHostAddr
	if from == "" {
		from = "127.0.0.1:0"
	}
	if c.registryHost, err = c.net.ForwardFrom(from, netns.BridgeAddr, RegistryPort); err != nil {
		return err
	}
	base := "http://" + c.registryHost
	if err := waitRegistry(ctx, base); err != nil {
		return fmt.Errorf("%w (its log: %s)", err, logFile.Name())
	}
	var pushed []string
	for _, img := range c.cfg.Images {
		refs, err := pushArchive(ctx, base, img)
		if err != nil {
			return err
		}
		pushed = append(pushed, refs...)
	}
	c.logf("cluster: registry at %s for the nodes, %s for the host, mirror of docker.io; pushed %s", RegistryAddr(), c.registryHost, strings.Join(pushed, ", "))
	return nil
}

// waitRegistry waits until the registry at base answers its API's root.
func waitRegistry(ctx context.Context, base string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v2/", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("it answered %s", resp.Status)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("the registry did not answer at %s: %w", base, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// pushArchive pushes the images of an OCI archive to the registry at base,
// streaming its blobs, each under the repository and tag its name gives
// (docker.io/ dropped: the registry mirrors Docker Hub), and returns what
// it pushed.
func pushArchive(ctx context.Context, base, archive string) ([]string, error) {
	f, err := os.Open(archive)
	if err != nil {
		return nil, fmt.Errorf("when reading image %s: %w", archive, err)
	}
	defer f.Close()
	repoTag := func(name string) (string, string, error) {
		repo, tag, ok := strings.Cut(strings.TrimPrefix(name, "docker.io/"), ":")
		if !ok || strings.Contains(tag, "/") {
			return "", "", fmt.Errorf("image %s is named %q: want [docker.io/]REPOSITORY:TAG", archive, name)
		}
		return repo, tag, nil
	}
	pushed, err := ociimage.PushArchive(ctx, http.DefaultClient, base, f, repoTag)
	if err != nil {
		return nil, fmt.Errorf("when pushing %s: %w", archive, err)
	}
	return pushed, nil
}

// stopRegistry stops the registry, if it runs.
func (c *Cluster) stopRegistry() error {
	if c.registry == nil {
		return nil
	}
	_ = c.registry.Process.Kill()
	err := c.registry.Wait()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		// Killed, as asked.
		err = nil
	}
	return err
}

// RegistryHost is where the host reaches the harness's registry
// (127.0.0.1:PORT), empty when the cluster runs none.
func (c *Cluster) RegistryHost() string { return c.registryHost }
