package runwrap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"airlock.dev/airlock/internal/pid1link"
)

// keepOutcomes is how many finished runs the registry remembers.
const keepOutcomes = 256

// Supervisor is PID 1's command service. It serves sessions (session.go) to
// the clients the container runtime execs, starts a keeper per run, holds the
// run's stream descriptors, enforces the deadline itself if the keeper is
// killed, and remembers outcomes. It is also the reaper of everything in the
// container: Reap must be called on every SIGCHLD.
type Supervisor struct {
	self int
	log  io.Writer
	// id is PID 1's session key: the gateway accepts only its holder.
	id *pid1link.Identity
	// keeperLog is what keepers get as stdout and stderr: a pipe whose lines
	// PID 1 relays, quoted, to its own log. The container's log itself is
	// handed to no child: a command could open it through a keeper's /proc
	// before the keeper makes itself undumpable, and forge PID 1's lines.
	keeperLog *os.File

	mu      sync.Mutex
	waiters map[int]chan syscall.WaitStatus // keepers by pid
	runs    map[string]*run
	done    []string // finished run ids, oldest first
	// claimed are direct children that are not keepers: leftovers a run
	// kept on purpose, or orphans of a killed keeper adopted by its run.
	claimed map[int]bool
	// idle are keepers ready for the next run: started ahead, or back from a run that left nothing behind (at
	// most maxIdleKeepers).
	idle []*keeperProc
	// busy wakes the memory guard when something it guards appears: an idle
	// sandbox then costs no timer wakeups (each one is costly under gVisor).
	busy chan struct{}
	// acceptFailingSince is when accept began to fail, nil while it works
	// (zero once Serve stopped).
	acceptFailingSince atomic.Pointer[time.Time]
}

type run struct {
	cfg   Config
	start time.Time
	ctl   *net.UnixConn // to the keeper
	// stdout and stderr are where the run's output goes (the session's pipes,
	// or /dev/null for a background run): PID 1 forwards to them itself if the
	// keeper is killed. stdin is nil when the run has no stdin.
	stdout *os.File
	stderr *os.File
	stdin  *os.File
	// outR and errR are our copies of the read ends of the command's output
	// pipes: while they are open a killed keeper does not turn the command's
	// next write into SIGPIPE, and we forward what the command writes after.
	outR, errR *os.File
	ended      chan struct{}
	cancel     chan struct{}
	cancelO    sync.Once
	reply      Reply
	// keeper is the keeper's pid; orphans, once it died, the roots PID 1
	// adopted (both under Supervisor.mu). oomGuard is set when the memory
	// guard killed the command.
	keeper   int
	orphans  []int
	oomGuard atomic.Pointer[string]
	// info is what the registry tells about the run (under Supervisor.mu);
	// started is closed once the keeper reported the command started, or
	// the run ended without it.
	info    ProcInfo
	started chan struct{}
	// replied is closed once reply is final: the client may be answered
	// before the keeper has exited.
	replied chan struct{}
	// stdinW is a background run's stdin (OpStdin writes to it); killed
	// records an OpKill.
	stdinMu sync.Mutex
	stdinW  *os.File
	// kill is closed by OpKill.
	kill  chan struct{}
	killO sync.Once
	// stream carries a foreground run's output to the call following it (under Supervisor.mu).
	stream *runStream
	// ctlMu guards telling the keeper about the run (tell); ctlGone once the run ended, when the keeper may
	// already hold another run.
	ctlMu   sync.Mutex
	ctlGone bool
}

// tell sends req about the run to its keeper, unless the run ended.
func (r *run) tell(req Request) error {
	r.ctlMu.Lock()
	defer r.ctlMu.Unlock()
	if r.ctlGone || r.ctl == nil {
		return os.ErrClosed
	}
	req.ID = r.cfg.ID
	return WriteFrame(r.ctl, &req)
}

// endTell stops tell for good: the keeper's next request will be about another run.
func (r *run) endTell() {
	r.ctlMu.Lock()
	r.ctlGone = true
	r.ctlMu.Unlock()
}

// lose ends the run as lost: nobody follows it any more.
func (r *run) lose() { r.cancelO.Do(func() { close(r.cancel) }) }

// NewSupervisor returns a supervisor speaking for id; log receives its own
// diagnostics and, relayed, its keepers'.
func NewSupervisor(log io.Writer, id *pid1link.Identity) (*Supervisor, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("keeper log pipe: %w", err)
	}
	go relayKeeperLog(r, log)
	return &Supervisor{self: os.Getpid(), log: log, id: id, keeperLog: w, waiters: map[int]chan syscall.WaitStatus{},
		runs: map[string]*run{}, claimed: map[int]bool{}, busy: make(chan struct{}, 1)}, nil
}

// Listen binds the supervisor's socket.
func Listen() (*net.UnixListener, error) {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: socketAddr(), Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", socketAddr(), err)
	}
	return ln, nil
}

// Accept failures (EMFILE, ENFILE, ENOBUFS: the sandbox's commands may hold
// every descriptor the node allows) are retried with a growing pause up to
// acceptBackoffMax; one that lasts acceptFailureGrace makes Healthy fail.
const (
	acceptBackoffMax   = time.Second
	acceptFailureGrace = 10 * time.Second
	acceptLogEvery     = 10 * time.Second
	// requestTimeout bounds how long a connected client may take to send its
	// request and descriptors: an idle connection must not hold a descriptor.
	requestTimeout = 10 * time.Second
)

// Serve accepts clients until ln is closed.
func (s *Supervisor) Serve(ln *net.UnixListener) error {
	go s.refillIdle()
	var pause time.Duration
	var failures int
	var logged time.Time
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				s.acceptFailingSince.Store(&time.Time{}) // no longer serving at all
				return nil
			}
			s.acceptFailingSince.CompareAndSwap(nil, ptrTo(time.Now()))
			if failures++; time.Since(logged) > acceptLogEvery {
				fmt.Fprintf(s.log, "airlock-init pid1: accept: %v (%d failures; retrying)\n", err, failures)
				logged, failures = time.Now(), 0
			}
			pause = min(max(2*pause, 5*time.Millisecond), acceptBackoffMax)
			time.Sleep(pause)
			continue
		}
		s.acceptFailingSince.Store(nil)
		pause = 0
		go s.serve(c)
	}
}

// Healthy says why the supervisor cannot serve new sessions, nil when it can:
// its accept has failed for acceptFailureGrace, or it stopped.
func (s *Supervisor) Healthy() error {
	since := s.acceptFailingSince.Load()
	switch {
	case since == nil:
		return nil
	case since.IsZero():
		return errors.New("the supervisor stopped accepting sessions")
	case time.Since(*since) > acceptFailureGrace:
		return fmt.Errorf("the supervisor has failed to accept sessions since %s", since.Format(time.RFC3339))
	}
	return nil
}

func ptrTo[T any](v T) *T { return &v }

// Reap collects every exited child; a keeper's status goes to its run.
func (s *Supervisor) Reap() {
	for {
		s.mu.Lock()
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			s.mu.Unlock()
			return
		}
		if ch, ok := s.waiters[pid]; ok {
			ch <- ws
			delete(s.waiters, pid)
		}
		delete(s.claimed, pid)
		s.mu.Unlock()
	}
}

// isClient reports whether pid may use the supervisor: it must not descend
// from us. Every process a command starts does (we are its subreaper, or PID
// 1 that orphans re-parent to); a process the container runtime exec'd does
// not (its parent is outside the container, ppid 0).
func (s *Supervisor) isClient(pid int) bool {
	for i := 0; i < 4096 && pid > 0; i++ {
		if pid == s.self {
			return false
		}
		if pid == 1 {
			return true // the host's init (tests): not us
		}
		st, ok := readStat(pid)
		if !ok {
			return false
		}
		pid = st.ppid
	}
	return pid == 0
}

// serve answers one connection on the socket: a client handing over its
// exec stream for a session (OpSession), the only thing the socket serves.
func (s *Supervisor) serve(c *net.UnixConn) {
	defer c.Close()
	pid, err := peerPID(c)
	if err != nil || !s.isClient(pid) {
		// A command (or its descendant): say nothing, read nothing.
		return
	}
	var req Request
	_ = c.SetReadDeadline(time.Now().Add(requestTimeout))
	files, err := recvFrameFiles(c, &req, 2)
	_ = c.SetReadDeadline(time.Time{})
	if err != nil {
		_ = WriteFrame(c, &Reply{Error: err.Error()})
		return
	}
	if req.Op != OpSession || len(files) != 2 {
		closeAll(files)
		_ = WriteFrame(c, &Reply{Error: fmt.Sprintf("unknown op %q (%d descriptors): the socket serves sessions only", req.Op, len(files))})
		return
	}
	err = s.serveSession(files[0], files[1])
	rep := Reply{Known: true, Done: true}
	if err != nil {
		rep.Error = err.Error()
	}
	_ = WriteFrame(c, &rep)
}

// startRun registers req's run and starts it on files (its stdout, stderr
// and, unless NoStdin, stdin; for a background run those are made here),
// which it owns from then on, whatever happens. A refusal says why.
func (s *Supervisor) startRun(req *Request, files []*os.File) (*run, error) {
	if req.Background {
		closeAll(files) // a background run has no stream: its output goes to files
		var err error
		if files, err = s.backgroundStdio(req); err != nil {
			return nil, err
		}
	}
	if err := req.validate(); err != nil || len(files) < 2 {
		closeAll(files)
		return nil, fmt.Errorf("bad run request: %w (%d descriptors)", err, len(files))
	}
	r := &run{cfg: req.Config, start: time.Now(), stdout: files[0], stderr: files[1], ended: make(chan struct{}),
		cancel: make(chan struct{}), started: make(chan struct{}), replied: make(chan struct{}), kill: make(chan struct{})}
	r.info = ProcInfo{ID: r.cfg.ID, Command: displayCommand(r.cfg.command()), Background: r.cfg.Background, Running: true, StartedAt: r.start}
	if len(files) > 2 {
		r.stdin = files[2]
	}
	if req.Background {
		r.stdinW = files[3]
		files = files[:3]
	}
	if err := s.register(r); err != nil {
		closeAll(append(files, r.stdinW))
		return nil, err
	}
	go s.execute(r, files)
	return r, nil
}

// startBackground starts a background run and answers once its command
// started, or with its outcome when it could not start.
func (s *Supervisor) startBackground(req *Request) *Reply {
	r, err := s.startRun(req, nil)
	if err != nil {
		return &Reply{Error: err.Error()}
	}
	<-r.started
	s.mu.Lock()
	info := r.info
	s.mu.Unlock()
	if !info.Running {
		<-r.ended // it could not start: its outcome says why
		s.mu.Lock()
		info = r.info
		s.mu.Unlock()
		rep := r.reply
		rep.Process = &info
		return &rep
	}
	return &Reply{Known: true, Process: &info}
}

// maxBackground bounds the background runs alive at once: each holds files
// and a keeper, and their output files must outlive rotation (DefaultKeep).
const maxBackground = 16

// register adds r to the registry; it returns why not.
func (s *Supervisor) register(r *run) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.runs[r.cfg.ID]; dup {
		return errors.New("duplicate run id")
	}
	if r.cfg.Background {
		n := 0
		for _, o := range s.runs {
			if o.cfg.Background && o.info.Running {
				n++
			}
		}
		if n >= maxBackground {
			return fmt.Errorf("too many background processes (%d are running; kill one first)", n)
		}
	}
	s.runs[r.cfg.ID] = r
	s.wake()
	return nil
}

// wake tells the memory guard there may be something to guard.
func (s *Supervisor) wake() {
	select {
	case s.busy <- struct{}{}:
	default:
	}
}

// backgroundStdio is a background run's descriptors: /dev/null for the
// stream (the keeper still writes its trailer there), and a stdin pipe whose
// write end (the fourth file) stays with us for OpStdin. Its output goes
// under <out dir>/background, apart from the foreground runs' rotation.
func (s *Supervisor) backgroundStdio(req *Request) ([]*os.File, error) {
	base := req.OutDir
	if base == "" {
		base = defaultOutDir()
	}
	req.OutDir = filepath.Join(base, "background")
	out, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", os.DevNull, err)
	}
	errOut, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		_ = out.Close()
		return nil, fmt.Errorf("open %s: %w", os.DevNull, err)
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		closeAll([]*os.File{out, errOut})
		return nil, fmt.Errorf("stdin pipe: %w", err)
	}
	req.NoStdin = false
	return []*os.File{out, errOut, inR, inW}, nil
}

// execute runs r to its end and records the outcome.
func (s *Supervisor) execute(r *run, files []*os.File) {
	startedOnce := sync.OnceFunc(func() { close(r.started) })
	repliedOnce := sync.OnceFunc(func() { close(r.replied) })
	defer func() {
		s.mu.Lock()
		s.done = append(s.done, r.cfg.ID)
		if len(s.done) > keepOutcomes {
			delete(s.runs, s.done[0])
			s.done = s.done[1:]
		}
		r.info.Running, r.info.EndedAt, r.info.Trailer = false, time.Now(), r.reply.Trailer
		s.mu.Unlock()
		r.closeStdin()
		closeAll(files)
		repliedOnce()
		startedOnce()
		close(r.ended)
	}()
	k, err := s.startKeeper(r, files)
	if err != nil {
		t := Trailer{V: TrailerVersion, ExitCode: -1, OOMKills: -1, WrapperError: err.Error()}
		r.reply = Reply{Known: true, Done: true, Trailer: &t, Code: ExitWrapperError}
		return
	}
	// The keeper holds the command now: the registry keeps only what the
	// processes API shows (r.info), not the env and scoped secrets.
	r.cfg.Env, r.cfg.Shell, r.cfg.Argv = nil, "", nil
	go func() {
		select {
		case <-r.cancel:
			_ = r.tell(Request{Op: opCancel})
		case <-r.ended:
		}
	}()
	// The keeper's first frame says the command started (or is already its
	// final reply, when it could not start).
	var rep Reply
	first := ReadFrame(r.ctl, &rep)
	if first == nil && rep.Trailer == nil && rep.Process != nil {
		s.mu.Lock()
		r.info.PID, r.info.StdoutPath, r.info.StderrPath = rep.Process.PID, rep.Process.StdoutPath, rep.Process.StderrPath
		s.mu.Unlock()
		startedOnce()
		rep = Reply{}
		first = ReadFrame(r.ctl, &rep)
	}
	if first == nil && rep.Trailer != nil {
		rep.Known = true
		r.reply = rep
		// The keeper wrote the trailer and closed its copies of the stream:
		// with ours closed too the exec can end while the keeper exits.
		closeAll(files)
		files = nil
		repliedOnce()
		var idle Reply
		_ = r.ctl.SetReadDeadline(time.Now().Add(idleWait))
		reusable := ReadFrame(r.ctl, &idle) == nil && idle.Idle
		_ = r.ctl.SetReadDeadline(time.Time{})
		r.endTell()
		closeAll([]*os.File{r.outR, r.errR}) // a kept leftover's writes fail as they would without us
		if reusable {
			s.recycle(k)
			return
		}
		<-k.exited
		_ = r.ctl.Close()
		s.adoptOrphans(r.cfg.KeepLeftovers) // what the keeper left: kept on purpose
		return
	}
	ws := <-k.exited
	r.endTell()
	_ = r.ctl.Close()
	s.keeperKilled(r, ws)
	closeAll([]*os.File{r.outR, r.errR})
}

// idleWait bounds the wait for a keeper's word after its run's final reply: idle (it takes the next run), or
// its exit.
const idleWait = 5 * time.Second

// maxIdleKeepers is how many keepers wait for runs at most: enough that a run rarely starts one.
const maxIdleKeepers = 2

// keeperProc is a started keeper waiting for its run on ctl.
type keeperProc struct {
	pid    int
	exited chan syscall.WaitStatus
	ctl    *net.UnixConn
}

// spawnKeeper starts a keeper; it makes itself undumpable and then waits for
// a run on its control socket.
func (s *Supervisor) spawnKeeper() (*keeperProc, error) {
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	mine, theirs := os.NewFile(uintptr(sp[0]), "keeper-control"), os.NewFile(uintptr(sp[1]), "control")
	defer theirs.Close()
	fc, err := net.FileConn(mine)
	_ = mine.Close()
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		_ = fc.Close()
		return nil, fmt.Errorf("open %s: %w", os.DevNull, err)
	}
	defer null.Close()
	attr := &os.ProcAttr{
		Env:   append(os.Environ(), roleEnv+"="+roleKeeper),
		Files: []*os.File{null, s.keeperLog, s.keeperLog, theirs},
	}
	k := &keeperProc{exited: make(chan syscall.WaitStatus, 1), ctl: fc.(*net.UnixConn)}
	s.mu.Lock() // no Reap between start and registration
	p, err := os.StartProcess("/proc/self/exe", []string{"airlock-init-keeper"}, attr)
	if err == nil {
		s.waiters[p.Pid] = k.exited
		k.pid = p.Pid
	}
	s.mu.Unlock()
	if err != nil {
		_ = k.ctl.Close()
		return nil, fmt.Errorf("start keeper: %w", err)
	}
	_ = p.Release() // Reap waits for it
	return k, nil
}

// takeKeeper returns an idle keeper that is alive and not stopped (a command may have killed or stopped it:
// kill -9 -1, kill -STOP -1), else a new one; it starts another in the background when none is left idle, so a
// run costs no process start on its critical path, and, with keepers reused, rarely one at all.
func (s *Supervisor) takeKeeper() (*keeperProc, error) {
	for {
		s.mu.Lock()
		var k *keeperProc
		if n := len(s.idle); n > 0 {
			k, s.idle = s.idle[n-1], s.idle[:n-1]
		}
		empty := len(s.idle) == 0
		s.mu.Unlock()
		if empty {
			go s.refillIdle()
		}
		if k == nil {
			return s.spawnKeeper()
		}
		if k.usable() {
			return k, nil
		}
		_ = syscall.Kill(k.pid, syscall.SIGKILL)
		_ = k.ctl.Close()
	}
}

// usable reports whether the keeper can take a run: it has not exited and is not stopped.
func (k *keeperProc) usable() bool {
	select {
	case ws := <-k.exited:
		k.exited <- ws
		return false
	default:
	}
	st, ok := readStat(k.pid)
	return ok && st.state != 'T' && st.state != 't' && st.state != 'Z' && st.state != 'X'
}

// refillIdle starts a keeper ahead of the next run, unless enough wait already.
func (s *Supervisor) refillIdle() {
	k, err := s.spawnKeeper()
	if err != nil {
		fmt.Fprintf(s.log, "airlock-init pid1: spare keeper: %v\n", err)
		return
	}
	s.recycle(k)
}

// recycle lets k wait for the next run, or ends it (its control socket closed: it exits) when enough wait.
func (s *Supervisor) recycle(k *keeperProc) {
	s.mu.Lock()
	keep := len(s.idle) < maxIdleKeepers
	if keep {
		s.idle = append(s.idle, k)
	}
	s.mu.Unlock()
	if !keep {
		_ = k.ctl.Close()
	}
}

// startKeeper hands r to a keeper: the keeper made itself undumpable before
// it receives the descriptors. A spare keeper that dies before it accepted
// the run (a command's kill -9 -1 may have hit it just before: its death is
// not reaped yet, and the hand-off can still succeed) is replaced by a fresh
// one: it never started the command.
func (s *Supervisor) startKeeper(r *run, files []*os.File) (*keeperProc, error) {
	for attempt := 0; ; attempt++ {
		k, err := s.takeKeeper()
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		r.ctl, r.keeper = k.ctl, k.pid
		s.mu.Unlock()
		err = s.sendRun(r, files)
		if err == nil {
			var ack Reply
			if err = ReadFrame(r.ctl, &ack); err == nil && !ack.Accepted {
				err = errors.New("the keeper did not accept the run")
			}
		}
		if err == nil {
			return k, nil
		}
		_ = syscall.Kill(k.pid, syscall.SIGKILL)
		_ = k.ctl.Close()
		closeAll([]*os.File{r.outR, r.errR})
		if attempt > 0 {
			fmt.Fprintf(s.log, "airlock-init pid1: run %s: %v\n", r.cfg.ID, err)
			return nil, fmt.Errorf("hand the run to its keeper: %w", err)
		}
	}
}

// sendRun hands the keeper its run: the request with the stream, then the
// command's output pipes, whose read ends we keep a copy of.
func (s *Supervisor) sendRun(r *run, files []*os.File) error {
	if err := sendFrameFiles(r.ctl, &Request{Op: OpRun, Config: r.cfg}, files); err != nil {
		return err
	}
	outR, outW, err1 := os.Pipe()
	errR, errW, err2 := os.Pipe()
	if err := errors.Join(err1, err2); err != nil {
		closeAll([]*os.File{outR, outW, errR, errW})
		return fmt.Errorf("output pipes: %w", err)
	}
	defer closeAll([]*os.File{outW, errW})
	r.outR, r.errR = outR, errR
	return sendFrameFiles(r.ctl, &Request{Op: opPipes}, []*os.File{outR, outW, errR, errW})
}

// adoptOrphans claims the direct children that no run owns yet, and returns
// them: at a keeper's exit its leftovers have just re-parented to us.
func (s *Supervisor) adoptOrphans(kept bool) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []int
	for _, pid := range liveChildren(s.self) {
		if _, keeper := s.waiters[pid]; keeper || s.claimed[pid] {
			continue
		}
		s.claimed[pid] = kept
		out = append(out, pid)
	}
	if len(out) > 0 {
		s.wake()
	}
	return out
}

// keeperKilled finishes a run whose keeper died without an outcome (the
// command killed it: kill -9 -1 reaches every process of the uid but PID 1).
// Its tree re-parented to us; the deadline still holds: at the timeout (or
// on cancel) it is killed, and the outcome is written to the stream and
// kept for OpStatus.
func (s *Supervisor) keeperKilled(r *run, ws syscall.WaitStatus) {
	roots := s.adoptOrphans(false)
	s.mu.Lock()
	r.orphans = roots
	s.mu.Unlock()
	fmt.Fprintf(s.log, "airlock-init pid1: run %s: keeper died (%v); supervising %d orphaned processes\n", r.cfg.ID, ws, len(roots))
	fwd := startForward(r)
	var deadline <-chan time.Time
	if r.cfg.Timeout > 0 {
		tm := time.NewTimer(time.Until(r.start.Add(r.cfg.Timeout)))
		defer tm.Stop()
		deadline = tm.C
	}
	t := Trailer{ExitCode: -1, OOMKills: -1}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	lost := false
wait:
	for len(s.alive(roots)) > 0 {
		select {
		case <-deadline:
			t.TimedOut = true
			break wait
		case <-r.cancel:
			lost = true
			break wait
		case <-r.kill:
			t.Killed = true
			break wait
		case <-fwd.over:
			t.OutputLimit = true
			break wait
		case <-fwd.lost:
			lost = true
			break wait
		case <-tick.C:
		}
	}
	if p := r.oomGuard.Load(); p != nil && !t.TimedOut && !lost {
		t.Signal, t.OOMGuard = "SIGKILL", *p
	} else if t.TimedOut || lost || t.OutputLimit || t.Killed {
		t.Signal, t.StreamLost = "SIGKILL", lost
		s.killRoots(roots, r.cfg.Grace)
	} else {
		t.StartError = "the command killed its supervisor; its exit status is unknown"
	}
	t.StdoutBytes, t.StderrBytes = fwd.finish(drainTimeout)
	t.DurationMS = time.Since(r.start).Milliseconds()
	t.V = TrailerVersion
	closeAll(fwd.dsts)
	r.reply = Reply{Known: true, Done: true, Trailer: &t, Code: clientCode(t)}
}

// alive returns the roots that still exist or have live descendants.
func (s *Supervisor) alive(roots []int) []int {
	var out []int
	for _, pid := range roots {
		if st, ok := readStat(pid); (ok && st.state != 'Z' && st.state != 'X') || len(liveDescendants(pid)) > 0 {
			out = append(out, pid)
		}
	}
	return out
}

// killRoots is killTree for adopted trees: SIGTERM, grace, then SIGKILL
// until they are gone, adopting whatever re-parents to us meanwhile.
func (s *Supervisor) killRoots(roots []int, grace time.Duration) {
	signal := func(sig syscall.Signal) int {
		roots = append(roots, s.adoptOrphans(false)...)
		n := 0
		for _, root := range roots {
			pids := append(liveDescendants(root), root)
			for _, pid := range pids {
				if syscall.Kill(pid, sig) == nil {
					n++
				}
			}
		}
		return n
	}
	signal(syscall.SIGTERM)
	signal(syscall.SIGCONT)
	for end := time.Now().Add(grace); time.Now().Before(end) && len(s.alive(roots)) > 0; {
		time.Sleep(10 * time.Millisecond)
	}
	for i := 0; i < 200 && len(s.alive(roots)) > 0; i++ {
		signal(syscall.SIGKILL)
		time.Sleep(5 * time.Millisecond)
	}
}

// status answers OpStatus: the outcome of a run, waiting up to req.Wait (or
// until ctx ends) for a running one; Cancel kills it first.
func (s *Supervisor) status(ctx context.Context, req *Request) *Reply {
	s.mu.Lock()
	r := s.runs[req.ID]
	s.mu.Unlock()
	if r == nil {
		return &Reply{Known: false}
	}
	if req.Cancel {
		r.lose()
	}
	var rep Reply
	select {
	case <-r.ended:
		rep = r.reply
	case <-time.After(req.Wait):
		rep = Reply{Known: true}
	case <-ctx.Done():
		rep = Reply{Known: true}
	}
	s.mu.Lock()
	info := r.info
	s.mu.Unlock()
	rep.Process = &info
	return &rep
}
