// Package goprog builds a Go program as the images of the build carry
// one: static, for linux/amd64, reproducible (-trimpath, no build ID),
// without symbols. build/pauseimage and build/testimages put the programs
// it builds into container images.
package goprog

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Static builds the package pkg of the module in dir ("" is the current
// directory) and returns the program. The go tool's errors go to stderr.
func Static(dir, pkg string) ([]byte, error) {
	tmp, err := os.MkdirTemp("", "goprog")
	if err != nil {
		return nil, fmt.Errorf("when making a build directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "program")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w -buildid=", "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("when building %s: %w", pkg, err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		return nil, fmt.Errorf("when reading the built %s: %w", pkg, err)
	}
	return data, nil
}
