package controller

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"airlock.dev/airlock/internal/sandbox"
	"airlock.dev/airlock/internal/testutil/child"
)

// benchCount is how many sandboxes BenchmarkCreateSandboxes creates (AIRLOCK_BENCH_COUNT overrides).
func benchCount() int {
	if n, err := strconv.Atoi(os.Getenv("AIRLOCK_BENCH_COUNT")); err == nil && n > 0 {
		return n
	}
	return 1000
}

// BenchmarkCreateSandboxes creates N Sandboxes and waits until all have their pod and policy, with the real
// manager binary running as its own process against envtest; as the baseline, the same run first creates N
// pods + policies directly with client-go at the same concurrency. It reports the ratio and the manager's
// peak RSS. Run with `make bench-envtest`.
func BenchmarkCreateSandboxes(b *testing.B) {
	_, c := startEnv(b)
	n, workers := benchCount(), 8
	ctx := context.Background()
	for b.Loop() {
		baseNS := newNamespace(b, c)
		start := time.Now()
		parallel(b, n, workers, func(i int) error {
			s := makeSandbox(baseNS, fmt.Sprintf("s%d", i)).image("img:1").obj()
			r, err := sandbox.Resolve(s, nil, sandbox.DefaultDefaults())
			if err != nil {
				return err
			}
			np := sandbox.BuildNetworkPolicy(s, r.Network, nil)
			if err := c.Create(ctx, np); err != nil {
				return err
			}
			return c.Create(ctx, sandbox.BuildPod(s, r, sandbox.DefaultPodOptions("init:1")))
		})
		direct := time.Since(start)

		mgr := startManagerProcess(b)
		ns := newNamespace(b, c)
		// Warm up: the manager's caches are synced once it reconciles a first sandbox.
		if err := c.Create(ctx, makeSandbox(ns, "warmup").image("img:1").obj()); err != nil {
			b.Fatal(err)
		}
		waitCount(b, c, ns, 1, time.Minute)

		start = time.Now()
		parallel(b, n, workers, func(i int) error {
			return c.Create(ctx, makeSandbox(ns, fmt.Sprintf("s%d", i)).image("img:1").obj())
		})
		created := time.Since(start)
		waitCount(b, c, ns, n+1, 10*time.Minute)
		viaSandboxes := time.Since(start)
		peak := mgr.peakRSS(b)

		ratio := viaSandboxes.Seconds() / direct.Seconds()
		b.ReportMetric(direct.Seconds(), "direct-s")
		b.ReportMetric(viaSandboxes.Seconds(), "sandbox-s")
		b.ReportMetric(ratio, "ratio")
		b.ReportMetric(float64(peak)/(1<<20), "manager-peak-MiB")
		b.Logf("%d pods+policies directly: %s; %d Sandboxes -> pods+policies: %s (objects created in %s); ratio %.2f; manager peak RSS %d MiB",
			n, direct.Round(time.Millisecond), n, viaSandboxes.Round(time.Millisecond), created.Round(time.Millisecond), ratio, peak>>20)
	}
}

func parallel(b *testing.B, n, workers int, f func(i int) error) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	next := make(chan int)
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := f(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for i := range n {
		select {
		case next <- i:
		case err := <-errs:
			close(next)
			b.Fatal(err)
		}
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
}

// waitCount polls (metadata only, to stay light) until the namespace holds want pods and want policies.
func waitCount(b *testing.B, c client.Client, ns string, want int, timeout time.Duration) {
	b.Helper()
	deadline := time.Now().Add(timeout)
	for {
		pods, pols := metaList(b, c, ns, "Pod", corev1.SchemeGroupVersion), metaList(b, c, ns, "NetworkPolicy", networkingv1.SchemeGroupVersion)
		if pods >= want && pols >= want {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("after %s: %d pods and %d policies, want %d each", timeout, pods, pols, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func metaList(b *testing.B, c client.Client, ns, kind string, gv schema.GroupVersion) int {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(gv.WithKind(kind + "List"))
	if err := c.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		b.Fatalf("listing %s: %v", kind, err)
	}
	return len(list.Items)
}

type managerProcess struct{ cmd *exec.Cmd }

// startManagerProcess builds cmd/manager and runs it against envtest until the benchmark ends.
func startManagerProcess(b *testing.B) *managerProcess {
	b.Helper()
	dir := b.TempDir()
	bin := filepath.Join(dir, "manager")
	if out, err := exec.Command("go", "build", "-o", bin, "airlock.dev/airlock/cmd/manager").CombinedOutput(); err != nil {
		b.Fatalf("building manager: %v\n%s", err, out)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := child.DieWithParent(exec.Command(bin, "--kubeconfig", kubeconfig, "--leader-elect=false", "--metrics-bind-address=0",
		"--health-probe-bind-address=0", "--workers=8", "--zap-log-level=error",
		"--kube-api-qps=1000", "--kube-api-burst=2000"))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
		}
	})
	return &managerProcess{cmd: cmd}
}

// peakRSS reads the process's high-water resident set size (VmHWM) from /proc.
func (m *managerProcess) peakRSS(b *testing.B) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", m.cmd.Process.Pid))
	if err != nil {
		b.Fatalf("reading manager status: %v", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	b.Fatal("no VmHWM in /proc status")
	return 0
}
