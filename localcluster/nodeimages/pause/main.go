// pause is the sandbox ("pause") image of the real test node: PID 1 of every pod, holding its
// namespaces. There is no registry to pull registry.k8s.io/pause from, so the harness builds this.
// It sleeps until SIGTERM/SIGINT and reaps orphaned children, as upstream's pause.c does.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			if pid, _ := syscall.Wait4(-1, nil, syscall.WNOHANG, nil); pid <= 0 {
				break
			}
		}
	}
}
