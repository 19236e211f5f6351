package runwrap

import (
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const (
	// How long to wait for the output pipes to reach EOF once the command and
	// its leftovers are gone (or, with --keep-leftovers, once it exited).
	drainTimeout     = 2 * time.Second
	keptDrainTimeout = 200 * time.Millisecond
)

// supervisor owns one run in its keeper: it starts the command, tees its
// output into files and the stream, enforces the limits and reports the outcome.
type supervisor struct {
	cfg   Config
	files *outFiles
	// pipes are the command's output pipes from PID 1: stdout's read and
	// write ends, then stderr's.
	pipes []*os.File
	// starter, when a process limit applies, is the command's process
	// started ahead (nil: start it now).
	starter *starter

	stdout, stderr *streamOut
	stdin          *os.File // nil: none
	// control is where PID 1's requests about this run arrive (keeperControl); closed channels there mean
	// PID 1 is gone.
	control <-chan Request
	lost    <-chan struct{}
	// finished is closed once the run ended: watchControl must not outlive it (the keeper takes the next run).
	finished chan struct{}

	total       atomic.Int64 // stdout+stderr bytes captured
	timedOut    atomic.Bool
	outputLimit atomic.Bool
	streamLost  atomic.Bool
	oomGuard    atomic.Pointer[string]
	pgid        atomic.Int64
	fileErr     atomic.Pointer[string]
	received    time.Time // when the run arrived, for Timings
	timings     Timings
	killed      atomic.Bool // OpKill asked for it
	killReq     chan struct{}
	killOnce    sync.Once
}

func (s *supervisor) setFileErr(err error) {
	msg := err.Error()
	s.fileErr.CompareAndSwap(nil, &msg)
}

// since is the time since the run arrived, in microseconds.
func (s *supervisor) since() int64 { return time.Since(s.received).Microseconds() }

// requestKill asks the main loop to kill the tree (non-blocking).
func (s *supervisor) requestKill() {
	select {
	case s.killReq <- struct{}{}:
	default:
	}
}

// run runs the command and returns its trailer and the exit code the client
// reports.
func (s *supervisor) run(ctl *net.UnixConn) (Trailer, int) {
	if err := BecomeSubreaper(); err != nil {
		// Without it, escaped processes re-parent to PID 1 and are missed.
		return s.wrapperError(fmt.Errorf("become subreaper: %w", err))
	}
	dir := s.cfg.OutDir
	if dir == "" {
		dir = defaultOutDir()
	}
	files, err := openOutFiles(dir)
	if err != nil {
		s.setFileErr(err)
	} else {
		s.files = files
	}
	oomBefore := oomKillCount()
	s.timings.FilesUS = s.since()

	outR, outW, errR, errW := s.pipes[0], s.pipes[1], s.pipes[2], s.pipes[3]
	for _, f := range []*os.File{outR, errR, s.stdout.f, s.stderr.f} {
		growPipe(f)
	}
	l, startErr := s.command(outW, errW)
	var cmd process
	if startErr == nil {
		cmd, startErr = s.start(l)
	}
	if s.starter != nil { // not used: it must not look like a leftover
		s.starter.discard()
		s.starter = nil
	}
	_ = outW.Close()
	_ = errW.Close()
	begin := time.Now()
	s.timings.StartedUS = s.since()
	if startErr == nil {
		// PID 1 learns the command's pid and files now (a background run's
		// caller gets them at once); the final reply follows at the end.
		info := &ProcInfo{PID: cmd.pid}
		if s.files != nil {
			info.StdoutPath, info.StderrPath = s.files.path("stdout"), s.files.path("stderr")
		}
		_ = WriteFrame(ctl, &Reply{Process: info})
	}

	var wg sync.WaitGroup
	var outFile, errFile *os.File
	if s.files != nil {
		outFile, errFile = s.files.stdout, s.files.stderr
	}
	wg.Add(2)
	go s.copy(&wg, outR, outFile, s.stdout)
	go s.copy(&wg, errR, errFile, s.stderr)
	go s.watchControl()

	t := Trailer{OOMKills: -1}
	if startErr != nil {
		t.ExitCode, t.StartError = startFailure(startErr)
		s.note(errFile, "airlock: "+t.StartError+"\n")
		s.waitCopiers(&wg, outR, errR, drainTimeout)
	} else {
		t = s.supervise(cmd, &wg, outR, errR)
		t.DurationMS = time.Since(begin).Milliseconds()
	}
	reapOrphans()
	if oomBefore >= 0 {
		if after := oomKillCount(); after >= 0 {
			t.OOMKills = after - oomBefore
		}
	}
	return s.finish(t)
}

// supervise waits for the command while enforcing the timeout and the kill
// requests, then deals with leftovers and drains the pipes.
func (s *supervisor) supervise(cmd process, wg *sync.WaitGroup, outR, errR *os.File) Trailer {
	waitErr := make(chan *os.ProcessState, 1)
	go func() {
		ps, _ := cmd.wait() // a non-zero exit is in the state, not an error
		waitErr <- ps
	}()
	var timeout <-chan time.Time
	if s.cfg.Timeout > 0 {
		tm := time.NewTimer(s.cfg.Timeout)
		defer tm.Stop()
		timeout = tm.C
	}
	me, pgid := os.Getpid(), cmd.pid
	s.pgid.Store(int64(pgid))
	killed := make(chan struct{})
	startKill := func() {
		s.killOnce.Do(func() {
			go func() { killTree(me, pgid, s.cfg.Grace); close(killed) }()
		})
	}
	var state *os.ProcessState
loop:
	for {
		select {
		case <-timeout:
			s.timedOut.Store(true)
			startKill()
		case <-s.killReq:
			startKill()
		case state = <-waitErr:
			break loop
		}
	}
	s.timings.ExitedUS = s.since()
	t := Trailer{OOMKills: -1}
	t.ExitCode, t.Signal = exitStatus(state)

	drain := drainTimeout
	s.killOnce.Do(func() {
		close(killed) // the command ended on its own
		if s.cfg.KeepLeftovers {
			drain = keptDrainTimeout
			return
		}
		if hasChildren() && len(liveDescendants(me)) > 0 {
			t.LeftoversKilled = killTree(me, 0, s.cfg.Grace)
		}
	})
	<-killed
	s.waitCopiers(wg, outR, errR, drain)
	s.timings.DrainedUS = s.since()
	t.TimedOut = s.timedOut.Load()
	t.OutputLimit = s.outputLimit.Load()
	t.Killed = s.killed.Load() && !t.TimedOut
	t.StreamLost = s.streamLost.Load() && !t.TimedOut && !t.Killed
	if p := s.oomGuard.Load(); p != nil {
		t.OOMGuard = *p
	}
	return t
}

// waitCopiers waits for both output pipes to reach EOF; past the timeout
// (a kept leftover still holds them) it closes our read ends.
func (s *supervisor) waitCopiers(wg *sync.WaitGroup, outR, errR *os.File, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		_ = outR.Close()
		_ = errR.Close()
		<-done
	}
}

// watchControl acts on PID 1's requests about the run, and kills the tree
// when PID 1 cancels the run (its caller lost the stream) or goes away. The
// exec'd client's death is no reason: a command can kill it, and the deadline
// must still hold.
func (s *supervisor) watchControl() {
	for {
		select {
		case req := <-s.control:
			switch req.Op {
			case opMemoryKill:
				s.memoryKill(req.Reason)
				continue
			case OpSignal:
				if sig := signalNumber(req.Signal); sig != 0 {
					signalTree(os.Getpid(), int(s.pgid.Load()), sig)
				}
				continue
			case OpKill:
				s.killed.Store(true)
				s.requestKill()
				continue
			}
		case <-s.lost:
		case <-s.finished:
			return
		}
		s.streamLost.Store(true)
		s.requestKill()
		return
	}
}

// memoryKill SIGKILLs the command's tree at once (no grace: the sandbox is
// about to run out of memory), after marking the trailer.
func (s *supervisor) memoryKill(reason string) {
	s.oomGuard.CompareAndSwap(nil, &reason)
	me, pgid := os.Getpid(), int(s.pgid.Load())
	for i := 0; i < 200 && signalTree(me, pgid, syscall.SIGKILL) > 0; i++ {
		time.Sleep(5 * time.Millisecond)
	}
}

// finish closes and rotates the output files, and returns the outcome and the
// keeper's exit code.
func (s *supervisor) finish(t Trailer) (Trailer, int) {
	if s.files != nil {
		t.StdoutPath, t.StderrPath = s.files.path("stdout"), s.files.path("stderr")
		if err := s.files.close(); err != nil {
			s.setFileErr(err)
		}
		if err := rotateOutFiles(s.files.dir, s.cfg.Keep); err != nil {
			s.setFileErr(err)
		}
	}
	t.StdoutBytes, t.StderrBytes = s.stdout.count.Load(), s.stderr.count.Load()
	if p := s.fileErr.Load(); p != nil {
		t.FileError = *p
	}
	s.timings.DoneUS = s.since()
	if !s.received.IsZero() {
		t.Timings = &s.timings
	}
	t.V = TrailerVersion
	return t, clientCode(t)
}

// clientCode is the keeper's exit code for an outcome: the command's, 128+N for
// signal N, ExitTimeout or ExitWrapperError.
func clientCode(t Trailer) int {
	switch {
	case t.WrapperError != "":
		return ExitWrapperError
	case t.TimedOut:
		return ExitTimeout
	case t.Signal != "":
		return 128 + int(signalNumber(t.Signal))
	case t.ExitCode < 0:
		return ExitWrapperError
	}
	return t.ExitCode
}

func (s *supervisor) wrapperError(err error) (Trailer, int) {
	wrapperFailed(os.Stderr, err)
	return Trailer{V: TrailerVersion, ExitCode: -1, OOMKills: -1, WrapperError: err.Error()}, ExitWrapperError
}

// note writes a wrapper message into the command's stderr (stream and file),
// counted like the command's own output.
func (s *supervisor) note(file *os.File, msg string) {
	s.stderr.count.Add(int64(len(msg)))
	if file != nil {
		_, _ = file.WriteString(msg)
	}
	_ = s.stderr.write([]byte(msg), s.cfg.StallTimeout)
}

// exitStatus maps a finished command to (exit code, signal name); a
// non-zero exit is in ps, not in Wait's error.
func exitStatus(ps *os.ProcessState) (int, string) {
	if ps == nil {
		return -1, ""
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return -1, signalName(ws.Signal())
	}
	return ps.ExitCode(), ""
}

func signalNumber(name string) syscall.Signal {
	for i := syscall.Signal(1); i < 65; i++ {
		if signalName(i) == name {
			return i
		}
	}
	return 0
}
