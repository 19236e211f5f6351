package runwrap

import (
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// forwarder is PID 1 doing the keeper's output work for a run whose keeper
// was killed: it copies what the command writes from then on to the exec
// stream, under the run's output limit and stall timeout. Output the keeper
// had read but not yet written when it died is lost.
type forwarder struct {
	over, lost chan struct{} // closed once: output limit reached, stream broken
	overOnce   sync.Once
	lostOnce   sync.Once
	wg         sync.WaitGroup
	srcs       []*os.File
	dsts       []*os.File
	counts     [2]atomic.Int64
	total      atomic.Int64
}

// startForward starts copying r's output pipes to r's stream.
func startForward(r *run) *forwarder {
	f := &forwarder{over: make(chan struct{}), lost: make(chan struct{})}
	for i, p := range [][2]*os.File{{r.outR, r.stdout}, {r.errR, r.stderr}} {
		src, dst := p[0], pollable(p[1], r.stdin)
		if src == nil || dst == nil {
			continue
		}
		if i == 1 {
			r.stderr = dst // the trailer goes after the forwarded output, with a deadline
		}
		f.srcs, f.dsts = append(f.srcs, src), append(f.dsts, dst)
		f.wg.Add(1)
		go f.copy(src, dst, &f.counts[i], r.cfg)
	}
	return f
}

func (f *forwarder) copy(src, dst *os.File, count *atomic.Int64, cfg Config) {
	defer f.wg.Done()
	buf := make([]byte, 64<<10)
	broken := false
	for {
		n, err := src.Read(buf)
		data := buf[:n]
		if cfg.KillAfterOutputBytes > 0 && n > 0 {
			if over := f.total.Add(int64(n)) - cfg.KillAfterOutputBytes; over > 0 {
				data = data[:max(0, int64(n)-over)]
				f.overOnce.Do(func() { close(f.over) })
			}
		}
		if len(data) > 0 && !broken {
			count.Add(int64(len(data)))
			if cfg.StallTimeout > 0 {
				_ = dst.SetWriteDeadline(time.Now().Add(cfg.StallTimeout))
			}
			if _, werr := dst.Write(data); werr != nil {
				broken = true // keep reading: the command must not block on a full pipe
				f.lostOnce.Do(func() { close(f.lost) })
			}
		}
		if err != nil {
			return
		}
	}
}

// finish waits up to d for the pipes to reach EOF (the command's tree is
// gone), then closes the read ends, and returns the bytes forwarded.
func (f *forwarder) finish(d time.Duration) (stdout, stderr int64) {
	done := make(chan struct{})
	go func() { f.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		closeAll(f.srcs)
		<-done
	}
	return f.counts[0].Load(), f.counts[1].Load()
}

// pollable returns a duplicate of a stream descriptor in non-blocking mode,
// so that writes to it can carry a deadline. A descriptor shared with stdin
// (a tty) is left blocking, as the keeper leaves it: the command reads it.
func pollable(f, stdin *os.File) *os.File {
	if f == nil {
		return nil
	}
	fd, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		return f
	}
	syscall.CloseOnExec(fd)
	var st, st0 syscall.Stat_t
	shared := stdin != nil && syscall.Fstat(fd, &st) == nil && syscall.Fstat(int(stdin.Fd()), &st0) == nil &&
		st.Dev == st0.Dev && st.Ino == st0.Ino
	if !shared {
		_ = syscall.SetNonblock(fd, true)
	}
	return os.NewFile(uintptr(fd), f.Name())
}
