package gateway

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"airlock.dev/airlock/internal/gateway/auth"
	"airlock.dev/airlock/internal/mcpserver"
	"airlock.dev/airlock/internal/podexec"
)

// Executor runs commands in sandbox pods; *podexec.Engine is the real one.
type Executor interface {
	Stream(ctx context.Context, req podexec.Request, onChunk func(podexec.Chunk) error) (*podexec.Result, error)
}

// Authenticator turns a bearer key into a tenant; *auth.Store is the real one.
type Authenticator interface {
	Authenticate(ctx context.Context, key string) (auth.Principal, error)
}

// Options configure a Server. Client, Engine and Auth are required.
type Options struct {
	// Client writes and reads Sandboxes and SandboxTemplates (scheme must include airlock's API).
	Client client.Client
	// Reader, if set, serves the hot-path reads (exec, files) from a cache; Client is the fallback.
	Reader client.Reader
	Engine Executor
	Auth   Authenticator
	// Audit, if set, records events.k8s.io Events on create, delete and podexec.
	Audit AuditRecorder
	// Activity, if set, records exec and file transfers as sandbox activity for idle expiry (activity.go).
	Activity *Activity
	// Registry receives the gateway's metrics (a new one if nil); MetricsHandler serves it.
	Registry *prometheus.Registry
	Logger   logr.Logger

	DefaultTemplate string
	// ReadyTimeout bounds how long create waits for Ready (default 60s).
	ReadyTimeout time.Duration
	// MaxExecTimeout caps timeout_ms (default 1h).
	MaxExecTimeout time.Duration
	// DefaultOutputBytes is the per-stream inline budget when neither the request nor the template sets one.
	DefaultOutputBytes int64
	// MaxBodyBytes bounds JSON bodies (default 1 MiB); MaxFileBytes bounds file uploads and downloads (16 MiB).
	MaxBodyBytes int64
	MaxFileBytes int64
	// CreateRate and CreateBurst limit sandbox creation per key, over all replicas (default 1/s, burst 10;
	// rate < 0 disables).
	CreateRate  float64
	CreateBurst int
	// MaxExecsPerTenant bounds commands and file transfers in flight per tenant (default 20; < 0 disables).
	MaxExecsPerTenant int
	// MaxExecStreams bounds them over all tenants (default 100; < 0 disables): exec streams are long-running
	// requests, which API Priority and Fairness does not limit, so this protects the API server and kubelets.
	MaxExecStreams int
	// Replicas, if set, says how many gateway replicas share MaxExecsPerTenant, MaxExecStreams and the create
	// rate (e.g. ReplicaCounter.Count); each admits its share of the exec limits, rounded up, and of CreateRate
	// and CreateBurst, the burst rounded down but at least 1. Unset: this is the only replica.
	Replicas func() int
	// MaxInflightBytes bounds the memory all calls in flight may hold, each counted at its worst case
	// (default 256 MiB: MemoryPlan of DefaultMemoryLimit; < 0 disables). Over it calls answer 503 gateway_busy.
	MaxInflightBytes int64
	// MaxInflightBytesPerTenant is one tenant's share of it (default a quarter); over it, 429
	// memory_budget_exceeded.
	MaxInflightBytesPerTenant int64
	// LogCommands adds commands to the access log (off by default: they may hold secrets).
	LogCommands bool
	// MCPSessionTimeout ends an MCP session idle that long, deleting its sandbox (default 30m).
	MCPSessionTimeout time.Duration
	// MaxMCPSessionsPerTenant and MaxMCPSessions bound the MCP sessions open on this replica, per tenant and
	// over all tenants (defaults 64 and 1024; < 0 disables): over them, initialize gets 429.
	MaxMCPSessionsPerTenant int
	MaxMCPSessions          int
}

// Server is the gateway's HTTP API.
type Server struct {
	opts    Options
	metrics *Metrics
	creates *rateLimiter
	execs   *execSlots
	memory  *byteBudget
	handler http.Handler
	// mcpSessions are the MCP sessions of this replica and their sandboxes (mcp.go), mcpSlots their bounds
	// (mcpsessions.go), mcpCalls the /mcp POSTs in flight (mcpcalls.go).
	mcpSessions *mcpserver.Sessions
	mcpSlots    *mcpSessionSlots
	mcpCalls    *mcpCalls
	// secrets caches sandboxes' scoped secrets (secrets.go).
	secrets secretCache
}

// New checks opts, fills defaults and builds the handler.
func New(opts Options) (*Server, error) {
	if opts.Client == nil || opts.Engine == nil || opts.Auth == nil {
		return nil, errors.New("gateway: Client, Engine and Auth are required")
	}
	if opts.Reader == nil {
		opts.Reader = opts.Client
	}
	if opts.Logger.GetSink() == nil {
		opts.Logger = logr.Discard()
	}
	if opts.DefaultTemplate == "" {
		opts.DefaultTemplate = "python-node"
	}
	defDur(&opts.ReadyTimeout, 60*time.Second)
	defDur(&opts.MaxExecTimeout, time.Hour)
	defDur(&opts.MCPSessionTimeout, DefaultMCPSessionTimeout)
	defInt(&opts.DefaultOutputBytes, podexec.DefaultKeepBytes)
	defInt(&opts.MaxBodyBytes, 1<<20)
	defInt(&opts.MaxFileBytes, 16<<20)
	if opts.CreateRate == 0 {
		opts.CreateRate = 1
	}
	if opts.CreateBurst == 0 {
		opts.CreateBurst = 10
	}
	if opts.MaxExecsPerTenant == 0 {
		opts.MaxExecsPerTenant = 20
	}
	if opts.MaxMCPSessionsPerTenant == 0 {
		opts.MaxMCPSessionsPerTenant = DefaultMaxMCPSessionsPerTenant
	}
	if opts.MaxMCPSessions == 0 {
		opts.MaxMCPSessions = DefaultMaxMCPSessions
	}
	if opts.MaxExecStreams == 0 {
		opts.MaxExecStreams = DefaultMaxExecStreams
	}
	if opts.MaxInflightBytes == 0 {
		opts.MaxInflightBytes, _ = MemoryPlan(DefaultMemoryLimit)
	}
	if opts.MaxInflightBytesPerTenant == 0 {
		opts.MaxInflightBytesPerTenant = opts.MaxInflightBytes / 4
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	m, err := NewMetrics(opts.Registry)
	if err != nil {
		return nil, err
	}
	s := &Server{
		opts:    opts,
		metrics: m,
		creates: newRateLimiter(opts.CreateRate, opts.CreateBurst).sharedBy(opts.Replicas),
		execs:   newExecSlots(opts.MaxExecsPerTenant, opts.MaxExecStreams, opts.Replicas),
		memory:  newByteBudget(opts.MaxInflightBytes, opts.MaxInflightBytesPerTenant),
	}
	s.handler = s.routes()
	return s, nil
}

func defDur(d *time.Duration, v time.Duration) {
	if *d <= 0 {
		*d = v
	}
}

func defInt(i *int64, v int64) {
	if *i <= 0 {
		*i = v
	}
}

// Handler is the HTTP API and /healthz. /metrics is not on it: metrics name tenants, so they are served on a
// listener of their own (MetricsHandler) that only scrapers reach.
func (s *Server) Handler() http.Handler { return s.handler }

// MetricsHandler serves the gateway's metrics in the Prometheus format.
func (s *Server) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(s.opts.Registry, promhttp.HandlerOpts{})
}

// Metrics are the gateway's metrics (to register extra collectors such as UsageCollector).
func (s *Server) Metrics() *Metrics { return s.metrics }

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	authed := func(h func(http.ResponseWriter, *http.Request, auth.Principal)) http.Handler {
		return s.authenticate(h)
	}
	mux.Handle("POST /v1/sandboxes", authed(s.handleCreateSandbox))
	mux.Handle("GET /v1/sandboxes", authed(s.handleListSandboxes))
	mux.Handle("GET /v1/sandboxes/{id}", authed(s.handleGetSandbox))
	mux.Handle("DELETE /v1/sandboxes/{id}", authed(s.handleDeleteSandbox))
	mux.Handle("POST /v1/sandboxes/{id}/timeout", authed(s.extendTimeout))
	mux.Handle("POST /v1/sandboxes/{id}/exec", authed(s.handleExec))
	mux.Handle("GET /v1/sandboxes/{id}/processes", authed(s.listProcesses))
	mux.Handle("GET /v1/sandboxes/{id}/processes/{pid}", authed(s.getProcess))
	mux.Handle("POST /v1/sandboxes/{id}/processes/{pid}/stdin", authed(s.processStdin))
	mux.Handle("POST /v1/sandboxes/{id}/processes/{pid}/signal", authed(s.signalProcess))
	mux.Handle("DELETE /v1/sandboxes/{id}/processes/{pid}", authed(s.killProcess))
	mux.Handle("PUT /v1/sandboxes/{id}/files", authed(s.handlePutFile))
	mux.Handle("GET /v1/sandboxes/{id}/files", authed(s.handleGetFile))
	mux.Handle("GET /v1/tools", authed(s.getTools))
	mux.HandleFunc("GET /v1/openapi.json", serveOpenAPI)
	mux.Handle("/mcp", s.mcpHandler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	// The catch-all also shadows the mux's own 405: tell "wrong method" from "no such path" here.
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		var allow []string
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete} {
			r2 := r.Clone(r.Context())
			r2.Method = m
			if _, pattern := mux.Handler(r2); pattern != "/" {
				allow = append(allow, m)
			}
		}
		if len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeError(w, &Error{Status: http.StatusMethodNotAllowed, Code: CodeMethodNotAllowed, Message: r.Method + " not allowed on " + r.URL.Path + "; allowed: " + strings.Join(allow, ", ")})
			return
		}
		writeError(w, &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: "no route " + r.Method + " " + r.URL.Path + "; see /v1/openapi.json"})
	})
	// The recoverer inside the access log: it needs the statusWriter, and a recovered panic is logged as a 500.
	return s.accessLog(s.recoverer(mux))
}
