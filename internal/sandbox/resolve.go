package sandbox

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
)

// Defaults are the operator-wide settings that apply where neither the Sandbox nor its template says.
type Defaults struct {
	// RuntimeClassName is used when neither sandbox nor template names one.
	RuntimeClassName string
	// Timeout is the lifetime of sandboxes that set none.
	Timeout time.Duration
	// MaxTimeout is the operator's cap on every sandbox's lifetime.
	MaxTimeout time.Duration
	// IsolatingRuntimes are the runtime classes under which a template may run commands as root.
	IsolatingRuntimes []string
}

// DefaultDefaults are the built-in defaults (documented in docs/sizes.md).
func DefaultDefaults() Defaults {
	return Defaults{
		RuntimeClassName:  "gvisor",
		Timeout:           30 * time.Minute,
		MaxTimeout:        24 * time.Hour,
		IsolatingRuntimes: []string{"gvisor", "kata"},
	}
}

// Resolved is everything needed to build a sandbox's pod and policy, after applying the template and defaults.
type Resolved struct {
	Image            string
	RuntimeClassName string
	Size             airlockv1.Size
	Resources        corev1.ResourceRequirements
	WorkdirLimit     resource.Quantity
	WorkingDir       string
	// Timeout is the effective lifetime from creation, already capped by MaxTimeout.
	Timeout time.Duration
	// MaxTimeout is the most the timeout may ever be raised to.
	MaxTimeout time.Duration
	Network    airlockv1.NetworkSpec
	Env        []airlockv1.EnvVar
	RunAsRoot  bool
	Labels     map[string]string
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
	case ts.Network != nil:
		r.Network = *ts.Network.DeepCopy()
	}
	if r.Network.Mode == "" {
		r.Network.Mode = airlockv1.NetworkNone
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

	if r.RunAsRoot && !slices.Contains(d.IsolatingRuntimes, r.RuntimeClassName) {
		return Resolved{}, fmt.Errorf("template %q asks for root, which is allowed only under an isolating runtime (%v), not %q",
			tmpl.Name, d.IsolatingRuntimes, r.RuntimeClassName)
	}
	return r, nil
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
