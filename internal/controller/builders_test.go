package controller

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
)

// sandboxBuilder builds test Sandboxes: makeSandbox(ns, name).template("t").timeout(time.Minute).obj().
type sandboxBuilder struct{ s airlockv1.Sandbox }

func makeSandbox(ns, name string) *sandboxBuilder {
	return &sandboxBuilder{s: airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}}
}

func (b *sandboxBuilder) image(img string) *sandboxBuilder { b.s.Spec.Image = img; return b }

func (b *sandboxBuilder) template(name string) *sandboxBuilder {
	b.s.Spec.TemplateRef = &airlockv1.TemplateReference{Name: name}
	return b
}

func (b *sandboxBuilder) timeout(d time.Duration) *sandboxBuilder {
	b.s.Spec.Timeout = &metav1.Duration{Duration: d}
	return b
}

func (b *sandboxBuilder) idleTimeout(d time.Duration) *sandboxBuilder {
	b.s.Spec.IdleTimeout = &metav1.Duration{Duration: d}
	return b
}

func (b *sandboxBuilder) runtime(rc string) *sandboxBuilder {
	b.s.Spec.RuntimeClassName = &rc
	return b
}

func (b *sandboxBuilder) size(s airlockv1.Size) *sandboxBuilder { b.s.Spec.Size = s; return b }

func (b *sandboxBuilder) network(n airlockv1.NetworkSpec) *sandboxBuilder {
	b.s.Spec.Network = &n
	return b
}

func (b *sandboxBuilder) labels(l map[string]string) *sandboxBuilder { b.s.Spec.Labels = l; return b }

func (b *sandboxBuilder) obj() *airlockv1.Sandbox { return b.s.DeepCopy() }

// templateBuilder builds test SandboxTemplates.
type templateBuilder struct{ t airlockv1.SandboxTemplate }

func makeTemplate(ns, name, image string) *templateBuilder {
	return &templateBuilder{t: airlockv1.SandboxTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       airlockv1.SandboxTemplateSpec{Image: image},
	}}
}

func (b *templateBuilder) maxTimeout(d time.Duration) *templateBuilder {
	b.t.Spec.MaxTimeout = &metav1.Duration{Duration: d}
	return b
}

func (b *templateBuilder) defaultTimeout(d time.Duration) *templateBuilder {
	b.t.Spec.DefaultTimeout = &metav1.Duration{Duration: d}
	return b
}

func (b *templateBuilder) obj() *airlockv1.SandboxTemplate { return b.t.DeepCopy() }

func (b *sandboxBuilder) env(e ...airlockv1.EnvVar) *sandboxBuilder { b.s.Spec.Env = e; return b }

func (b *templateBuilder) env(e ...airlockv1.EnvVar) *templateBuilder { b.t.Spec.Env = e; return b }
