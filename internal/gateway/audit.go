package gateway

import (
	"k8s.io/apimachinery/pkg/runtime"
)

// AuditRecorder records an events.k8s.io Event regarding an object (client-go's events.EventRecorder).
type AuditRecorder interface {
	Eventf(regarding runtime.Object, related runtime.Object, eventtype, reason, action, note string, args ...interface{})
}

// Audit reasons and actions.
const (
	reasonCreated = "GatewayCreated"
	reasonDeleted = "GatewayDeleted"
	reasonExec    = "GatewayExec"
)

// audit records an Event; the note never holds the command, only who did what and how it ended.
func (s *Server) audit(obj runtime.Object, reason, action, note string, args ...any) {
	if s.opts.Audit == nil || obj == nil {
		return
	}
	s.opts.Audit.Eventf(obj, nil, "Normal", reason, action, note, args...)
}
