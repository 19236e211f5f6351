package gateway

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// The OpenAPI document is written by hand: every JSON field of the create request and of the sandbox view must
// be in it.
func TestOpenAPIDescribesEveryField(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(OpenAPISpec(), &doc); err != nil {
		t.Fatal(err)
	}
	for schema, typ := range map[string]reflect.Type{"CreateRequest": reflect.TypeFor[CreateRequest](), "Sandbox": reflect.TypeFor[SandboxView]()} {
		props := doc.Components.Schemas[schema].Properties
		for i := range typ.NumField() {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			if _, ok := props[name]; !ok {
				t.Errorf("openapi.json: schema %s has no property %q (field %s)", schema, name, typ.Field(i).Name)
			}
		}
	}
}
