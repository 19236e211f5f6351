package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"airlock.dev/airlock/internal/attestation"
	"airlock.dev/airlock/internal/sandbox"
)

// Reading pods' logs needs pods/log in tenant namespaces (rbac.go):
// +kubebuilder:rbac:groups="",resources=pods/log,verbs=get,roleName=airlock-manager-tenant

// PodLogReader reads the start of a container's log.
type PodLogReader interface {
	LogHead(ctx context.Context, namespace, pod, container string, limit int64) ([]byte, error)
}

// ClusterLogs reads logs through the API server (pods/log).
type ClusterLogs struct{ Clientset kubernetes.Interface }

// LogHead implements PodLogReader.
func (l ClusterLogs) LogHead(ctx context.Context, namespace, pod, container string, limit int64) ([]byte, error) {
	b, err := l.Clientset.CoreV1().Pods(namespace).GetLogs(pod, &corev1.PodLogOptions{Container: container, LimitBytes: ptr.To(limit)}).DoRaw(ctx)
	if apierrors.IsForbidden(err) {
		return nil, fmt.Errorf("reading the log of pod %s/%s is forbidden: the manager needs pods/log in tenant namespaces (airlock tenant create, the chart's tenants): %w", namespace, pod, err)
	}
	return b, err
}

// attestationLogBytes is how much of the log holds PID 1's attestation: a few lines before it.
const attestationLogBytes = 64 << 10

// maxAttestations bounds the cache; a pod past it is read again if asked for.
const maxAttestations = 4096

// Attestations reads what sandbox pods' PID 1 attested (package attestation), once per pod: the pool reads a
// member's when it turns ready, and the Sandbox that claims the member finds it here. The first attestation
// line of a pod's log is PID 1's own (nothing else can write there), so reading it late is as good as early.
type Attestations struct {
	Logs PodLogReader

	mu    sync.Mutex
	byUID map[types.UID]*attestation.Statement
	order []types.UID
}

// Of returns pod's attestation; attestation.ErrMissing (wrapped) while its log does not hold one yet.
func (a *Attestations) Of(ctx context.Context, pod *corev1.Pod) (*attestation.Statement, error) {
	a.mu.Lock()
	st, ok := a.byUID[pod.UID]
	a.mu.Unlock()
	if ok {
		return st, nil
	}
	if a.Logs == nil {
		return nil, errors.New("the manager reads no pod logs, so it cannot check what PID 1 attested")
	}
	log, err := a.Logs.LogHead(ctx, pod.Namespace, pod.Name, sandbox.ContainerName, attestationLogBytes)
	if err != nil {
		return nil, fmt.Errorf("reading PID 1's attestation: %w", err)
	}
	st, err = attestation.Find(log)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.byUID == nil {
		a.byUID = map[types.UID]*attestation.Statement{}
	}
	if _, ok := a.byUID[pod.UID]; !ok {
		if len(a.order) >= maxAttestations {
			delete(a.byUID, a.order[0])
			a.order = a.order[1:]
		}
		a.byUID[pod.UID] = st
		a.order = append(a.order, pod.UID)
	}
	return st, nil
}
