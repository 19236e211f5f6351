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
// and ends with its reply; a control call is one request and one reply.
const (
	PathRun     = "/run"
	PathControl = "/control"
)

// serveSession serves one session on a client's exec stream (in: its stdin, out: its stdout) until the
// gateway closes it or it breaks.
func (s *Supervisor) serveSession(in, out *os.File) error {
	conn := pid1link.FileConn(pollable(in, nil), pollable(out, nil))
	closeAll([]*os.File{in, out}) // pollable made duplicates
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+PathRun, s.handleRun)
	mux.HandleFunc("POST "+PathControl, s.handleControl)
	return pid1link.Serve(context.Background(), conn, s.id, mux)
}

// handleRun runs one foreground command: the body is its Config (a frame) and then its stdin; the answer is its
// output as frames, then its reply. A caller that goes away (the stream is reset, the session breaks) is a
// lost stream: the keeper kills the command, as it does when nobody reads its output.
func (s *Supervisor) handleRun(w http.ResponseWriter, hr *http.Request) {
	out := &frameWriter{w: w, rc: http.NewResponseController(w)}
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
	if inW != nil {
		go copyStdin(inW, hr.Body)
	}
	var pumps sync.WaitGroup
	pumps.Add(2)
	go out.pump(&pumps, outR, pid1link.FrameStdout)
	go out.pump(&pumps, errR, pid1link.FrameStderr)
	select {
	case <-r.replied:
	case <-hr.Context().Done():
		// The gateway is gone: let the keeper see it (its writes fail) and end the run as lost.
		closeAll([]*os.File{outR, errR})
		r.cancelO.Do(func() { close(r.cancel) })
		<-r.replied
	}
	// The keeper and PID 1 closed the stream's write ends before the reply: the pumps reach EOF.
	pumps.Wait()
	closeAll([]*os.File{outR, errR})
	out.reply(&r.reply)
}

// copyStdin feeds the command's stdin from the call's body until it ends (EOF closes the command's stdin).
func copyStdin(w *os.File, body io.Reader) {
	_, _ = io.Copy(w, body)
	_ = w.Close()
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
type frameWriter struct {
	w      http.ResponseWriter
	rc     *http.ResponseController
	mu     sync.Mutex
	broken bool
}

// pumpChunk is how much output one frame carries at most.
const pumpChunk = 64 << 10

// pump frames what src delivers until EOF. Once the answer cannot be written, it closes src: the keeper's next
// write then fails, which it treats as a lost stream.
func (f *frameWriter) pump(wg *sync.WaitGroup, src *os.File, kind byte) {
	defer wg.Done()
	buf := make([]byte, pumpChunk)
	for {
		n, err := src.Read(buf)
		if n > 0 && !f.write(kind, buf[:n]) {
			_ = src.Close()
			return
		}
		if err != nil {
			return
		}
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
