package controller

import (
	"context"
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ReasonNamespaceNotTenant: the manager may not write the sandbox's pod or NetworkPolicy in its namespace,
// because the namespace is not an Airlock tenant (the manager's writes are granted per tenant, rbac.go). It
// retries, so making the namespace a tenant lets the sandbox start.
const ReasonNamespaceNotTenant = "NamespaceNotTenant"

// writeTarget names what a create was for: the resource the manager asks about, and what to call it.
type writeTarget struct {
	group, resource, what string
}

var (
	podWrite    = writeTarget{group: "", resource: "pods", what: "pods"}
	policyWrite = writeTarget{group: "networking.k8s.io", resource: "networkpolicies", what: "NetworkPolicies"}
)

// notTenant tells whether err, from creating target in ns, is the API server's authorization refusing the
// manager (as opposed to admission, e.g. a quota or Pod Security, which also answers Forbidden): it asks with
// a SelfSubjectAccessReview, which needs no permission. It returns the blocker to record, or nil.
func notTenant(ctx context.Context, c client.Client, err error, ns string, target writeTarget) (*blocker, error) {
	if !apierrors.IsForbidden(err) {
		return nil, nil
	}
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Group: target.group, Resource: target.resource},
	}}
	if cerr := c.Create(ctx, review); cerr != nil {
		return nil, fmt.Errorf("asking whether the manager may create %s in %s: %w (after: %w)", target.what, ns, cerr, err)
	}
	if review.Status.Allowed {
		return nil, nil
	}
	return &blocker{reason: ReasonNamespaceNotTenant, message: notTenantMessage(ns, target)}, nil
}

func notTenantMessage(ns string, target writeTarget) string {
	return fmt.Sprintf("the manager may not create %s in namespace %s: it is not an Airlock tenant. Make it one with "+
		"`airlock tenant create %s` (add --adopt for an existing namespace) or list it in the Helm chart's tenants", target.what, ns, ns)
}
