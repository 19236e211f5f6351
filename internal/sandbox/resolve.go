package sandbox

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/allowlist"
)

// Defaults are the operator-wide settings that apply where neither the Sandbox nor its template says.
type Defaults struct {
	// RuntimeClassName is used when neither sandbox nor template names one.
	RuntimeClassName string
	// Timeout is the lifetime of sandboxes that set none.
	Timeout time.Duration
	// MaxTimeout is the operator's cap on every sandbox's lifetime.
	MaxTimeout time.Duration
	// IsolatingHandlers are globs (path.Match) of the RuntimeClass handlers that count as isolating. Only
	// under them may a template run commands as root.
	IsolatingHandlers []string
	// AllowUnisolated lets sandboxes run under other handlers (e.g. runc); status.isolation then says none.
	AllowUnisolated bool
	// AllowUnverified lets sandboxes run whose pod found nothing proving its handler's isolation, though not
	// the node's own kernel either; status.isolation then says unverified.
	AllowUnverified bool
}

// DefaultDefaults are the built-in defaults (documented in docs/sizes.md).
func DefaultDefaults() Defaults {
	return Defaults{
		RuntimeClassName:  "gvisor",
		Timeout:           30 * time.Minute,
		MaxTimeout:        24 * time.Hour,
		IsolatingHandlers: []string{"runsc", "runsc-*", "gvisor", "kata*"},
	}
}

// Resolved is everything needed to build a sandbox's pod and policy, after applying the template and defaults.
type Resolved struct {
	Image            string
	RuntimeClassName string
	// RuntimeHandler is the RuntimeClass's handler; the controller sets it once it has read the class.
	RuntimeHandler string
	Size           airlockv1.Size
	Resources      corev1.ResourceRequirements
	WorkdirLimit   resource.Quantity
	WorkingDir     string
	// Timeout is the effective lifetime from creation, already capped by MaxTimeout.
	Timeout time.Duration
	// MaxTimeout is the most the timeout may ever be raised to.
	MaxTimeout time.Duration
	// IdleTimeout expires the sandbox after this long without activity; 0 means never.
	IdleTimeout time.Duration
	Network     airlockv1.NetworkSpec
	// EgressProxy is where the sandbox reaches its allowlist's hosts; the controller sets it when the
	// network has an allowlist.
	EgressProxy *EgressProxy
	Env         []airlockv1.EnvVar
	RunAsRoot   bool
	Labels      map[string]string
	// InitFromImage: the image holds airlock-init at InitBinary, so the pod mounts no init volume.
	InitFromImage bool
}

// DefaultWorkingDir is where commands run and files persist when the Sandbox does not say.
const DefaultWorkingDir = "/home/sandbox"

// Resolve applies the template (nil when the sandbox names an image) and the operator defaults to a sandbox.
// Its errors describe a problem the user can fix; they are reported in the Ready condition.
func Resolve(sbx *airlockv1.Sandbox, tmpl *airlockv1.SandboxTemplate, d Defaults) (Resolved, error) {
	var ts airlockv1.SandboxTemplateSpec
	if tmpl != nil {
		ts = tmpl.Spec
	}
	r := Resolved{
		Image:            firstNonEmpty(sbx.Spec.Image, ts.Image),
		RuntimeClassName: firstNonEmpty(deref(sbx.Spec.RuntimeClassName), ts.RuntimeClassName, d.RuntimeClassName),
		Size:             airlockv1.Size(firstNonEmpty(string(sbx.Spec.Size), string(ts.Size), string(DefaultSize))),
		WorkingDir:       firstNonEmpty(sbx.Spec.WorkingDir, DefaultWorkingDir),
		RunAsRoot:        ts.RunAsRoot,
		InitFromImage:    ts.Init == airlockv1.InitFromImage,
		Labels:           sbx.Spec.Labels,
		Env:              mergeEnv(ts.Env, sbx.Spec.Env),
		Network:          airlockv1.NetworkSpec{Mode: airlockv1.NetworkNone},
	}
	if r.Image == "" {
		return Resolved{}, fmt.Errorf("no image: set spec.image or spec.templateRef")
	}
	if sbx.Spec.Resources != nil {
		r.Resources = *sbx.Spec.Resources.DeepCopy()
	} else {
		res, err := Resources(r.Size, ts.Resources)
		if err != nil {
			return Resolved{}, err
		}
		r.Resources = res
	}
	r.WorkdirLimit = WorkdirLimit(r.Size)

	switch {
	case sbx.Spec.Network != nil:
		r.Network = *sbx.Spec.Network.DeepCopy()
		if r.Network.Mode != airlockv1.NetworkRestricted && len(r.Network.Allow) > 0 {
			return Resolved{}, fmt.Errorf("spec.network.allow needs spec.network.mode Restricted")
		}
		if tmpl != nil {
			if err := NarrowAllow(&r.Network, ts.Network, tmpl.Name); err != nil {
				return Resolved{}, err
			}
		}
	case ts.Network != nil:
		r.Network = *ts.Network.DeepCopy()
	}
	if r.Network.Mode == "" {
		r.Network.Mode = airlockv1.NetworkNone
	}
	if r.Network.Mode != airlockv1.NetworkRestricted {
		r.Network.Allow = nil // a None template's list is for the sandboxes that ask for Restricted
	}
	if _, err := allowlist.Parse(r.Network.Allow); err != nil {
		return Resolved{}, fmt.Errorf("network.allow: %w", err)
	}

	r.MaxTimeout = d.MaxTimeout
	if ts.MaxTimeout != nil && ts.MaxTimeout.Duration < r.MaxTimeout {
		r.MaxTimeout = ts.MaxTimeout.Duration
	}
	r.Timeout = d.Timeout
	if ts.DefaultTimeout != nil {
		r.Timeout = ts.DefaultTimeout.Duration
	}
	if sbx.Spec.Timeout != nil {
		r.Timeout = sbx.Spec.Timeout.Duration
	}
	r.Timeout = min(r.Timeout, r.MaxTimeout)
	switch {
	case sbx.Spec.IdleTimeout != nil:
		r.IdleTimeout = sbx.Spec.IdleTimeout.Duration
		// The API server checks this only against a spec.timeout; the template or the operator may supply it.
		if r.IdleTimeout > r.Timeout {
			return Resolved{}, fmt.Errorf("spec.idleTimeout %s exceeds the sandbox's timeout %s, which caps its whole lifetime: set a longer spec.timeout", r.IdleTimeout, r.Timeout)
		}
	case ts.DefaultIdleTimeout != nil:
		// A template default longer than this sandbox's timeout simply never fires first.
		r.IdleTimeout = ts.DefaultIdleTimeout.Duration
	}
	return r, nil
}

// NarrowAllow applies a template's allowlist to a sandbox's Restricted network: none of its own means the
// template's; its own may only narrow the template's, never reach a host the template does not permit. The
// template's list counts whatever the template's own mode: a None template lists what Restricted gets.
func NarrowAllow(n *airlockv1.NetworkSpec, tmplNet *airlockv1.NetworkSpec, tmplName string) error {
	if n.Mode != airlockv1.NetworkRestricted {
		return nil
	}
	var tmplAllow []string
	if tmplNet != nil {
		tmplAllow = tmplNet.Allow
	}
	if len(n.Allow) == 0 {
		n.Allow = slices.Clone(tmplAllow)
		return nil
	}
	permitted, err := allowlist.Parse(tmplAllow)
	if err != nil {
		return fmt.Errorf("template %s's network.allow: %w", tmplName, err)
	}
	for _, a := range n.Allow {
		if !permitted.Covers(a) {
			return fmt.Errorf("network.allow entry %q is not within template %s's allowlist [%s]: a sandbox may narrow its template's allowlist, not widen it",
				a, tmplName, strings.Join(tmplAllow, ", "))
		}
	}
	return nil
}

// CheckRuntime says whether a sandbox may run under a RuntimeClass with this handler: an isolating one, or
// any when non-isolating runtimes are allowed, but root only under an isolating one. The handler, not the
// class name, is what the node runs, so it is what is checked.
func (d Defaults) CheckRuntime(r Resolved, handler string) error {
	if d.IsolatingHandler(handler) {
		return nil
	}
	if r.RunAsRoot {
		return fmt.Errorf("%w: the template asks for root (runAsRoot), which is allowed only under an isolating handler (--isolating-handlers=%s), and RuntimeClass %q has handler %q",
			ErrRootNotIsolated, strings.Join(d.IsolatingHandlers, ","), r.RuntimeClassName, handler)
	}
	if !d.AllowUnisolated {
		return fmt.Errorf("%w: RuntimeClass %q has handler %q, which is not among the isolating handlers (--isolating-handlers=%s), and the operator does not allow non-isolating runtimes (--allow-unisolated-runtimes)",
			ErrNotIsolating, r.RuntimeClassName, handler, strings.Join(d.IsolatingHandlers, ","))
	}
	return nil
}

// Errors of CheckRuntime.
var (
	ErrNotIsolating    = errors.New("runtime not isolating")
	ErrRootNotIsolated = errors.New("root needs an isolating runtime")
)

// IsolatingHandler reports whether a RuntimeClass handler matches one of the isolating globs.
func (d Defaults) IsolatingHandler(handler string) bool {
	return matchesHandler(d.IsolatingHandlers, handler)
}

// ExpectedIsolation is what a sandbox under this handler must prove: gVisor for a gVisor handler
// (GVisorHandlers), a kernel of its own (a VM) for any other isolating handler, nothing for the rest.
func (d Defaults) ExpectedIsolation(handler string) airlockv1.Isolation {
	switch {
	case !d.IsolatingHandler(handler):
		return airlockv1.IsolationNone
	case GVisorHandler(handler):
		return airlockv1.IsolationGVisor
	}
	return airlockv1.IsolationKata
}

// ValidateHandlerGlobs rejects malformed handler patterns (--isolating-handlers, --process-limit-handlers), which
// would otherwise match nothing.
func ValidateHandlerGlobs(globs []string) error {
	for _, g := range globs {
		if _, err := path.Match(g, ""); err != nil {
			return fmt.Errorf("handler pattern %q: %w", g, err)
		}
	}
	return nil
}

// mergeEnv returns base overlaid by over, keeping base's order and appending new names.
func mergeEnv(base, over []airlockv1.EnvVar) []airlockv1.EnvVar {
	out := slices.Clone(base)
	for _, e := range over {
		if i := slices.IndexFunc(out, func(b airlockv1.EnvVar) bool { return b.Name == e.Name }); i >= 0 {
			out[i] = e
			continue
		}
		out = append(out, e)
	}
	return out
}

func firstNonEmpty(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
