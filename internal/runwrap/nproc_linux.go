package runwrap

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// ProcessLimitEnv names the container environment variable that caps how many processes the sandbox user may
// have (RLIMIT_NPROC). The controller sets it for runtimes where the pod's pids limit would kill the whole
// sandbox instead of failing fork (gVisor counts its own host tasks against the cgroup): with the rlimit, a
// fork bomb gets EAGAIN inside the sandbox and the sandbox survives.
const ProcessLimitEnv = "AIRLOCK_PROCESS_LIMIT"

// applyProcessLimit sets RLIMIT_NPROC on this process, so the command and all it starts inherit it.
func applyProcessLimit() error {
	v := os.Getenv(ProcessLimitEnv)
	if v == "" {
		return nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n == 0 {
		return fmt.Errorf("%s=%q: want a positive number", ProcessLimitEnv, v)
	}
	var cur unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NPROC, &cur); err == nil && cur.Max < n {
		n = cur.Max // never try to raise it
	}
	if err := unix.Setrlimit(unix.RLIMIT_NPROC, &unix.Rlimit{Cur: n, Max: n}); err != nil {
		return fmt.Errorf("setting RLIMIT_NPROC to %d: %w", n, err)
	}
	return nil
}
