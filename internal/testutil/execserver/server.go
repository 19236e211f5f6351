// Package execserver is a local stand-in for "API server + kubelet + pod" in
// exec tests: real remotecommand servers running real processes, no cluster.
//
//   - SPDY requests to /api/v1/namespaces/NS/pods/POD/exec are served by the
//     kubelet's streaming code (k8s.io/cri-streaming ServeExec), as the API
//     server would proxy them to the kubelet.
//   - WebSocket v5 requests go through the API server's own
//     StreamTranslatorHandler (k8s.io/apiserver), which speaks SPDY to the
//     kubelet endpoint of this server — the production path.
//   - The "container" runs commands as local processes; Rewrite maps
//     container paths (the wrapper) to host paths.
package execserver

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apiserver/pkg/util/proxy"
	"k8s.io/client-go/rest"
	crs "k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/streaming/pkg/httpstream/wsstream"

	"airlock.dev/airlock/internal/attestation"
	"airlock.dev/airlock/internal/runwrap"
	"airlock.dev/airlock/internal/testutil/child"
)

// Options configure a Server.
type Options struct {
	// Rewrite maps argv[0] as seen in the container to a host path.
	Rewrite map[string]string
	// Env is added to the server's environment for commands (e.g. HOME).
	Env []string
	// Dir is the commands' working directory.
	Dir string
	// Pods, if set, are the only pods that exist; exec into others gets 404.
	Pods []string
	// Supervisor, if set, is the wrapper binary to run as the "container's"
	// PID 1 (`Supervisor pid1`, with Env and Dir, and a network gate whose
	// target is a closed port on loopback) for as long as the server runs;
	// the commands reach it through runwrap.SocketEnv, and SupervisorKey is
	// the key it attested.
	Supervisor string
	// DisableWebSocket answers WebSocket upgrades with 400, like a server
	// that cannot translate them, to exercise the SPDY fallback.
	DisableWebSocket bool
}

// Server is a running exec server.
type Server struct {
	URL  string
	opts Options
	hs   *httptest.Server

	WebSocketRequests atomic.Int64
	SPDYRequests      atomic.Int64

	pid1 *exec.Cmd
	key  string

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	procs map[int]*os.Process
}

var serverSeq atomic.Int64

// Start starts a server on loopback.
// It panics if the supervisor cannot start (a test setup failure).
func Start(opts Options) *Server {
	if opts.Supervisor != "" {
		sock := runwrap.SocketEnv + fmt.Sprintf("=@airlock-execserver-%d-%d", os.Getpid(), serverSeq.Add(1))
		opts.Env = append(slices.Clone(opts.Env), sock)
	}
	s := &Server{opts: opts, conns: map[net.Conn]struct{}{}, procs: map[int]*os.Process{}}
	if opts.Supervisor != "" {
		s.startSupervisor()
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/api/v1/namespaces/{ns}/pods/{pod}/exec", s.serveAPI)
	mux.HandleFunc("/kubelet/exec/{ns}/{pod}", s.serveKubelet)
	s.hs = httptest.NewUnstartedServer(mux)
	s.hs.Config.ConnState = s.trackConn
	s.hs.Start()
	s.URL = s.hs.URL
	return s
}

// startSupervisor runs PID 1 and waits for its attestation, whose key the
// engine must pin. Its log goes on to the test's stderr.
func (s *Server) startSupervisor() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("execserver: a port for the gate: %v", err))
	}
	gatePort := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close() // refused from now on: the gate passes at once
	s.pid1 = child.DieWithParent(exec.Command(s.opts.Supervisor, "pid1", "--gate-host=127.0.0.1",
		fmt.Sprintf("--gate-port=%d", gatePort), "--gate-timeout=10s"))
	s.pid1.Env, s.pid1.Dir = append(os.Environ(), s.opts.Env...), s.opts.Dir
	logR, logW, err := os.Pipe()
	if err != nil {
		panic(fmt.Sprintf("execserver: supervisor log pipe: %v", err))
	}
	s.pid1.Stderr = logW
	if err := s.pid1.Start(); err != nil {
		panic(fmt.Sprintf("execserver: start supervisor: %v", err))
	}
	_ = logW.Close()
	keys := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(logR)
		for sc.Scan() {
			fmt.Fprintln(os.Stderr, sc.Text())
			if st, err := attestation.Find(append(sc.Bytes(), '\n')); err == nil {
				select {
				case keys <- st.Key:
				default:
				}
			}
		}
		close(keys)
	}()
	select {
	case k, ok := <-keys:
		if !ok {
			panic("execserver: the supervisor ended without attesting")
		}
		s.key = k
	case <-time.After(30 * time.Second):
		panic("execserver: the supervisor did not attest within 30s")
	}
}

// SupervisorKey is the key the supervisor attested: the engine's Request.SupervisorKey.
func (s *Server) SupervisorKey() string { return s.key }

// SupervisorPID is the supervisor's process.
func (s *Server) SupervisorPID() int { return s.pid1.Process.Pid }

// Close stops the server.
func (s *Server) Close() {
	s.DropConnections(false)
	s.hs.Close()
	if s.pid1 != nil {
		_ = s.pid1.Process.Kill()
		_ = s.pid1.Wait()
	}
}

// RESTConfig points a client at the server.
func (s *Server) RESTConfig() *rest.Config { return &rest.Config{Host: s.URL} }

// DropConnections closes every connection abruptly, hijacked streams
// included. With killExecs it also SIGKILLs the exec'd processes (not their
// children), as containerd does when an exec's request context ends.
func (s *Server) DropConnections(killExecs bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		_ = c.Close()
	}
	if killExecs {
		for _, p := range s.procs {
			_ = p.Kill()
		}
	}
}

// ExecPIDs are the processes the server exec'd that are still running.
func (s *Server) ExecPIDs() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []int
	for pid := range s.procs {
		out = append(out, pid)
	}
	return out
}

func (s *Server) trackConn(c net.Conn, st http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch st {
	case http.StateNew:
		s.conns[c] = struct{}{}
	case http.StateClosed:
		delete(s.conns, c)
	}
	// Hijacked connections stay tracked: those are the exec streams.
}

// serveAPI plays the API server's pods/exec endpoint.
func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	if s.opts.Pods != nil && !slices.Contains(s.opts.Pods, r.PathValue("pod")) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,"message":"pods %q not found"}`, r.PathValue("pod"))
		return
	}
	q := r.URL.Query()
	cmd := q["command"]
	opts := crs.Options{Stdin: q.Get("stdin") == "true", Stdout: q.Get("stdout") == "true", Stderr: q.Get("stderr") == "true"}
	if wsstream.IsWebSocketRequest(r) {
		s.WebSocketRequests.Add(1)
		if s.opts.DisableWebSocket {
			http.Error(w, "websocket upgrades not supported here", http.StatusBadRequest)
			return
		}
		kq := url.Values{"command": cmd, "input": {b01(opts.Stdin)}, "output": {b01(opts.Stdout)}, "error": {b01(opts.Stderr)}}
		loc, err := url.Parse(fmt.Sprintf("%s/kubelet/exec/%s/%s?%s", s.URL, r.PathValue("ns"), r.PathValue("pod"), kq.Encode()))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		translator := proxy.NewStreamTranslatorHandler(loc, nil, 0, proxy.Options{Stdin: opts.Stdin, Stdout: opts.Stdout, Stderr: opts.Stderr})
		// As the API server: translate only v5 (stream-close) WebSocket requests.
		proxy.NewTranslatingHandler(http.NotFoundHandler(), translator, wsstream.IsWebSocketRequestWithStreamCloseProtocol).ServeHTTP(w, r)
		return
	}
	s.SPDYRequests.Add(1)
	s.serveExec(w, r, cmd, &opts)
}

// serveKubelet plays the kubelet's exec endpoint (SPDY, kubelet parameters).
func (s *Server) serveKubelet(w http.ResponseWriter, r *http.Request) {
	opts, err := crs.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.serveExec(w, r, r.URL.Query()["command"], opts)
}

func (s *Server) serveExec(w http.ResponseWriter, r *http.Request, cmd []string, opts *crs.Options) {
	if len(cmd) == 0 {
		http.Error(w, "no command", http.StatusBadRequest)
		return
	}
	crs.ServeExec(w, r, (*executor)(s), r.PathValue("pod"), "", "", cmd, opts, 0, 30*time.Second, crs.SupportedStreamingProtocols)
}

func b01(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

var errNoCommand = errors.New("execserver: empty command")
