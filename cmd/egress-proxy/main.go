// Command egress-proxy is Airlock's egress proxy (docs/network.md): the one destination of Restricted
// sandboxes with an allowlist, which it enforces per sandbox, identified by source pod IP.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/egressproxy"
	"airlock.dev/airlock/internal/sandbox"
)

type flags struct {
	listen, metricsListen                string
	blocked, permitted, hosts            string
	systemResolver, devLogs              bool
	maxConns, maxPerSandbox              int
	dialTimeout, tunnelIdle, shutdownMax time.Duration
}

func parseFlags() flags {
	var f flags
	fs := flag.CommandLine
	fs.StringVar(&f.listen, "listen", ":3128", "address the proxy serves sandboxes on")
	fs.StringVar(&f.metricsListen, "metrics-listen", ":9090", "address to serve /metrics, /healthz and /readyz on")
	fs.StringVar(&f.blocked, "blocked-cidrs", "", "comma-separated CIDRs never connected to, on top of loopback, link-local, private and reserved ranges: the cluster's pod and service ranges and its nodes when they are outside those")
	fs.StringVar(&f.permitted, "permitted-cidrs", "", "comma-separated CIDRs connected to although blocked, e.g. an internal package mirror (allowlists still apply)")
	fs.StringVar(&f.hosts, "hosts", "", "comma-separated name=IP pairs resolved without DNS, e.g. pypi.mirror.internal=203.0.113.20")
	fs.BoolVar(&f.systemResolver, "system-resolver", true, "resolve names not in --hosts with the system resolver; false resolves only --hosts")
	fs.IntVar(&f.maxPerSandbox, "max-connections-per-sandbox", 64, "open connections one sandbox may have to the proxy; more are answered 429")
	fs.IntVar(&f.maxConns, "max-connections", egressproxy.DefaultMaxConnections, fmt.Sprintf(
		"open connections the proxy serves from all sandboxes together; more are answered 503, and at the maximum a new "+
			"connection displaces one that has sent no request yet. Each may hold up to %d KiB of memory, so the default "+
			"fits a 256 MiB memory limit (docs/network.md)", egressproxy.ConnectionCost>>10))
	fs.DurationVar(&f.dialTimeout, "dial-timeout", 10*time.Second, "how long connecting to a destination may take")
	fs.DurationVar(&f.tunnelIdle, "tunnel-idle-timeout", 5*time.Minute, "a tunnel that moves no byte for this long is closed")
	fs.DurationVar(&f.shutdownMax, "shutdown-grace", 5*time.Second, "on SIGTERM, how long plain HTTP requests may finish before every connection left (tunnels included) is reset")
	fs.BoolVar(&f.devLogs, "dev-logs", false, "human-readable logs instead of JSON")
	flag.Parse()
	return f
}

func (f flags) validate() error {
	if f.maxConns < 1 {
		return fmt.Errorf("--max-connections must be at least 1, got %d", f.maxConns)
	}
	if f.maxPerSandbox < 1 {
		return fmt.Errorf("--max-connections-per-sandbox must be at least 1, got %d", f.maxPerSandbox)
	}
	return nil
}

func main() {
	f := parseFlags()
	log := zap.New(zap.UseDevMode(f.devLogs))
	// controller-runtime's cache logs through it too; unset, it prints a stack trace to say so.
	ctrllog.SetLogger(log)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, f, log); err != nil {
		log.Error(err, "egress proxy failed")
		os.Exit(1)
	}
}

func run(ctx context.Context, f flags, log logr.Logger) error {
	if err := f.validate(); err != nil {
		return err
	}
	setMemoryLimit(f.maxConns, log)
	guard, resolver, err := destinations(f)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics, err := egressproxy.NewMetrics(reg)
	if err != nil {
		return err
	}
	cfg, err := config.GetConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := airlockv1.AddToScheme(scheme); err != nil {
		return err
	}
	// Only Airlock's pods are cached, indexed by IP; Sandboxes for their allowlists.
	ca, err := cache.New(cfg, cache.Options{Scheme: scheme, ByObject: map[client.Object]cache.ByObject{
		&corev1.Pod{}:        {Label: labels.SelectorFromSet(labels.Set{sandbox.LabelManagedBy: sandbox.ManagedByValue})},
		&airlockv1.Sandbox{}: {},
	}})
	if err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	if err := ca.IndexField(ctx, &corev1.Pod{}, egressproxy.PodIPIndex, egressproxy.IndexPodIP); err != nil {
		return fmt.Errorf("pod index: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("clientset: %w", err)
	}
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	if err := b.StartRecordingToSinkWithContext(ctx); err != nil {
		return fmt.Errorf("events: %w", err)
	}
	rec := &egressproxy.EventRecorder{Recorder: b.NewRecorder(scheme, "airlock-egress-proxy")}
	if err := forgetDeleted(ctx, ca, metrics, rec); err != nil {
		return err
	}
	go func() {
		if err := ca.Start(ctx); err != nil {
			log.Error(err, "cache stopped")
		}
	}()

	proxy := &egressproxy.Proxy{
		Directory:  &egressproxy.KubeDirectory{Reader: ca},
		Dialer:     &egressproxy.Dialer{Guard: guard, Resolver: resolver, Timeout: f.dialTimeout},
		Metrics:    metrics,
		Recorder:   rec,
		Log:        log.WithName("proxy"),
		TunnelIdle: f.tunnelIdle,
	}
	go serveMetrics(ctx, f.metricsListen, reg, ca, log)
	if !ca.WaitForCacheSync(ctx) {
		return errors.New("cache did not sync")
	}
	l, err := net.Listen("tcp", f.listen)
	if err != nil {
		return err
	}
	srv := egressproxy.NewServer(proxy)
	limited := egressproxy.NewLimitListener(l, egressproxy.Limits{PerSource: f.maxPerSandbox, Total: f.maxConns}, metrics)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(limited) }()
	log.Info("serving", "listen", f.listen, "maxConnections", f.maxConns, "maxConnectionsPerSandbox", f.maxPerSandbox,
		"connectionMemoryBoundMiB", egressproxy.MemoryBound(f.maxConns)>>20, "systemResolver", f.systemResolver)
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	// Plain HTTP requests may finish within the grace; then every connection left, tunnels included, is reset
	// while the pod's network still exists, so no client waits on a proxy that is gone.
	sctx, cancel := context.WithTimeout(context.Background(), f.shutdownMax)
	defer cancel()
	_ = srv.Shutdown(sctx)
	limited.Abort()
	log.Info("stopped")
	return nil
}

// destinations builds the guard and the resolver from the flags.
func destinations(f flags) (*egressproxy.Guard, egressproxy.Resolver, error) {
	blocked, err := prefixes(f.blocked)
	if err != nil {
		return nil, nil, fmt.Errorf("--blocked-cidrs: %w", err)
	}
	permitted, err := prefixes(f.permitted)
	if err != nil {
		return nil, nil, fmt.Errorf("--permitted-cidrs: %w", err)
	}
	hosts := egressproxy.Hosts{}
	for _, kv := range splitList(f.hosts) {
		name, ip, ok := strings.Cut(kv, "=")
		addr, err := netip.ParseAddr(ip)
		if !ok || err != nil || name == "" {
			return nil, nil, fmt.Errorf("--hosts: %q is not name=IP", kv)
		}
		key := strings.TrimSuffix(strings.ToLower(name), ".")
		hosts[key] = append(hosts[key], addr)
	}
	var resolver egressproxy.Resolver = hosts
	if f.systemResolver {
		resolver = egressproxy.HostsThen{Hosts: hosts, Next: net.DefaultResolver}
	}
	return egressproxy.NewGuard(blocked, permitted), resolver, nil
}

func prefixes(list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range splitList(list) {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, err
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// forgetDeleted drops a deleted sandbox's metric series and remembered destinations.
func forgetDeleted(ctx context.Context, ca cache.Cache, m *egressproxy.Metrics, rec *egressproxy.EventRecorder) error {
	inf, err := ca.GetInformer(ctx, &airlockv1.Sandbox{})
	if err != nil {
		return fmt.Errorf("sandbox informer: %w", err)
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
		if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if s, ok := obj.(*airlockv1.Sandbox); ok {
			m.Forget(s.Namespace, s.Name)
			rec.Forget(string(s.UID))
		}
	}})
	if err != nil {
		return fmt.Errorf("sandbox informer: %w", err)
	}
	return nil
}

// serveMetrics serves /metrics, /healthz and /readyz (ready once the cache synced).
func serveMetrics(ctx context.Context, addr string, reg *prometheus.Registry, ca cache.Cache, log logr.Logger) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		sctx, cancel := context.WithTimeout(r.Context(), 100*time.Millisecond)
		defer cancel()
		if !ca.WaitForCacheSync(sctx) {
			http.Error(w, "cache not synced", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error(err, "metrics server")
	}
}
