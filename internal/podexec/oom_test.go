package podexec

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"airlock.dev/airlock/internal/testutil/execserver"
)

func contextWithCancel(t *testing.T) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	return ctx, cancel
}

func oomPod(container string, last, current *corev1.ContainerStateTerminated) *corev1.Pod {
	return &corev1.Pod{
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox"}, {Name: "other"}}},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
			Name:                 container,
			State:                corev1.ContainerState{Terminated: current},
			LastTerminationState: corev1.ContainerState{Terminated: last},
		}}},
	}
}

func TestContainerOOMKilled(t *testing.T) {
	since := time.Now()
	at := func(d time.Duration) metav1.Time { return metav1.NewTime(since.Add(d)) }
	oom := func(d time.Duration) *corev1.ContainerStateTerminated {
		return &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137, FinishedAt: at(d)}
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		ctr  string
		want bool
	}{
		{"last state oom after start", oomPod("sandbox", oom(time.Second), nil), "sandbox", true},
		{"current state oom", oomPod("sandbox", nil, oom(time.Second)), "sandbox", true},
		{"default container", oomPod("sandbox", oom(time.Second), nil), "", true},
		{"old oom", oomPod("sandbox", oom(-time.Hour), nil), "sandbox", false},
		{"within skew", oomPod("sandbox", oom(-2*time.Second), nil), "sandbox", true},
		{"other container", oomPod("other", oom(time.Second), nil), "sandbox", false},
		{"error exit", oomPod("sandbox", &corev1.ContainerStateTerminated{Reason: "Error", FinishedAt: at(time.Second)}, nil), "sandbox", false},
		{"nil pod", nil, "sandbox", false},
	} {
		if got := ContainerOOMKilled(tc.pod, tc.ctr, since); got != tc.want {
			t.Errorf("%s: got %v", tc.name, got)
		}
	}
}

type fakeOOM struct {
	oom   bool
	calls int
}

func (f *fakeOOM) OOMKilled(context.Context, string, string, string, time.Time) (bool, error) {
	f.calls++
	return f.oom, nil
}

// A SIGKILL that is not a timeout is classified with the OOM hook; a pod
// getter is the real-world hook (PodOOMChecker).
func TestEngineOOMClassification(t *testing.T) {
	hook := &fakeOOM{oom: true}
	env := newEnv(t, ProtocolAuto, func(_ *execserver.Options, eo *Options) { eo.OOMChecker = hook })
	res := env.run(t, Request{Shell: "kill -KILL $$"})
	if res.Outcome != OutcomeOOM || res.Signal != "SIGKILL" || hook.calls != 1 {
		t.Fatalf("%+v calls %d", res, hook.calls)
	}
	hook.oom = false
	res = env.run(t, Request{Shell: "kill -KILL $$"})
	if res.Outcome != OutcomeSignal || res.Signal != "SIGKILL" {
		t.Fatalf("%+v", res)
	}
	// Timeouts never ask.
	calls := hook.calls
	if res = env.run(t, Request{Shell: "sleep 5", Timeout: 200 * time.Millisecond}); res.Outcome != OutcomeTimeout || hook.calls != calls {
		t.Fatalf("%+v", res)
	}

	pods := PodOOMChecker(func(ctx context.Context, ns, name string) (*corev1.Pod, error) {
		return oomPod("sandbox", &corev1.ContainerStateTerminated{Reason: "OOMKilled", FinishedAt: metav1.Now()}, nil), nil
	})
	if ok, err := pods.OOMKilled(t.Context(), "ns", "p", "sandbox", time.Now().Add(-time.Minute)); !ok || err != nil {
		t.Fatalf("PodOOMChecker: %v %v", ok, err)
	}
}
