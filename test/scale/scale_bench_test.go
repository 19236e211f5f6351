// Package scale runs the manager against a real control plane (etcd, kube-apiserver, kube-scheduler,
// kube-controller-manager, all built by hack/) whose nodes and pods kwok simulates: `make bench-scale`.
package scale

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/testutil/benchstat"
	"airlock.dev/airlock/internal/testutil/child"
)

func setting(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// BenchmarkScale creates AIRLOCK_SCALE_COUNT Sandboxes (default 10,000) in AIRLOCK_SCALE_TENANTS namespaces
// (20) on AIRLOCK_SCALE_NODES simulated nodes (50), then times one more Sandbox while they all exist, then
// deletes them all. It reports creates/s, the time until all are Ready, the manager's peak RSS and CPU, API
// requests per sandbox, the reconcile p99 at steady state, and the deletion time.
func BenchmarkScale(b *testing.B) {
	n, tenants, nodes := setting("AIRLOCK_SCALE_COUNT", 10_000), setting("AIRLOCK_SCALE_TENANTS", 20), setting("AIRLOCK_SCALE_NODES", 50)
	kwok := os.Getenv("AIRLOCK_KWOK")
	bins := os.Getenv("KUBEBUILDER_ASSETS")
	if kwok == "" || bins == "" {
		b.Fatal("AIRLOCK_KWOK and KUBEBUILDER_ASSETS must name the binaries hack/ builds: run `make bench-scale`")
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		b.Fatal(err)
	}
	if err := airlockv1.AddToScheme(scheme); err != nil {
		b.Fatal(err)
	}
	env := &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join("..", "..", "config", "crd", "bases")}, ErrorIfCRDPathMissing: true}
	api := env.ControlPlane.GetAPIServer().Configure()
	api.Set("max-requests-inflight", "1000")
	api.Set("max-mutating-requests-inflight", "500")
	cfg, err := env.Start()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = env.Stop() })
	cfg.QPS, cfg.Burst = 2000, 4000
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	dir := b.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		b.Fatal(err)
	}

	// The rest of the control plane, and kwok, as processes of this test.
	schedConfig := filepath.Join(dir, "scheduler.yaml")
	if err := os.WriteFile(schedConfig, []byte(fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: %q, qps: 1000, burst: 2000}
leaderElection: {leaderElect: false}
`, kubeconfig)), 0o600); err != nil {
		b.Fatal(err)
	}
	start(b, dir, "kube-scheduler", filepath.Join(bins, "kube-scheduler"), "--config", schedConfig, "--secure-port=0")
	// Its node-lifecycle controller lifts the not-ready taint new nodes get at admission once they are Ready,
	// and keeps them so while kwok renews their leases.
	start(b, dir, "kube-controller-manager", filepath.Join(bins, "kube-controller-manager"), "--kubeconfig", kubeconfig,
		"--leader-elect=false", "--secure-port=0", "--kube-api-qps=1000", "--kube-api-burst=2000",
		"--controllers=*,-serviceaccount-token-controller,-bootstrap-signer-controller,-token-cleaner-controller")
	stages, err := filepath.Abs(filepath.Join("testdata", "kwok-stages.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	start(b, dir, "kwok", kwok, "--kubeconfig", kubeconfig, "--config", stages, "--manage-all-nodes=false",
		"--manage-nodes-with-label-selector=airlock.dev/simulated=true", "--node-ip=10.123.0.2", "--cidr=10.244.0.0/16",
		"--node-lease-duration-seconds=40")
	mgrBin := filepath.Join(dir, "manager")
	if out, err := exec.Command("go", "build", "-o", mgrBin, "airlock.dev/airlock/cmd/manager").CombinedOutput(); err != nil {
		b.Fatalf("building manager: %v\n%s", err, out)
	}
	metricsAddr := freeAddr(b)
	mgr := start(b, dir, "manager", mgrBin, "--kubeconfig", kubeconfig, "--leader-elect=false", "--metrics-bind-address="+metricsAddr,
		"--health-probe-bind-address=0", "--workers=16", "--zap-log-level=error", "--kube-api-qps=1000", "--kube-api-burst=2000")

	// The cluster: gVisor's RuntimeClass, simulated nodes, tenants, and the install's finalizer policy.
	if err := c.Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "runsc"}); err != nil {
		b.Fatal(err)
	}
	for i := range nodes {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("kwok-%02d", i),
			Labels:      map[string]string{"airlock.dev/simulated": "true", "kubernetes.io/os": "linux"},
			Annotations: map[string]string{"node.alpha.kubernetes.io/ttl": "0", "kwok.x-k8s.io/node": "fake"}},
			Spec: corev1.NodeSpec{PodCIDR: fmt.Sprintf("10.244.%d.0/24", i), PodCIDRs: []string{fmt.Sprintf("10.244.%d.0/24", i)}}}
		if err := c.Create(ctx, node); err != nil {
			b.Fatal(err)
		}
	}
	namespaces := make([]string, tenants)
	for i := range namespaces {
		namespaces[i] = fmt.Sprintf("tenant-%02d", i)
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespaces[i]}}); err != nil {
			b.Fatal(err)
		}
	}
	installFinalizerPolicy(b, c, kubeconfig)
	scrape := metricsScraper(b, ctx, cfg, c, metricsAddr)
	waitNodesReady(b, c, nodes)

	for b.Loop() {
		r := runScale(b, ctx, c, cfg, mgr, scrape, namespaces, n)
		b.ReportMetric(r.createsPerSec, "creates/s")
		b.ReportMetric(r.allReady.Seconds(), "all-ready-s")
		b.ReportMetric(float64(mgr.peakRSS(b))/(1<<20), "manager-peak-MiB")
		b.ReportMetric(r.cpu.Seconds(), "manager-cpu-s")
		b.ReportMetric(r.requestsPerSandbox, "requests/sandbox")
		b.ReportMetric(r.writesPerSandbox, "writes/sandbox")
		b.ReportMetric(r.reconcileP99.Seconds(), "steady-reconcile-p99-s")
		b.ReportMetric(r.oneMore.Seconds(), "one-more-ready-s")
		b.ReportMetric(r.deleteAll.Seconds(), "delete-all-s")
		b.Logf("%d Sandboxes in %d namespaces on %d simulated nodes: created at %.0f/s, all Ready after %s (p50 %s p99 %s per sandbox); "+
			"manager peak RSS %d MiB, CPU %s (%.1f s per 1,000); %.2f API requests per sandbox (%.2f writes); "+
			"steady-state reconcile p99 %s over %d reconciles; one more Sandbox Ready in %s with %d existing; all deleted in %s, nothing left; load %s",
			n, tenants, nodes, r.createsPerSec, r.allReady.Round(time.Millisecond), r.readyP50, r.readyP99,
			mgr.peakRSS(b)>>20, r.cpu.Round(100*time.Millisecond), r.cpu.Seconds()/float64(n)*1000, r.requestsPerSandbox, r.writesPerSandbox,
			r.reconcileP99, r.steadyReconciles, r.oneMore.Round(time.Millisecond), n, r.deleteAll.Round(time.Millisecond), benchstat.LoadAvg())
	}
}

type scaleResult struct {
	createsPerSec                        float64
	allReady, oneMore, deleteAll         time.Duration
	readyP50, readyP99, reconcileP99     time.Duration
	cpu                                  time.Duration
	requestsPerSandbox, writesPerSandbox float64
	steadyReconciles                     int
}

func runScale(b *testing.B, ctx context.Context, c client.WithWatch, cfg *rest.Config, mgr *process, scrape func() string, namespaces []string, n int) scaleResult {
	var r scaleResult
	ready := watchReady(b, ctx, c)
	reqBefore, cpuBefore := apiRequests(b, cfg), mgr.cpuTime(b)
	created := make([]time.Time, n)
	begin := time.Now()
	parallel(b, n, 32, func(i int) error {
		created[i] = time.Now()
		return c.Create(ctx, newSandbox(namespaces[i%len(namespaces)], fmt.Sprintf("s%05d", i)))
	})
	r.createsPerSec = float64(n) / time.Since(begin).Seconds()
	var lat []time.Duration
	for i := range n {
		at := ready.wait(b, fmt.Sprintf("%s/s%05d", namespaces[i%len(namespaces)], i), 30*time.Minute)
		lat = append(lat, at.Sub(created[i]))
		r.allReady = max(r.allReady, at.Sub(begin))
	}
	r.readyP50, r.readyP99 = benchstat.Percentile(lat, 50), benchstat.Percentile(lat, 99)
	reqAfter := apiRequests(b, cfg)
	r.requestsPerSandbox = (reqAfter.Writes + reqAfter.Other - reqBefore.Writes - reqBefore.Other) / float64(n)
	r.writesPerSandbox = (reqAfter.Writes - reqBefore.Writes) / float64(n)
	r.cpu = mgr.cpuTime(b) - cpuBefore

	// Steady state: nothing changes for 30 s, then one more sandbox.
	histBefore := reconcileHistogram(b, scrape())
	time.Sleep(30 * time.Second)
	start := time.Now()
	if err := c.Create(ctx, newSandbox(namespaces[0], "one-more")); err != nil {
		b.Fatal(err)
	}
	r.oneMore = ready.wait(b, namespaces[0]+"/one-more", 5*time.Minute).Sub(start)
	time.Sleep(5 * time.Second)
	r.reconcileP99, r.steadyReconciles = reconcileHistogram(b, scrape()).since(histBefore).quantile(0.99)

	start = time.Now()
	for _, ns := range namespaces {
		if err := c.DeleteAllOf(ctx, &airlockv1.Sandbox{}, client.InNamespace(ns)); err != nil {
			b.Fatal(err)
		}
	}
	for end := time.Now().Add(30 * time.Minute); ; time.Sleep(time.Second) {
		left := 0
		for _, list := range []client.ObjectList{&airlockv1.SandboxList{}, &corev1.PodList{}, &networkingv1.NetworkPolicyList{}} {
			if err := c.List(ctx, list, client.Limit(1)); err != nil {
				b.Fatal(err)
			}
			left += metaItems(list)
		}
		if left == 0 {
			break
		}
		if time.Now().After(end) {
			b.Fatal("objects left 30 minutes after deleting every Sandbox")
		}
	}
	r.deleteAll = time.Since(start)
	return r
}

func newSandbox(ns, name string) *airlockv1.Sandbox {
	return &airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: airlockv1.SandboxSpec{Image: "img:1", RuntimeClassName: ptr.To("gvisor"), Timeout: &metav1.Duration{Duration: 2 * time.Hour}}}
}

func metaItems(list client.ObjectList) int {
	switch l := list.(type) {
	case *airlockv1.SandboxList:
		return len(l.Items)
	case *corev1.PodList:
		return len(l.Items)
	case *networkingv1.NetworkPolicyList:
		return len(l.Items)
	}
	return 0
}

// readyWatch records when a watch first saw each Sandbox Ready.
type readyWatch struct {
	mu   sync.Mutex
	at   map[string]time.Time
	cond *sync.Cond
}

// watchReady follows Sandboxes until ctx ends. The API server may close a watch at any time (its timeout, or
// a watcher it finds too slow with 10,000 objects changing): it is then re-listed and watched again from the
// list's version, so no Ready is missed (one seen in a list is timed at the list).
func watchReady(b *testing.B, ctx context.Context, c client.WithWatch) *readyWatch {
	w := &readyWatch{at: map[string]time.Time{}}
	w.cond = sync.NewCond(&w.mu)
	seen := func(s *airlockv1.Sandbox) {
		if s.Status.Phase != airlockv1.PhaseReady {
			return
		}
		w.mu.Lock()
		if _, ok := w.at[s.Namespace+"/"+s.Name]; !ok {
			w.at[s.Namespace+"/"+s.Name] = time.Now()
			w.cond.Broadcast()
		}
		w.mu.Unlock()
	}
	consume := func(wi watch.Interface) {
		defer wi.Stop()
		for ev := range wi.ResultChan() {
			if s, ok := ev.Object.(*airlockv1.Sandbox); ok && ev.Type != watch.Deleted {
				seen(s)
			}
		}
	}
	wi, err := c.Watch(ctx, &airlockv1.SandboxList{}) // before anything is created
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		consume(wi)
		for ctx.Err() == nil {
			var list airlockv1.SandboxList
			if err := c.List(ctx, &list); err != nil {
				time.Sleep(time.Second)
				continue
			}
			for i := range list.Items {
				seen(&list.Items[i])
			}
			if wi, err = c.Watch(ctx, &airlockv1.SandboxList{}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}}); err != nil {
				time.Sleep(time.Second)
				continue
			}
			consume(wi)
		}
	}()
	return w
}

func (w *readyWatch) wait(b *testing.B, key string, timeout time.Duration) time.Time {
	deadline := time.Now().Add(timeout)
	stop := time.AfterFunc(timeout, func() { w.mu.Lock(); w.cond.Broadcast(); w.mu.Unlock() })
	defer stop.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		if at, ok := w.at[key]; ok {
			return at
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s not Ready after %s (%d others are)", key, timeout, len(w.at))
		}
		w.cond.Wait()
	}
}

func waitNodesReady(b *testing.B, c client.Client, want int) {
	for end := time.Now().Add(2 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		var nodes corev1.NodeList
		if err := c.List(context.Background(), &nodes); err != nil {
			b.Fatal(err)
		}
		ready := 0
		for _, n := range nodes.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue && len(n.Spec.Taints) == 0 {
					ready++
				}
			}
		}
		if ready >= want {
			return
		}
		if time.Now().After(end) {
			b.Fatalf("%d of %d simulated nodes Ready and untainted after 2 minutes: are kwok and the controller-manager running (their logs are in the test's temp dir)?", ready, want)
		}
	}
}

// installFinalizerPolicy installs config/admission as an install would and waits until it is in effect.
func installFinalizerPolicy(b *testing.B, c client.Client, kubeconfig string) {
	out, err := exec.Command(filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl"), "--kubeconfig", kubeconfig,
		"apply", "-f", filepath.Join("..", "..", "config", "admission", "sandbox-finalizer.yaml")).CombinedOutput()
	if err != nil {
		b.Fatalf("applying the finalizer policy: %v\n%s", err, out)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "policy-probe"}}
	if err := c.Create(context.Background(), ns); err != nil {
		b.Fatal(err)
	}
	for end := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		s := newSandbox(ns.Name, "probe")
		if err := c.Create(context.Background(), s, client.DryRunAll); err == nil && slices.Contains(s.Finalizers, "sandbox.airlock.dev/cleanup") {
			return
		}
		if time.Now().After(end) {
			b.Fatal("the finalizer policy has no effect after a minute")
		}
	}
}

// metricsScraper returns a function that reads the manager's metrics with a service account token the API
// server authorizes for GET /metrics, as a Prometheus would.
func metricsScraper(b *testing.B, ctx context.Context, cfg *rest.Config, c client.Client, addr string) func() string {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "scraper"}}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "scraper"},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "scraper"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "scraper"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "default", Name: "scraper"}}}
	for _, o := range []client.Object{sa, role, binding} {
		if err := c.Create(ctx, o); err != nil {
			b.Fatal(err)
		}
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, "scraper", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the manager's self-signed serving cert on loopback
	return func() string {
		for end := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
			req, _ := http.NewRequest(http.MethodGet, "https://"+addr+"/metrics", nil)
			req.Header.Set("Authorization", "Bearer "+tr.Status.Token)
			resp, err := hc.Do(req)
			if err == nil {
				body, rerr := io.ReadAll(resp.Body)
				resp.Body.Close()
				if rerr == nil && resp.StatusCode == http.StatusOK {
					return string(body)
				}
				err = fmt.Errorf("%s: %.200s", resp.Status, body)
			}
			if time.Now().After(end) {
				b.Fatalf("manager metrics: %v", err)
			}
		}
	}
}

// histogram is the sandbox controller's controller_runtime_reconcile_time_seconds: cumulative counts by upper
// bound.
type histogram struct {
	bounds []float64
	counts []float64
}

func reconcileHistogram(b *testing.B, text string) histogram {
	var h histogram
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "controller_runtime_reconcile_time_seconds_bucket{") || !strings.Contains(line, `controller="sandbox"`) {
			continue
		}
		i := strings.Index(line, `le="`)
		j := strings.Index(line[i+4:], `"`)
		le, v := line[i+4:i+4+j], line[strings.LastIndexByte(line, ' ')+1:]
		bound := math.Inf(1)
		if le != "+Inf" {
			bound, _ = strconv.ParseFloat(le, 64)
		}
		count, _ := strconv.ParseFloat(v, 64)
		h.bounds, h.counts = append(h.bounds, bound), append(h.counts, count)
	}
	if len(h.bounds) == 0 {
		b.Fatal("the manager's metrics have no reconcile histogram for the sandbox controller")
	}
	return h
}

func (h histogram) since(before histogram) histogram {
	out := histogram{bounds: h.bounds, counts: slices.Clone(h.counts)}
	for i := range out.counts {
		if i < len(before.counts) {
			out.counts[i] -= before.counts[i]
		}
	}
	return out
}

// quantile is the upper bound of the bucket that holds the q-th quantile, and how many observations there were.
func (h histogram) quantile(q float64) (time.Duration, int) {
	total := h.counts[len(h.counts)-1]
	for i, c := range h.counts {
		if c >= q*total {
			return time.Duration(h.bounds[i] * float64(time.Second)), int(total)
		}
	}
	return 0, int(total)
}

func apiRequests(b *testing.B, cfg *rest.Config) benchstat.Requests {
	r, err := benchstat.APIRequests(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return r
}

// process is a child of the test: it dies with it, its output goes to a log in the test's temp dir.
type process struct{ cmd *exec.Cmd }

func start(b *testing.B, dir, name, bin string, args ...string) *process {
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		b.Fatal(err)
	}
	cmd := child.DieWithParent(exec.Command(bin, args...))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		b.Fatalf("starting %s: %v", name, err)
	}
	var exited atomic.Bool
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); exited.Store(true); close(done) }()
	b.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logf.Close()
	})
	time.Sleep(200 * time.Millisecond)
	if exited.Load() {
		log, _ := os.ReadFile(logf.Name())
		b.Fatalf("%s exited at once:\n%s", name, tail(string(log), 2000))
	}
	return &process{cmd: cmd}
}

func (p *process) peakRSS(b *testing.B) int64 {
	v, err := benchstat.PeakRSS(p.cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	return v
}

func (p *process) cpuTime(b *testing.B) time.Duration {
	v, err := benchstat.CPUTime(p.cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	return v
}

func parallel(b *testing.B, n, workers int, f func(i int) error) {
	var wg sync.WaitGroup
	var next atomic.Int64
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
}

func freeAddr(b *testing.B) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
