package gateway

import (
	"encoding/json"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/sandbox"
)

// Annotations the gateway puts on Sandboxes it creates.
const (
	AnnotationMetadata = "gateway.airlock.dev/metadata" // the caller's metadata, as JSON
	AnnotationKeyID    = "gateway.airlock.dev/key-id"   // the key that created it
	defaultWorkingDir  = "/home/sandbox"
)

// SandboxView is a sandbox as the API shows it.
type SandboxView struct {
	ID string `json:"id"`
	// Status is the phase in lower case: pending, ready, expired, terminating or failed.
	Status            string            `json:"status"`
	Reason            string            `json:"reason,omitempty"`
	Message           string            `json:"message,omitempty"`
	Template          string            `json:"template,omitempty"`
	Image             string            `json:"image,omitempty"`
	Size              string            `json:"size,omitempty"`
	Network           string            `json:"network,omitempty"`
	Isolation         string            `json:"isolation,omitempty"` // gvisor, kata or none, once proven
	TimeoutMinutes    *float64          `json:"timeout_minutes,omitempty"`
	MaxTimeoutMinutes *float64          `json:"max_timeout_minutes,omitempty"`
	WorkingDir        string            `json:"working_dir"`
	CreatedAt         time.Time         `json:"created_at"`
	StartedAt         *time.Time        `json:"started_at,omitempty"`
	ExpiresAt         *time.Time        `json:"expires_at"`
	UsageSeconds      int64             `json:"usage_seconds"`
	Metadata          map[string]string `json:"metadata,omitempty"`
	// IdleTimeoutMinutes is the idle timeout in force; IdleExpiresAt is when it ends the sandbox unless more
	// activity is recorded, which lags the real one by up to the gateway's --activity-flush-interval.
	IdleTimeoutMinutes *float64   `json:"idle_timeout_minutes,omitempty"`
	LastActivityAt     *time.Time `json:"last_activity_at,omitempty"`
	IdleExpiresAt      *time.Time `json:"idle_expires_at,omitempty"`
	// Start is warm when the sandbox adopted a pool member, cold when it named a pool but got its own pod.
	Start string `json:"start,omitempty"`
}

func viewOf(sb *airlockv1.Sandbox, now time.Time) SandboxView {
	v := SandboxView{
		ID:         sb.Name,
		Status:     statusOf(sb),
		Image:      sb.Status.Image,
		Size:       string(sb.Status.Size),
		Isolation:  string(sb.Status.Isolation),
		WorkingDir: workingDir(sb),
		CreatedAt:  sb.CreationTimestamp.UTC(),
	}
	if v.Size == "" {
		v.Size = string(sb.Spec.Size)
	}
	if sb.Spec.TemplateRef != nil {
		v.Template = sb.Spec.TemplateRef.Name
	}
	if n := sb.Status.Network; n != nil {
		v.Network = strings.ToLower(string(n.Mode))
	} else if n := sb.Spec.Network; n != nil {
		v.Network = strings.ToLower(string(n.Mode))
	}
	if t := sb.Spec.Timeout; t != nil {
		m := t.Minutes()
		v.TimeoutMinutes = &m
	}
	if t := sb.Status.MaxTimeout; t != nil {
		m := t.Minutes()
		v.MaxTimeoutMinutes = &m
	}
	viewIdle(&v, sb)
	if c := meta.FindStatusCondition(sb.Status.Conditions, airlockv1.ConditionReady); c != nil && c.Status != "True" {
		v.Reason, v.Message = c.Reason, c.Message
	}
	if t := sb.Status.StartedAt; t != nil {
		u := t.UTC()
		v.StartedAt = &u
	}
	if t := sb.Status.ExpiresAt; t != nil {
		u := t.UTC()
		v.ExpiresAt = &u
	}
	v.UsageSeconds = usageSeconds(sb, now)
	v.Start = startOf(sb)
	if raw := sb.Annotations[AnnotationMetadata]; raw != "" {
		_ = json.Unmarshal([]byte(raw), &v.Metadata)
	}
	return v
}

// viewIdle shows the idle timeout in force (from status once the pod exists, else as asked) and its deadline.
func viewIdle(v *SandboxView, sb *airlockv1.Sandbox) {
	idle := sb.Status.IdleTimeout
	if idle == nil && sb.Status.PodName == "" {
		idle = sb.Spec.IdleTimeout
	}
	if idle == nil {
		return
	}
	m := idle.Minutes()
	v.IdleTimeoutMinutes = &m
	if t := sb.Status.LastActivityAt; t != nil {
		u := t.UTC()
		v.LastActivityAt = &u
	}
	if at := sandbox.IdleDeadline(sb.Status.StartedAt, sb.Status.LastActivityAt, idle.Duration); at != nil {
		u := at.UTC()
		v.IdleExpiresAt = &u
	}
}

func statusOf(sb *airlockv1.Sandbox) string {
	if sb.DeletionTimestamp != nil {
		return "terminating"
	}
	if sb.Status.Phase == "" {
		return "pending"
	}
	return strings.ToLower(string(sb.Status.Phase))
}

func workingDir(sb *airlockv1.Sandbox) string {
	if sb.Spec.WorkingDir != "" {
		return sb.Spec.WorkingDir
	}
	return defaultWorkingDir
}

// usageSeconds is the sandbox-seconds used so far, billed per started second: from the container's start to
// now, or frozen at what the controller recorded once the sandbox ended.
func usageSeconds(sb *airlockv1.Sandbox, now time.Time) int64 {
	recorded := int64(0)
	if sb.Status.Usage != nil {
		recorded = sb.Status.Usage.SandboxSeconds
	}
	if sb.Status.StartedAt == nil {
		return recorded
	}
	switch sb.Status.Phase {
	case airlockv1.PhaseExpired, airlockv1.PhaseFailed:
		if sb.Status.Usage != nil {
			return recorded
		}
	}
	end := now
	if sb.DeletionTimestamp != nil && sb.DeletionTimestamp.Time.Before(end) {
		end = sb.DeletionTimestamp.Time
	}
	d := end.Sub(sb.Status.StartedAt.Time)
	secs := int64(d / time.Second)
	if d%time.Second > 0 {
		secs++
	}
	return max(secs, recorded)
}
