package podexec

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// OOMChecker tells whether a container was OOM-killed at or after since. The
// engine asks it when a command died from SIGKILL without a timeout (and the
// wrapper saw no oom_kill in its cgroup), or when the sandbox was lost.
type OOMChecker interface {
	OOMKilled(ctx context.Context, namespace, pod, container string, since time.Time) (bool, error)
}

// PodGetterFunc fetches a pod, e.g. from a controller-runtime client or a
// clientset.
type PodGetterFunc func(ctx context.Context, namespace, name string) (*corev1.Pod, error)

// PodOOMChecker is an OOMChecker that reads the container's status.
type PodOOMChecker PodGetterFunc

// oomPoll is how often PodOOMChecker re-reads a pod whose container still runs.
const oomPoll = 250 * time.Millisecond

// OOMKilled implements OOMChecker. A runtime may report the container's OOM kill a few seconds after the exec
// stream broke (gVisor: the sandbox is OOM-killed as a whole), so while the container still shows as running
// it polls until ctx ends.
func (f PodOOMChecker) OOMKilled(ctx context.Context, namespace, pod, container string, since time.Time) (bool, error) {
	for {
		p, err := f(ctx, namespace, pod)
		if err != nil {
			return false, fmt.Errorf("get pod %s/%s: %w", namespace, pod, err)
		}
		if ContainerOOMKilled(p, container, since) {
			return true, nil
		}
		if !containerRunning(p, container) {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, nil
		case <-time.After(oomPoll):
		}
	}
}

func containerRunning(pod *corev1.Pod, container string) bool {
	if container == "" && len(pod.Spec.Containers) > 0 {
		container = pod.Spec.Containers[0].Name
	}
	for i := range pod.Status.ContainerStatuses {
		if cs := &pod.Status.ContainerStatuses[i]; cs.Name == container {
			return cs.State.Running != nil
		}
	}
	return false
}

// clockSkew tolerates node and gateway clocks that disagree a little.
const clockSkew = 5 * time.Second

// ContainerOOMKilled reports whether the container's current or last
// termination is an OOM kill that finished at or after since (minus a small
// clock-skew allowance). An empty container name means the first container.
func ContainerOOMKilled(pod *corev1.Pod, container string, since time.Time) bool {
	if pod == nil {
		return false
	}
	if container == "" && len(pod.Spec.Containers) > 0 {
		container = pod.Spec.Containers[0].Name
	}
	for i := range pod.Status.ContainerStatuses {
		cs := &pod.Status.ContainerStatuses[i]
		if cs.Name != container {
			continue
		}
		for _, t := range []*corev1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
			if t != nil && t.Reason == "OOMKilled" && !t.FinishedAt.Time.Before(since.Add(-clockSkew)) {
				return true
			}
		}
	}
	return false
}
