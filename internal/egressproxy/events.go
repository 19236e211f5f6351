package egressproxy

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
)

// maxHostsPerSandbox bounds the destinations remembered per sandbox; past it, no more Events are sent for it.
const maxHostsPerSandbox = 256

// EventRecorder records, on each Sandbox, an Event the first time each destination is allowed (EgressAllowed)
// or denied (EgressDenied): a log of where the sandbox went that its owner can read with kubectl, one Event
// per destination and verdict rather than per connection. Metrics count every connection.
type EventRecorder struct {
	Recorder events.EventRecorder

	mu   sync.Mutex
	seen map[string]map[string]struct{} // sandbox UID -> verdict+target
}

// Record implements Recorder.
func (r *EventRecorder) Record(c Client, allowed bool, target, detail string) {
	reason, kind := "EgressDenied", corev1.EventTypeWarning
	if allowed {
		reason, kind = "EgressAllowed", corev1.EventTypeNormal
	}
	if !r.first(c.UID, reason+" "+target) {
		return
	}
	ref := &corev1.ObjectReference{APIVersion: airlockv1.GroupVersion.String(), Kind: "Sandbox",
		Namespace: c.Namespace, Name: c.Name, UID: types.UID(c.UID)}
	if allowed {
		r.Recorder.Eventf(ref, nil, kind, reason, "Connect", "the egress proxy connected the sandbox to %s", target)
		return
	}
	r.Recorder.Eventf(ref, nil, kind, reason, "Connect", "the egress proxy refused %s: %s", target, detail)
}

func (r *EventRecorder) first(uid, key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[string]map[string]struct{}{}
	}
	s := r.seen[uid]
	if s == nil {
		s = map[string]struct{}{}
		r.seen[uid] = s
	}
	if _, ok := s[key]; ok || len(s) >= maxHostsPerSandbox {
		return false
	}
	s[key] = struct{}{}
	return true
}

// Forget drops what was remembered of a deleted sandbox.
func (r *EventRecorder) Forget(uid string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.seen, uid)
}
