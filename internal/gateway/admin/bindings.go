package admin

import (
	"context"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// roleBinding is one RoleBinding a tenant gets: an install's ClusterRole bound to one of its ServiceAccounts,
// in the tenant only.
type roleBinding struct {
	name, clusterRole string
	subject           rbacv1.Subject
	// what the ClusterRole grants, the CLI flag naming it, and its name's suffix in a Helm release: for errors.
	what, flag, helmSuffix string
}

// clusterRoleExists refuses a binding to a missing ClusterRole, which would grant nothing, silently.
func (b roleBinding) clusterRoleExists(ctx context.Context, c client.Client) error {
	if err := c.Get(ctx, client.ObjectKey{Name: b.clusterRole}, &rbacv1.ClusterRole{}); err != nil {
		return fmt.Errorf("ClusterRole %s (%s): %w; install Airlock first (Helm or config/default), or name it with %s (Helm: <release>-airlock-%s)",
			b.clusterRole, b.what, err, b.flag, b.helmSuffix)
	}
	return nil
}

// ensure creates or updates the binding in ns.
func (b roleBinding) ensure(ctx context.Context, c client.Client, ns string) error {
	ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: b.clusterRole}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: b.name, Namespace: ns}}
	if err := c.Get(ctx, client.ObjectKeyFromObject(rb), rb); err == nil && rb.RoleRef != ref {
		// roleRef is immutable: an update could not fix it.
		return fmt.Errorf("RoleBinding %s/%s refers to %s %s, not ClusterRole %s: delete it, or pass %s %s",
			ns, b.name, rb.RoleRef.Kind, rb.RoleRef.Name, b.clusterRole, b.flag, rb.RoleRef.Name)
	}
	if _, err := createOrUpdate(ctx, c, rb, func() {
		rb.RoleRef = ref
		rb.Subjects = []rbacv1.Subject{b.subject}
	}); err != nil {
		return fmt.Errorf("RoleBinding %s in %s: %w", b.name, ns, err)
	}
	return nil
}
