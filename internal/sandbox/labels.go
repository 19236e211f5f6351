package sandbox

const (
	// LabelName is set on every object made for a sandbox, with the Sandbox's name as value. A pool member has
	// its own name there, and keeps it when a Sandbox claims it.
	LabelName = "sandbox.airlock.dev/name"
	// LabelManagedBy marks objects Airlock created.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedByValue is the value of LabelManagedBy.
	ManagedByValue = "airlock"

	// ContainerName is the sandbox's main container, the one commands are executed in.
	ContainerName = "sandbox"

	// ToolsDir is where the sandbox container sees airlock-init: InitImage's InitImagePath, read-only.
	ToolsDir = "/airlock/bin"
	// InitBinary is the path of airlock-init inside the sandbox container.
	InitBinary = ToolsDir + "/airlock-init"

	// ProcessLimitEnv carries PodOptions.ProcessLimit to the supervisor in the sandbox (runwrap.ProcessLimitEnv).
	ProcessLimitEnv = "AIRLOCK_PROCESS_LIMIT"

	// SandboxUID is the fixed non-root user commands run as.
	SandboxUID int64 = 1000
)

// SelectorLabels are the labels that select a sandbox's pod.
func SelectorLabels(sandboxName string) map[string]string {
	return map[string]string{LabelName: sandboxName}
}
