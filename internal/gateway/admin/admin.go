// Package admin does what `airlock keys` and `airlock tenant` do: create tenants (namespaces with a sandbox
// quota) and create, list and revoke their API keys. Tests use it too.
package admin

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/gateway/auth"
)

const (
	// LabelTenant ("true") marks a namespace as a gateway tenant; the gateway refuses keys of other namespaces.
	LabelTenant = auth.LabelTenant
	// QuotaName is the tenant's ResourceQuota.
	QuotaName = "airlock-sandboxes"
	// QuotaResource is the object-count quota on Sandboxes. The API server's quota admission checks and
	// increments it atomically, so racing creates can never exceed it.
	QuotaResource corev1.ResourceName = "count/sandboxes.sandbox.airlock.dev"
	// ExecBindingName is the tenant's RoleBinding that lets the gateway exec there; the chart names it the same
	// (templates/gateway/rbac.yaml), so the CLI and the chart manage one object.
	ExecBindingName = "airlock-gateway-exec"
	// ManagerBindingName is the tenant's RoleBinding that lets the manager create and delete sandbox pods and
	// their NetworkPolicies there; the chart names it the same (templates/tenants.yaml).
	ManagerBindingName = "airlock-manager-tenant"
)

// Defaults of the installation's names, as the chart (release "airlock") and config/ name them.
const (
	DefaultGatewayServiceAccount = "airlock-gateway"
	DefaultGatewayNamespace      = "airlock-system"
	DefaultExecClusterRole       = "airlock-gateway-exec"
	DefaultManagerServiceAccount = "airlock-manager"
	DefaultManagerClusterRole    = "airlock-manager-tenant"
	// DefaultKeyNamespace holds the API key Secrets and nothing else: the gateway's Secret permission there
	// reaches no other Secret (not the exec guard's certificate in the gateway's own namespace).
	DefaultKeyNamespace = "airlock-keys"
)

// ErrNotTenant is returned for a namespace that exists but does not carry LabelTenant.
var ErrNotTenant = errors.New("not an Airlock tenant")

// TenantOptions configure CreateTenant.
type TenantOptions struct {
	MaxSandboxes int64
	// TemplatesFrom, if set, is a namespace whose SandboxTemplates are copied into the tenant (templates are
	// namespaced, and the gateway's default template must exist in each tenant).
	TemplatesFrom string
	// Adopt makes an existing namespace that is not yet a tenant one. Without it such a namespace is refused:
	// becoming a tenant lets the gateway exec into every pod there.
	Adopt bool
	// GatewayServiceAccount and GatewayNamespace name the gateway's ServiceAccount, which gets pods/exec in the
	// tenant through a RoleBinding (ExecBindingName) to the ClusterRole ExecClusterRole. An empty
	// GatewayServiceAccount creates no binding (a gateway that runs with other credentials, as in tests).
	GatewayServiceAccount string
	GatewayNamespace      string
	ExecClusterRole       string
	// ManagerServiceAccount and ManagerNamespace name the manager's ServiceAccount, which may create sandbox
	// pods and policies only in tenants: a RoleBinding (ManagerBindingName) to ManagerClusterRole. An empty
	// ManagerServiceAccount creates no binding.
	ManagerServiceAccount string
	ManagerNamespace      string
	ManagerClusterRole    string
	// KeyNamespace holds the API key Secrets: never a tenant (tenants let the gateway create Secrets).
	KeyNamespace string
}

// bindings are the RoleBindings a tenant gets, for the identities o names.
func (o TenantOptions) bindings() []roleBinding {
	var b []roleBinding
	if o.GatewayServiceAccount != "" {
		b = append(b, roleBinding{name: ExecBindingName, clusterRole: o.ExecClusterRole, flag: "--exec-cluster-role",
			what: "the gateway's exec permission", helmSuffix: "gateway-exec",
			subject: rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: o.GatewayServiceAccount, Namespace: o.GatewayNamespace}})
	}
	if o.ManagerServiceAccount != "" {
		b = append(b, roleBinding{name: ManagerBindingName, clusterRole: o.ManagerClusterRole, flag: "--manager-cluster-role",
			what: "the manager's permission to create sandbox pods", helmSuffix: "manager-tenant",
			subject: rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: o.ManagerServiceAccount, Namespace: o.ManagerNamespace}})
	}
	return b
}

// CreateTenant creates (or updates) the tenant's namespace with the restricted Pod Security Standard
// enforced, audited and warned, the gateway's exec and the manager's RoleBindings and the sandbox quota.
func CreateTenant(ctx context.Context, c client.Client, name string, o TenantOptions) error {
	if err := o.validate(name); err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	switch err := c.Get(ctx, client.ObjectKeyFromObject(ns), ns); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("namespace %s: %w", name, err)
	case ns.Labels[LabelTenant] != "true" && !o.Adopt:
		return fmt.Errorf("namespace %s already exists and is %w (no label %s=true): "+
			"pass --adopt to make it one (the gateway may then exec into every pod in it), or pick a new name", name, ErrNotTenant, LabelTenant)
	}
	for _, b := range o.bindings() {
		if err := b.clusterRoleExists(ctx, c); err != nil {
			return err
		}
	}
	ns = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := createOrUpdate(ctx, c, ns, func() {
		if ns.Labels == nil {
			ns.Labels = map[string]string{}
		}
		ns.Labels[LabelTenant] = "true"
		for _, mode := range []string{"enforce", "audit", "warn"} {
			ns.Labels["pod-security.kubernetes.io/"+mode] = "restricted"
		}
	}); err != nil {
		return fmt.Errorf("namespace %s: %w", name, err)
	}
	for _, b := range o.bindings() {
		if err := b.ensure(ctx, c, name); err != nil {
			return err
		}
	}
	if o.GatewayServiceAccount != "" {
		if err := bindSecrets(ctx, c, name, o); err != nil {
			return err
		}
	}
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: QuotaName, Namespace: name}}
	if _, err := createOrUpdate(ctx, c, q, func() {
		q.Spec.Hard = corev1.ResourceList{QuotaResource: *resource.NewQuantity(o.MaxSandboxes, resource.DecimalSI)}
	}); err != nil {
		return fmt.Errorf("quota in %s: %w", name, err)
	}
	if err := waitQuotaReady(ctx, c, name); err != nil {
		return err
	}
	if o.TemplatesFrom != "" {
		var list airlockv1.SandboxTemplateList
		if err := c.List(ctx, &list, client.InNamespace(o.TemplatesFrom)); err != nil {
			return fmt.Errorf("templates in %s: %w", o.TemplatesFrom, err)
		}
		for _, t := range list.Items {
			cp := &airlockv1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Name: t.Name, Namespace: name}}
			if _, err := createOrUpdate(ctx, c, cp, func() {
				cp.Spec = t.Spec
				// Airlock's own annotations describe the template (e.g. what is installed, for the tool
				// descriptions): they travel with it.
				for k, v := range t.Annotations {
					if strings.HasPrefix(k, "sandbox.airlock.dev/") {
						metav1.SetMetaDataAnnotation(&cp.ObjectMeta, k, v)
					}
				}
			}); err != nil {
				return fmt.Errorf("template %s: %w", t.Name, err)
			}
		}
	}
	return nil
}

// createOrUpdate gets obj, applies mutate and creates or updates it.
func createOrUpdate(ctx context.Context, c client.Client, obj client.Object, mutate func()) (created bool, err error) {
	err = c.Get(ctx, client.ObjectKeyFromObject(obj), obj)
	switch {
	case apierrors.IsNotFound(err):
		mutate()
		return true, c.Create(ctx, obj)
	case err != nil:
		return false, err
	}
	mutate()
	return false, c.Update(ctx, obj)
}

// CreateKey stores a new key for tenant in keyNamespace and returns it: the only time it is ever seen.
func CreateKey(ctx context.Context, c client.Client, keyNamespace, tenant, name string) (key, id string, err error) {
	var ns corev1.Namespace
	if err := c.Get(ctx, types.NamespacedName{Name: tenant}, &ns); err != nil {
		return "", "", fmt.Errorf("tenant %s: %w (create it with `airlock tenant create %s`)", tenant, err, tenant)
	}
	// The gateway refuses keys of namespaces without the label; refusing here keeps keys from being made for
	// a namespace by mistake.
	if ns.Labels[LabelTenant] != "true" {
		return "", "", fmt.Errorf("namespace %s is %w (no label %s=true): make it one with `airlock tenant create %s --adopt`",
			tenant, ErrNotTenant, LabelTenant, tenant)
	}
	key, id, err = auth.NewKey()
	if err != nil {
		return "", "", err
	}
	if err := c.Create(ctx, auth.NewSecret(keyNamespace, id, key, tenant, name, time.Now())); err != nil {
		return "", "", fmt.Errorf("storing key: %w", err)
	}
	return key, id, nil
}

// ListKeys lists the stored keys (metadata only), oldest first.
func ListKeys(ctx context.Context, c client.Client, keyNamespace string) ([]auth.Key, error) {
	var list corev1.SecretList
	if err := c.List(ctx, &list, client.InNamespace(keyNamespace), client.MatchingLabels{auth.LabelAPIKey: "true"}); err != nil {
		return nil, fmt.Errorf("listing keys: %w", err)
	}
	var keys []auth.Key
	for i := range list.Items {
		if k, err := auth.KeyFromSecret(&list.Items[i]); err == nil {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].Created.Before(keys[j].Created) })
	return keys, nil
}

// RevokeKey marks the key revoked (keeping its record) or, with remove, deletes its Secret.
func RevokeKey(ctx context.Context, c client.Client, keyNamespace, id string, remove bool) error {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: auth.SecretName(id), Namespace: keyNamespace}}
	if remove {
		if err := c.Delete(ctx, s); err != nil {
			return fmt.Errorf("deleting key %s: %w", id, err)
		}
		return nil
	}
	patch := []byte(`{"data":{"` + auth.DataRevoked + `":"dHJ1ZQ=="}}`) // base64("true")
	if err := c.Patch(ctx, s, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("revoking key %s: %w", id, err)
	}
	return nil
}

// quotaWait bounds how long CreateTenant waits for the quota controller; a new CRD's type can take it ~20 s to
// discover.
const quotaWait = 90 * time.Second

// waitQuotaReady waits until the quota controller has filled the tenant quota's status (hard and used): until then the API
// server's quota admission refuses every Sandbox create in the namespace ("status unknown for quota").
func waitQuotaReady(ctx context.Context, c client.Client, ns string) error {
	ctx, cancel := context.WithTimeout(ctx, quotaWait)
	defer cancel()
	for {
		q := &corev1.ResourceQuota{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: QuotaName}, q); err == nil {
			// Admission needs both: hard comes at once, used only after the controller's quota monitor has
			// discovered the Sandbox type.
			_, hard := q.Status.Hard[QuotaResource]
			_, used := q.Status.Used[QuotaResource]
			if hard && used {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("quota in %s: the cluster's quota controller did not fill its status within %s (is kube-controller-manager running?)", ns, quotaWait)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
