// Command pause is the sandbox of every pod: the first process of the pod's
// namespaces, which holds them while the pod's containers come and go. It
// reaps the zombies the pod leaves to it, as PID 1 of its namespace must,
// and exits when asked to stop. build/pauseimage packs it into the image
// containerd imports at start.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, syscall.SIGCHLD, syscall.SIGINT, syscall.SIGTERM)
	for s := range sig {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		// Reap every child that has exited; signals coalesce, so one
		// SIGCHLD may stand for several.
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
