package runwrap

import (
	"fmt"
	"net"
	"os"
	"time"
)

// ExecMain is `airlock-init exec`, the thin client the engine execs for each
// command. It reads the request frame from stdin, hands it and its own stdio
// descriptors to the supervisor in PID 1, and waits for the outcome. The
// supervisor writes the command's output and the trailer straight to those
// descriptors, so a command that kills this client (kill -9 -1 does) changes
// nothing but the exec's status code.
func ExecMain(args []string) int {
	// First, before the request (and its nonce) is read: no same-uid
	// process may read our memory or open our descriptors from now on.
	if err := setNotDumpable(); err != nil {
		fmt.Fprintf(os.Stderr, "airlock-init exec: %v\n", err)
		return ExitWrapperError
	}
	if len(args) != 0 {
		fmt.Fprintln(os.Stderr, "airlock-init exec: takes no arguments (the request comes on stdin)")
		return 2
	}
	var req Request
	if err := ReadFrame(os.Stdin, &req.Config); err != nil {
		return wrapperFailed("", os.Stderr, fmt.Errorf("read request: %w", err))
	}
	req.Op = OpRun
	if err := req.validate(); err != nil {
		return wrapperFailed(req.Nonce, os.Stderr, err)
	}
	c, err := dialSupervisor()
	if err != nil {
		return wrapperFailed(req.Nonce, os.Stderr, err)
	}
	defer c.Close()
	if req.Background {
		// PID 1 answers once the command started; the reply is our output.
		return relay(c, &req, "exec")
	}
	files := []*os.File{os.Stdout, os.Stderr}
	if !req.NoStdin {
		files = append(files, os.Stdin)
	}
	if err := sendFrameFiles(c, &req, files); err != nil {
		return wrapperFailed(req.Nonce, os.Stderr, err)
	}
	var rep Reply
	if err := ReadFrame(c, &rep); err != nil {
		// The supervisor never drops a client it accepted: this is PID 1
		// going away, and with it the sandbox.
		fmt.Fprintf(os.Stderr, "airlock-init exec: lost the supervisor: %v\n", err)
		return ExitWrapperError
	}
	if rep.Error != "" {
		return wrapperFailed(req.Nonce, os.Stderr, fmt.Errorf("supervisor: %s", rep.Error))
	}
	return rep.Code
}

// ControlMain is `airlock-init status` and `airlock-init ctl`: the request
// frame on stdin asks about known runs (status, or for ctl the frame's op:
// list, output, stdin, signal, kill); the supervisor's Reply is printed on
// stdout as a frame.
func ControlMain(name string, args []string) int {
	if len(args) != 0 {
		fmt.Fprintf(os.Stderr, "airlock-init %s: takes no arguments (the request comes on stdin)\n", name)
		return 2
	}
	var req Request
	if err := ReadFrame(os.Stdin, &req); err != nil {
		fmt.Fprintf(os.Stderr, "airlock-init %s: read request: %v\n", name, err)
		return 2
	}
	switch {
	case name == "status":
		req.Op = OpStatus
	case req.Op == OpStatus, req.Op == OpList, req.Op == OpOutput, req.Op == OpStdin, req.Op == OpSignal, req.Op == OpKill:
	default:
		fmt.Fprintf(os.Stderr, "airlock-init %s: unknown op %q\n", name, req.Op)
		return 2
	}
	c, err := dialSupervisor()
	if err != nil {
		fmt.Fprintf(os.Stderr, "airlock-init %s: %v\n", name, err)
		return ExitWrapperError
	}
	defer c.Close()
	return relay(c, &req, name)
}

// relay sends req to the supervisor and prints its reply on stdout.
func relay(c *net.UnixConn, req *Request, name string) int {
	if err := sendFrameFiles(c, req, nil); err != nil {
		fmt.Fprintf(os.Stderr, "airlock-init %s: %v\n", name, err)
		return ExitWrapperError
	}
	var rep Reply
	if err := ReadFrame(c, &rep); err != nil {
		fmt.Fprintf(os.Stderr, "airlock-init %s: %v\n", name, err)
		return ExitWrapperError
	}
	if err := WriteFrame(os.Stdout, &rep); err != nil {
		return ExitWrapperError
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
