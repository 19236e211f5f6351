package auth

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Secret layout of a stored key.
const (
	// LabelAPIKey marks key Secrets; the gateway watches only these.
	LabelAPIKey = "sandbox.airlock.dev/api-key"
	// LabelTenant repeats the tenant for `kubectl get secrets -l`.
	LabelTenant = "sandbox.airlock.dev/tenant"
	// SecretPrefix + id is the Secret's name.
	SecretPrefix = "airlock-key-"

	DataHash    = "hash"    // hex SHA-256 of the whole key
	DataTenant  = "tenant"  // the tenant's namespace
	DataCreated = "created" // RFC 3339
	DataName    = "name"    // optional human label
	DataRevoked = "revoked" // "true" once revoked (kept for the record)
)

// Key is a stored key's metadata (never the key itself).
type Key struct {
	ID      string
	Tenant  string
	Name    string
	Created time.Time
	Revoked bool
	hash    string
}

// SecretName is the name of the Secret holding key id.
func SecretName(id string) string { return SecretPrefix + id }

// NewSecret is the Secret that stores a key.
func NewSecret(namespace, id, key, tenant, name string, now time.Time) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      SecretName(id),
			Namespace: namespace,
			Labels:    map[string]string{LabelAPIKey: "true", LabelTenant: tenant},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			DataHash:    []byte(HashKey(key)),
			DataTenant:  []byte(tenant),
			DataCreated: []byte(now.UTC().Format(time.RFC3339)),
			DataName:    []byte(name),
		},
	}
}

// KeyFromSecret reads a key Secret.
func KeyFromSecret(s *corev1.Secret) (Key, error) {
	id := s.Name[min(len(s.Name), len(SecretPrefix)):]
	if s.Name[:len(s.Name)-len(id)] != SecretPrefix || !ValidID(id) {
		return Key{}, fmt.Errorf("secret %s/%s: name is not %s<id>", s.Namespace, s.Name, SecretPrefix)
	}
	k := Key{
		ID:      id,
		Tenant:  string(s.Data[DataTenant]),
		Name:    string(s.Data[DataName]),
		Revoked: string(s.Data[DataRevoked]) == "true",
		hash:    string(s.Data[DataHash]),
	}
	if k.Tenant == "" || len(k.hash) != 64 {
		return Key{}, fmt.Errorf("secret %s/%s: missing %s or %s", s.Namespace, s.Name, DataTenant, DataHash)
	}
	if t, err := time.Parse(time.RFC3339, string(s.Data[DataCreated])); err == nil {
		k.Created = t
	}
	return k, nil
}
