package runwrap

import (
	"fmt"
	"net"
	"os"
	"time"
)

// ConnectMain is `airlock-init connect`, the client the gateway execs for a session: it hands its stdin and
// stdout — the exec stream — to the supervisor in PID 1, which speaks the session's TLS on them itself
// (pid1link), and waits until the session ends. It never reads or writes the stream: what a command could
// learn or change through this process's /proc before it made itself undumpable is ciphertext. Killing it
// (kill -9 -1 does) changes nothing but the exec's status: PID 1 holds the stream.
func ConnectMain(args []string) int {
	if err := setNotDumpable(); err != nil {
		return wrapperFailed(os.Stderr, err)
	}
	if len(args) != 0 {
		fmt.Fprintln(os.Stderr, "airlock-init connect: takes no arguments")
		return 2
	}
	c, err := dialSupervisor()
	if err != nil {
		return wrapperFailed(os.Stderr, err)
	}
	defer c.Close()
	if err := sendFrameFiles(c, &Request{Op: OpSession}, []*os.File{os.Stdin, os.Stdout}); err != nil {
		return wrapperFailed(os.Stderr, err)
	}
	// Our copies are not needed: the exec ends once PID 1 closes its own.
	_ = os.Stdin.Close()
	_ = os.Stdout.Close()
	var rep Reply
	if err := ReadFrame(c, &rep); err != nil {
		return wrapperFailed(os.Stderr, fmt.Errorf("lost the supervisor: %w", err))
	}
	if rep.Error != "" {
		return wrapperFailed(os.Stderr, fmt.Errorf("session: %s", rep.Error))
	}
	return 0
}

func dialSupervisor() (*net.UnixConn, error) {
	addr := socketAddr()
	var lastErr error
	// PID 1 binds its socket once its gate passed; only a sandbox that just
	// started can be this early.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: addr, Net: "unix"})
		if err == nil {
			return c, nil
		}
		lastErr = err
	}
	return nil, fmt.Errorf("connect to the supervisor in PID 1 (%s; it listens once the sandbox's network gate passed): %w", addr, lastErr)
}
