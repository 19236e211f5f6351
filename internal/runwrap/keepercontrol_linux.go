package runwrap

import (
	"net"
	"os"
	"sync"
	"time"
)

// keeperRun is one run as the keeper receives it: its Config with its stream (stdout, stderr and, unless
// NoStdin, stdin), then the command's output pipes (read and write ends of stdout, then of stderr).
type keeperRun struct {
	cfg      Config
	files    []*os.File
	pipes    []*os.File
	received time.Time
}

func (r keeperRun) stdin() *os.File {
	if len(r.files) > 2 {
		return r.files[2]
	}
	return nil
}

// keeperControl is the keeper's one reader of its control socket: runs go to runs, every other request to the
// run in progress (by id; a request for another run, or between runs, is dropped), and the socket's end to
// lost, which ends the run in progress as a lost stream and the keeper.
type keeperControl struct {
	runs chan keeperRun
	lost chan struct{}

	mu  sync.Mutex
	id  string
	ops chan Request
}

func readKeeperControl(ctl *net.UnixConn) *keeperControl {
	k := &keeperControl{runs: make(chan keeperRun), lost: make(chan struct{})}
	go k.read(ctl)
	return k
}

func (k *keeperControl) read(ctl *net.UnixConn) {
	defer close(k.lost)
	defer close(k.runs)
	for {
		var req Request
		if err := ReadFrame(ctl, &req); err != nil {
			return
		}
		if req.Op != OpRun {
			k.deliver(req)
			continue
		}
		received := time.Now()
		files, err := recvFiles(ctl, 3)
		if err != nil || len(files) < 2 {
			closeAll(files)
			return
		}
		var pipes Request
		if err := ReadFrame(ctl, &pipes); err != nil || pipes.Op != opPipes {
			closeAll(files)
			return
		}
		fds, err := recvFiles(ctl, 4)
		if err != nil || len(fds) != 4 {
			closeAll(append(files, fds...))
			return
		}
		k.runs <- keeperRun{cfg: req.Config, files: files, pipes: fds, received: received}
	}
}

// current makes id the run in progress ("" for none) and returns the channel its requests arrive on.
func (k *keeperControl) current(id string) <-chan Request {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.id = id
	k.ops = make(chan Request, 16)
	return k.ops
}

func (k *keeperControl) deliver(req Request) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.id == "" || req.ID != k.id {
		return
	}
	select {
	case k.ops <- req:
	default: // a flood of signals: the run is busy dying anyway
	}
}
