package sandbox

import (
	airlockv1 "airlock.dev/airlock/api/v1alpha1"

	corev1 "k8s.io/api/core/v1"
)

// ProxyTargetFlag is airlock-init setup's flag for the egress proxy the gate must reach.
const ProxyTargetFlag = "--proxy-target="

// NetworkModeEnv tells commands (and the models driving them) the sandbox's network mode: none or restricted.
const NetworkModeEnv = "AIRLOCK_NETWORK"

// noNetworkIndex is where package tools look in mode None: a name that cannot resolve, which says why.
const noNetworkIndex = "https://sandbox-has-no-network.invalid/"

// NetworkEnv is the environment that makes the common tools work, or fail at once with a clear message, in
// the sandbox's network mode. Restricted with an allowlist: the proxy variables (by the proxy Service's IP:
// the sandbox has no DNS), which pip, npm, git and curl honour. None: pip and npm point at an index whose name
// says the network is off, with retries off, so they fail in a second rather than back off for a minute.
// A template or sandbox may override any of them: they only help tools, the sandbox's NetworkPolicy and PID 1's
// gate (its flags) do not depend on them.
func NetworkEnv(n airlockv1.NetworkSpec, proxy *EgressProxy) []corev1.EnvVar {
	if n.Mode != airlockv1.NetworkRestricted {
		return []corev1.EnvVar{
			{Name: "PIP_INDEX_URL", Value: noNetworkIndex + "pypi/simple/"},
			{Name: "PIP_RETRIES", Value: "0"},
			{Name: "PIP_TIMEOUT", Value: "2"},
			{Name: "npm_config_registry", Value: noNetworkIndex + "npm/"},
			{Name: "npm_config_fetch_retries", Value: "0"},
			{Name: "npm_config_fetch_timeout", Value: "2000"},
		}
	}
	var env []corev1.EnvVar
	if !NeedsProxy(n) || proxy == nil {
		return env
	}
	url := "http://" + proxy.Address
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "npm_config_proxy", "npm_config_https_proxy"} {
		env = append(env, corev1.EnvVar{Name: k, Value: url})
	}
	for _, k := range []string{"NO_PROXY", "no_proxy"} {
		env = append(env, corev1.EnvVar{Name: k, Value: "localhost,127.0.0.1,::1"})
	}
	return env
}

// networkModeEnv is NetworkModeEnv, one of Airlock's own variables (BuildPod puts it with them, last).
func networkModeEnv(n airlockv1.NetworkSpec) corev1.EnvVar {
	if n.Mode == airlockv1.NetworkRestricted {
		return corev1.EnvVar{Name: NetworkModeEnv, Value: "restricted"}
	}
	return corev1.EnvVar{Name: NetworkModeEnv, Value: "none"}
}
