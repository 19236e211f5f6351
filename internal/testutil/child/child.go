// Package child makes processes that tests start die with the test: a test binary killed by `go test
// -timeout` (or by a signal) must not leave managers, gateways or test servers running on the machine.
package child

import (
	"os/exec"
	"syscall"
)

// DieWithParent sets PR_SET_PDEATHSIG=SIGKILL on cmd (call before Start). The kernel delivers it when the
// thread that started the child exits; Go keeps its threads for the life of the process unless a goroutine
// locked to one ends, so call this from ordinary (unlocked) goroutines. The setting survives exec, so it also
// covers wrappers that exec their payload (`ip netns exec`, `setpriv`).
func DieWithParent(cmd *exec.Cmd) *exec.Cmd {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	return cmd
}
