package runwrap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"airlock.dev/airlock/internal/pid1link"
)

// Session calls, as the gateway makes them on a session (pid1link): a run streams its output back as frames
// and ends with its reply; an attach does the same for a run already going (after its call's stream broke);
// a control call is one request and one reply.
const (
	PathRun     = "/run"
	PathAttach  = "/attach"
	PathControl = "/control"
)

// serveSession serves one session on a client's exec stream (in: its stdin, out: its stdout) until the
// gateway closes it or it breaks.
func (s *Supervisor) serveSession(in, out *os.File) error {
	conn := pid1link.FileConn(pollable(in, nil), pollable(out, nil))
	closeAll([]*os.File{in, out}) // pollable made duplicates
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+PathRun, s.handleRun)
	mux.HandleFunc("POST "+PathAttach, s.handleAttach)
	mux.HandleFunc("POST "+PathControl, s.handleControl)
	return pid1link.Serve(context.Background(), conn, s.id, mux)
}

// handleRun runs one foreground command: the body is its Config (a frame) and then its stdin; the answer is its
// output as frames, then its reply. A call that goes away (its stream reset, the session broken) leaves the
// run going for its reattach grace, for an attach to pick up; the keeper kills it as lost after that.
func (s *Supervisor) handleRun(w http.ResponseWriter, hr *http.Request) {
	out := newFrameWriter(w)
	var req Request
	if err := ReadFrame(hr.Body, &req.Config); err != nil {
		out.reply(&Reply{Error: fmt.Sprintf("read run request: %v", err)})
		return
	}
	req.Op = OpRun
	if req.Background {
		out.reply(&Reply{Error: "a background run is started with " + PathControl})
		return
	}
	outR, outW, err1 := os.Pipe()
	errR, errW, err2 := os.Pipe()
	if err := errors.Join(err1, err2); err != nil {
		closeAll([]*os.File{outR, outW, errR, errW})
		out.reply(&Reply{Error: fmt.Sprintf("output pipes: %v", err)})
		return
	}
	files := []*os.File{outW, errW}
	var inW *os.File
	if !req.NoStdin {
		inR, w, err := os.Pipe()
		if err != nil {
			closeAll([]*os.File{outR, outW, errR, errW})
			out.reply(&Reply{Error: fmt.Sprintf("stdin pipe: %v", err)})
			return
		}
		files, inW = append(files, inR), w
	}
	r, err := s.startRun(&req, files) // owns files from here
	if err != nil {
		closeAll([]*os.File{outR, errR, inW})
		out.reply(&Reply{Error: err.Error()})
		return
	}
	st := newRunStream(s, r, outR, errR, inW != nil)
	s.mu.Lock()
	r.stream = st
	s.mu.Unlock()
	if inW != nil {
		go func() {
			if copyStdin(inW, hr.Body) == nil {
				st.stdinEOF.Store(true)
			}
		}()
	}
	_ = st.attach(out, [2]int64{}) // nothing sent yet: nothing to resend
	out.started()                  // the caller learns the run exists: after a break it attaches, never runs it again
	follow(hr, st, out)
}

// handleAttach follows a run already going, whose call ended: the body is a Request (OpAttach) with its id and
// how much of each stream the caller has; the answer is the rest of its output, then its reply.
func (s *Supervisor) handleAttach(w http.ResponseWriter, hr *http.Request) {
	out := newFrameWriter(w)
	var req Request
	if err := ReadFrame(hr.Body, &req); err != nil {
		out.reply(&Reply{Error: fmt.Sprintf("read attach request: %v", err)})
		return
	}
	s.mu.Lock()
	r := s.runs[req.ID]
	var st *runStream
	if r != nil {
		st = r.stream
	}
	s.mu.Unlock()
	if st == nil {
		out.reply(&Reply{Known: r != nil, Error: "no foreground run with this id to attach to"})
		return
	}
	if err := st.attach(out, [2]int64{req.StdoutOffset, req.StderrOffset}); err != nil {
		out.reply(&Reply{Known: true, Error: "attach: " + err.Error()})
		return
	}
	follow(hr, st, out)
}

// follow sends the run's reply once its output is complete, if fw is still the run's sink; a call that ends
// first lets the run go (runStream.detach).
func follow(hr *http.Request, st *runStream, fw *frameWriter) {
	select {
	case <-st.done():
		st.mu.Lock()
		attached := st.sink == fw
		st.mu.Unlock()
		if attached {
			fw.reply(&st.r.reply)
		}
	case <-hr.Context().Done():
		st.detach(fw)
	}
}

// copyStdin feeds the command's stdin from the call's body until it ends (EOF closes the command's stdin); nil
// when all of it arrived.
func copyStdin(w *os.File, body io.Reader) error {
	_, err := io.Copy(w, body)
	_ = w.Close()
	return err
}

// handleControl answers one control request: start a background run, a run's status, list, output, stdin,
// signal or kill.
func (s *Supervisor) handleControl(w http.ResponseWriter, hr *http.Request) {
	var req Request
	var rep *Reply
	if err := ReadFrame(hr.Body, &req); err != nil {
		rep = &Reply{Error: fmt.Sprintf("read control request: %v", err)}
	} else {
		rep = s.controlRequest(hr.Context(), &req)
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	_ = WriteFrame(w, rep)
}

func (s *Supervisor) controlRequest(ctx context.Context, req *Request) *Reply {
	switch req.Op {
	case OpRun:
		if !req.Background {
			return &Reply{Error: "a foreground run is made with " + PathRun}
		}
		return s.startBackground(req)
	case OpStatus:
		return s.status(ctx, req)
	case OpList, OpOutput, OpStdin, OpSignal, OpKill:
		return s.control(req)
	}
	return &Reply{Error: fmt.Sprintf("unknown op %q", req.Op)}
}

// frameWriter writes a run's answer: output frames from two pumps, then the reply.
func newFrameWriter(w http.ResponseWriter) *frameWriter {
	return &frameWriter{w: w, rc: http.NewResponseController(w)}
}

type frameWriter struct {
	w      http.ResponseWriter
	rc     *http.ResponseController
	mu     sync.Mutex
	broken bool
}

// pumpChunk is how much output one frame carries at most.
const pumpChunk = 64 << 10

// started sends the answer's headers at once (before any output): the call's RoundTrip returns, so that a
// break from then on shows as a broken answer (ErrNoReply), which the caller follows again by attaching.
func (f *frameWriter) started() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.w.WriteHeader(http.StatusOK)
	if err := f.rc.Flush(); err != nil {
		f.broken = true
	}
}

// write sends one frame and flushes it; false once the answer is broken.
func (f *frameWriter) write(kind byte, payload []byte) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.broken {
		return false
	}
	// A stalled reader is the keeper's to judge (its stall timeout): no deadline here.
	if err := pid1link.WriteFrame(f.w, kind, payload); err != nil {
		f.broken = true
		return false
	}
	if err := f.rc.Flush(); err != nil {
		f.broken = true
		return false
	}
	return true
}

func (f *frameWriter) reply(rep *Reply) {
	js, err := json.Marshal(rep)
	if err != nil {
		js, _ = json.Marshal(&Reply{Error: "encode reply: " + err.Error()})
	}
	f.write(pid1link.FrameReply, js)
}

// keeperLogLine bounds one relayed line; keeperLogBurst and keeperLogEvery, how many lines pass and how fast
// the allowance refills, so a command that got hold of the pipe cannot flood PID 1's log.
const (
	keeperLogLine  = 1 << 10
	keeperLogBurst = 100
	keeperLogEvery = time.Second
)

// relayKeeperLog copies keepers' diagnostics to log, each line quoted after a fixed prefix, so that nothing
// read from the pipe can pass for a line of PID 1's own.
func relayKeeperLog(r *os.File, log io.Writer) {
	buf := make([]byte, 0, keeperLogLine)
	allowance, refilled, dropped := keeperLogBurst, time.Now(), 0
	chunk := make([]byte, 4096)
	emit := func(line []byte) {
		if now := time.Now(); now.Sub(refilled) >= keeperLogEvery {
			if dropped > 0 {
				fmt.Fprintf(log, "airlock-init pid1: keeper: %d lines dropped\n", dropped)
			}
			allowance, refilled, dropped = keeperLogBurst, now, 0
		}
		if allowance == 0 {
			dropped++
			return
		}
		allowance--
		fmt.Fprintf(log, "airlock-init pid1: keeper: %q\n", line)
	}
	for {
		n, err := r.Read(chunk)
		for _, b := range chunk[:n] {
			if b == '\n' || len(buf) == keeperLogLine {
				emit(buf)
				buf = buf[:0]
				if b == '\n' {
					continue
				}
			}
			buf = append(buf, b)
		}
		if err != nil {
			if len(buf) > 0 {
				emit(buf)
			}
			return
		}
	}
}

// maxCommandDisplay bounds the command a run's ProcInfo shows (the processes API): the registry keeps up to
// keepOutcomes runs, and a shell script may be megabytes.
const maxCommandDisplay = 4 << 10

// displayCommand is argv as the registry keeps it: whole, unless longer than maxCommandDisplay in all, then cut
// with a marker.
func displayCommand(argv []string) []string {
	out, n := make([]string, 0, len(argv)), 0
	for _, a := range argv {
		if n+len(a) > maxCommandDisplay {
			out = append(out, a[:maxCommandDisplay-n]+fmt.Sprintf("… (%d bytes cut)", n+len(a)-maxCommandDisplay))
			break
		}
		out, n = append(out, a), n+len(a)
	}
	return out
}
