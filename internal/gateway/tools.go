package gateway

import (
	"net/http"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/gateway/auth"
	"airlock.dev/airlock/pkg/client"
)

// AnnotationInstalled on a SandboxTemplate says what its image has, in words for a model (e.g. "Python 3.11
// (python, pip), Node.js 22 (npm), git, curl, gcc and make"). The tool descriptions quote it; without it they
// claim nothing about the image.
const AnnotationInstalled = "sandbox.airlock.dev/installed"

// getTools serves run_command and run_python for a template, described as they are true for it.
func (s *Server) getTools(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	q := r.URL.Query()
	format := q.Get("format")
	if format == "" {
		format = client.FormatAnthropic
	}
	if format != client.FormatAnthropic && format != client.FormatOpenAI {
		writeError(w, badField("format", "must be %s or %s", client.FormatAnthropic, client.FormatOpenAI))
		return
	}
	name := q.Get("template")
	if name == "" {
		name = s.opts.DefaultTemplate
	}
	var t airlockv1.SandboxTemplate
	if err := s.opts.Reader.Get(r.Context(), types.NamespacedName{Namespace: p.Tenant, Name: name}, &t); err != nil {
		if apierrors.IsNotFound(err) {
			writeError(w, &Error{Status: http.StatusNotFound, Code: CodeNotFound, Field: "template", Message: "no template " + name + " is available to this tenant"})
			return
		}
		writeError(w, fromKube(err, "template"))
		return
	}
	tc := client.ToolContext{
		Installed:      strings.TrimSpace(t.Annotations[AnnotationInstalled]),
		WorkingDir:     defaultWorkingDir,
		Network:        "none",
		DefaultTimeout: DefaultExecTimeout * time.Millisecond,
	}
	if n := t.Spec.Network; n != nil && n.Mode == airlockv1.NetworkRestricted {
		tc.Network = "restricted"
	}
	tools, err := client.ToolDefinitions(format, tc)
	if err != nil {
		writeError(w, badField("format", "%v", err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"template": name, "format": format, "tools": tools})
}
