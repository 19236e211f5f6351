package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"

	"airlock.dev/airlock/internal/runwrap"
)

// reservedEnvTable is every name the rules name, and names next to them that must stay allowed.
func reservedEnvTable() []string {
	names := []string{"AIRLOCK_", "AIRLOCK_NODE_IP", "AIRLOCK_MEMORY_GUARD", "AIRLOCK_PROCESS_LIMIT", "AIRLOCK_SUPERVISOR_SOCKET",
		"AIRLOCK_RUNWRAP_ROLE", "AIRLOCK_RUNWRAP_EXEC", "AIRLOCK_NETWORK", "AIRLOCK_ANYTHING_NEW",
		"AIRLOCK", "airlock_node_ip", "Airlock_NODE_IP", "MY_AIRLOCK_NODE_IP", "_AIRLOCK_NODE_IP",
		"GO", "GOPATH", "GOFLAGS", "GODEBUGX", "XGOGC", "godebug", "gomaxprocs",
		"HOME", "USER", "PATH", "HTTP_PROXY", "NO_PROXY", "PIP_INDEX_URL"}
	for _, n := range GoRuntimeEnv {
		names = append(names, n, n+"_", strings.ToLower(n))
	}
	return names
}

func TestCheckPodEnvName(t *testing.T) {
	for name, refused := range map[string]bool{"AIRLOCK_NODE_IP": true, "AIRLOCK_MEMORY_GUARD": true, "GODEBUG": true, "GOMEMLIMIT": true,
		"AIRLOCK": false, "airlock_node_ip": false, "GOPATH": false, "HOME": false, "HTTP_PROXY": false} {
		err := CheckPodEnvName(name)
		if (err != nil) != refused {
			t.Errorf("%s: error %v, want refused=%v", name, err, refused)
		}
		if err != nil && !strings.HasPrefix(err.Error(), name+" is reserved") {
			t.Errorf("%s: the error must name the variable first: %v", name, err)
		}
	}
	if err := CheckPodEnvName("GOGC"); err == nil || !strings.Contains(err.Error(), "exec request's env") {
		t.Errorf("a Go runtime variable's error must say where it may be set: %v", err)
	}
}

// In one command's env only Airlock's own prefix is reserved: the Go runtime's variables reach the command alone.
func TestCheckCommandEnvName(t *testing.T) {
	for name, refused := range map[string]bool{"AIRLOCK_NODE_IP": true, "AIRLOCK_RUNWRAP_ROLE": true, "GODEBUG": false, "GOGC": false, "HOME": false} {
		if err := CheckCommandEnvName(name); (err != nil) != refused {
			t.Errorf("%s: error %v, want refused=%v", name, err, refused)
		}
	}
}

// TestCELReservedEnvAgreesWithGo runs the CEL rule of the generated CRDs' env names (Sandbox and
// SandboxTemplate), with the API server's own CEL validator, against CheckPodEnvName on a table of names.
func TestCELReservedEnvAgreesWithGo(t *testing.T) {
	for _, crd := range []string{"sandbox.airlock.dev_sandboxes.yaml", "sandbox.airlock.dev_sandboxtemplates.yaml"} {
		t.Run(crd, func(t *testing.T) {
			v := envNameValidator(t, filepath.Join("..", "..", "config", "crd", "bases", crd))
			for _, name := range reservedEnvTable() {
				errs, _ := v.Validate(context.Background(), field.NewPath("name"), nil, name, nil, celconfig.RuntimeCELCostBudget)
				goErr := CheckPodEnvName(name)
				if (len(errs) > 0) != (goErr != nil) {
					t.Errorf("%s: CEL says %v, Go says %v", name, errs, goErr)
				}
				if len(errs) > 0 && !strings.Contains(errs.ToAggregate().Error(), name+" is reserved") {
					t.Errorf("%s: the CEL message must name the variable: %v", name, errs)
				}
			}
		})
	}
}

// envNameValidator compiles the x-kubernetes-validations of spec.env[].name in a generated CRD.
func envNameValidator(t *testing.T, path string) *cel.Validator {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	env := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["env"]
	if env.Items == nil || env.Items.Schema == nil {
		t.Fatalf("%s has no spec.env items", path)
	}
	v1Name := env.Items.Schema.Properties["name"]
	var name apiextensions.JSONSchemaProps
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(&v1Name, &name, nil); err != nil {
		t.Fatal(err)
	}
	s, err := schema.NewStructural(&name)
	if err != nil {
		t.Fatal(err)
	}
	v := cel.NewValidator(s, false, celconfig.PerCallLimit)
	if v == nil {
		t.Fatalf("%s: spec.env[].name has no CEL rule", path)
	}
	return v
}

// Every variable airlock-init reads from its environment is reserved, and the pod sets the ones it means to
// under the names airlock-init reads.
func TestAirlockInitReadsOnlyReservedNames(t *testing.T) {
	for _, name := range []string{runwrap.SocketEnv, runwrap.MemoryGuardEnv, runwrap.ProcessLimitEnv} {
		if CheckCommandEnvName(name) == nil {
			t.Errorf("airlock-init reads %s, which a command's env may set", name)
		}
	}
	if MemoryGuardEnv != runwrap.MemoryGuardEnv || ProcessLimitEnv != runwrap.ProcessLimitEnv {
		t.Errorf("the pod sets %s and %s, airlock-init reads %s and %s", MemoryGuardEnv, ProcessLimitEnv, runwrap.MemoryGuardEnv, runwrap.ProcessLimitEnv)
	}
}
