package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/podexec"
	"airlock.dev/airlock/internal/runwrap"
	"airlock.dev/airlock/internal/sandbox"
	"airlock.dev/airlock/internal/testutil/benchstat"
)

// TestManagerKilledRepeatedlyLosesNothing SIGKILLs the manager every 2–4 s (and restarts it at once) while 16
// sandboxes are created one every 3 s, at most 4 alive at a time, each used (a command runs in it once it is
// Ready) and left to expire after 30 s. They request 50m CPU instead of small's 250m. The cap keeps the test
// about the manager, not the node: a gVisor pod's start and teardown take ~3 CPU-seconds, and with 6-10 alive
// the 2-core node was so loaded that most sandboxes were not Ready before they expired and pods took 10 s to
// terminate. Nothing may outlive its expiry: each Sandbox, its pod and its policy are gone by expiry + 20 s (pods took up to 15 s to terminate on a loaded node);
// no sandbox ever has two pods; nothing is left without its Sandbox; and usage is recorded exactly once per
// sandbox (one Deleted event), whichever step a kill interrupted.
func TestManagerKilledRepeatedlyLosesNothing(t *testing.T) {
	ns := newTenant(t)
	ctx := context.Background()
	const (
		n        = 16
		maxAlive = 4
		ttl      = 30 * time.Second
		every    = 3 * time.Second
		lateness = 20 * time.Second
	)

	// The killer owns the manager while it runs; mgr is the survivor afterwards, whatever happens.
	stopKiller, killerDone := make(chan struct{}), make(chan int, 1)
	killerErrs := make(chan error, 1)
	go func() {
		kills := 0
		defer func() { killerDone <- kills }()
		for {
			select {
			case <-stopKiller:
				return
			case <-time.After(2*time.Second + rand.N(2*time.Second)):
			}
			mgr.kill()
			kills++
			m, err := startManager()
			if err != nil {
				killerErrs <- fmt.Errorf("restarting the manager after kill %d: %w", kills, err)
				return
			}
			mgr = m
		}
	}()
	var kills int
	stop := func() {
		if stopKiller != nil {
			close(stopKiller)
			stopKiller = nil
			kills = <-killerDone
		}
	}
	defer stop()

	type tracked struct {
		created, deadline, gone time.Time
		deleting                time.Time // first seen with a deletionTimestamp
		readyAfter              time.Duration
		used, running           bool
		execErr                 string
	}
	boxes := map[string]*tracked{}
	type execResult struct {
		name string
		ok   bool
		err  string
	}
	used := make(chan execResult, 1000) // a failed command is retried while the sandbox is Ready
	var problems []string
	problem := func(format string, args ...any) {
		if len(problems) < 20 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	end := time.Now().Add(n*(ttl+30*time.Second)/maxAlive + 2*time.Minute) // a sandbox lives ~ttl + 30 s, Ready and gone included
	next := time.Now()
	for created := 0; ; time.Sleep(250 * time.Millisecond) {
		select {
		case err := <-killerErrs:
			t.Fatal(err)
		default:
		}
		now := time.Now()
		alive := 0
		for _, b := range boxes {
			if b.gone.IsZero() {
				alive++
			}
		}
		if created < n && !now.Before(next) && alive < maxAlive {
			name := fmt.Sprintf("k%02d", created)
			createSandbox(t, ns, name, withTimeout(ttl), func(s *airlockv1.Sandbox) {
				s.Spec.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m")}}
			})
			boxes[name] = &tracked{created: now}
			created++
			next = now.Add(every) // from now: a creation the cap held does not make a burst
		}
		for len(used) > 0 {
			r := <-used
			boxes[r.name].used, boxes[r.name].running = r.ok, false
			if !r.ok {
				boxes[r.name].execErr = r.err
			}
		}
		var pods corev1.PodList
		if err := k8s.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		perSandbox := map[string]int{}
		for _, p := range pods.Items {
			perSandbox[p.Labels[sandbox.LabelName]]++
		}
		left := 0
		for name, b := range boxes {
			if perSandbox[name] > 1 {
				problem("%s has %d pods", name, perSandbox[name])
			}
			if !b.gone.IsZero() {
				continue
			}
			s, err := getSandbox(ns, name)
			switch {
			case apierrors.IsNotFound(err):
				podErr := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.Pod{})
				npErr := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &networkingv1.NetworkPolicy{})
				if apierrors.IsNotFound(podErr) && apierrors.IsNotFound(npErr) {
					b.gone = now
					continue
				}
			case err != nil:
				t.Fatal(err)
			default:
				if b.deadline.IsZero() {
					b.deadline = s.CreationTimestamp.Add(ttl)
				}
				if s.DeletionTimestamp != nil && b.deleting.IsZero() {
					b.deleting = now
				}
				if s.Status.Phase == airlockv1.PhaseReady && !b.used && !b.running {
					b.running = true
					if b.readyAfter == 0 {
						b.readyAfter = now.Sub(b.created)
					}
					go func() {
						cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
						defer cancel()
						req, err := target(cctx, ns, name)
						var res *podexec.Result
						if err == nil {
							req.Shell, req.Timeout = "echo "+name+" > state && cat state", 20*time.Second
							res, err = engine.Run(cctx, req)
						}
						r := execResult{name: name, ok: err == nil && res.ExitCode == 0 && strings.TrimSpace(res.Stdout) == name}
						if err != nil {
							r.err = err.Error()
						} else if !r.ok {
							r.err = fmt.Sprintf("exit %d outcome %s stdout %q stderr %q", res.ExitCode, res.Outcome, res.Stdout, res.Stderr)
						}
						used <- r
					}()
				}
			}
			left++
			if !b.deadline.IsZero() && now.After(b.deadline.Add(lateness)) {
				problem("%s (or its pod or policy) still there %s after its expiry", name, now.Sub(b.deadline).Round(time.Second))
				b.gone = now // reported once
			}
		}
		if created == n && left == 0 {
			break
		}
		if now.After(end) {
			t.Fatalf("%d of %d sandboxes still there at the end of the test", left, n)
		}
	}
	stop()

	var late, ready, expiring, finalizing []time.Duration
	var notUsed []string
	for name, b := range boxes {
		late = append(late, b.gone.Sub(b.deadline))
		ready = append(ready, b.readyAfter)
		if !b.deleting.IsZero() {
			expiring, finalizing = append(expiring, b.deleting.Sub(b.deadline)), append(finalizing, b.gone.Sub(b.deleting))
		}
		if !b.used {
			notUsed = append(notUsed, fmt.Sprintf("%s (Ready after %s; last error: %s)", name, b.readyAfter.Round(time.Millisecond), b.execErr))
		}
	}
	t.Logf("%d manager kills; %d sandboxes; Ready after p50 %s, max %s; gone after their expiry: p50 %s, max %s (deleting after p50 %s, max %s; then gone after p50 %s, max %s)",
		kills, n, benchstat.Percentile(ready, 50), benchstat.Percentile(ready, 100), benchstat.Percentile(late, 50), benchstat.Percentile(late, 100),
		benchstat.Percentile(expiring, 50), benchstat.Percentile(expiring, 100), benchstat.Percentile(finalizing, 50), benchstat.Percentile(finalizing, 100))
	if kills < 20 {
		problem("only %d manager kills: the test did not test much", kills)
	}
	if len(notUsed) > 0 {
		problem("%d sandboxes never ran their command: %s", len(notUsed), strings.Join(notUsed, "; "))
	}
	for kind, list := range map[string]client.ObjectList{"pods": &corev1.PodList{}, "policies": &networkingv1.NetworkPolicyList{}} {
		if err := k8s.List(ctx, list, client.InNamespace(ns), client.HasLabels{sandbox.LabelName}); err != nil {
			t.Fatal(err)
		}
		if items := listLen(list); items > 0 {
			problem("%d %s left without their Sandbox", items, kind)
		}
	}
	// Reported with the rest, not fatally: a failure here must not hide the problems above.
	var usageErr error
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		if usageErr = oneUsageRecordEach(ctx, ns, boxes); usageErr == nil || time.Now().After(deadline) {
			break
		}
	}
	if usageErr != nil {
		problem("exactly one usage record per sandbox: not true after 30s: %v", usageErr)
	}
	if len(problems) > 0 {
		t.Errorf("with the manager SIGKILLed %d times:\n%s", kills, strings.Join(problems, "\n"))
	}
}

// oneUsageRecordEach checks that each named sandbox has exactly one Deleted event that records its usage, and
// names every sandbox that has not.
func oneUsageRecordEach[T any](ctx context.Context, ns string, boxes map[string]T) error {
	var wrong []string
	for name := range boxes {
		evs, err := sandboxEvents(ctx, ns, name, "Deleted")
		if err != nil {
			return err
		}
		if len(evs) != 1 || !strings.Contains(evs[0].Note, "sandbox-seconds") {
			wrong = append(wrong, fmt.Sprintf("%s: %d Deleted events", name, len(evs)))
		}
	}
	if len(wrong) > 0 {
		sort.Strings(wrong)
		return fmt.Errorf("want 1 each: %s", strings.Join(wrong, ", "))
	}
	return nil
}

func listLen(list client.ObjectList) int {
	switch l := list.(type) {
	case *corev1.PodList:
		return len(l.Items)
	case *networkingv1.NetworkPolicyList:
		return len(l.Items)
	}
	return -1
}

// TestGatewayKilledDuringCommands SIGKILLs a gateway while 6 commands run through it in 2 sandboxes. Each of
// its 6 callers gets an error, at once, never a hang or a made-up result. The commands follow the rule for a
// run whose caller vanished (docs/runtimes.md): each runs on for its reattach grace (30 s) for a gateway to
// attach to it, ends on its own meanwhile if it can, and is killed at the grace's end if nobody attached. A
// second gateway keeps serving the same tenant meanwhile, the sandboxes stay usable, and a background process
// started through the dead gateway is re-attached through the other.
func TestGatewayKilledDuringCommands(t *testing.T) {
	a, err := startGateway("--max-concurrent-execs=40")
	if err != nil {
		t.Fatal(err)
	}
	defer a.stop()
	b, err := startGateway("--max-concurrent-execs=40")
	if err != nil {
		t.Fatal(err)
	}
	defer b.stop()
	_, key := gatewayTenant(t, 10)

	const boxes, perBox, shortPerBox = 2, 3, 2
	ids := make([]string, boxes)
	for i := range ids {
		status, created := a.call(t, key, "POST", "/v1/sandboxes", map[string]any{"size": "small", "timeout_minutes": 15})
		if status != http.StatusCreated || created["status"] != "ready" {
			t.Fatalf("create: status %d %v", status, created)
		}
		ids[i] = str(t, created, "id")
	}
	status, bg := a.call(t, key, "POST", "/v1/sandboxes/"+ids[0]+"/exec",
		map[string]any{"command": "for i in $(seq 1 16); do echo tick $i; sleep 0.5; done", "background": true})
	if status != http.StatusAccepted {
		t.Fatalf("background start: %d %v", status, bg)
	}
	bgID := str(t, bg, "process_id")

	// In each sandbox: two commands that end on their own once the test writes "go" after the kill (and
	// leave a file), one that would run for 5 minutes (60 s deadline), killed at its grace's end. Each marks its start with a
	// file: a burst of execs takes a loaded 2-core node's containerd long to start (of 20, and of 12, some
	// were still refused after the gateway's 15 s retry), and the checks queue behind them, so nothing may end on a timer before
	// all are seen.
	type call struct {
		box, n int
		short  bool
		err    error
		status int
		body   map[string]any
		ended  time.Time
	}
	calls := make(chan call, boxes*perBox)
	started := time.Now()
	for i, id := range ids {
		for n := range perBox {
			short := n < shortPerBox
			cmd, timeout := fmt.Sprintf("echo started; touch started-%d; until [ -e go ]; do sleep 0.2; done; echo done > done-%d", n, n), 180_000
			if !short {
				cmd, timeout = fmt.Sprintf("echo started; touch started-%d; exec sleep 300", n), 60_000
			}
			go func() {
				s, body, err := a.try(key, "POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"command": cmd, "timeout_ms": timeout})
				calls <- call{box: i, n: n, short: short, err: err, status: s, body: body, ended: time.Now()}
			}()
		}
	}
	// All 20 run in their sandboxes (each has marked its start, and none can end before the kill) first.
	eventually(t, 90*time.Second, fmt.Sprint(boxes*perBox, " commands running"), func() error {
		total, last := 0, map[string]any{}
		for _, id := range ids {
			last = b.execCmd(t, key, id, "ls started-* 2>/dev/null | wc -l", 10_000)
			n, _ := strconv.Atoi(strings.TrimSpace(fmt.Sprint(last["stdout"])))
			total += n
		}
		if total < boxes*perBox {
			ended := ""
			select {
			case c := <-calls:
				ended = fmt.Sprintf("; %d calls already ended, one with status %d %v, error %v", len(calls)+1, c.status, c.body, c.err)
				calls <- c
			default:
			}
			return fmt.Errorf("%d commands started (the last count: %v)%s", total, last, ended)
		}
		return nil
	})
	t.Logf("all %d commands running %s after the calls", boxes*perBox, time.Since(started).Round(time.Millisecond))
	killed := time.Now()
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	_ = a.cmd.Wait()
	for range boxes * perBox {
		select {
		case c := <-calls:
			if c.err == nil {
				t.Errorf("box %d command %d: the call through the killed gateway got status %d, want an error", c.box, c.n, c.status)
			} else if d := c.ended.Sub(killed); d > 5*time.Second {
				t.Errorf("box %d command %d: its caller learned of the kill after %s", c.box, c.n, d)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a call through the killed gateway hangs")
		}
	}
	// The short ones go on to their own end: the other gateway lets them (it serves the tenant in every sandbox).
	for _, id := range ids {
		if res := b.execCmd(t, key, id, "touch go", 10_000); res["exit_code"] != float64(0) {
			t.Fatalf("%s: touch go: %v", id, summarize(res))
		}
	}
	for _, id := range ids {
		if res := b.execCmd(t, key, id, "echo ok", 10_000); res["exit_code"] != float64(0) || res["stdout"] != "ok\n" {
			t.Errorf("%s through the surviving gateway: %v", id, summarize(res))
		}
	}
	// The background process goes on, and is re-attached through the other gateway.
	status, proc := b.call(t, key, "GET", "/v1/sandboxes/"+ids[0]+"/processes/"+bgID+"?wait_ms=15000", nil)
	if status != http.StatusOK || proc["status"] != "exited" || proc["exit_code"] != float64(0) || !strings.Contains(fmt.Sprint(proc["stdout"]), "tick 16\n") {
		t.Errorf("background process after the kill: %d %v", status, proc)
	}
	// Nobody attached to the long ones: their grace ends them, well before their 60 s deadline.
	time.Sleep(time.Until(killed.Add(runwrap.DefaultReattachGrace + runwrap.DefaultGrace)))
	eventually(t, 20*time.Second, "every command ended: the short ones after their work, the long ones at their grace's end", func() error {
		for _, id := range ids {
			res := b.execCmd(t, key, id, "ps -eo args= | grep -c -e '^[s]leep 300' -e '[u]ntil \\[ -e go' ; ls done-* | wc -l", 10_000)
			if got := strings.Fields(fmt.Sprint(res["stdout"])); len(got) != 2 || got[0] != "0" || got[1] != strconv.Itoa(shortPerBox) {
				return fmt.Errorf("%s: sleeps running, files written: %q", id, res["stdout"])
			}
		}
		return nil
	})
	if late := time.Since(killed); late > runwrap.DefaultReattachGrace+runwrap.DefaultGrace+20*time.Second {
		t.Errorf("the long commands ended %s after the kill", late.Round(time.Second))
	}
	t.Logf("%d callers got their error at once; the surviving gateway served all %d sandboxes; every command had ended %s after the kill (long ones: the %s reattach grace)",
		boxes*perBox, boxes, time.Since(killed).Round(time.Second), runwrap.DefaultReattachGrace)
}
