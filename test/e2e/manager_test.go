package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"airlock.dev/airlock/internal/testutil/child"
)

// managerProc is the manager binary, run out of cluster as a child of the test: the test stops it by the PID
// it started, and can SIGKILL and restart it.
type managerProc struct {
	cmd *exec.Cmd
	log *os.File
}

// startManager starts the manager with the suite's flags, plus extra ones (e.g. --allow-unisolated-runtimes).
func startManager(extra ...string) (*managerProc, error) {
	logPath := filepath.Join(os.TempDir(), fmt.Sprintf("airlock-e2e-manager-%d.log", os.Getpid()))
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	addRunFile(logPath, true)
	args := append([]string{"--kubeconfig", kubeconfig, "--leader-elect=false",
		"--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0",
		"--init-image", initImage, "--zap-log-level=info", "--egress-proxy-service=" + egressProxyNS + "/" + egressProxyName}, extra...)
	args = append(args, execGuardArgs...)
	cmd := child.DieWithParent(exec.Command(managerBin, args...))
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting manager: %w", err)
	}
	return &managerProc{cmd: cmd, log: f}, nil
}

// kill sends SIGKILL: no chance to clean up, as after a node failure.
func (m *managerProc) kill() {
	_ = m.cmd.Process.Signal(syscall.SIGKILL)
	_ = m.cmd.Wait()
}

func (m *managerProc) stop() {
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = m.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		m.kill()
	}
	m.log.Close()
}
