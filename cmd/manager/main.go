// Command manager runs the Airlock controller: it reconciles Sandboxes into isolated pods.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/controller"
	"airlock.dev/airlock/internal/initproc"
	"airlock.dev/airlock/internal/metrics"
	"airlock.dev/airlock/internal/runwrap"
	"airlock.dev/airlock/internal/sandbox"
	"airlock.dev/airlock/internal/version"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
		os.Exit(1)
	}
}

func run() error {
	defaults := sandbox.DefaultDefaults()
	podOpts := sandbox.DefaultPodOptions(version.InitImage())
	var (
		metricsAddr, probeAddr, isolating string
		leaseNamespace                    string
		leaderElect                       bool
		workers, qps, burst               int
	)
	fs := flag.CommandLine
	fs.StringVar(&metricsAddr, "metrics-bind-address", ":8443", "Address the Prometheus metrics endpoint binds to (HTTPS, for callers the API server authorizes for GET /metrics); \"0\" disables it.")
	fs.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address the /healthz and /readyz probes bind to.")
	fs.BoolVar(&leaderElect, "leader-elect", true, "Elect a leader so that only one replica reconciles.")
	fs.StringVar(&leaseNamespace, "leader-election-namespace", "", "Namespace of the leader election Lease; empty: the manager's own (in a pod). Needed out of cluster.")
	fs.StringVar(&podOpts.InitImage, "init-image", podOpts.InitImage, "Image that holds /usr/local/bin/airlock-init, which every sandbox pod runs as PID 1 (unless its template's init is Image): mounted read-only as an image volume, or copied (--init-delivery).")
	initDelivery := fs.String("init-delivery", string(podOpts.InitDelivery), "How a sandbox pod gets airlock-init from --init-image: image-volume (Kubernetes 1.35+, containerd 2.1+ or CRI-O 1.31+), copy (an init container copies it into an emptyDir mounted read-only: any cluster, one container start more), or auto: image-volume where the API server and every node offer it, else copy.")
	fs.StringVar(&defaults.RuntimeClassName, "default-runtime-class", defaults.RuntimeClassName, "Runtime class of sandboxes whose spec and template name none.")
	fs.DurationVar(&defaults.Timeout, "default-timeout", defaults.Timeout, "Lifetime of sandboxes whose spec and template set none.")
	fs.DurationVar(&defaults.MaxTimeout, "max-timeout", defaults.MaxTimeout, "Cap on every sandbox's lifetime (at most 24h, the API's own cap).")
	fs.StringVar(&isolating, "isolating-handlers", strings.Join(defaults.IsolatingHandlers, ","), "Comma-separated globs of the RuntimeClass handlers that isolate (gVisor: runsc, runsc-*, GKE Sandbox's gvisor; Kata: kata*); sandboxes under any other handler are refused, and only these may run a template's commands as root.")
	fs.BoolVar(&defaults.AllowUnisolated, "allow-unisolated-runtimes", false, "Let sandboxes run under non-isolating handlers such as runc; status.isolation then says none. Not a security boundary for hostile code.")
	fs.BoolVar(&defaults.AllowUnverified, "allow-unverified-isolation", false, "Let sandboxes run whose pod found nothing proving the isolation its handler promises (gVisor without its marker file and with its kernel log unreadable), though it does not run its node's kernel; status.isolation then says unverified.")
	fs.StringVar(&podOpts.GateTarget, "gate-target", "", "host:port the network gate probes: it must listen and be denied by the sandbox's policy. Empty: the pod's node IP and the kubelet port from the Node's status.")
	fs.DurationVar(&podOpts.GateTimeout.Duration, "network-gate-timeout", podOpts.GateTimeout.Duration, "How long a new pod waits for its network isolation to take effect before it fails.")
	fs.IntVar(&podOpts.ProcessLimit, "process-limit", podOpts.ProcessLimit, "Most processes the sandbox user may have (RLIMIT_NPROC) under --process-limit-handlers; 0 disables.")
	processHandlers := fs.String("process-limit-handlers", strings.Join(podOpts.ProcessLimitHandlers, ","), "Comma-separated globs of the RuntimeClass handlers (not class names: the handler is what the node runs) whose pids limit kills the whole sandbox instead of failing fork (gVisor's), so the process limit is applied inside.")
	fs.Func("process-limit-runtime-classes", "Removed: it matched RuntimeClass names; use --process-limit-handlers.", func(string) error {
		return errors.New("removed: it matched RuntimeClass names, which say nothing of the runtime; use --process-limit-handlers, globs of the RuntimeClass handler (default " +
			strings.Join(sandbox.GVisorHandlers, ",") + ")")
	})
	fs.StringVar(&podOpts.MemoryGuard, "memory-guard", "", "PID 1's memory guard in every sandbox: the headroom in MiB below the sandbox's memory limit at which it kills the largest command, or off. Empty: airlock-init's default (160).")
	egressProxy := fs.String("egress-proxy-service", "", "namespace/name of the egress proxy's Service, which Restricted sandboxes with an allowlist (network.allow) reach their hosts through; empty: no proxy, and such sandboxes wait with reason EgressProxyUnavailable.")
	fs.IntVar(&workers, "workers", 32, "How many sandboxes are reconciled concurrently (each reconcile mostly waits for the API server).")
	fs.IntVar(&qps, "kube-api-qps", 200, "Queries per second the manager may send to the API server.")
	fs.IntVar(&burst, "kube-api-burst", 400, "Burst of queries the manager may send to the API server.")
	var guard webhookFlags
	guard.bind(fs)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	flag.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: manager [flags]\n\nRuns the Airlock controller (version %s): Sandbox custom resources become isolated pods with a deny-all NetworkPolicy and a hard expiry.\n\nFlags:\n", version.Version)
		fs.PrintDefaults()
	}
	flag.Parse()
	defaults.IsolatingHandlers = splitList(isolating)
	if err := sandbox.ValidateHandlerGlobs(defaults.IsolatingHandlers); err != nil {
		return fmt.Errorf("--isolating-handlers: %w", err)
	}
	if podOpts.GateTarget != "" {
		host, port, err := net.SplitHostPort(podOpts.GateTarget)
		if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 1 || n > 65535 {
			return fmt.Errorf("--gate-target must be host:port, got %q", podOpts.GateTarget)
		}
		if err := initproc.CheckGateHost(host); err != nil {
			return fmt.Errorf("--gate-target: %w", err)
		}
	}
	podOpts.ProcessLimitHandlers = splitList(*processHandlers)
	if err := sandbox.ValidateHandlerGlobs(podOpts.ProcessLimitHandlers); err != nil {
		return fmt.Errorf("--process-limit-handlers: %w", err)
	}
	delivery, err := sandbox.ParseInitDelivery(*initDelivery)
	if err != nil {
		return fmt.Errorf("--init-delivery: %w", err)
	}
	podOpts.InitDelivery = delivery
	if _, _, err := runwrap.ParseMemoryGuard(podOpts.MemoryGuard); err != nil {
		return fmt.Errorf("--memory-guard: %w", err)
	}
	if defaults.MaxTimeout <= 0 || defaults.MaxTimeout > 24*time.Hour {
		return fmt.Errorf("--max-timeout must be in (0, 24h], got %s", defaults.MaxTimeout)
	}
	if defaults.Timeout <= 0 {
		return fmt.Errorf("--default-timeout must be positive, got %s", defaults.Timeout)
	}
	webhookServer, err := guard.server()
	if err != nil {
		return err
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("setup")

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := airlockv1.AddToScheme(scheme); err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(qps), burst
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsOptions(metricsAddr),
		HealthProbeBindAddress:  probeAddr,
		LeaderElection:          leaderElect,
		LeaderElectionID:        "manager.sandbox.airlock.dev",
		LeaderElectionNamespace: leaseNamespace,
		Cache:                   controller.CacheOptions(),
		WebhookServer:           webhookServer,
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	m, err := metrics.NewController(crmetrics.Registry, mgr.GetCache())
	if err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	cs, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return fmt.Errorf("clientset: %w", err)
	}
	if err := discoverServer(cs, &podOpts, log); err != nil {
		return err
	}
	r := &controller.SandboxReconciler{
		Client:       mgr.GetClient(),
		APIReader:    mgr.GetAPIReader(),
		Scheme:       scheme,
		Recorder:     mgr.GetEventRecorder("airlock-manager"),
		Clock:        clock.RealClock{},
		Defaults:     defaults,
		Pod:          podOpts,
		Metrics:      m,
		Workers:      workers,
		Attestations: &controller.Attestations{Logs: controller.ClusterLogs{Clientset: cs}},
	}
	if *egressProxy != "" {
		ns, name, ok := strings.Cut(*egressProxy, "/")
		if !ok || ns == "" || name == "" {
			return fmt.Errorf("--egress-proxy-service %q is not namespace/name", *egressProxy)
		}
		r.EgressProxy = &controller.ProxyLocator{Reader: mgr.GetAPIReader(), Service: types.NamespacedName{Namespace: ns, Name: name}, TTL: 10 * time.Second}
	}
	if err := setupPools(mgr, r); err != nil {
		return err
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up controller: %w", err)
	}
	if err := guard.setup(mgr); err != nil {
		return fmt.Errorf("setting up exec webhook: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	log.Info("starting manager", "version", version.Version, "initImage", podOpts.InitImage,
		"isolatingHandlers", defaults.IsolatingHandlers, "allowUnisolatedRuntimes", defaults.AllowUnisolated,
		"allowUnverifiedIsolation", defaults.AllowUnverified, "gateTarget", podOpts.GateTarget)
	return mgr.Start(ctrl.SetupSignalHandler())
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

// discoverServer records the API server's version, which --init-delivery=auto judges image volumes by (with the
// nodes', for each pod), and says what it would choose now.
func discoverServer(cs kubernetes.Interface, o *sandbox.PodOptions, log logr.Logger) error {
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		return fmt.Errorf("reading the API server's version: %w", err)
	}
	o.ServerVersion = v.GitVersion
	if o.InitDelivery != sandbox.InitDeliveryAuto {
		log.Info("airlock-init delivery set by the operator", "initDelivery", o.InitDelivery, "server", v.GitVersion)
		return nil
	}
	nodes, err := cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		log.Error(err, "listing nodes to judge image volumes (judged again for each pod)")
		return nil
	}
	if why := sandbox.ImageVolumesUnavailable(v.GitVersion, nodes.Items); why != "" {
		log.Info("image volumes are not available: airlock-init is copied into each sandbox pod by an init container", "why", why)
		return nil
	}
	log.Info("airlock-init reaches sandbox pods as an image volume", "server", v.GitVersion)
	return nil
}
