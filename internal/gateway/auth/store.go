package auth

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/flowcontrol"
)

// Principal is an authenticated caller.
type Principal struct {
	KeyID  string
	Tenant string
}

// ErrUnauthenticated is returned for a missing, malformed, unknown, wrong or revoked key. The cause is
// deliberately not told apart.
var ErrUnauthenticated = errors.New("invalid or revoked API key")

// Store authenticates keys against the key Secrets in one namespace, read from an informer's cache: a
// request never calls the API server, and a deleted or revoked Secret stops its key within the watch delay.
type Store struct {
	namespace string
	informer  cache.SharedIndexInformer
	lister    listerscorev1.SecretLister
	// live reads a key the cache has not seen yet: a key created a moment ago must work at once. Such reads
	// are rate limited, so well-formed but unknown keys cannot turn into a flood of API calls.
	live        kubernetes.Interface
	liveLimiter flowcontrol.RateLimiter
	// tenants refuses keys whose namespace is not (or no longer) a tenant.
	tenants *tenants
}

// NewStore watches the key Secrets in namespace, and the tenant namespaces. Call Run before Authenticate.
func NewStore(cs kubernetes.Interface, namespace string) *Store {
	f := informers.NewSharedInformerFactoryWithOptions(cs, 10*time.Minute,
		informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = LabelAPIKey + "=true" }))
	inf := f.Core().V1().Secrets()
	return &Store{namespace: namespace, informer: inf.Informer(), lister: inf.Lister(),
		live: cs, liveLimiter: flowcontrol.NewTokenBucketRateLimiter(5, 10), tenants: newTenants(cs)}
}

// Run starts the watch and waits for the first full list (so that no valid key is refused at start-up).
func (s *Store) Run(ctx context.Context) error {
	go s.informer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), s.informer.HasSynced) {
		return fmt.Errorf("key secrets in %s: cache did not sync: %w", s.namespace, context.Cause(ctx))
	}
	return s.tenants.run(ctx)
}

// HasSynced reports whether the key cache is filled (for readiness).
func (s *Store) HasSynced() bool { return s.informer.HasSynced() && s.tenants.informer.HasSynced() }

// Authenticate checks a bearer key, then that its namespace is still a tenant (ErrNotTenant otherwise).
func (s *Store) Authenticate(ctx context.Context, key string) (Principal, error) {
	id, err := ParseKey(key)
	if err != nil {
		return Principal{}, ErrUnauthenticated
	}
	sec, err := s.lister.Secrets(s.namespace).Get(SecretName(id))
	if apierrors.IsNotFound(err) && s.live != nil && s.liveLimiter.TryAccept() {
		sec, err = s.live.CoreV1().Secrets(s.namespace).Get(ctx, SecretName(id), metav1.GetOptions{})
		if err == nil && sec.Labels[LabelAPIKey] != "true" {
			return Principal{}, ErrUnauthenticated
		}
	}
	if apierrors.IsNotFound(err) {
		return Principal{}, ErrUnauthenticated
	}
	if err != nil {
		return Principal{}, fmt.Errorf("key %s: %w", id, err)
	}
	p, err := principalFor(sec, key)
	if err != nil {
		return Principal{}, err
	}
	if err := s.tenants.check(p.Tenant); err != nil {
		return Principal{}, err
	}
	return p, nil
}

func principalFor(sec *corev1.Secret, key string) (Principal, error) {
	k, err := KeyFromSecret(sec)
	if err != nil {
		return Principal{}, ErrUnauthenticated
	}
	// Compare before looking at Revoked so that a revoked key costs the same as a live one.
	if !hashMatches(key, k.hash) || k.Revoked {
		return Principal{}, ErrUnauthenticated
	}
	return Principal{KeyID: k.ID, Tenant: k.Tenant}, nil
}
