package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/controller"
	"airlock.dev/airlock/internal/sandbox"
)

// TestInitFromImage: a template with init: Image runs the airlock-init its image holds, with no init volume,
// and its sandbox works as any other (gate, state across commands, stderr and exit code intact); one whose
// image does not hold airlock-init at /airlock/bin fails at once with InitMismatch and says what to change,
// instead of hanging in Pending.
func TestInitFromImage(t *testing.T) {
	ns := newTenant(t)
	ctx := context.Background()

	own := &airlockv1.SandboxTemplate{}
	own.Namespace, own.Name = ns, "own-init"
	own.Spec = airlockv1.SandboxTemplateSpec{Image: sandboxImage, RuntimeClassName: "gvisor", Init: airlockv1.InitFromImage}
	if err := k8s.Create(ctx, own); err != nil {
		t.Fatal(err)
	}
	createSandbox(t, ns, "own-init", withTemplate("own-init"))
	s := waitReady(t, ns, "own-init")
	if s.Status.Isolation != airlockv1.IsolationGVisor {
		t.Errorf("isolation %q, want gvisor", s.Status.Isolation)
	}
	pod := &corev1.Pod{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "own-init"}, pod); err != nil {
		t.Fatal(err)
	}
	for _, v := range pod.Spec.Volumes {
		if v.Image != nil {
			t.Errorf("pod mounts image volume %s (%s): init: Image needs none", v.Name, v.Image.Reference)
		}
	}
	if got := sandbox.PodArg(pod, sandbox.ProtocolFlag); got == "" {
		t.Errorf("PID 1 was not told the manager's protocol (%s): %v", sandbox.ProtocolFlag, pod.Spec.Containers[0].Command)
	}
	sh(t, ns, "own-init", "echo kept > state.txt", 30*time.Second)
	res := sh(t, ns, "own-init", "cat state.txt; echo oops >&2; exit 3", 30*time.Second)
	if res.ExitCode != 3 || strings.TrimSpace(res.Stdout) != "kept" || strings.TrimSpace(res.Stderr) != "oops" {
		t.Errorf("got exit %d stdout %q stderr %q, want 3, kept, oops", res.ExitCode, res.Stdout, res.Stderr)
	}

	// The init image holds airlock-init under /usr/local/bin, not /airlock/bin: an image without it.
	tpl := &airlockv1.SandboxTemplate{}
	tpl.Namespace, tpl.Name = ns, "no-init"
	tpl.Spec = airlockv1.SandboxTemplateSpec{Image: initImage, RuntimeClassName: "gvisor", Init: airlockv1.InitFromImage}
	if err := k8s.Create(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	// Its /tmp exists (it has no /home/sandbox), so that the only thing missing is airlock-init.
	createSandbox(t, ns, "no-init", withTemplate("no-init"), func(s *airlockv1.Sandbox) { s.Spec.WorkingDir = "/tmp" })
	eventually(t, readyTimeout, "the sandbox without airlock-init Failed with InitMismatch", func() error {
		s, err := getSandbox(ns, "no-init")
		if err != nil {
			return err
		}
		if s.Status.Phase != airlockv1.PhaseFailed || conditionStatus(s, airlockv1.ConditionReady) != "False/"+controller.ReasonInitMismatch {
			return fmt.Errorf("not yet: %s", describe(s))
		}
		if c := meta.FindStatusCondition(s.Status.Conditions, airlockv1.ConditionReady); c == nil || !strings.Contains(c.Message, sandbox.InitBinary) {
			t.Errorf("the Ready message does not name the missing %s: %s", sandbox.InitBinary, describe(s))
		}
		t.Logf("without airlock-init: %s", describe(s))
		return nil
	})
}
