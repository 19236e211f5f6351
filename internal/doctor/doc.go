// Package doctor tells what a cluster has and lacks for Airlock (`airlock doctor`): it gathers the facts
// (facts.go: the Kubernetes version and APIs, nodes, RuntimeClasses, an installed manager and its images),
// proves NetworkPolicy enforcement and the runtime's isolation with a probe pod that runs airlock-init's own
// gate (probe.go), judges each with what to set (judge.go, pure) and prints one screen (report.go).
package doctor
