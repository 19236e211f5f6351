package gateway

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/gateway/auth"
	"airlock.dev/airlock/internal/podexec"
)

// createSandbox makes a sandbox for the caller as req asks and, unless req.Wait is false, waits for it to leave
// Pending. The key's create rate, the template's limits, the tenant's quota and the scoped secrets apply here.
func (s *Server) createSandbox(ctx context.Context, p auth.Principal, req *CreateRequest) (*SandboxView, *Error) {
	if e := req.validate(); e != nil {
		return nil, e
	}
	if ok, retry := s.creates.allow(p.KeyID); !ok {
		s.metrics.rejected.WithLabelValues(p.Tenant, CodeRateLimited).Inc()
		return nil, &Error{Status: http.StatusTooManyRequests, Code: CodeRateLimited, RetryAfter: retry.Truncate(time.Second) + time.Second,
			Message: "too many sandbox creations for this key: " + s.creates.limitText()}
	}
	tmpl := req.Template
	if tmpl == "" {
		tmpl = s.opts.DefaultTemplate
	}
	var t airlockv1.SandboxTemplate
	if err := s.getTemplate(ctx, types.NamespacedName{Namespace: p.Tenant, Name: tmpl}, &t); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, badField("template", "no template %q is available to this tenant", tmpl)
		}
		return nil, fromKube(err, "template")
	}
	if e := checkIdleTimeout(req, &t); e != nil {
		return nil, e
	}
	if e := checkAllow(req, &t); e != nil {
		return nil, e
	}
	sb, e := buildSandbox(req, p, tmpl)
	if e != nil {
		return nil, e
	}
	sb.Spec.PoolRef = s.poolFor(ctx, &t, sb)
	if e := validateSecrets(req); e != nil {
		return nil, e
	}
	markSecrets(sb, req.Secrets)
	if err := s.opts.Client.Create(ctx, sb); err != nil {
		e := fromKube(err, "sandbox")
		if e.Code == CodeQuotaExceeded {
			s.metrics.rejected.WithLabelValues(p.Tenant, CodeQuotaExceeded).Inc()
		}
		return nil, e
	}
	if e := s.storeSecrets(ctx, sb, req.Secrets); e != nil {
		_ = s.opts.Client.Delete(ctx, sb) // useless without its secrets
		return nil, e
	}
	s.audit(sb, reasonCreated, "Create", "created through the gateway by key %s", p.KeyID)
	if req.Wait == nil || *req.Wait {
		sb = s.waitReady(ctx, sb)
		s.warm(sb)
	}
	v := viewOf(sb, time.Now())
	return &v, nil
}

// listSandboxes is the tenant's sandboxes, oldest first.
func (s *Server) listSandboxes(ctx context.Context, p auth.Principal) ([]SandboxView, *Error) {
	var list airlockv1.SandboxList
	if err := s.opts.Client.List(ctx, &list, client.InNamespace(p.Tenant)); err != nil {
		return nil, fromKube(err, "sandboxes")
	}
	slices.SortFunc(list.Items, func(a, b airlockv1.Sandbox) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	now := time.Now()
	out := make([]SandboxView, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, viewOf(&list.Items[i], now))
	}
	return out, nil
}

// getSandbox is the caller's sandbox id, read from the API server (not the cache: a client polls it for changes).
func (s *Server) getSandbox(ctx context.Context, p auth.Principal, id string) (*SandboxView, *Error) {
	sb, e := s.sandboxByID(ctx, p, id)
	if e != nil {
		return nil, e
	}
	v := viewOf(sb, time.Now())
	return &v, nil
}

// deleteSandbox deletes in the background and returns the sandbox as it was, status terminating. Repeating it
// while the sandbox is terminating returns the same; once it is gone, 404.
func (s *Server) deleteSandbox(ctx context.Context, p auth.Principal, id string) (*SandboxView, *Error) {
	sb, e := s.sandboxByID(ctx, p, id)
	if e != nil {
		return nil, e
	}
	if sb.DeletionTimestamp == nil {
		err := s.opts.Client.Delete(ctx, sb, client.PropagationPolicy(metav1.DeletePropagationBackground),
			client.Preconditions{UID: &sb.UID})
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, fromKube(err, "sandbox "+strconv.Quote(id))
		}
		now := metav1.Now()
		sb.DeletionTimestamp = &now
		s.audit(sb, reasonDeleted, "Delete", "deleted through the gateway by key %s", p.KeyID)
	}
	v := viewOf(sb, time.Now())
	return &v, nil
}

// sandboxByID checks id and reads the caller's sandbox from the API server.
func (s *Server) sandboxByID(ctx context.Context, p auth.Principal, id string) (*airlockv1.Sandbox, *Error) {
	if e := checkSandboxID(id); e != nil {
		return nil, e
	}
	return s.lookup(ctx, s.opts.Client, p, id)
}

// Warmer opens a sandbox's session ahead of its first command; *podexec.Engine is one.
type Warmer interface {
	Warm(target podexec.Request)
}

// warm opens a Ready sandbox's session in the background as its create answers, so that its first command
// (an agent's next call) finds it open.
func (s *Server) warm(sb *airlockv1.Sandbox) {
	if w, ok := s.opts.Engine.(Warmer); ok && sb.Status.Phase == airlockv1.PhaseReady {
		w.Warm(s.target(sb))
	}
}
