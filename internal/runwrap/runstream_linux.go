package runwrap

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"airlock.dev/airlock/internal/pid1link"
)

// DefaultReattachGrace is how long a foreground run outlives the call that started it when that call's stream
// breaks (a kube-apiserver or kubelet restart, a network blip, a gateway rolled), unless its Config says
// otherwise: the gateway reopens a session and re-attaches by the run's id (OpAttach) and gets its real outcome
// and all of its output. Past it, with nobody attached, the run is killed as a lost stream. Its own deadline
// still holds meanwhile.
const (
	DefaultReattachGrace = 30 * time.Second
	MaxReattachGrace     = 5 * time.Minute
)

// runStream carries a foreground run's output from its stream pipes to whichever call is attached. It always
// drains the pipes, so a run nobody follows for a while neither blocks nor stalls: what it drops while detached
// is in the run's output files, from where an attach sends it first.
type runStream struct {
	sup      *Supervisor
	r        *run
	pipes    [2]*os.File // the read ends of stdout's and stderr's stream pipes
	stdin    bool        // the run takes stdin from its call
	stdinEOF atomic.Bool // all of it arrived: only then can the run outlive its call

	mu    sync.Mutex
	sink  *frameWriter // the attached call; nil while detached
	sent  [2]int64     // bytes of each stream forwarded, or dropped while detached
	grace *time.Timer  // running while detached
	// drained is closed once both pipes reached EOF: with r.replied, the run's output is complete.
	drained chan struct{}
}

func newRunStream(sup *Supervisor, r *run, outR, errR *os.File, stdin bool) *runStream {
	st := &runStream{sup: sup, r: r, pipes: [2]*os.File{outR, errR}, stdin: stdin, drained: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Add(2)
	go st.pump(&wg, 0, pid1link.FrameStdout)
	go st.pump(&wg, 1, pid1link.FrameStderr)
	go func() { wg.Wait(); closeAll(st.pipes[:]); close(st.drained) }()
	return st
}

// pump forwards one pipe until EOF (the keeper and PID 1 close their write ends before the run's reply).
func (st *runStream) pump(wg *sync.WaitGroup, i int, kind byte) {
	defer wg.Done()
	buf := make([]byte, pumpChunk)
	for {
		n, err := st.pipes[i].Read(buf)
		if n > 0 {
			st.mu.Lock()
			if st.sink != nil && !st.sink.write(kind, buf[:n]) {
				st.detachLocked(st.sink)
			}
			st.sent[i] += int64(n)
			st.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

// attach makes fw the run's sink, after sending it what the run wrote since the offsets (the caller's count of
// each stream), read back from its output files.
func (st *runStream) attach(fw *frameWriter, offsets [2]int64) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.grace != nil {
		st.grace.Stop()
		st.grace = nil
	}
	st.sup.mu.Lock()
	paths := [2]string{st.r.info.StdoutPath, st.r.info.StderrPath}
	st.sup.mu.Unlock()
	for i, kind := range []byte{pid1link.FrameStdout, pid1link.FrameStderr} {
		if offsets[i] > st.sent[i] {
			return fmt.Errorf("offset %d of %s is past the %d bytes the run wrote", offsets[i], streamName[i], st.sent[i])
		}
		if err := resend(fw, kind, paths[i], offsets[i], st.sent[i]); err != nil {
			return err
		}
	}
	st.sink = fw
	return nil
}

var streamName = [2]string{"stdout", "stderr"}

// resend sends bytes [from, to) of a stream from its output file.
func resend(fw *frameWriter, kind byte, path string, from, to int64) error {
	if from == to {
		return nil
	}
	if path == "" {
		return errors.New("the run has no output files to resend from")
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("resend output: %w", err)
	}
	defer f.Close()
	buf := make([]byte, pumpChunk)
	for off := from; off < to; {
		n, err := f.ReadAt(buf[:min(int64(len(buf)), to-off)], off)
		if n > 0 && !fw.write(kind, buf[:n]) {
			return errors.New("the attaching call went away")
		}
		off += int64(n)
		if err != nil && n == 0 {
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("the output file %s ends at %d of %d bytes", path, off, to)
			}
			return fmt.Errorf("resend output: %w", err)
		}
	}
	return nil
}

// detach lets fw go (its call ended): the run goes on unfollowed for its reattach grace (within its deadline),
// unless its stdin was cut off, which no later call can make whole: then it is ended at once, as lost.
func (st *runStream) detach(fw *frameWriter) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.detachLocked(fw)
}

func (st *runStream) detachLocked(fw *frameWriter) {
	if st.sink != fw || fw == nil {
		return
	}
	st.sink = nil
	if st.stdin && !st.stdinEOF.Load() {
		st.r.lose()
		return
	}
	grace := st.r.cfg.ReattachGrace
	if grace == 0 {
		grace = DefaultReattachGrace
	}
	st.grace = time.AfterFunc(grace, func() {
		st.mu.Lock()
		defer st.mu.Unlock()
		if st.sink == nil {
			st.r.lose()
		}
	})
}

// done is closed once the run's output and reply are complete.
func (st *runStream) done() <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		<-st.r.replied
		<-st.drained
		close(ch)
	}()
	return ch
}
