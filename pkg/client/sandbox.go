package client

import (
	"context"
	"errors"
	"net/url"
	"time"
)

// Info is a sandbox as the gateway shows it.
type Info struct {
	ID string `json:"id"`
	// Status is pending, ready, expired, terminating or failed.
	Status            string            `json:"status"`
	Reason            string            `json:"reason,omitempty"`
	Message           string            `json:"message,omitempty"`
	Template          string            `json:"template,omitempty"`
	Image             string            `json:"image,omitempty"`
	Size              string            `json:"size,omitempty"`
	Network           string            `json:"network,omitempty"`
	Isolation         string            `json:"isolation,omitempty"`
	TimeoutMinutes    *float64          `json:"timeout_minutes,omitempty"`
	MaxTimeoutMinutes *float64          `json:"max_timeout_minutes,omitempty"`
	WorkingDir        string            `json:"working_dir"`
	CreatedAt         time.Time         `json:"created_at"`
	StartedAt         *time.Time        `json:"started_at,omitempty"`
	ExpiresAt         *time.Time        `json:"expires_at"`
	UsageSeconds      int64             `json:"usage_seconds"`
	Metadata          map[string]string `json:"metadata,omitempty"`
}

// CreateOptions describe a new sandbox; zero values take the gateway's and template's defaults.
type CreateOptions struct {
	Template       string
	Size           string
	TimeoutMinutes int
	// IdleTimeoutMinutes expires the sandbox after that long without a command, file transfer or running
	// background process; 0 is the template's default.
	IdleTimeoutMinutes int
	// Network is "none" (also "off") or "restricted".
	Network string
	Env     map[string]string
	// Secrets are like Env, for this sandbox only: kept in a Secret that goes with it and masked as
	// [masked:NAME] in the output the gateway returns.
	Secrets  map[string]string
	Metadata map[string]string
	// NoWait returns as soon as the sandbox is created instead of once it is Ready.
	NoWait bool
}

type createRequest struct {
	Template       string            `json:"template,omitempty"`
	Size           string            `json:"size,omitempty"`
	TimeoutMinutes *int              `json:"timeout_minutes,omitempty"`
	IdleTimeout    *int              `json:"idle_timeout_minutes,omitempty"`
	Network        string            `json:"network,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	Secrets        map[string]string `json:"secrets,omitempty"`
	Metadata       map[string]string `json:"metadata,omitempty"`
	Wait           *bool             `json:"wait,omitempty"`
}

// Sandbox is one sandbox of the client's tenant.
type Sandbox struct {
	ID    string
	Files *Files
	c     *Client
}

func (c *Client) sandbox(id string) *Sandbox {
	s := &Sandbox{ID: id, c: c}
	s.Files = &Files{s: s}
	return s
}

// Create makes a sandbox and, unless NoWait, waits until it is Ready (the gateway's --ready-timeout; after it
// the sandbox is returned still pending). A 429 rate limit or a 503 is retried: the gateway created nothing.
func (c *Client) Create(ctx context.Context, opts CreateOptions) (*Sandbox, error) {
	req := createRequest{Template: opts.Template, Size: opts.Size, Network: opts.Network, Env: opts.Env, Secrets: opts.Secrets, Metadata: opts.Metadata}
	if req.Network == "off" {
		req.Network = "none"
	}
	if opts.TimeoutMinutes != 0 {
		req.TimeoutMinutes = &opts.TimeoutMinutes
	}
	if opts.IdleTimeoutMinutes != 0 {
		req.IdleTimeout = &opts.IdleTimeoutMinutes
	}
	if opts.NoWait {
		f := false
		req.Wait = &f
	}
	var info Info
	if err := c.call(ctx, "POST", "/v1/sandboxes", req, &info); err != nil {
		return nil, err
	}
	return c.sandbox(info.ID), nil
}

// Connect returns an existing sandbox of the tenant (ErrNotFound otherwise).
func (c *Client) Connect(ctx context.Context, id string) (*Sandbox, error) {
	s := c.sandbox(id)
	if _, err := s.Info(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// List returns the tenant's sandboxes.
func (c *Client) List(ctx context.Context) ([]Info, error) {
	var out struct {
		Sandboxes []Info `json:"sandboxes"`
	}
	if err := c.call(ctx, "GET", "/v1/sandboxes", nil, &out); err != nil {
		return nil, err
	}
	return out.Sandboxes, nil
}

// Info reads the sandbox's current state.
func (s *Sandbox) Info(ctx context.Context) (*Info, error) {
	var info Info
	if err := s.c.call(ctx, "GET", s.path(""), nil, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// SetTimeout sets the sandbox's total lifetime, from its creation, to minutes (only up, at most its
// max_timeout_minutes).
func (s *Sandbox) SetTimeout(ctx context.Context, minutes int) error {
	return s.c.call(ctx, "POST", s.path("/timeout"), map[string]int{"timeout_minutes": minutes}, nil)
}

// Terminate deletes the sandbox. It is idempotent: a sandbox already gone is not an error.
func (s *Sandbox) Terminate(ctx context.Context) error {
	err := s.c.call(ctx, "DELETE", s.path(""), nil, nil)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

func (s *Sandbox) path(suffix string) string { return "/v1/sandboxes/" + url.PathEscape(s.ID) + suffix }
