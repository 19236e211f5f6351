package controller

// The manager's /metrics is served only to callers the API server authenticates and authorizes
// (cmd/manager/metrics.go: controller-runtime's filters.WithAuthenticationAndAuthorization), which asks it
// with a TokenReview and a SubjectAccessReview per scrape.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
