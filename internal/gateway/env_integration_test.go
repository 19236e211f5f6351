package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/gateway/admin"
	"airlock.dev/airlock/internal/gateway/auth"
	"airlock.dev/airlock/internal/podexec"
	"airlock.dev/airlock/internal/testutil/execserver"
)

// One real kube-apiserver + etcd for the package, started on first use so that unit tests run without it.
var (
	envOnce sync.Once
	envCfg  *rest.Config
	envErr  error
	env     *envtest.Environment
	scheme  = runtime.NewScheme()

	wrapperOnce sync.Once
	wrapperPath string
	wrapperErr  error
)

func init() {
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if err := airlockv1.AddToScheme(scheme); err != nil {
		panic(err)
	}
}

func TestMain(m *testing.M) {
	if cfg := os.Getenv(childGatewayEnv); cfg != "" {
		// This process is a gateway for TestIntegrationMemoryBounded, not a test run.
		if err := runChildGateway(cfg); err != nil {
			fmt.Fprintln(os.Stderr, "child gateway:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	if env != nil {
		_ = env.Stop()
	}
	if wrapperPath != "" {
		_ = os.RemoveAll(filepath.Dir(wrapperPath))
	}
	os.Exit(code)
}

func startEnv(tb testing.TB) *rest.Config {
	tb.Helper()
	envOnce.Do(func() {
		if os.Getenv("KUBEBUILDER_ASSETS") == "" {
			envErr = fmt.Errorf("KUBEBUILDER_ASSETS is not set: run 'make test-integration'")
			return
		}
		env = &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join("..", "..", "config", "crd", "bases")}, ErrorIfCRDPathMissing: true}
		envCfg, envErr = env.Start()
		if envErr == nil {
			envCfg.QPS, envCfg.Burst = 1000, 2000
		}
	})
	if envErr != nil {
		tb.Fatalf("envtest: %v", envErr)
	}
	return envCfg
}

// wrapper builds the in-sandbox wrapper once, for the exec server to run.
func wrapper(tb testing.TB) string {
	tb.Helper()
	wrapperOnce.Do(func() {
		dir, err := os.MkdirTemp("", "airlock-gw-wrapper-")
		if err != nil {
			wrapperErr = err
			return
		}
		wrapperPath, wrapperErr = execserver.BuildWrapper(dir)
	})
	if wrapperErr != nil {
		tb.Fatalf("building wrapper: %v", wrapperErr)
	}
	return wrapperPath
}

// gw is a gateway under test: real API server, real key Store, an exec engine pointed at a local exec
// server (pods never run in envtest), behind a real HTTP listener.
type gw struct {
	c     client.Client
	cs    kubernetes.Interface
	keyNS string
	srv   *Server
	http  *httptest.Server
	exec  *execserver.Server
}

func newGateway(tb testing.TB, mutate func(*Options)) *gw {
	tb.Helper()
	cfg := startEnv(tb)
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		tb.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	g := &gw{c: c, cs: cs, keyNS: newNamespace(tb, c, "airlock-keys-")}
	store := auth.NewStore(cs, g.keyNS)
	if err := store.Run(ctx); err != nil {
		tb.Fatal(err)
	}
	// The exec server runs commands on this machine: HOME (where the wrapper keeps full outputs) and the
	// default directory are temporary, never the host's.
	home := tb.TempDir()
	g.exec = execserver.Start(execserver.Options{Rewrite: map[string]string{podexec.DefaultWrapperPath: wrapper(tb)},
		Supervisor: wrapper(tb), Env: []string{"HOME=" + home}, Dir: home})
	engine, err := podexec.New(g.exec.RESTConfig(), podexec.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	if err := b.StartRecordingToSinkWithContext(ctx); err != nil {
		tb.Fatal(err)
	}
	o := Options{Client: c, Engine: engine, Auth: store, Audit: b.NewRecorder(scheme, "airlock-gateway"),
		ReadyTimeout: time.Second, CreateBurst: 100, CreateRate: 10}
	if mutate != nil {
		mutate(&o)
	}
	if g.srv, err = New(o); err != nil {
		tb.Fatal(err)
	}
	g.http = httptest.NewServer(g.srv.Handler())
	tb.Cleanup(func() {
		g.http.Close()
		g.exec.Close()
		b.Shutdown()
		cancel()
	})
	return g
}

func newNamespace(tb testing.TB, c client.Client, prefix string) string {
	tb.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	if err := c.Create(context.Background(), ns); err != nil {
		tb.Fatal(err)
	}
	return ns.Name
}

// tenant creates a tenant the way `airlock tenant create` does, with the default template and a key.
// envtest runs no kube-controller-manager, so the quota controller never fills the ResourceQuota's status;
// the quota admission plugin then refuses every create ("status unknown for quota"). We set status.hard and
// status.used = 0 as that controller would; admission then checks and increments used atomically itself.
func (g *gw) tenant(tb testing.TB, maxSandboxes int64) (ns, key string) {
	tb.Helper()
	ctx := context.Background()
	ns = fmt.Sprintf("t-%d", time.Now().UnixNano()%1_000_000_000_000)
	// Play the quota controller while CreateTenant waits for it.
	filled := make(chan error, 1)
	go func() {
		deadline := time.Now().Add(30 * time.Second)
		for {
			var q corev1.ResourceQuota
			err := g.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: admin.QuotaName}, &q)
			if err == nil {
				q.Status.Hard = q.Spec.Hard
				q.Status.Used = corev1.ResourceList{admin.QuotaResource: resource.MustParse("0")}
				filled <- g.c.Status().Update(ctx, &q)
				return
			}
			if time.Now().After(deadline) {
				filled <- err
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	if err := admin.CreateTenant(ctx, g.c, ns, admin.TenantOptions{MaxSandboxes: maxSandboxes}); err != nil {
		tb.Fatal(err)
	}
	if err := <-filled; err != nil {
		tb.Fatal(err)
	}
	tmpl := &airlockv1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Name: "python-node", Namespace: ns},
		Spec: airlockv1.SandboxTemplateSpec{Image: "localhost/airlock/sandbox-python:1", OutputLimitBytes: ptrTo(int64(4096))}}
	if err := g.c.Create(ctx, tmpl); err != nil {
		tb.Fatal(err)
	}
	key = g.key(tb, ns)
	return ns, key
}

func (g *gw) key(tb testing.TB, tenant string) string {
	tb.Helper()
	key, _, err := admin.CreateKey(context.Background(), g.c, g.keyNS, tenant, "test")
	if err != nil {
		tb.Fatal(err)
	}
	// The store learns of the key through its watch.
	waitFor(tb, 10*time.Second, func() bool {
		_, err := g.srv.opts.Auth.Authenticate(context.Background(), key)
		return err == nil
	})
	return key
}

func ptrTo[T any](v T) *T { return &v }

func waitFor(tb testing.TB, d time.Duration, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("condition not met within %v", d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// do sends a request and decodes a JSON answer into a map (nil for an empty body).
func (g *gw) do(tb testing.TB, key, method, path string, body any, hdr ...string) (int, map[string]any) {
	tb.Helper()
	code, m, err := g.try(key, method, path, body, hdr...)
	if err != nil {
		tb.Fatal(err)
	}
	return code, m
}

// try is do for goroutines other than the test's, which must not call t.Fatal: it returns the failure.
func (g *gw) try(key, method, path string, body any, hdr ...string) (int, map[string]any, error) {
	resp, raw, err := g.tryRaw(key, method, path, body, hdr...)
	if err != nil {
		return 0, nil, err
	}
	var m map[string]any
	if len(raw) > 0 && resp.Header.Get("Content-Type") == "application/json" {
		if err := json.Unmarshal(raw, &m); err != nil {
			return 0, nil, fmt.Errorf("%s %s: bad JSON %q: %w", method, path, raw, err)
		}
	}
	return resp.StatusCode, m, nil
}

func (g *gw) raw(tb testing.TB, key, method, path string, body any, hdr ...string) (*http.Response, []byte) {
	tb.Helper()
	resp, raw, err := g.tryRaw(key, method, path, body, hdr...)
	if err != nil {
		tb.Fatal(err)
	}
	return resp, raw
}

func (g *gw) tryRaw(key, method, path string, body any, hdr ...string) (*http.Response, []byte, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = bytes.NewReader([]byte(b))
	case io.Reader:
		rd = b
	default:
		j, err := json.Marshal(b)
		if err != nil {
			return nil, nil, err
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, g.http.URL+path, rd)
	if err != nil {
		return nil, nil, err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp, raw, fmt.Errorf("%s %s: reading the body: %w", method, path, err)
	}
	return resp, raw, nil
}

// markReady plays the controller: pods never run in envtest, so the test sets the status it would.
func (g *gw) markReady(tb testing.TB, ns, id string) {
	tb.Helper()
	ctx := context.Background()
	var sb airlockv1.Sandbox
	if err := g.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: id}, &sb); err != nil {
		tb.Fatal(err)
	}
	now := metav1.Now()
	sb.Status.Phase = airlockv1.PhaseReady
	sb.Status.PodName = id
	sb.Status.SupervisorKey = g.exec.SupervisorKey()
	sb.Status.StartedAt = &now
	sb.Status.MaxTimeout = &metav1.Duration{Duration: 2 * time.Hour}
	sb.Status.Conditions = []metav1.Condition{{Type: airlockv1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Running", LastTransitionTime: now}}
	if err := g.c.Status().Update(ctx, &sb); err != nil {
		tb.Fatal(err)
	}
}

// readySandbox creates a Ready sandbox whose working directory is a local directory (the exec server runs
// commands on this machine).
func (g *gw) readySandbox(tb testing.TB, ns, workDir string) string {
	tb.Helper()
	sb := &airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{GenerateName: "sbx-", Namespace: ns},
		Spec: airlockv1.SandboxSpec{TemplateRef: &airlockv1.TemplateReference{Name: "python-node"}, WorkingDir: workDir}}
	if err := g.c.Create(context.Background(), sb); err != nil {
		tb.Fatal(err)
	}
	g.markReady(tb, ns, sb.Name)
	return sb.Name
}

func parseKeyID(key string) (string, error) { return auth.ParseKey(key) }

func (g *gw) setPhase(tb testing.TB, ns, id string, phase airlockv1.SandboxPhase) {
	tb.Helper()
	var sb airlockv1.Sandbox
	if err := g.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: id}, &sb); err != nil {
		tb.Fatal(err)
	}
	sb.Status.Phase = phase
	sb.Status.Conditions[0].Status = metav1.ConditionFalse
	sb.Status.Conditions[0].Reason = "PodStarting"
	if err := g.c.Status().Update(context.Background(), &sb); err != nil {
		tb.Fatal(err)
	}
}
