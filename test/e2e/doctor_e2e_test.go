package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"airlock.dev/airlock/internal/doctor"
	"airlock.dev/airlock/internal/initproc"
)

// TestDoctor: airlock doctor's probe on the real cluster. Its pod's gate passes behind a deny-all policy (kube-
// router enforces it), and under each gVisor class it says how gVisor was proven: the marker (gvisor), the
// kernel log (gvisor-managed, as GKE Sandbox runs it), nothing (gvisor-seccomp); under runc, no isolation.
// The probe's namespace, pod and policy are gone afterwards.
func TestDoctor(t *testing.T) {
	ctx := context.Background()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	facts, err := doctor.Gather(ctx, k8s, cs.Discovery(), "airlock-system")
	if err != nil {
		t.Fatal(err)
	}
	s := doctor.SettingsOf(facts, initImage)
	s.InitImage = initImage
	for class, want := range map[string][2]string{
		"gvisor":         {initproc.ExpectGVisor, initproc.MethodMarker},
		"gvisor-managed": {initproc.ExpectGVisor, initproc.MethodKernelLog},
		"gvisor-seccomp": {initproc.Unverified, ""},
		"runc":           {initproc.ExpectNone, ""},
	} {
		t.Run(class, func(t *testing.T) {
			o := doctor.PlanProbe(facts, s, class, doctor.ProbeOptions{Image: initImage, Timeout: 90 * time.Second})
			res, err := doctor.Probe(ctx, k8s, cs, o)
			if err != nil {
				t.Fatal(err)
			}
			a := res.Attestation
			if a == nil || a.Isolation != want[0] || a.Method != want[1] {
				t.Fatalf("probe under %s: %+v (attested %+v), want isolation %s by %q", class, res, a, want[0], want[1])
			}
			facts.Probe = res
			fs := doctor.Judge(facts, s)
			for _, f := range fs {
				if f.Check == "NetworkPolicy enforcer" && f.Status != doctor.OK {
					t.Errorf("enforcer: %+v", f)
				}
			}
			eventually(t, 2*time.Minute, "the probe's namespace deleted", func() error {
				if err := k8s.Get(ctx, client.ObjectKey{Name: res.Namespace}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
					return fmt.Errorf("namespace %s: %v", res.Namespace, err)
				}
				return nil
			})
		})
	}
}
