package gateway

import (
	"context"

	"airlock.dev/airlock/internal/gateway/auth"
)

// contextWithPrincipal carries a slot the auth middleware fills, so that the access log can name the tenant.
func contextWithPrincipal(ctx context.Context, p *auth.Principal) context.Context {
	return context.WithValue(ctx, tenantKey, p)
}

func principalFrom(ctx context.Context) *auth.Principal {
	p, _ := ctx.Value(tenantKey).(*auth.Principal)
	return p
}
