package controller

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/attestation"
	"airlock.dev/airlock/internal/metrics"
	"airlock.dev/airlock/internal/sandbox"
)

// The integration tests share one real kube-apiserver + etcd (envtest), started on first use so that unit
// tests in this package run without it. Each test runs its own manager in its own namespace.
var (
	envOnce   sync.Once
	env       *envtest.Environment
	envCfg    *rest.Config
	envClient client.Client
	envErr    error
	scheme    = runtime.NewScheme()
)

func init() {
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if err := airlockv1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		panic(err)
	}
}

func TestMain(m *testing.M) {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapLevel())))
	code := m.Run()
	if env != nil {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping envtest:", err)
		}
	}
	os.Exit(code)
}

// zapLevel keeps manager logs quiet unless AIRLOCK_TEST_VERBOSE is set.
func zapLevel() zapcore.Level {
	if os.Getenv("AIRLOCK_TEST_VERBOSE") != "" {
		return zapcore.DebugLevel
	}
	return zapcore.ErrorLevel
}

// startEnv starts envtest once. KUBEBUILDER_ASSETS must name the binaries hack/build-k8s.sh built; a missing
// one fails the test rather than skipping it.
func startEnv(tb testing.TB) (*rest.Config, client.Client) {
	tb.Helper()
	envOnce.Do(func() {
		if os.Getenv("KUBEBUILDER_ASSETS") == "" {
			envErr = fmt.Errorf("KUBEBUILDER_ASSETS is not set: run 'make test-integration' (it builds the binaries)")
			return
		}
		env = &envtest.Environment{
			CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases")},
			ErrorIfCRDPathMissing: true,
		}
		envCfg, envErr = env.Start()
		if envErr != nil {
			return
		}
		envCfg.QPS, envCfg.Burst = 1000, 2000
		envClient, envErr = client.New(envCfg, client.Options{Scheme: scheme})
		if envErr != nil {
			return
		}
		// gke-gvisor is GKE Sandbox's class: handler gvisor.
		for name, handler := range map[string]string{"gvisor": "runsc", "runc": "runc", "kata": "kata-qemu", "gke-gvisor": "gvisor"} {
			rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Handler: handler}
			if envErr = envClient.Create(context.Background(), rc); envErr != nil {
				return
			}
		}
		envServerVersion, envErr = serverVersion(envCfg)
		if envErr != nil {
			return
		}
		envErr = createNode(envClient)
	})
	if envErr != nil {
		tb.Fatalf("envtest: %v", envErr)
	}
	return envCfg, envClient
}

// envNode is the one Node of envtest, with what the kubelet would report: its kernel, kubelet port, and the
// kubelet's and runtime's versions (which decide whether pods get airlock-init as an image volume).
const (
	envNode        = "envtest-node"
	envNodeKernel  = "6.1.0-envtest"
	envNodeRuntime = "containerd://2.4.2"
)

// envServerVersion is the envtest API server's version (discovery), as the manager records it at start.
var envServerVersion string

// testPodOptions are the manager's pod options as it starts against envtest: it knows the server's version.
func testPodOptions() sandbox.PodOptions {
	o := sandbox.DefaultPodOptions("localhost/airlock/init:test")
	o.ServerVersion = envServerVersion
	return o
}

func serverVersion(cfg *rest.Config) (string, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return "", err
	}
	v, err := dc.ServerVersion()
	if err != nil {
		return "", fmt.Errorf("reading envtest's version: %w", err)
	}
	return v.GitVersion, nil
}

func createNode(c client.Client) error {
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: envNode}}
	if err := c.Create(ctx, node); err != nil {
		return err
	}
	node.Status.NodeInfo.KernelVersion = envNodeKernel
	node.Status.NodeInfo.KubeletVersion = envServerVersion
	node.Status.NodeInfo.ContainerRuntimeVersion = envNodeRuntime
	node.Status.DaemonEndpoints.KubeletEndpoint.Port = 10250
	return c.Status().Update(ctx, node)
}

// managerOptions tune a test manager.
type managerOptions struct {
	clock    clock.PassiveClock
	defaults *sandbox.Defaults
	// egressProxy names the egress proxy's Service; none when empty.
	egressProxy types.NamespacedName
	// attest, when set, edits what each pod's stand-in PID 1 attests (attestingLogs).
	attest func(*corev1.Pod, *attestation.Statement)
	// as is the user the manager acts as (impersonated), to run it with an install's RBAC; empty: envtest's admin.
	as string
	// initDelivery is the manager's --init-delivery; empty: auto.
	initDelivery sandbox.InitDelivery
}

// startManager runs the Sandbox controller against envtest until the test ends or the returned stop is called.
func startManager(tb testing.TB, o managerOptions) (stop func()) {
	tb.Helper()
	cfg, _ := startEnv(tb)
	if o.as != "" {
		cfg = rest.CopyConfig(cfg)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: o.as}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:     scheme,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Cache:      CacheOptions(),
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		tb.Fatalf("creating manager: %v", err)
	}
	m, err := metrics.NewController(prometheus.NewRegistry(), mgr.GetCache())
	if err != nil {
		tb.Fatalf("metrics: %v", err)
	}
	defaults := sandbox.DefaultDefaults()
	if o.defaults != nil {
		defaults = *o.defaults
	}
	clk := o.clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	r := &SandboxReconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Scheme:    scheme,
		Recorder:  mgr.GetEventRecorder("airlock-manager"),
		Clock:     clk,
		Defaults:  defaults,
		Pod:       testPodOptions(),
		Metrics:   m,
		Workers:   8,
	}
	if o.initDelivery != "" {
		r.Pod.InitDelivery = o.initDelivery
	}
	r.Attestations = &Attestations{Logs: attestingLogs{c: mgr.GetAPIReader(), edit: o.attest}}
	if o.egressProxy.Name != "" {
		r.EgressProxy = &ProxyLocator{Reader: mgr.GetAPIReader(), Service: o.egressProxy, TTL: time.Second}
	}
	if err := r.SetupWithManager(mgr); err != nil {
		tb.Fatalf("setting up controller: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					tb.Errorf("manager stopped with error: %v", err)
				}
			case <-time.After(30 * time.Second):
				tb.Errorf("manager did not stop within 30s")
			}
		})
	}
	tb.Cleanup(stop)
	return stop
}

// newNamespace creates a namespace for one test. envtest runs no namespace controller, so it is never removed:
// every test uses a fresh one.
func newNamespace(tb testing.TB, c client.Client) string {
	tb.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "airlock-test-"}}
	if err := c.Create(context.Background(), ns); err != nil {
		tb.Fatalf("creating namespace: %v", err)
	}
	return ns.Name
}
