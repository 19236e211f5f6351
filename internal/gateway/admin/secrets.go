package admin

import (
	"context"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// SecretsRoleName is the tenant's Role and RoleBinding that let the gateway store and read sandboxes' scoped
// secrets there (docs/pools.md); the chart names them the same for its tenants. A Role, not a ClusterRole: the
// gateway reads no Secret outside its own namespace and its tenants'.
const SecretsRoleName = "airlock-gateway-secrets"

// bindSecrets creates the Role and RoleBinding for the gateway's scoped secrets in tenant ns.
func bindSecrets(ctx context.Context, c client.Client, ns string, o TenantOptions) error {
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: SecretsRoleName, Namespace: ns}}
	if _, err := createOrUpdate(ctx, c, role, func() {
		role.Rules = []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create", "get"}}}
	}); err != nil {
		return fmt.Errorf("secrets Role in %s: %w", ns, err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: SecretsRoleName, Namespace: ns}}
	if _, err := createOrUpdate(ctx, c, rb, func() {
		rb.RoleRef = rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: SecretsRoleName}
		rb.Subjects = []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: o.GatewayServiceAccount, Namespace: o.GatewayNamespace}}
	}); err != nil {
		return fmt.Errorf("secrets RoleBinding in %s: %w", ns, err)
	}
	return nil
}
