package gateway

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"syscall"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/podexec"
	"airlock.dev/airlock/internal/testutil/execserver"
)

// execRouter plays the API server's pods/exec endpoint in front of several exec servers, as if pods ran on
// different nodes: each pod's exec is proxied (upgrades included) to the server its route names, others to the
// default. One gateway's engine then reaches sandboxes that answer and sandboxes that hang.
type execRouter struct {
	srv *httptest.Server

	mu     sync.Mutex
	routes map[string]*url.URL // "namespace/pod" to the server its exec goes to
	def    *url.URL
}

func newExecRouter(tb testing.TB) *execRouter {
	tb.Helper()
	r := &execRouter{routes: map[string]*url.URL{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/api/v1/namespaces/{ns}/pods/{pod}/exec", r.serveExec)
	r.srv = httptest.NewServer(mux)
	tb.Cleanup(r.srv.Close)
	return r
}

// RESTConfig points an engine at the router.
func (r *execRouter) RESTConfig() *rest.Config { return &rest.Config{Host: r.srv.URL} }

// route sends the execs of pod ns/pod to the server at base.
func (r *execRouter) route(ns, pod, base string) {
	u, err := url.Parse(base)
	if err != nil {
		panic(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.routes[ns+"/"+pod] = u
}

// setDefault sends the execs of every pod without a route to the server at base.
func (r *execRouter) setDefault(base string) {
	u, err := url.Parse(base)
	if err != nil {
		panic(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.def = u
}

func (r *execRouter) serveExec(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	to := r.routes[req.PathValue("ns")+"/"+req.PathValue("pod")]
	if to == nil {
		to = r.def
	}
	r.mu.Unlock()
	if to == nil {
		http.Error(w, "no exec server for this pod", http.StatusNotFound)
		return
	}
	(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(to) }}).ServeHTTP(w, req)
}

// startNode starts an exec server with its own PID 1 (a sandbox's "node"), as newGateway does for its own.
func startNode(tb testing.TB) *execserver.Server {
	tb.Helper()
	home := tb.TempDir()
	s := execserver.Start(execserver.Options{Rewrite: map[string]string{podexec.DefaultWrapperPath: wrapper(tb)},
		Supervisor: wrapper(tb), Env: []string{"HOME=" + home}, Dir: home})
	tb.Cleanup(s.Close)
	return s
}

// startHungNode starts a node whose PID 1 is stopped (SIGSTOP): the exec runs, the session's client reaches
// PID 1's socket, and nothing ever answers. It is continued before it is closed, so that it can die.
func startHungNode(tb testing.TB) *execserver.Server {
	tb.Helper()
	s := startNode(tb)
	pid := s.SupervisorPID()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	return s
}

// startSilentNode is a "node" that accepts connections and never answers: an exec to it hangs before it
// starts. It returns its base URL.
func startSilentNode(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	tb.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return "http://" + ln.Addr().String()
}

// setSupervisorKey records key as the one sandbox ns/name's PID 1 attested: the key of the node it runs on.
func (g *gw) setSupervisorKey(tb testing.TB, ns, name, key string) {
	tb.Helper()
	var sb airlockv1.Sandbox
	if err := g.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &sb); err != nil {
		tb.Fatal(err)
	}
	sb.Status.SupervisorKey = key
	if err := g.c.Status().Update(context.Background(), &sb); err != nil {
		tb.Fatal(err)
	}
}
