package mcpserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"airlock.dev/airlock/pkg/client"
)

// MetadataSession is the sandbox metadata key (gateway annotation gateway.airlock.dev/metadata) that names
// the MCP session a sandbox belongs to. The mapping lives on the Sandbox, so that any gateway replica finds
// a session's sandbox, and an operator sees which sandboxes MCP sessions hold.
const MetadataSession = "mcp-session"

// deleteTimeout bounds the deletion of a session's sandbox when the session ends.
const deleteTimeout = 30 * time.Second

// Sessions gives each MCP session (a client that initialised, over HTTP or stdio) one sandbox, created on
// its first tool call and deleted when the session ends. It is safe for concurrent use.
type Sessions struct {
	log logr.Logger
	mu  sync.Mutex
	m   map[*mcp.ServerSession]*session
	// releasing counts deletions under way, which Close waits for: a process exits right after it.
	releasing sync.WaitGroup
}

// session is one MCP session's state. mu serialises its tool calls' lazy create, so that two concurrent
// first calls make one sandbox.
type session struct {
	mu sync.Mutex
	// key names the session on its sandbox: the MCP session id, or a random one for stdio (which has none).
	key string
	// b is the backend of the call that created the sandbox: the session's end deletes with it.
	b         Backend
	sandboxID string
}

// NewSessions returns an empty session table.
func NewSessions(log logr.Logger) *Sessions {
	return &Sessions{log: log, m: map[*mcp.ServerSession]*session{}}
}

// get returns ss's state, registering it (and its clean-up at the session's end) on first use.
func (s *Sessions) get(ss *mcp.ServerSession) (*session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.m[ss]; ok {
		return st, nil
	}
	key := ss.ID()
	if key == "" {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			return nil, fmt.Errorf("session key: %w", err)
		}
		key = "stdio-" + hex.EncodeToString(b)
	}
	st := &session{key: key}
	s.m[ss] = st
	go func() {
		_ = ss.Wait()
		s.end(ss)
	}()
	return st, nil
}

// sandbox returns the session's sandbox id, creating the sandbox with opts if it has none. The in-memory id is a
// cache: without it the sandbox is looked up by its metadata, e.g. when another replica created it.
func (st *session) sandbox(ctx context.Context, b Backend, opts client.CreateOptions) (string, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.sandboxID != "" {
		_, err := b.Get(ctx, st.sandboxID)
		if !errors.Is(err, client.ErrNotFound) {
			return st.sandboxID, err
		}
		// Gone (expired, or deleted over REST): the session gets a new one.
		st.sandboxID, st.b = "", nil
	}
	list, err := b.List(ctx)
	if err != nil {
		return "", err
	}
	for _, info := range list {
		if info.Metadata[MetadataSession] == st.key && info.Status != "terminating" {
			st.sandboxID, st.b = info.ID, b
			return info.ID, nil
		}
	}
	opts.Metadata = map[string]string{MetadataSession: st.key}
	info, err := b.Create(ctx, opts)
	if err != nil {
		return "", err
	}
	st.sandboxID, st.b = info.ID, b
	return info.ID, nil
}

// adopt makes id the session's sandbox (create_sandbox in a session).
func (st *session) adopt(b Backend, id string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.sandboxID, st.b = id, b
}

// current is the session's sandbox id, "" if none.
func (st *session) current() string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.sandboxID
}

// forget drops the session's sandbox if it is id (after delete_sandbox).
func (st *session) forget(id string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.sandboxID == id {
		st.sandboxID, st.b = "", nil
	}
}

// end deletes the sandbox of a session that closed or expired.
func (s *Sessions) end(ss *mcp.ServerSession) {
	s.mu.Lock()
	st, ok := s.m[ss]
	delete(s.m, ss)
	if ok {
		s.releasing.Add(1)
	}
	s.mu.Unlock()
	if ok {
		defer s.releasing.Done()
		s.release(st)
	}
}

func (s *Sessions) release(st *session) {
	st.mu.Lock()
	id, b := st.sandboxID, st.b
	st.sandboxID, st.b = "", nil
	st.mu.Unlock()
	if id == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), deleteTimeout)
	defer cancel()
	if err := b.Delete(ctx, id); err != nil && !errors.Is(err, client.ErrNotFound) {
		// The sandbox's own timeout reclaims it.
		s.log.Error(err, "deleting the sandbox of an ended MCP session", "session", st.key, "sandbox", id)
		return
	}
	s.log.V(1).Info("deleted the sandbox of an ended MCP session", "session", st.key, "sandbox", id)
}

// Close deletes every session's sandbox now, and waits for deletions under way (the server is shutting
// down: its sessions die with it).
func (s *Sessions) Close() {
	s.mu.Lock()
	all := s.m
	s.m = map[*mcp.ServerSession]*session{}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, st := range all {
		wg.Go(func() { s.release(st) })
	}
	wg.Wait()
	s.releasing.Wait()
}
