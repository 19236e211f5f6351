package podexec

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Defaults of the session pool.
const (
	// DefaultSessionIdle is how long an unused session stays open: a sandbox in use keeps its session, one left
	// alone costs nothing after this.
	DefaultSessionIdle = 2 * time.Minute
	// DefaultMaxSessions bounds the sessions one engine holds open (about 100 KiB each: TLS, HTTP/2 and the
	// exec's own buffers); past it the least recently used idle one is closed first.
	DefaultMaxSessions = 512
)

// sessionKey names one sandbox's supervisor: a session is reused only for the same pod and the same key.
type sessionKey struct{ namespace, pod, container, supervisorKey string }

func keyOf(r *Request) sessionKey {
	return sessionKey{r.Namespace, r.Pod, r.Container, r.SupervisorKey}
}

// sessionPool keeps one session per sandbox open while the sandbox is in use, so a call costs no exec set-up
// and no TLS handshake: every call is a stream of the sandbox's HTTP/2 session.
type sessionPool struct {
	open func(ctx context.Context, target *Request) (*session, error)
	idle time.Duration
	max  int

	mu    sync.Mutex
	byKey map[sessionKey]*pooled
	stop  chan struct{}
}

// pooled is one sandbox's session: being opened (ready not closed yet), or open.
type pooled struct {
	ready    chan struct{}
	s        *session
	err      error
	users    int
	lastUsed time.Time
}

func newSessionPool(open func(ctx context.Context, target *Request) (*session, error), idle time.Duration, max int) *sessionPool {
	p := &sessionPool{open: open, idle: idle, max: max, byKey: map[sessionKey]*pooled{}, stop: make(chan struct{})}
	go p.reap()
	return p
}

// acquire returns target's session, opening it if there is none (concurrent first calls share one opening),
// and the release to call when done with it; broken says the session failed and must not be used again.
func (p *sessionPool) acquire(ctx context.Context, target *Request) (*session, func(broken bool), error) {
	k := keyOf(target)
	for try := 0; ; try++ {
		p.mu.Lock()
		e := p.byKey[k]
		if e == nil {
			e = &pooled{ready: make(chan struct{})}
			p.byKey[k] = e
			p.mu.Unlock()
			go p.fill(e, *target) // every caller, the first too, waits within its own deadline
		} else {
			p.mu.Unlock()
		}
		select {
		case <-e.ready:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		p.mu.Lock()
		switch {
		case e.err != nil:
			if p.byKey[k] == e {
				delete(p.byKey, k)
			}
			p.mu.Unlock()
			return nil, nil, e.err
		case !e.s.usable():
			if p.byKey[k] == e {
				delete(p.byKey, k)
			}
			unused := e.users == 0
			p.mu.Unlock()
			if unused {
				go e.s.close()
			}
			if try == 2 {
				return nil, nil, fmt.Errorf("%w: sessions with the sandbox's supervisor break as soon as they open", ErrNotStarted)
			}
			continue // broken since: open another
		}
		e.users++
		p.mu.Unlock()
		return e.s, func(broken bool) { p.release(k, e, broken) }, nil
	}
}

// fill opens e's session. Its life is the pool's, not the first caller's: it is bounded by the handshake and
// the open's own timeouts, not by one call's context.
func (p *sessionPool) fill(e *pooled, target Request) {
	s, err := p.open(context.Background(), &target)
	p.mu.Lock()
	e.s, e.err, e.lastUsed = s, err, time.Now()
	p.mu.Unlock()
	close(e.ready)
	p.evict()
}

func (p *sessionPool) release(k sessionKey, e *pooled, broken bool) {
	p.mu.Lock()
	e.users--
	e.lastUsed = time.Now()
	if broken && p.byKey[k] == e {
		delete(p.byKey, k)
	}
	closeNow := (broken || p.byKey[k] != e) && e.users == 0
	p.mu.Unlock()
	if closeNow {
		go e.s.close()
	}
}

// evict closes the least recently used idle sessions while there are more than max.
func (p *sessionPool) evict() {
	p.mu.Lock()
	var victims []*session
	for len(p.byKey) > p.max {
		var oldK sessionKey
		var old *pooled
		for k, e := range p.byKey {
			if e.s != nil && e.users == 0 && (old == nil || e.lastUsed.Before(old.lastUsed)) {
				oldK, old = k, e
			}
		}
		if old == nil {
			break // all in use: over max only while they are
		}
		delete(p.byKey, oldK)
		victims = append(victims, old.s)
	}
	p.mu.Unlock()
	for _, s := range victims {
		go s.close()
	}
}

// reap closes sessions unused for idle.
func (p *sessionPool) reap() {
	tick := time.NewTicker(max(p.idle/4, time.Second))
	defer tick.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-tick.C:
		}
		p.mu.Lock()
		var victims []*session
		for k, e := range p.byKey {
			if e.s != nil && e.users == 0 && (time.Since(e.lastUsed) > p.idle || !e.s.usable()) {
				delete(p.byKey, k)
				victims = append(victims, e.s)
			}
		}
		p.mu.Unlock()
		for _, s := range victims {
			go s.close()
		}
	}
}

// closeAll ends every session (the engine is closed).
func (p *sessionPool) closeAll() {
	close(p.stop)
	p.mu.Lock()
	var all []*session
	for k, e := range p.byKey {
		if e.s != nil {
			all = append(all, e.s)
		}
		delete(p.byKey, k)
	}
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range all {
		wg.Add(1)
		go func() { defer wg.Done(); s.close() }()
	}
	wg.Wait()
}
