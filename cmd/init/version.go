package main

import "runtime/debug"

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
