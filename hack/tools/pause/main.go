// Command pause is the pod sandbox ("infra") container of the local cluster: it holds the pod's namespaces
// open and does nothing else. As PID 1 it gets no default signal handling, so it catches SIGTERM and SIGINT
// itself and exits 0. It reaps nothing: the containers of a pod are not its children.
// Build it static (CGO_ENABLED=0); hack/images.sh packs it into localhost/airlock/pause.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		os.Stdout.WriteString("airlock pause\n")
		return
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	<-sigs
	os.Exit(0)
}
