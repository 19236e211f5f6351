package runwrap

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"
)

const (
	roleEnv        = "AIRLOCK_RUNWRAP_ROLE"
	roleSupervisor = "supervisor"
	// Descriptors the front hands the supervisor (after 0, 1, 2).
	fdLifeline = 3 // config JSON, then EOF when the front dies
	fdReady    = 4 // supervisor -> front: "ok\n" once it owns the run
	// How long the front waits for the supervisor to take over.
	supervisorStartTimeout = 15 * time.Second
)

// Main runs `airlock-init run ARGS...`: args are the arguments after "run".
// It returns the process exit code.
//
// Main re-executes /proc/self/exe with the same os.Args and
// AIRLOCK_RUNWRAP_ROLE=supervisor in the environment; the binary must route
// that invocation to Main again (it does when it dispatches "run" to Main).
// Main checks that variable first and then ignores args.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if os.Getenv(roleEnv) == roleSupervisor {
		return supervise()
	}
	cfg, err := ParseArgs(args)
	if err != nil {
		return wrapperFailed(cfg.Nonce, stderr, err)
	}
	return front(cfg, stdin, stdout, stderr)
}

// front is the process the container runtime exec'd. It only starts the
// supervisor and waits: the runtime may SIGKILL it at any time, and the
// supervisor notices through the lifeline pipe.
func front(cfg Config, stdin io.Reader, stdout, stderr io.Writer) int {
	// A broken stream must surface as EPIPE, not kill us silently.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	// If the supervisor is killed, its orphans come to us instead of PID 1.
	_ = becomeSubreaper()

	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		return wrapperFailed(cfg.Nonce, stderr, fmt.Errorf("lifeline pipe: %w", err))
	}
	defer lifeW.Close()
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return wrapperFailed(cfg.Nonce, stderr, fmt.Errorf("ready pipe: %w", err))
	}
	defer readyR.Close()

	sup := exec.Command("/proc/self/exe")
	sup.Args = os.Args
	sup.Env = append(os.Environ(), roleEnv+"="+roleSupervisor)
	sup.Stdin, sup.Stdout, sup.Stderr = stdin, stdout, stderr
	sup.ExtraFiles = []*os.File{lifeR, readyW} // fdLifeline, fdReady
	// Only matters when stdin is not a file (tests): don't hang on its copier.
	sup.WaitDelay = time.Second
	err = sup.Start()
	_ = lifeR.Close()
	_ = readyW.Close()
	if err != nil {
		return wrapperFailed(cfg.Nonce, stderr, fmt.Errorf("start supervisor: %w", err))
	}

	// Write the config off the main goroutine: a binary that does not route
	// the supervisor to Main would never read it.
	go func() {
		if err := json.NewEncoder(lifeW).Encode(cfg); err != nil {
			_ = sup.Process.Kill()
		}
	}()
	if err := awaitReady(readyR); err != nil {
		_ = sup.Process.Kill()
		_ = sup.Wait()
		return wrapperFailed(cfg.Nonce, stderr, err)
	}

	werr := sup.Wait()
	var ee *exec.ExitError
	switch {
	case werr == nil:
		return 0
	case errors.As(werr, &ee) && ee.Exited():
		return ee.ExitCode()
	}
	// The supervisor died abnormally (someone killed it). Its orphans were
	// re-parented to us: clean up and say so.
	killTree(os.Getpid(), 0, cfg.Grace)
	reapOrphans()
	return wrapperFailed(cfg.Nonce, stderr, fmt.Errorf("supervisor died: %w", werr))
}

func awaitReady(r *os.File) error {
	_ = r.SetReadDeadline(time.Now().Add(supervisorStartTimeout))
	line, err := bufio.NewReader(r).ReadString('\n')
	if line == "ok\n" {
		return nil
	}
	if err == nil {
		err = fmt.Errorf("unexpected %q", line)
	}
	return fmt.Errorf("supervisor did not start (the binary must route AIRLOCK_RUNWRAP_ROLE=supervisor to runwrap.Main): %w", err)
}
