package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
)

// buildVersion is Cairn's version, set by the image build with
// -ldflags "-X main.buildVersion=<version>".
var buildVersion = ""

// version returns buildVersion, or what the Go toolchain recorded about the
// build when the linker was not told.
func version() string {
	if buildVersion != "" {
		return buildVersion
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				return "dev-" + s.Value
			}
		}
		if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			return bi.Main.Version
		}
	}
	return "dev"
}

// osReleasePath is where programs look for what OS they run on: the
// kubelet reports its PRETTY_NAME as the Node's OS image.
const osReleasePath = "/etc/os-release"

// osRelease returns the os-release(5) file of Cairn at version v.
func osRelease(v string) string {
	return fmt.Sprintf("NAME=Cairn\nID=cairn\nVERSION=%q\nVERSION_ID=%q\nPRETTY_NAME=%q\n", v, v, "Cairn "+v)
}

// writeOSRelease writes Cairn's os-release file at path. The core writes
// it into the in-memory root once per boot, before anything that reads it
// starts.
func writeOSRelease(path, v string) error {
	return writeRootFile(path, osRelease(v))
}

// writeRootFile writes content at path in the node's in-memory root,
// readable by all, making its directory if it has none.
func writeRootFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("when making the directory of %s: %w", path, err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		return fmt.Errorf("when writing %s: %w", path, err)
	}
	return nil
}
