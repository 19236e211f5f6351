package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/gateway/auth"
	"airlock.dev/airlock/internal/sandbox"
)

// The REST handlers of sandboxes; service_sandboxes.go does the work.

func (s *Server) handleCreateSandbox(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	var req CreateRequest
	if !s.readJSON(w, r, &req, noValidation) {
		return
	}
	v, e := s.createSandbox(r.Context(), p, &req)
	answer(w, http.StatusCreated, v, e)
}

func (s *Server) handleListSandboxes(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	list, e := s.listSandboxes(r.Context(), p)
	answer(w, http.StatusOK, struct {
		Sandboxes []SandboxView `json:"sandboxes"`
	}{list}, e)
}

func (s *Server) handleGetSandbox(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	v, e := s.getSandbox(r.Context(), p, r.PathValue("id"))
	answer(w, http.StatusOK, v, e)
}

func (s *Server) handleDeleteSandbox(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	v, e := s.deleteSandbox(r.Context(), p, r.PathValue("id"))
	answer(w, http.StatusOK, v, e)
}

func buildSandbox(req *CreateRequest, p auth.Principal, tmpl string) (*airlockv1.Sandbox, *Error) {
	sb := &airlockv1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "sbx-",
			Namespace:    p.Tenant,
			Annotations:  map[string]string{AnnotationKeyID: p.KeyID},
		},
		Spec: airlockv1.SandboxSpec{TemplateRef: &airlockv1.TemplateReference{Name: tmpl}},
	}
	if req.Size != "" {
		sb.Spec.Size = sizeValues[req.Size]
	}
	if req.TimeoutMinutes != nil {
		sb.Spec.Timeout = &metav1.Duration{Duration: time.Duration(*req.TimeoutMinutes) * time.Minute}
	}
	if req.IdleTimeoutMinutes != nil {
		sb.Spec.IdleTimeout = &metav1.Duration{Duration: time.Duration(*req.IdleTimeoutMinutes) * time.Minute}
	}
	switch req.Network {
	case "none":
		sb.Spec.Network = &airlockv1.NetworkSpec{Mode: airlockv1.NetworkNone}
	case "restricted":
		// Without allow, the controller gives the sandbox its template's allowlist.
		sb.Spec.Network = &airlockv1.NetworkSpec{Mode: airlockv1.NetworkRestricted, Allow: req.Allow}
	}
	for _, k := range sortedKeys(req.Env) {
		sb.Spec.Env = append(sb.Spec.Env, airlockv1.EnvVar{Name: k, Value: req.Env[k]})
	}
	if len(req.Metadata) > 0 {
		b, err := json.Marshal(req.Metadata)
		if err != nil {
			return nil, badField("metadata", "cannot be encoded: %v", err)
		}
		sb.Annotations[AnnotationMetadata] = string(b)
	}
	return sb, nil
}

// checkIdleTimeout refuses an idle timeout longer than the template's default timeout when the request sets no
// timeout of its own (validate compares it with timeout_minutes); the controller would only report it later.
func checkIdleTimeout(req *CreateRequest, t *airlockv1.SandboxTemplate) *Error {
	if req.IdleTimeoutMinutes == nil || req.TimeoutMinutes != nil || t.Spec.DefaultTimeout == nil {
		return nil
	}
	if def := t.Spec.DefaultTimeout.Duration; time.Duration(*req.IdleTimeoutMinutes)*time.Minute > def {
		return badField("idle_timeout_minutes", "must not exceed the template's default timeout of %g minutes; set a longer timeout_minutes", def.Minutes())
	}
	return nil
}

// checkAllow refuses an allowlist that reaches beyond the template's, which the controller would only report
// later.
func checkAllow(req *CreateRequest, t *airlockv1.SandboxTemplate) *Error {
	if len(req.Allow) == 0 {
		return nil
	}
	n := airlockv1.NetworkSpec{Mode: airlockv1.NetworkRestricted, Allow: req.Allow}
	if err := sandbox.NarrowAllow(&n, t.Spec.Network, t.Name); err != nil {
		return badField("allow", "%v", err)
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// waitReady polls until the sandbox leaves Pending, ReadyTimeout passes or the caller goes away; it returns
// the last state seen (still pending on timeout: the caller can poll GET). It polls the cache (Reader), every
// few milliseconds for the first second (a warm pool claim is Ready within tens of them), then every 100 ms at
// most: a cache read costs a copy of one object, and a create that waits longer (a cold start, a burst of
// claims) should not wait up to a second more than it must.
func (s *Server) waitReady(ctx context.Context, sb *airlockv1.Sandbox) *airlockv1.Sandbox {
	ctx, cancel := context.WithTimeout(ctx, s.opts.ReadyTimeout)
	defer cancel()
	key := client.ObjectKeyFromObject(sb)
	delay, start := 5*time.Millisecond, time.Now()
	for {
		var cur airlockv1.Sandbox
		if err := s.opts.Reader.Get(ctx, key, &cur); err == nil {
			sb = &cur
			if p := sb.Status.Phase; p != "" && p != airlockv1.PhasePending {
				return sb
			}
		}
		select {
		case <-ctx.Done():
			return sb
		case <-time.After(delay):
		}
		if time.Since(start) > time.Second {
			delay = min(delay*3/2, 100*time.Millisecond)
		}
	}
}

// sandboxID reads and checks {id}.
func sandboxID(r *http.Request) (string, *Error) {
	id := r.PathValue("id")
	return id, checkSandboxID(id)
}

// checkSandboxID refuses what cannot name a sandbox: 404 like any missing one.
func checkSandboxID(id string) *Error {
	if len(validation.IsDNS1123Subdomain(id)) > 0 || len(id) > 63 {
		return notFound("sandbox " + strconv.Quote(id))
	}
	return nil
}

// lookup fetches the caller's sandbox from reader; only the tenant's namespace is ever read, so another
// tenant's sandbox is indistinguishable from a missing one.
func (s *Server) lookup(ctx context.Context, reader client.Reader, p auth.Principal, id string) (*airlockv1.Sandbox, *Error) {
	var sb airlockv1.Sandbox
	err := reader.Get(ctx, types.NamespacedName{Namespace: p.Tenant, Name: id}, &sb)
	if apierrors.IsNotFound(err) && reader != s.opts.Client {
		// The cache may not have seen a sandbox created a moment ago.
		err = s.opts.Client.Get(ctx, types.NamespacedName{Namespace: p.Tenant, Name: id}, &sb)
	}
	if err != nil {
		return nil, fromKube(err, "sandbox "+strconv.Quote(id))
	}
	return &sb, nil
}

// sandboxFromPath resolves the {id} of the request to the caller's sandbox, answering the error itself.
func (s *Server) sandboxFromPath(w http.ResponseWriter, r *http.Request, p auth.Principal) (*airlockv1.Sandbox, string, bool) {
	id := r.PathValue("id")
	sb, e := s.sandboxByID(r.Context(), p, id)
	if e != nil {
		writeError(w, e)
		return nil, id, false
	}
	return sb, id, true
}

// extendTimeout raises spec.timeout (lifetime from creation). The sandbox's cap is status.maxTimeout; the API
// server itself refuses a lower value (CEL rule), which we report as 409.
func (s *Server) extendTimeout(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	id, e := sandboxID(r)
	if e != nil {
		writeError(w, e)
		return
	}
	var req TimeoutRequest
	if !s.readJSON(w, r, &req, req.validate) {
		return
	}
	sb, e := s.lookup(r.Context(), s.opts.Client, p, id)
	if e != nil {
		writeError(w, e)
		return
	}
	if st := statusOf(sb); st != "pending" && st != "ready" {
		writeError(w, &Error{Status: http.StatusConflict, Code: CodeConflict, Phase: st,
			Message: "sandbox is " + st + ": its timeout can no longer be changed"})
		return
	}
	want := time.Duration(*req.TimeoutMinutes) * time.Minute
	if mt := sb.Status.MaxTimeout; mt != nil && want > mt.Duration {
		writeError(w, badField("timeout_minutes", "at most %g for this sandbox (its template's and the operator's cap)", mt.Minutes()))
		return
	}
	if cur := sb.Spec.Timeout; cur != nil && want < cur.Duration {
		writeError(w, &Error{Status: http.StatusConflict, Code: CodeConflict,
			Message: fmt.Sprintf("timeout can only be raised: it is %g minutes now", cur.Minutes())})
		return
	}
	patch := fmt.Appendf(nil, `{"spec":{"timeout":%q}}`, want.String())
	if err := s.opts.Client.Patch(r.Context(), sb, client.RawPatch(types.MergePatchType, patch)); err != nil {
		e := fromKube(err, "sandbox "+strconv.Quote(id))
		if apierrors.IsInvalid(err) && strings.Contains(err.Error(), "may only grow") {
			e = &Error{Status: http.StatusConflict, Code: CodeConflict, Message: "timeout can only be raised, never lowered"}
		}
		writeError(w, e)
		return
	}
	writeJSON(w, http.StatusOK, viewOf(sb, time.Now()))
}
