package gateway

import (
	"context"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/sandbox"
)

// poolLookupTimeout bounds the pool lookup of a create: a cache that cannot sync (no RBAC for sandboxpools)
// must not hold creates up.
const poolLookupTimeout = time.Second

// poolFor names the tenant's SandboxPool for a create's template and network mode, nil if it has none: the
// controller then claims a warm member for the sandbox, or creates its pod cold when the pool is drained or
// does not fit (a size or allowlist of its own). Of several pools for the same template and mode, the one
// with the most ready members wins. A pool that cannot be listed only costs the warm start.
func (s *Server) poolFor(ctx context.Context, tmpl *airlockv1.SandboxTemplate, sb *airlockv1.Sandbox) *airlockv1.PoolReference {
	ctx, cancel := context.WithTimeout(ctx, poolLookupTimeout)
	defer cancel()
	var pools airlockv1.SandboxPoolList
	if err := s.opts.Reader.List(ctx, &pools, client.InNamespace(sb.Namespace)); err != nil {
		s.opts.Logger.V(1).Info("listing sandbox pools; creating cold", "namespace", sb.Namespace, "error", err.Error())
		return nil
	}
	mode := networkMode(sb.Spec.Network, tmpl)
	var best *airlockv1.SandboxPool
	for i := range pools.Items {
		p := &pools.Items[i]
		if p.DeletionTimestamp != nil || p.Spec.TemplateRef.Name != tmpl.Name {
			continue
		}
		pm := p.Spec.NetworkMode
		if pm == "" {
			pm = networkMode(nil, tmpl) // the template's
		}
		if pm != mode {
			continue
		}
		if best == nil || p.Status.ReadyMembers > best.Status.ReadyMembers {
			best = p
		}
	}
	if best == nil {
		return nil
	}
	return &airlockv1.PoolReference{Name: best.Name}
}

// getTemplate reads a template from the cache, and from the API server when the cache does not have it (yet):
// a create's template read is on the path of a warm start, and a template made just before must still be found.
func (s *Server) getTemplate(ctx context.Context, key client.ObjectKey, t *airlockv1.SandboxTemplate) error {
	if err := s.opts.Reader.Get(ctx, key, t); !apierrors.IsNotFound(err) {
		return err
	}
	return s.opts.Client.Get(ctx, key, t)
}

// networkMode is the mode a sandbox with this network ends up with under the template.
func networkMode(n *airlockv1.NetworkSpec, tmpl *airlockv1.SandboxTemplate) airlockv1.NetworkMode {
	switch {
	case n != nil && n.Mode != "":
		return n.Mode
	case tmpl.Spec.Network != nil && tmpl.Spec.Network.Mode != "":
		return tmpl.Spec.Network.Mode
	}
	return airlockv1.NetworkNone
}

// lateEnv is a command's environment in a sandbox that adopted a warm pool member: the sandbox's own
// spec.env, which its pod was not made with, under the request's. A sandbox with a pod of its own has spec.env
// in the pod already. Names Airlock reserves are left out: create and the CRD refuse them, but a Sandbox made
// before they did may hold one (as BuildPod puts Airlock's own variables last for a cold start).
func lateEnv(sb *airlockv1.Sandbox, req map[string]string) map[string]string {
	if !warmStart(sb) || len(sb.Spec.Env) == 0 {
		return req
	}
	env := make(map[string]string, len(sb.Spec.Env)+len(req))
	for _, e := range sb.Spec.Env {
		if sandbox.CheckCommandEnvName(e.Name) == nil {
			env[e.Name] = e.Value
		}
	}
	for k, v := range req {
		env[k] = v
	}
	return env
}

func warmStart(sb *airlockv1.Sandbox) bool {
	return sb.Status.Pool != nil && sb.Status.Pool.Result == airlockv1.ClaimWarm
}

// startOf is how the sandbox got its pod, for the API: warm (a pool member), cold (its own pod, though it
// named a pool: the pool was drained or did not fit), or "" for a sandbox without a pool.
func startOf(sb *airlockv1.Sandbox) string {
	if sb.Status.Pool == nil {
		return ""
	}
	return strings.ToLower(string(sb.Status.Pool.Result))
}
