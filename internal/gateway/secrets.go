package gateway

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/sandbox"
)

// Scoped secrets are values for one sandbox's task (a git token, say), given at create. They are never in the
// pod spec (so a warm pool member can take them) nor in the Sandbox: the gateway keeps them in an immutable
// Secret owned by the Sandbox, which the garbage collector deletes with it, injects them into the environment
// of every command it runs there, and masks them wherever sandbox-derived bytes leave the gateway (masker.go).

// AnnotationSecrets lists, comma-separated, the names of a sandbox's scoped secrets: a command must not run
// without them.
const AnnotationSecrets = "gateway.airlock.dev/secrets"

const (
	maxSecrets = 16
	// minMaskedSecret is the shortest value masked in output: a shorter one would mask ordinary text.
	minMaskedSecret = 4
)

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// secretName is the Secret that holds a sandbox's scoped secrets.
func secretName(sb *airlockv1.Sandbox) string { return sb.Name + "-secrets" }

// validateSecrets checks a create's secrets: C identifiers that do not repeat an env name, bounded values.
func validateSecrets(req *CreateRequest) *Error {
	if len(req.Secrets) > maxSecrets {
		return badField("secrets", "at most %d", maxSecrets)
	}
	for k, v := range req.Secrets {
		switch {
		case !envName.MatchString(k) || len(k) > 256:
			return badField("secrets", "name %q is not an environment variable name", k)
		case len(v) > maxEnvValue:
			return badField("secrets", "value of %s is longer than %d bytes", k, maxEnvValue)
		case !utf8.ValidString(v) || strings.ContainsRune(v, 0):
			return badField("secrets", "value of %s must be UTF-8 text without NUL", k)
		}
		if _, dup := req.Env[k]; dup {
			return badField("secrets", "%s is also in env", k)
		}
	}
	return nil
}

// markSecrets records the secrets' names on the sandbox before it is created.
func markSecrets(sb *airlockv1.Sandbox, secrets map[string]string) {
	if len(secrets) > 0 {
		sb.Annotations[AnnotationSecrets] = strings.Join(sortedKeys(secrets), ",")
	}
}

// storeSecrets creates the sandbox's Secret, owned by it, once the sandbox exists (its UID is the owner).
func (s *Server) storeSecrets(ctx context.Context, sb *airlockv1.Sandbox, secrets map[string]string) *Error {
	if len(secrets) == 0 {
		return nil
	}
	data := make(map[string][]byte, len(secrets))
	for k, v := range secrets {
		data[k] = []byte(v)
	}
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: secretName(sb), Namespace: sb.Namespace,
			Labels: map[string]string{sandbox.LabelName: sb.Name, sandbox.LabelManagedBy: sandbox.ManagedByValue},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: airlockv1.GroupVersion.String(), Kind: "Sandbox",
				Name: sb.Name, UID: sb.UID}}},
		Immutable: ptr.To(true),
		Type:      corev1.SecretTypeOpaque,
		Data:      data,
	}
	if err := s.opts.Client.Create(ctx, sec); err != nil {
		return fromKube(err, "secrets")
	}
	s.secrets.put(sb.UID, secrets)
	return nil
}

// secretCache keeps the secrets of sandboxes by UID. Their Secrets are immutable, so an entry never goes
// stale; it is dropped with the cache when the cache grows past its bound.
type secretCache struct {
	mu sync.Mutex
	m  map[types.UID]map[string]string
}

const secretCacheEntries = 4096

func (c *secretCache) get(uid types.UID) (map[string]string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[uid]
	return v, ok
}

func (c *secretCache) put(uid types.UID, v map[string]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= secretCacheEntries {
		c.m = map[types.UID]map[string]string{}
	}
	c.m[uid] = v
}

// sandboxSecrets returns the sandbox's scoped secrets (nil if it has none), read once from its Secret. A Secret
// that is missing, or not owned by this very Sandbox, fails the command rather than running it without them.
func (s *Server) sandboxSecrets(ctx context.Context, sb *airlockv1.Sandbox) (map[string]string, *Error) {
	names := sb.Annotations[AnnotationSecrets]
	if names == "" {
		return nil, nil
	}
	if v, ok := s.secrets.get(sb.UID); ok {
		return v, nil
	}
	sec := &corev1.Secret{}
	err := s.opts.Client.Get(ctx, types.NamespacedName{Namespace: sb.Namespace, Name: secretName(sb)}, sec)
	owned := err == nil && slices.ContainsFunc(sec.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == sb.UID })
	switch {
	case apierrors.IsNotFound(err) || (err == nil && !owned):
		return nil, &Error{Status: http.StatusConflict, Code: CodeNotReady,
			Message: fmt.Sprintf("sandbox %s's secrets (%s) are not stored: the command did not run", sb.Name, names)}
	case err != nil:
		return nil, fromKube(err, "secrets")
	}
	v := make(map[string]string, len(sec.Data))
	for k, b := range sec.Data {
		v[k] = string(b)
	}
	s.secrets.put(sb.UID, v)
	return v, nil
}

// execEnv is a command's environment: the claim's late-bound env, the scoped secrets, then the request's own.
func (s *Server) execEnv(ctx context.Context, sb *airlockv1.Sandbox, req map[string]string) map[string]string {
	env := lateEnv(sb, req)
	secrets, _ := s.sandboxSecrets(ctx, sb) // readySandbox has loaded them or refused the sandbox
	if len(secrets) == 0 {
		return env
	}
	out := make(map[string]string, len(env)+len(secrets))
	for k, v := range secrets {
		out[k] = v
	}
	for k, v := range env {
		out[k] = v
	}
	return out
}
