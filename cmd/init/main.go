package main

import (
	"fmt"
	"os"
	"path/filepath"

	"cairn.dev/cairn/node/modules"
)

// coreArgv0 is the argv[0] PID 1 gives the core, which is how the binary
// knows it runs as the core. It also names the process in listings.
const coreArgv0 = "cairn-core"

func main() {
	switch {
	case os.Getpid() == 1:
		runPID1() // never returns
	case filepath.Base(os.Args[0]) == coreArgv0:
		os.Exit(runCore())
	case filepath.Base(os.Args[0]) == modules.ModprobeName:
		os.Exit(modules.RunModprobe(os.Args[1:]))
	default:
		fmt.Fprintln(os.Stderr, "cairn init: this is the node's PID 1, and not PID 1 here; refusing to run")
		os.Exit(2)
	}
}
