package controller

// The manager's /metrics is served only to callers the API server authenticates and authorizes
// (cmd/manager/metrics.go: controller-runtime's filters.WithAuthenticationAndAuthorization), which asks it
// with a TokenReview and a SubjectAccessReview per scrape.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// The manager's permissions come in two ClusterRoles (config/rbac/role.yaml). airlock-manager, bound
// cluster-wide, reads what its caches watch (pods and NetworkPolicies included) and writes only Airlock's own
// objects and events. airlock-manager-tenant holds every write to pods and NetworkPolicies and is bound by a
// RoleBinding in each tenant namespace only (the chart's tenants, `airlock tenant create`): a stolen manager
// token cannot start a pod in kube-system or any other namespace that is not a tenant. A Sandbox elsewhere
// stays Ready=False with reason NamespaceNotTenant (tenancy.go).
// Reading a sandbox pod's log (PID 1's), in tenants only:
// +kubebuilder:rbac:groups="",resources=pods/log,verbs=get,roleName=airlock-manager-tenant
