package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/podexec"
)

// pipEnv points pip at the PyPI stand-in (plain HTTP, so trusted) and lets it install for the sandbox user.
const pipEnv = "PIP_INDEX_URL=http://" + pypiHost + "/simple/ PIP_TRUSTED_HOST=" + pypiHost + " PIP_BREAK_SYSTEM_PACKAGES=1 PIP_NO_CACHE_DIR=1 "

const pipInstall = pipEnv + "pip install --disable-pip-version-check " + demoPackage

const npmInstall = "cd $(mktemp -d) && npm install --no-audit --no-fund --registry http://" + npmHost + "/ " + demoPackage

// TestEgressProxy: Restricted sandboxes with an allowlist install packages through the egress proxy from
// stand-in indexes on this machine, reach nothing else (directly or through the proxy), and mode None fails
// fast. The proxy runs as a pod, as installed; it resolves names only from its hosts list.
func TestEgressProxy(t *testing.T) {
	startTestHosts(t)
	startPackageHosts(t)
	proxyIP := deployEgressProxy(t)
	ns := newTenant(t)
	ctx := context.Background()
	tmpl := &airlockv1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "packages"},
		Spec: airlockv1.SandboxTemplateSpec{Image: sandboxImage, RuntimeClassName: "gvisor",
			Network: &airlockv1.NetworkSpec{Mode: airlockv1.NetworkRestricted, Allow: []string{pypiHost, npmHost, privateHost + ":443"}}}}
	if err := k8s.Create(ctx, tmpl); err != nil {
		t.Fatal(err)
	}
	restricted := airlockv1.NetworkSpec{Mode: airlockv1.NetworkRestricted}
	createSandbox(t, ns, "pkgs", withTemplate("packages"), withNetwork(restricted))
	pipOnly := restricted
	pipOnly.Allow = []string{pypiHost}
	createSandbox(t, ns, "pip-only", withTemplate("packages"), withNetwork(pipOnly))
	createSandbox(t, ns, "none")
	for _, n := range []string{"pkgs", "pip-only", "none"} {
		waitReady(t, ns, n)
	}
	proxyAddr := net.JoinHostPort(proxyIP, strconv.Itoa(egressProxyPort))

	t.Run("isolation proven with the proxy as positive control", func(t *testing.T) {
		s, _ := getSandbox(ns, "pkgs")
		if ev := s.Status.IsolationEvidence; ev == nil || ev.ProxyTarget != proxyAddr {
			t.Errorf("evidence %+v: want the gate to have reached %s", s.Status.IsolationEvidence, proxyAddr)
		}
		if got := conditionStatus(s, airlockv1.ConditionNetworkIsolated); got != "True/Isolated" {
			t.Errorf("NetworkIsolated %s: %s", got, describe(s))
		}
	})

	t.Run("pip and npm install from allowed indexes", func(t *testing.T) {
		res := sh(t, ns, "pkgs", pipInstall+" && python3 -c 'import airlock_e2e_demo; print(airlock_e2e_demo.VALUE)'", 2*time.Minute)
		if res.ExitCode != 0 || !strings.Contains(res.Stdout, demoValue) {
			t.Errorf("pip install: exit %d\nstdout %s\nstderr %s", res.ExitCode, res.Stdout, res.Stderr)
		}
		res = sh(t, ns, "pkgs", npmInstall+" && node -e 'console.log(require(\""+demoPackage+"\"))'", 2*time.Minute)
		if res.ExitCode != 0 || !strings.Contains(res.Stdout, demoValue) {
			t.Errorf("npm install: exit %d\nstdout %s\nstderr %s", res.ExitCode, res.Stdout, res.Stderr)
		}
	})

	t.Run("a host not on the list fails fast with the proxy's reason", func(t *testing.T) {
		start := time.Now()
		res := sh(t, ns, "pip-only", npmInstall, 2*time.Minute)
		took := time.Since(start)
		out := res.Stdout + res.Stderr
		t.Logf("npm install of a host not on the list: exit %d after %s:\n%s", res.ExitCode, took.Round(time.Millisecond), tail(out, 600))
		if res.ExitCode == 0 || !strings.Contains(out, "403") {
			t.Errorf("npm install from %s in a sandbox allowed only %s: exit %d, want a 403", npmHost, pypiHost, res.ExitCode)
		}
		if took > 20*time.Second {
			t.Errorf("the refusal took %s", took)
		}
		if res := sh(t, ns, "pip-only", pipInstall, 2*time.Minute); res.ExitCode != 0 {
			t.Errorf("pip install from the listed index: exit %d\n%s", res.ExitCode, res.Stderr)
		}
		eventually(t, 20*time.Second, "EgressDenied and EgressAllowed events", func() error {
			denied, err := sandboxEvents(ctx, ns, "pip-only", "EgressDenied")
			if err != nil {
				return err
			}
			allowed, err := sandboxEvents(ctx, ns, "pip-only", "EgressAllowed")
			if err != nil {
				return err
			}
			if len(denied) == 0 || len(allowed) == 0 || !strings.Contains(denied[0].Note, npmHost+":80") {
				return fmt.Errorf("%d denied, %d allowed events", len(denied), len(allowed))
			}
			return nil
		})
	})

	t.Run("the proxy refuses private addresses by literal and by name", func(t *testing.T) {
		for target, want := range map[string]string{
			"10.96.0.1:443":               "is not on sandbox",
			"169.254.169.254:80":          "is not on sandbox",
			privateHost + ":443":          "resolves to blocked address: 10.96.0.1",
			nodeIP + ":10250":             "is not on sandbox",
			"airlock-e2e.test:443":        "is not on sandbox",
			net.JoinHostPort(pkgIP, "80"): "is not on sandbox",
		} {
			line := connectThroughProxy(t, ns, "pkgs", proxyAddr, target)
			if !strings.Contains(line, " 403 ") || !strings.Contains(line, want) {
				t.Errorf("CONNECT %s: %q, want a 403 saying %q", target, line, want)
			}
		}
	})

	t.Run("nothing but the proxy is reachable directly", func(t *testing.T) {
		targetIP := startTargetPod(t)
		var dnsPod corev1.PodList
		if err := k8s.List(ctx, &dnsPod, client.InNamespace("kube-system"), client.MatchingLabels{"k8s-app": "kube-dns"}); err != nil || len(dnsPod.Items) == 0 {
			t.Fatalf("cluster DNS pods: %v (%d)", err, len(dnsPod.Items))
		}
		dests := []struct {
			name string
			host string
			port int
		}{
			{"the package stand-in", pkgIP, 80}, {"the internet stand-in", internetIP, 80}, {"the metadata stand-in", metadataIP, 80},
			{"the node's kubelet", nodeIP, 10250}, {"the node's API server", nodeIP, 6443}, {"the API server's service IP", "10.96.0.1", 443},
			{"another pod", targetIP, 8080}, {"the cluster DNS service (TCP)", "10.96.0.10", 53},
			{"a cluster DNS pod (TCP)", dnsPod.Items[0].Status.PodIP, 53},
		}
		for _, d := range dests {
			if open, detail := probe(t, ns, "pkgs", d.host, d.port); open {
				t.Errorf("restricted sandbox reached %s (%s:%d) directly: %s", d.name, d.host, d.port, detail)
			}
		}
		if open, detail := probe(t, ns, "pkgs", proxyIP, egressProxyPort); !open {
			t.Errorf("positive control: the restricted sandbox cannot reach the proxy: %s", detail)
		}
		proxyPod := waitProxyServing(t)
		for _, host := range []string{proxyIP, proxyPod.Status.PodIP} {
			if open, detail := probe(t, ns, "none", host, egressProxyPort); open {
				t.Errorf("a mode None sandbox reached the proxy at %s: %s", host, detail)
			}
		}
		res := sh(t, ns, "pkgs", dnsScript, 30*time.Second)
		if res.ExitCode != 0 || !strings.Contains(res.Stdout, "lookup failed") || !strings.Contains(res.Stdout, "udp no answer") {
			t.Errorf("DNS from the sandbox: exit %d %q %q", res.ExitCode, res.Stdout, res.Stderr)
		}
	})

	t.Run("mode None says so, fast", func(t *testing.T) {
		for _, c := range []struct{ cmd, want string }{
			{"pip install --disable-pip-version-check --break-system-packages requests", "sandbox-has-no-network"},
			{"npm view left-pad", "sandbox-has-no-network"},
		} {
			start := time.Now()
			res := sh(t, ns, "none", c.cmd, time.Minute)
			took := time.Since(start)
			out := res.Stdout + res.Stderr
			t.Logf("%s: exit %d after %s:\n%s", c.cmd, res.ExitCode, took.Round(time.Millisecond), tail(out, 400))
			if res.ExitCode == 0 || !strings.Contains(out, c.want) {
				t.Errorf("%s: exit %d, output does not say the network is off", c.cmd, res.ExitCode)
			}
			if took > 10*time.Second {
				t.Errorf("%s took %s to fail", c.cmd, took)
			}
		}
	})

	t.Run("the Python SDK's restricted sandbox on the default template installs from the allowed index", func(t *testing.T) {
		g := gateway(t)
		gwNS, key := gatewayTenant(t, 5)
		var def airlockv1.SandboxTemplate
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: gwNS, Name: "python-node"}, &def); err != nil {
			t.Fatal(err)
		}
		// The chart's default template: no network unless asked, and an allowlist for those that ask.
		def.Spec.Network = &airlockv1.NetworkSpec{Mode: airlockv1.NetworkNone, Allow: []string{pypiHost}}
		if err := k8s.Update(ctx, &def); err != nil {
			t.Fatal(err)
		}
		script := fmt.Sprintf(`from airlock import Sandbox
with Sandbox.create(network="restricted", timeout_minutes=10) as sbx:
    r = sbx.exec(%q, timeout_seconds=120)
    print("pip", r.exit_code, r.stdout.strip().splitlines()[-1:])
    r = sbx.exec("curl -sSf -m 10 -o /dev/null http://%s/%s", timeout_seconds=30)
    print("npm", r.exit_code, r.stderr.strip())
`, pipInstall+" -q && python3 -c 'import airlock_e2e_demo; print(airlock_e2e_demo.VALUE)'", npmHost, demoPackage)
		root, err := filepath.Abs("../..")
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("/usr/bin/python3", "-c", script)
		cmd.Env = append(os.Environ(), "AIRLOCK_API_URL="+g.base, "AIRLOCK_API_KEY="+key,
			"PYTHONPATH="+filepath.Join(root, "sdk/python"), "PYTHONDONTWRITEBYTECODE=1")
		out, err := cmd.CombinedOutput()
		t.Logf("SDK:\n%s", out)
		if err != nil || !strings.Contains(string(out), "pip 0 ['"+demoValue+"']") ||
			!strings.Contains(string(out), "npm 22") && !strings.Contains(string(out), "403") {
			t.Errorf("want pip to install and the unlisted host refused (%v)", err)
		}
	})

	t.Run("memory stays bounded with 100 concurrent downloads", func(t *testing.T) {
		pod := waitProxyServing(t)
		metrics := "http://" + net.JoinHostPort(pod.Status.PodIP, "9090") + "/metrics"
		before := scrape(t, metrics, "process_resident_memory_bytes")
		var peak float64
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				case <-time.After(200 * time.Millisecond):
				}
				if v, err := scrapeValue(metrics, "process_resident_memory_bytes"); err == nil && v > peak {
					peak = v
				}
			}
		})
		res := sh(t, ns, "pkgs", `pids=; for i in $(seq 100); do curl -sS -o /dev/null --max-time 240 --limit-rate 2M http://`+pypiHost+`/medium & pids="$pids $!"; done; fails=0; n=0; for p in $pids; do n=$((n+1)); wait $p || fails=$((fails+1)); done; echo "waited=$n failed=$fails"`, 5*time.Minute)
		close(done)
		wg.Wait()
		t.Logf("proxy RSS %.0f MiB before, peak %.0f MiB during 100 concurrent 8 MiB downloads; %s", before/(1<<20), peak/(1<<20), strings.TrimSpace(res.Stdout))
		// $(jobs -p) is empty in dash's command substitution: wait for the pids themselves, all 100 of them.
		if res.ExitCode != 0 || !strings.Contains(res.Stdout, "waited=100 failed=0") {
			t.Errorf("downloads: exit %d %q %q", res.ExitCode, res.Stdout, tail(res.Stderr, 400))
		}
		if peak > 128<<20 {
			t.Errorf("the proxy's RSS peaked at %.0f MiB", peak/(1<<20))
		}
		// A chunk is counted right after it is written: the last ones may land just after the client finished.
		eventually(t, 10*time.Second, "the proxy counted every byte", func() error {
			got := scrape(t, metrics, `airlock_egress_bytes_total{direction="received",namespace="`+ns+`",sandbox="pkgs"}`)
			if got < 100*(8<<20) {
				return fmt.Errorf("received bytes counted %.0f, want at least 100 x 8 MiB", got)
			}
			return nil
		})
	})

	t.Run("a proxy restart mid-download is a clear error, not a hang", func(t *testing.T) {
		pod := waitProxyServing(t)
		type outcome struct {
			res  *podexec.Result
			took time.Duration
			err  error
		}
		result := make(chan outcome, 1)
		go func() {
			start := time.Now()
			req, err := target(context.Background(), ns, "pkgs")
			if err != nil {
				result <- outcome{nil, time.Since(start), err}
				return
			}
			req.Shell, req.Timeout = "curl -sS -o /dev/null --limit-rate 1M http://"+pypiHost+"/big", 3*time.Minute
			res, err := engine.Run(context.Background(), req)
			result <- outcome{res, time.Since(start), err}
		}()
		time.Sleep(4 * time.Second)
		deleted := time.Now()
		if err := k8s.Delete(ctx, pod); err != nil {
			t.Fatal(err)
		}
		o := <-result
		if o.err != nil {
			t.Fatal(o.err)
		}
		after := time.Since(deleted)
		t.Logf("download ended %s after the proxy pod's deletion: exit %d %q", after.Round(time.Millisecond), o.res.ExitCode, strings.TrimSpace(o.res.Stderr))
		if o.res.ExitCode == 0 || strings.TrimSpace(o.res.Stderr) == "" {
			t.Errorf("the cut download did not fail with a message: exit %d %q", o.res.ExitCode, o.res.Stderr)
		}
		if after > 30*time.Second {
			t.Errorf("the download took %s to fail after the proxy went away", after)
		}
		waitProxyServing(t)
		eventually(t, time.Minute, "installs work through the new proxy pod (same Service IP)", func() error {
			if res := sh(t, ns, "pkgs", pipInstall+" --force-reinstall", 2*time.Minute); res.ExitCode != 0 {
				return fmt.Errorf("pip exit %d: %s", res.ExitCode, tail(res.Stderr, 300))
			}
			return nil
		})
	})
}

// dnsScript shows a sandbox has no DNS: a lookup fails at once, and a query sent straight to the cluster DNS
// service gets no answer.
const dnsScript = `python3 - <<'EOF'
import socket, time
t = time.monotonic()
try:
    socket.getaddrinfo("kubernetes.default.svc.cluster.local", 443)
    print("lookup answered")
except Exception as e:
    print("lookup failed after %.2fs: %s" % (time.monotonic() - t, e))
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(2)
q = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + b"\x0akubernetes\x07default\x03svc\x07cluster\x05local\x00" + b"\x00\x01\x00\x01"
s.sendto(q, ("10.96.0.10", 53))
try:
    s.recvfrom(512)
    print("udp answered")
except Exception as e:
    print("udp no answer: %s" % e)
EOF`

// connectThroughProxy sends CONNECT target from inside the sandbox to the proxy and returns the status line.
func connectThroughProxy(t *testing.T, ns, name, proxyAddr, target string) string {
	t.Helper()
	host, port, _ := net.SplitHostPort(proxyAddr)
	script := fmt.Sprintf(`import socket
s = socket.create_connection((%q, %s), 5)
s.sendall(b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n")
print(s.makefile("rb").readline().decode().strip())`, host, port, target, target)
	res := sh(t, ns, name, "python3 -c '"+script+"'", 30*time.Second)
	if res.ExitCode != 0 {
		t.Fatalf("CONNECT %s: exit %d %q", target, res.ExitCode, res.Stderr)
	}
	return strings.TrimSpace(res.Stdout)
}

func scrape(t *testing.T, url, series string) float64 {
	t.Helper()
	v, err := scrapeValue(url, series)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// scrapeValue reads one series (name with its labels as exposed, sorted) from a Prometheus text endpoint.
func scrapeValue(url, series string) (float64, error) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(rest), 64)
		}
	}
	return 0, fmt.Errorf("%s: no series %s", url, series)
}
