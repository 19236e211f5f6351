package runwrap

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"
)

// Background processes: the registry's runs, read back and steered by id.

const (
	// maxOutputRead bounds what one OpOutput returns per stream.
	maxOutputRead = 1 << 20
	// stdinTimeout bounds an OpStdin write to a command that does not read.
	stdinTimeout = 10 * time.Second
)

// control answers the ops that act on known runs.
func (s *Supervisor) control(req *Request) *Reply {
	if req.Op == OpList {
		return &Reply{Known: true, Processes: s.list()}
	}
	s.mu.Lock()
	r := s.runs[req.ID]
	var info ProcInfo
	if r != nil {
		info = r.info
	}
	s.mu.Unlock()
	if r == nil {
		return &Reply{Known: false}
	}
	rep := &Reply{Known: true, Done: !info.Running, Trailer: info.Trailer, Process: &info}
	var err error
	switch req.Op {
	case OpOutput:
		rep.Output, err = readOutput(&info, req)
	case OpStdin:
		err = r.writeStdin(req.Data, req.EOF)
	case OpSignal:
		err = s.signalRun(r, req.Signal)
	case OpKill:
		if info.Running {
			r.killO.Do(func() { close(r.kill) }) // for PID 1, if the keeper is gone
			_ = r.tell(Request{Op: OpKill})      // the keeper kills the tree with grace
		}
	}
	if err != nil {
		rep.Error = err.Error()
	}
	return rep
}

// list returns every run the registry holds, in start order.
func (s *Supervisor) list() []ProcInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ProcInfo, 0, len(s.runs))
	for _, r := range s.runs {
		out = append(out, r.info)
	}
	for i := 1; i < len(out); i++ { // insertion sort: at most a few hundred
		for j := i; j > 0 && out[j].StartedAt.Before(out[j-1].StartedAt); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// readOutput reads each stream's file from its offset.
func readOutput(info *ProcInfo, req *Request) (*Output, error) {
	if info.StdoutPath == "" {
		return nil, errors.New("this run has no output files")
	}
	limit := req.Limit
	if limit <= 0 || limit > maxOutputRead {
		limit = maxOutputRead
	}
	var o Output
	var err1, err2 error
	o.Stdout, o.StdoutSize, err1 = readFrom(info.StdoutPath, req.StdoutOffset, limit)
	o.Stderr, o.StderrSize, err2 = readFrom(info.StderrPath, req.StderrOffset, limit)
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	return &o, nil
}

func readFrom(path string, off int64, limit int) ([]byte, int64, error) {
	if off < 0 {
		return nil, 0, errors.New("negative offset")
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, fmt.Errorf("open output: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, 0, fmt.Errorf("stat output: %w", err)
	}
	if off >= st.Size() {
		return []byte{}, st.Size(), nil
	}
	buf := make([]byte, min(int64(limit), st.Size()-off))
	n, err := f.ReadAt(buf, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, 0, fmt.Errorf("read output: %w", err)
	}
	return buf[:n], st.Size(), nil
}

// writeStdin writes data to a background run's stdin, then closes it on eof.
func (r *run) writeStdin(data []byte, eof bool) error {
	r.stdinMu.Lock()
	defer r.stdinMu.Unlock()
	if r.stdinW == nil {
		return errors.New("stdin is closed")
	}
	if len(data) > 0 {
		_ = r.stdinW.SetWriteDeadline(time.Now().Add(stdinTimeout))
		if _, err := r.stdinW.Write(data); err != nil {
			return fmt.Errorf("write stdin: %w", err)
		}
	}
	if eof {
		_ = r.stdinW.Close()
		r.stdinW = nil
	}
	return nil
}

func (r *run) closeStdin() {
	r.stdinMu.Lock()
	defer r.stdinMu.Unlock()
	if r.stdinW != nil {
		_ = r.stdinW.Close()
		r.stdinW = nil
	}
}

// signalRun sends sig to the run's tree: through its keeper, or to the
// orphans PID 1 adopted once the keeper was killed.
func (s *Supervisor) signalRun(r *run, name string) error {
	sig := signalNumber(name)
	if sig == 0 {
		return fmt.Errorf("unknown signal %q", name)
	}
	s.mu.Lock()
	running, orphans := r.info.Running, append([]int(nil), r.orphans...)
	s.mu.Unlock()
	if !running {
		return errors.New("the process has ended")
	}
	if len(orphans) == 0 {
		return r.tell(Request{Op: OpSignal, Signal: name})
	}
	for _, root := range orphans {
		for _, pid := range append(liveDescendants(root), root) {
			_ = syscall.Kill(pid, sig)
		}
	}
	return nil
}
