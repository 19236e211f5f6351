// Command gateway serves Airlock's HTTP API for agents (docs/gateway.md): sandboxes, commands and files, with
// bearer API keys per tenant. It talks to the Kubernetes API with its own ServiceAccount (config/gateway).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/gateway"
	"airlock.dev/airlock/internal/gateway/auth"
	"airlock.dev/airlock/internal/podexec"
)

type flags struct {
	listen, keyNamespace, defaultTemplate, protocol string
	metricsListen, serviceName, serviceNamespace    string
	metricsCertDir                                  string
	readyTimeout, maxExecTimeout, shutdownGrace     time.Duration
	maxBody, maxFile, defaultOutput                 int64
	memoryLimit, maxInflight, maxInflightPerTenant  int64
	createRate                                      float64
	createBurst, maxExecs, maxExecStreams           int
	logCommands, devLogs                            bool
	activityFlush                                   time.Duration
	mcpSessionTimeout                               time.Duration
	maxMCPSessions, maxMCPSessionsPerTenant         int
	sessionIdle                                     time.Duration
	maxSessions                                     int
}

func parseFlags() flags {
	var f flags
	fs := flag.CommandLine
	fs.StringVar(&f.listen, "listen", ":8080", "address to serve the API and /healthz on")
	fs.StringVar(&f.metricsListen, "metrics-listen", ":9090", "address to serve /metrics on, apart from the API: HTTPS, for callers the API server authorizes for GET /metrics (as the manager's); \"0\" disables it")
	fs.StringVar(&f.metricsCertDir, "metrics-cert-dir", "", "directory with tls.crt and tls.key for /metrics, reloaded when they change (empty: a self-signed certificate made at start)")
	fs.StringVar(&f.keyNamespace, "key-namespace", "airlock-keys", "namespace of the API key Secrets: one that holds nothing else, since the gateway may read every Secret in it")
	fs.StringVar(&f.defaultTemplate, "default-template", "python-node", "SandboxTemplate used when a create request names none (it must exist in each tenant namespace)")
	fs.StringVar(&f.protocol, "exec-protocol", "auto", "pods/exec transport: auto (WebSocket, falling back to SPDY), spdy or websocket")
	fs.DurationVar(&f.sessionIdle, "session-idle", podexec.DefaultSessionIdle, "how long a sandbox's session (one exec held open, which carries all its calls) stays open unused")
	fs.IntVar(&f.maxSessions, "max-sessions", podexec.DefaultMaxSessions, "sessions this replica holds open at most (about 100 KiB each); past it the least recently used idle one closes")
	fs.DurationVar(&f.readyTimeout, "ready-timeout", 60*time.Second, "how long POST /v1/sandboxes waits for Ready before answering with status pending")
	fs.DurationVar(&f.maxExecTimeout, "max-exec-timeout", time.Hour, "largest timeout_ms a command may ask for")
	fs.Int64Var(&f.maxBody, "max-body-bytes", 1<<20, "largest JSON request body (exec stdin included) and MCP request (write_file's content included); larger is 413")
	fs.Int64Var(&f.maxFile, "max-file-bytes", 16<<20, "largest file upload or download; larger is 413")
	fs.Int64Var(&f.defaultOutput, "default-output-bytes", podexec.DefaultKeepBytes, "per-stream output kept inline when neither the request nor the template (outputLimitBytes) sets it")
	fs.Float64Var(&f.createRate, "create-rate", 1, "sandbox creations per second per API key, over all replicas (see --service-name; token bucket refill; negative disables)")
	fs.IntVar(&f.createBurst, "create-burst", 10, "token bucket size for sandbox creations per API key, over all replicas (each keeps its share, rounded down, at least 1)")
	fs.IntVar(&f.maxExecs, "max-concurrent-execs", 20, "commands and file transfers in flight per tenant, over all replicas (see --service-name); more is 429 too_many_concurrent_execs (negative disables)")
	fs.IntVar(&f.maxExecStreams, "max-exec-streams", gateway.DefaultMaxExecStreams, "commands and file transfers in flight over all tenants and replicas: exec streams are long-running requests, which API Priority and Fairness does not limit; more is 429 too_many_exec_streams (negative disables)")
	fs.StringVar(&f.serviceName, "service-name", "", "the gateway's own Service: replicas count its ready endpoints and each admits its share of --max-concurrent-execs and --max-exec-streams, rounded up, and of --create-rate and --create-burst (empty: this gateway assumes it is the only replica)")
	fs.StringVar(&f.serviceNamespace, "service-namespace", envOr("POD_NAMESPACE", "airlock-system"), "namespace of --service-name (default $POD_NAMESPACE)")
	fs.Int64Var(&f.memoryLimit, "memory-limit", 0, "memory the gateway may use, in bytes (0: the container's cgroup limit, else 512 MiB); sets the in-flight budget's default and, unless GOMEMLIMIT is set, the Go runtime's soft limit (90%)")
	fs.Int64Var(&f.maxInflight, "max-inflight-bytes", 0, "memory all calls in flight may hold, each counted at its worst case (0: half of --memory-limit; negative disables); when full, calls answer 503 gateway_busy with Retry-After")
	fs.Int64Var(&f.maxInflightPerTenant, "max-inflight-bytes-per-tenant", 0, "one tenant's share of --max-inflight-bytes (0: a quarter of it); over it, 429 memory_budget_exceeded")
	fs.BoolVar(&f.logCommands, "log-commands", false, "log each command's argv or shell string (off: commands may carry secrets)")
	fs.BoolVar(&f.devLogs, "dev-logs", false, "human-readable logs instead of JSON")
	fs.DurationVar(&f.shutdownGrace, "shutdown-grace", 30*time.Second, "on SIGTERM, how long running requests may finish")
	fs.DurationVar(&f.activityFlush, "activity-flush-interval", gateway.DefaultActivityFlushInterval, "at most how often this replica writes one sandbox's status.lastActivityAt after an exec or file transfer; idle expiry (spec.idleTimeout) is precise to it")
	fs.DurationVar(&f.mcpSessionTimeout, "mcp-session-timeout", gateway.DefaultMCPSessionTimeout, "an MCP session (/mcp) idle this long ends, and its sandbox is deleted")
	fs.IntVar(&f.maxMCPSessionsPerTenant, "max-mcp-sessions-per-tenant", gateway.DefaultMaxMCPSessionsPerTenant, "MCP sessions one tenant may hold open on this replica; another initialize is 429 too_many_mcp_sessions (negative disables)")
	fs.IntVar(&f.maxMCPSessions, "max-mcp-sessions", gateway.DefaultMaxMCPSessions, "MCP sessions open on this replica over all tenants, each counted in the memory budget; another initialize is 429 too_many_mcp_sessions (negative disables)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: gateway [flags]\n\nAirlock's HTTP API for agents (see docs/gateway.md). Flags:\n\n")
		fs.PrintDefaults()
	}
	flag.Parse()
	return f
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func main() {
	f := parseFlags()
	log := zap.New(zap.UseDevMode(f.devLogs))
	// controller-runtime's cache and client log through it too; unset, it prints a stack trace to say so.
	ctrllog.SetLogger(log)
	if err := run(f, log); err != nil {
		log.Error(err, "gateway failed")
		os.Exit(1)
	}
}

func run(f flags, log logr.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cfg, err := config.GetConfig()
	if err != nil {
		return fmt.Errorf("kubernetes config: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "airlock-gateway"
	gw, err := build(ctx, cfg, f, log)
	if err != nil {
		return err
	}
	srv := &http.Server{Addr: f.listen, Handler: gw.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	// Deadlines for ordinary calls; exec and file transfers extend theirs per request, up to their own timeouts.
	srv.ReadTimeout, srv.WriteTimeout = time.Minute, 2*time.Minute
	errc := make(chan error, 2)
	go func() { errc <- fmt.Errorf("listen %s: %w", f.listen, srv.ListenAndServe()) }()
	if f.metricsListen != "0" {
		msrv, err := newMetricsServer(cfg, f.metricsListen, f.metricsCertDir, gw.MetricsHandler(), log.WithName("metrics"))
		if err != nil {
			return err
		}
		mctx, stopMetrics := context.WithCancel(ctx)
		defer stopMetrics()
		go func() {
			if err := msrv.serve(mctx); err != nil {
				errc <- err
			}
		}()
	}
	log.Info("serving", "listen", f.listen, "metricsListen", f.metricsListen, "keyNamespace", f.keyNamespace, "defaultTemplate", f.defaultTemplate)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), f.shutdownGrace)
	defer cancel()
	err = srv.Shutdown(sctx)
	gw.CloseMCPSessions() // its MCP sessions end with this process: delete their sandboxes
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// build wires clients, caches, the key store, the exec engine and audit events into the server.
func build(ctx context.Context, cfg *rest.Config, f flags, log logr.Logger) (*gateway.Server, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := airlockv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("clientset: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	// Sandboxes and templates cached cluster-wide: exec and files read them on every call; pools on every create.
	ca, err := cache.New(cfg, cache.Options{Scheme: scheme, ByObject: map[client.Object]cache.ByObject{
		&airlockv1.Sandbox{}: {}, &airlockv1.SandboxTemplate{}: {}, &airlockv1.SandboxPool{}: {},
	}})
	if err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	inf, err := ca.GetInformer(ctx, &airlockv1.Sandbox{})
	if err != nil {
		return nil, fmt.Errorf("sandbox informer: %w", err)
	}
	if _, err := ca.GetInformer(ctx, &airlockv1.SandboxTemplate{}); err != nil {
		return nil, fmt.Errorf("template informer: %w", err)
	}
	if _, err := ca.GetInformer(ctx, &airlockv1.SandboxPool{}); err != nil {
		return nil, fmt.Errorf("pool informer: %w", err)
	}
	usage := gateway.NewUsageCollector(func() []airlockv1.Sandbox {
		var l airlockv1.SandboxList
		if err := ca.List(context.Background(), &l); err != nil {
			log.Error(err, "listing sandboxes for metrics")
		}
		return l.Items
	})
	if _, err := inf.AddEventHandler(usage.EventHandler()); err != nil {
		return nil, fmt.Errorf("sandbox informer: %w", err)
	}
	go func() {
		if err := ca.Start(ctx); err != nil {
			log.Error(err, "cache stopped")
		}
	}()
	keys := auth.NewStore(cs, f.keyNamespace)
	if err := keys.Run(ctx); err != nil {
		return nil, err
	}
	if !ca.WaitForCacheSync(ctx) {
		return nil, errors.New("sandbox cache did not sync")
	}

	engine, err := podexec.New(cfg, podexec.Options{
		Protocol: podexec.Protocol(f.protocol),
		OOMChecker: podexec.PodOOMChecker(func(ctx context.Context, ns, name string) (*corev1.Pod, error) {
			return cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		}),
		SessionIdle: f.sessionIdle, MaxSessions: f.maxSessions,
		Logger: log.WithName("exec"),
	})
	if err != nil {
		return nil, fmt.Errorf("exec engine: %w", err)
	}
	go func() { <-ctx.Done(); engine.Close() }()
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	if err := b.StartRecordingToSinkWithContext(ctx); err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	replicas, err := replicaCount(ctx, cs, f, log)
	if err != nil {
		return nil, err
	}
	activity, err := gateway.NewActivity(c, f.activityFlush, clock.RealClock{}, log.WithName("activity"))
	if err != nil {
		return nil, err
	}
	go activity.Run(ctx)
	inflight := memoryPlan(f, log)
	srv, err := gateway.New(gateway.Options{
		Client: c, Reader: ca, Engine: engine, Auth: keys,
		Audit:  b.NewRecorder(scheme, "airlock-gateway"),
		Logger: log.WithName("gateway"),

		DefaultTemplate: f.defaultTemplate, ReadyTimeout: f.readyTimeout, MaxExecTimeout: f.maxExecTimeout,
		DefaultOutputBytes: f.defaultOutput, MaxBodyBytes: f.maxBody, MaxFileBytes: f.maxFile,
		CreateRate: f.createRate, CreateBurst: f.createBurst, MaxExecsPerTenant: f.maxExecs,
		MaxExecStreams: f.maxExecStreams, Replicas: replicas,
		MaxInflightBytes: inflight, MaxInflightBytesPerTenant: f.maxInflightPerTenant,
		LogCommands: f.logCommands, Activity: activity, MCPSessionTimeout: f.mcpSessionTimeout,
		MaxMCPSessionsPerTenant: f.maxMCPSessionsPerTenant, MaxMCPSessions: f.maxMCPSessions,
	})
	if err != nil {
		return nil, err
	}
	if err := srv.Metrics().Register(usage); err != nil {
		return nil, err
	}
	go srv.RenewBackground(ctx, f.activityFlush, clock.RealClock{}) // idle sandboxes whose background processes run
	return srv, nil
}

// replicaCount is how many replicas share the exec limits and the create rate: the ready endpoints of
// --service-name, else one.
func replicaCount(ctx context.Context, cs kubernetes.Interface, f flags, log logr.Logger) (func() int, error) {
	if f.serviceName == "" {
		log.Info("no --service-name: this gateway counts itself as the only replica, so each replica admits the full exec limits and create rate",
			"maxConcurrentExecs", f.maxExecs, "maxExecStreams", f.maxExecStreams, "createRate", f.createRate, "createBurst", f.createBurst)
		return nil, nil
	}
	rc, err := gateway.WatchReplicas(ctx, cs, f.serviceNamespace, f.serviceName, log.WithName("replicas"))
	if err != nil {
		return nil, err
	}
	return rc.Count, nil
}

// memoryPlan sizes the in-flight byte budget from the memory limit and, unless GOMEMLIMIT is set, gives the
// Go runtime a soft limit below it, so that the collector works harder before the kernel's OOM killer would.
func memoryPlan(f flags, log logr.Logger) int64 {
	limit, from := f.memoryLimit, "flag"
	if limit <= 0 {
		limit, from = gateway.MemoryLimit(), "cgroup"
	}
	if limit <= 0 {
		limit, from = gateway.DefaultMemoryLimit, "default"
	}
	inflight, goLimit := gateway.MemoryPlan(limit)
	if f.maxInflight != 0 {
		inflight = f.maxInflight
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(goLimit)
	}
	log.Info("memory", "limit", limit, "from", from, "maxInflightBytes", inflight, "goMemLimit", debug.SetMemoryLimit(-1))
	return inflight
}
