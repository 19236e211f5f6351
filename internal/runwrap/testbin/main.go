// Command testbin stands in for airlock-init in tests: it dispatches pid1 and
// connect (and the supervisor's re-executions) as cmd/airlock-init does.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"airlock.dev/airlock/internal/attestation"
	"airlock.dev/airlock/internal/initproc"
	"airlock.dev/airlock/internal/pid1link"
	"airlock.dev/airlock/internal/runwrap"
)

func main() {
	if code, ok := runwrap.Reexec(); ok {
		os.Exit(code)
	}
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testbin pid1|connect")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "pid1":
		os.Exit(initproc.PID1ForTests(os.Args[2:], os.Stderr))
	case "pid1-fakemem":
		os.Exit(fakeMemPID1(os.Args[2]))
	case "connect":
		os.Exit(runwrap.ConnectMain(os.Args[2:]))
	case "forge":
		os.Exit(forge())
	}
	fmt.Fprintf(os.Stderr, "testbin: unknown command %q\n", os.Args[1])
	os.Exit(2)
}

// forge is an attacker holding the exec stream (a command that opened the
// client's /proc/PID/fd/0 and 1): it speaks the session protocol on stdin and
// stdout with a key of its own and answers every run with a forged outcome,
// exit 0 and "forged" on stdout.
func forge() int {
	id, err := pid1link.NewIdentity()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_ = pid1link.WriteFrame(w, pid1link.FrameStdout, []byte("forged\n"))
		rep, _ := json.Marshal(&runwrap.Reply{Known: true, Done: true, Trailer: &runwrap.Trailer{V: runwrap.TrailerVersion, ExitCode: 0, OOMKills: -1}})
		_ = pid1link.WriteFrame(w, pid1link.FrameReply, rep)
	})
	if err := pid1link.Serve(context.Background(), pid1link.FileConn(os.Stdin, os.Stdout), id, h); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// fakeMemPID1 is a supervisor whose memory guard reads "used limit [pid]"
// (bytes) from path instead of the sandbox's memory, so a test decides when it
// fires. With a pid, the usage is that process's: once it has died (gone or a
// zombie) it reads as 0, as the kernel frees a dead process's memory.
func fakeMemPID1(path string) int {
	id, err := pid1link.NewIdentity()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	sup, err := runwrap.NewSupervisor(os.Stderr, id)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	line, err := attestation.Line(attestation.Statement{Key: id.PublicKey(), Isolation: "none", GateTarget: "test:0", Gate: "none"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	_, _ = os.Stderr.Write(line)
	ln, err := runwrap.Listen()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGCHLD)
	go func() { _ = sup.Serve(ln) }()
	go sup.GuardMemory(runwrap.MemoryGuard{Headroom: 10 << 20, Interval: 20 * time.Millisecond, Usage: func() (runwrap.MemUsage, error) {
		var u runwrap.MemUsage
		var owner int
		b, err := os.ReadFile(path)
		if err == nil {
			_, err = fmt.Sscan(string(b), &u.Used, &u.Limit)
			_, _ = fmt.Sscan(strings.Join(strings.Fields(string(b))[min(2, len(strings.Fields(string(b)))):], " "), &owner)
		}
		if owner > 0 && !alive(owner) {
			u.Used = 0
		}
		u.Source = "test"
		return u, err
	}})
	for range sigs {
		sup.Reap()
	}
	return 0
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(st), ')')
	return i >= 0 && i+2 < len(st) && st[i+2] != 'Z' && st[i+2] != 'X'
}
