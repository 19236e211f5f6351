package sandbox

import (
	"fmt"
	"slices"
	"strings"
)

// ReservedEnvPrefix starts the names of Airlock's own variables. The sandbox's PID 1 (airlock-init) reads them
// from its environment, which is the pod's: the network gate's target (AIRLOCK_NODE_IP), the memory guard, the
// process limit, its socket and the roles it re-executes itself in. A tenant's value would switch those off, so
// no env of a sandbox, template, pool claim or command may set one.
const ReservedEnvPrefix = "AIRLOCK_"

// GoRuntimeEnv are read by the Go runtime of airlock-init, a Go program and the pod's PID 1: in the pod's env
// they change how Airlock's own machinery runs (GODEBUG its TLS and network behaviour, GOGC and GOMEMLIMIT its
// memory, GOMAXPROCS its threads, GOTRACEBACK what a crash prints). Set per command, in an exec request's env,
// they reach only that command, so they are reserved in the pod's env alone. Sorted; the CRD's CEL rule on
// env names (api/v1alpha1 EnvVar) lists the same.
var GoRuntimeEnv = []string{"GODEBUG", "GOGC", "GOMAXPROCS", "GOMEMLIMIT", "GOTRACEBACK"}

// CheckPodEnvName refuses a name that may not be set in a sandbox pod's env: a Sandbox's or template's env, a
// create request's env (which becomes the Sandbox's, and a warm pool claim's late-bound env). The error says
// why and, for the Go runtime's variables, where they may be set instead.
func CheckPodEnvName(name string) error {
	if err := CheckCommandEnvName(name); err != nil {
		return err
	}
	if slices.Contains(GoRuntimeEnv, name) {
		return fmt.Errorf("%s is reserved in the sandbox's env: the Go runtime of airlock-init, the sandbox's PID 1, "+
			"reads it and would change how Airlock's own supervisor runs; set it per command instead, in the exec "+
			"request's env, where it reaches only the command", name)
	}
	return nil
}

// CheckCommandEnvName refuses a name that may not be set in one command's env (an exec request's env, a
// scoped secret): Airlock's own variables.
func CheckCommandEnvName(name string) error {
	if strings.HasPrefix(name, ReservedEnvPrefix) {
		return fmt.Errorf("%s is reserved: names starting with %s are Airlock's own variables, which its supervisor "+
			"(the sandbox's PID 1) reads for the network gate, the memory guard and the process limit", name, ReservedEnvPrefix)
	}
	return nil
}
